"""The JSON Schemas are valid draft 2020-12 and accept every document the loader accepts."""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest

from resolver import Module
from resolver.documents import (
    document_names,
    json_schema,
    load_ledger,
    parse_yaml,
)
from resolver.documents import document_key

jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is not installed")

REPO = Path(__file__).resolve().parent.parent
CATALOGUE = REPO / "catalogue"
FIXTURES = REPO / "fixtures"


def validator(document: str):
    schema = json_schema(document)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.parametrize("document", document_names())
def test_schema_is_valid_draft_2020_12(document):
    schema = json_schema(document)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert json.loads(json.dumps(schema)) == schema  # plain JSON, nothing else
    for name, definition in schema["$defs"].items():
        assert definition["additionalProperties"] is False, name


def test_schema_follows_the_model():
    definition = json_schema("module")["$defs"]["Container"]
    assert set(definition["properties"]) == {"name", "artifact", "command", "env", "mounts",
                                             "run-once", "part", "health", "secret-files"}
    assert definition["required"] == ["name", "artifact"]
    assert json_schema("module")["$defs"]["Require"]["properties"].keys() >= {"as", "provision"}
    for cls in (Module,):
        properties = json_schema("module")["$defs"][cls.__name__]["properties"]
        assert list(properties) == [document_key(cls, a.name) for a in attrs.fields(cls)]
    assert json_schema("ledger")["$defs"]["Ledger"]["required"] == ["version"]


@pytest.mark.parametrize("document, data", [
    ("module", {"name": "x", "colour": "blue"}),
    ("module", {"name": 3}),
    ("module", {"name": "x", "listens": {"http": {"port": 70000}}}),
    ("provisions", {"pg": {"scope": "world"}}),
    ("mesh", {"mesh": "m", "nodes": {"a": {"address": "10.0.0.1", "ssh-port": "22"}}}),
    ("mesh", {"mesh": "m"}),
    ("ledger", {"version": 2}),
    ("ledger", {}),
])
def test_schema_refuses_what_the_loader_refuses(document, data):
    assert list(validator(document).iter_errors(data))


def yaml_documents() -> list[tuple[str, Path]]:
    found = [("module", p) for p in sorted(CATALOGUE.glob("*/module.yaml"))]
    found += [("provisions", p) for p in sorted(CATALOGUE.glob("provisions.yaml"))]
    found += [("mesh", p) for p in sorted(FIXTURES.glob("*/mesh.yaml"))]
    found += [("ledger", p) for p in sorted(FIXTURES.glob("*/ledger.yaml"))]
    return found


@pytest.mark.parametrize("document, path", yaml_documents(),
                         ids=lambda v: str(v.relative_to(REPO)) if isinstance(v, Path) else v)
def test_every_catalogue_and_fixture_document_validates(document, path):
    data, _ = parse_yaml(path.read_text(), str(path))
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
              for e in validator(document).iter_errors(data)]
    assert errors == []


def test_a_written_ledger_validates():
    from pyrsistent import pmap

    from resolver import Ledger, PortAssignment
    from resolver.documents import dump_ledger

    ledger = Ledger(ports=pmap({"web@a": pmap({"http": PortAssignment("a", 20000)})}))
    data, _ = parse_yaml(dump_ledger(ledger), "ledger.yaml")
    assert list(validator("ledger").iter_errors(data)) == []
    assert load_ledger(dump_ledger(ledger), "ledger.yaml")[0] == ledger


@pytest.mark.parametrize("directory", sorted(p.parent for p in FIXTURES.glob("*/mesh.yaml")),
                         ids=lambda p: p.name)
def test_resolved_declarations_validate(directory):
    import resolver
    from resolver import documents
    from executors.control.loading import load_mesh_dir

    if not hasattr(resolver, "resolve"):
        pytest.skip("resolver.resolve is not written yet")
    inputs = load_mesh_dir(directory)
    resolution = resolver.resolve(inputs.catalogue, inputs.mesh, inputs.ledger, sources=inputs.sources)
    check = validator("declaration")
    assert resolution.declarations
    for node, declaration in resolution.declarations.items():
        plain = json.loads(json.dumps(documents.unstructure(declaration)))
        errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in check.iter_errors(plain)]
        assert errors == [], node


DOCS = REPO / "docs" / "schema.md"


def test_docs_examples_load():
    import re

    from resolver.documents import load_ledger, load_mesh, load_module, load_provisions

    blocks = re.findall(r"```yaml\n(.*?)```", DOCS.read_text(), re.S)
    loaders = [load_module, load_provisions, load_mesh, load_ledger]
    assert len(blocks) == len(loaders)
    for block, loader in zip(blocks, loaders):
        loader(block, "docs/schema.md")


def test_docs_fragments_are_yaml():
    """The pieces of a document shown alone (```yaml fragment) are valid YAML at least."""
    import re

    fragments = re.findall(r"```yaml fragment\n(.*?)```", DOCS.read_text(), re.S)
    assert fragments
    for fragment in fragments:
        parse_yaml(fragment, "docs/schema.md")


@pytest.mark.parametrize("document", ["module", "provisions", "mesh", "ledger"])
def test_docs_name_every_key(document):
    text = DOCS.read_text()
    missing = sorted({key for definition in json_schema(document)["$defs"].values()
                      for key in definition["properties"] if f"`{key}`" not in text
                      and f"{key}," not in text and f"{key}}}" not in text})
    assert missing == []
