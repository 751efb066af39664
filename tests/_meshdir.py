"""Test helpers: a fixture mesh copied to a temporary directory, with real node keys.

`prepare(fixture, tmp)` copies the fixture, makes its catalogue path work from the copy, runs
`mesh node-key` for every node (keys under tmp/keys, outside the mesh directory) and writes each
printed public key into the copy's mesh.yaml. `run_cli` runs the `mesh` command in-process and
returns (exit code, everything printed).
"""

from __future__ import annotations

import contextlib
import io
import re
import shutil
from pathlib import Path

from ruamel.yaml import YAML

from executors.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


def fixture_dirs() -> list[Path]:
    """Every fixture mesh directory (each holding a mesh.yaml), sorted."""
    return sorted(p.parent for p in FIXTURES.rglob("mesh.yaml"))


def fixture_id(path: Path) -> str:
    return str(path.relative_to(FIXTURES))


def run_cli(*argv) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in argv])
        except SystemExit as exit_:  # argparse refusals
            code = exit_.code if isinstance(exit_.code, int) else 2
    return code, out.getvalue() + err.getvalue()


def _mesh_yaml():
    yaml = YAML()  # round-trip: comments and order stay as the operator wrote them
    yaml.preserve_quotes = True
    return yaml


def prepare(fixture: Path, tmp: Path) -> tuple[Path, dict[str, Path], str]:
    """Copy `fixture` under tmp/mesh, give every node a key; (mesh dir, {node: key}, output)."""
    mesh_dir = tmp / "mesh"
    shutil.copytree(fixture, mesh_dir)
    yaml = _mesh_yaml()
    path = mesh_dir / "mesh.yaml"
    document = yaml.load(path.read_text(encoding="utf-8"))
    catalogue = document.get("catalogue", "catalogue") if isinstance(document, dict) else None
    if isinstance(catalogue, str) and not Path(catalogue).is_absolute():
        if not (mesh_dir / catalogue).resolve().is_relative_to(mesh_dir.resolve()):
            document["catalogue"] = str((fixture / catalogue).resolve())
    keys, printed = {}, []
    (tmp / "keys").mkdir()
    nodes = document.get("nodes") if isinstance(document, dict) else None
    for node in (nodes or {}):
        key_path = tmp / "keys" / f"{node}.key"
        code, output = run_cli("node-key", node, "--path", key_path)
        assert code == 0, output
        printed.append(output)
        match = re.search(r"public-key: (\S+)", output)
        if isinstance(nodes[node], dict):
            nodes[node]["public-key"] = match.group(1)
        keys[node] = key_path
    with path.open("w", encoding="utf-8") as handle:
        yaml.dump(document, handle)
    return mesh_dir, keys, "".join(printed)
