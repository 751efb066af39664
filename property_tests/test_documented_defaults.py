"""Every key docs/schema.md lists is a key of the model, every key of the model is listed, and a
key left out of a document takes exactly the default the page states.

The page is the operator's reference, so it is the oracle: its tables are read (`| key | type
| default | meaning |`), each stated default is read as YAML (`"0:0"`, `[host, port]`,
`{first: 20000, last: 29999}`), and a document written with only the required keys is
structured by the loader's own converter and compared key by key.
"""

from __future__ import annotations

import re
import typing
from pathlib import Path

import attrs
import pytest
from ruamel.yaml import YAML

from resolver import (
    Access,
    Artifact,
    Container,
    Floor,
    Health,
    SecretRotation,
    Instance,
    Listen,
    Logs,
    Mesh,
    Module,
    Mount,
    Node,
    Part,
    Provide,
    Provision,
    Require,
    SecretFile,
    StateDir,
)
from resolver.documents import structure, yaml_key

PAGE = Path(__file__).resolve().parent.parent / "docs" / "schema.md"
SECTIONS = {  # heading on the page → the model class, and a document with only required keys
    "1. Module manifest": (Module, {"name": "m"}),
    "artifact": (Artifact, {}),
    "listen": (Listen, {"port": 80}),
    "provide": (Provide, {"provision": "p", "listen": "l"}),
    "require": (Require, {"as": "r"}),
    "state": (StateDir, {"path": "p"}),
    "access": (Access, {"path": "/p"}),
    "part": (Part, {}),
    "container": (Container, {"name": "c", "artifact": "a"}),
    "mount": (Mount, {"target": "/t"}),
    "secret file": (SecretFile, {"path": "/run/secrets/p", "content": "c"}),
    "health": (Health, {}),
    "rotation": (SecretRotation, {}),
    "2. Provision definitions": (Provision, {}),
    "3. Mesh description": (Mesh, {"mesh": "m", "nodes": {}}),
    "node": (Node, {"address": "10.0.0.1"}),
    "instance": (Instance, {"module": "m", "node": "n"}),
    "floor": (Floor, {"port": 1}),
    "logs": (Logs, {}),
}
ROW = re.compile(r"^\| `([a-z-]+)` \| (.*?) \| (.*?) \| .*\|$")


def documented() -> dict:
    """heading → {key: default cell} of every table on the page."""
    found, heading = {}, None
    for line in PAGE.read_text().splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip()
            heading = next((h for h in SECTIONS if title.startswith(h)), None)
            continue
        match = ROW.match(line)
        if heading is not None and match:
            found.setdefault(heading, {})[match.group(1)] = match.group(3).strip()
    return found


def stated(cell: str):
    """A default cell read: REQUIRED, None (none, or the default said in words), or a value."""
    if cell == "required":
        return "REQUIRED"
    if not cell.startswith("`"):
        return None  # "none", "the image's", "first long-running container"…
    return YAML(typ="safe").load(cell.strip("`"))


@pytest.mark.parametrize("heading", sorted(SECTIONS))
def test_the_page_lists_exactly_the_keys_and_defaults_of_the_model(heading):
    cls, minimal = SECTIONS[heading]
    rows = documented()[heading]
    fields = {yaml_key(f.name): f for f in attrs.fields(cls)}
    assert set(rows) == set(fields), f"{heading}: the page and the model differ"
    model = structure(minimal, cls)
    hints = typing.get_type_hints(cls)
    for key, cell in rows.items():
        field = fields[key]
        default = stated(cell)
        if default == "REQUIRED":
            assert field.default is attrs.NOTHING, f"{heading}.{key} is documented required"
            continue
        assert field.default is not attrs.NOTHING, f"{heading}.{key} has no default"
        value = getattr(model, field.name)
        expected = None if default is None else structure(default, hints[field.name])
        assert value == expected, f"{heading}.{key}: {value!r}, the page says {cell}"
