"""The JSON Schemas agree with the loader, on whole meshes.

- Every document of a generated mesh (modules, provisions, mesh, ledger) and every declaration
  the resolver emits for it is valid against its schema.
- A single value the loader refuses by itself (a port out of range, an unknown protocol,
  scope, grant, key or slot, an owner or mode of the wrong shape, a timeout or validity too
  short, a host port under 1024, a ledger version this code does not read) is refused by the
  schema too; so is an unknown key, and a missing required one.
- The schema says what each key's type is: a value of another type is refused.
"""

from __future__ import annotations

import copy

import pytest
from hypothesis import given, note
from hypothesis import strategies as st

from resolver import (
    InputError,
    resolve,
)
from resolver.documents import (
    dump_yaml,
    json_schema,
    load_ledger,
    load_mesh,
    load_module,
    load_provisions,
    unstructure,
)
from resolver.documents import unstructure_full

from .strategies_meshes import meshes

jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is not installed")
VALIDATORS = {}


def valid(document: str, data) -> bool:
    if document not in VALIDATORS:
        VALIDATORS[document] = jsonschema.Draft202012Validator(json_schema(document))
    return VALIDATORS[document].is_valid(data)


def listen(d, **fields):
    d.setdefault("listens", {})["zq"] = {"port": 80, **fields}


MODULE_VALUES = {  # one value the loader refuses by itself, and the schema says so too
    "listen port 0": lambda d: listen(d, port=0),
    "listen port 65536": lambda d: listen(d, port=65536),
    "fixed port 0": lambda d: listen(d, fixed=0),
    "protocol": lambda d: listen(d, protocol="sctp"),
    "access mode": lambda d: d.setdefault("accesses", {}).update(
        {"zq": {"path": "/x", "mode": "wx"}}),
    "owner": lambda d: d.setdefault("state", {}).update({"zq": {"path": "x", "owner": "root"}}),
    "mode": lambda d: d.setdefault("state", {}).update({"zq": {"path": "x", "mode": "750x"}}),
    "timeout": lambda d: d.setdefault("containers", []).append(
        {"name": "zq", "artifact": "a", "health": {"command": ["x"], "timeout": 0}}),
    "unknown key": lambda d: d.update(colour="blue"),
    "missing name": lambda d: d.pop("name"),
    "a string for a port": lambda d: listen(d, port="80"),
    "a number for a name": lambda d: d.update(name=3),
    "a boolean for a number": lambda d: listen(d, port=True),
    "a mapping for a list": lambda d: d.update(secrets={"a": "b"}),
    "a list for a mapping": lambda d: d.update(listens=["http"]),
}
MESH_VALUES = {
    "ssh port": lambda d: next(iter(d["nodes"].values())).update({"ssh-port": 70000}),
    "host ports under 1024": lambda d: d.update({"host-ports": {"first": 1023}}),
    "host ports over 65535": lambda d: d.update({"host-ports": {"last": 65536}}),
    "floor port": lambda d: d.update(floors=[{"port": 0}]),
    "floor protocol": lambda d: d.update(floors=[{"port": 1, "protocol": "icmp"}]),
    "floor sources": lambda d: d.update(floors=[{"port": 1, "sources": "world"}]),
    "validity": lambda d: d.update(ca={"validity-days": 0}),
    "renewal": lambda d: d.update(ca={"renew-before-days": -1}),
    "unknown key": lambda d: d.update(colour="blue"),
    "missing nodes": lambda d: d.pop("nodes"),
    "a list for a mapping": lambda d: d.update(defaults=["postgres-database"]),
}
PROVISION_VALUES = {
    "scope": lambda d: d.update(zq={"scope": "planet"}),
    "grant": lambda d: d.update(zq={"grant": "everything"}),
    "key": lambda d: d.update(zq={"keys": ["colour"]}),
    "unknown key": lambda d: d.update(zq={"colour": "blue"}),
}
LEDGER_VALUES = {
    "version": lambda d: d.update(version=2),
    "port": lambda d: d.setdefault("ports", {}).update({"zq": {"l": {"node": "n", "port": 0}}}),
    "generation": lambda d: d.setdefault("credentials", {}).update(
        {"zq": {"active": {"generation": 0}}}),
    "slot": lambda d: d.setdefault("credentials", {}).update(
        {"zq": {"active": {"generation": 1, "slot": "c"}}}),
    "pin": lambda d: d.setdefault("pins", {}).update({"zq": "sha256:beef"}),
    "missing version": lambda d: d.pop("version"),
}


def test_every_schema_says_its_dialect_and_is_one():
    for document in ("module", "provisions", "mesh", "ledger", "declaration"):
        schema = json_schema(document)
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        assert jsonschema.validators.validator_for(schema) is jsonschema.Draft202012Validator
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["title"] == document and schema["$id"].endswith(f"/{document}.json")


@given(meshes())
def test_every_document_of_a_mesh_and_every_declaration_is_valid(world):
    for module in world.catalogue.modules.values():
        assert valid("module", unstructure(module)), module.name
    assert valid("provisions", unstructure(world.catalogue.provisions))
    assert valid("mesh", unstructure(world.mesh))
    assert valid("ledger", {"version": 1, **unstructure(world.ledger)})
    resolution = resolve(world.catalogue, world.mesh, world.ledger)
    assert valid("ledger", {"version": 1, **unstructure(resolution.ledger)})
    for declaration in resolution.declarations.values():
        assert valid("declaration", unstructure(declaration))
        assert valid("declaration", unstructure_full(declaration))


def refused_by_both(document, loader, plain, file):
    note(dump_yaml(plain))
    assert not valid(document, plain), "the schema accepts it"
    with pytest.raises(InputError):
        loader(dump_yaml(plain), file)


@given(meshes(), st.data())
def test_what_the_loader_refuses_in_one_value_the_schema_refuses(world, data):
    module = data.draw(st.sampled_from(sorted(world.catalogue.modules.values(),
                                              key=lambda m: m.name)))
    kind = data.draw(st.sampled_from(sorted(MODULE_VALUES)))
    note(f"module: {kind}")
    plain = copy.deepcopy(unstructure(module))
    MODULE_VALUES[kind](plain)
    refused_by_both("module", load_module, plain, "module.yaml")

    kind = data.draw(st.sampled_from(sorted(MESH_VALUES)))
    note(f"mesh: {kind}")
    plain = copy.deepcopy(unstructure(world.mesh))
    MESH_VALUES[kind](plain)
    refused_by_both("mesh", load_mesh, plain, "mesh.yaml")

    kind = data.draw(st.sampled_from(sorted(PROVISION_VALUES)))
    note(f"provisions: {kind}")
    plain = copy.deepcopy(unstructure(world.catalogue.provisions))
    PROVISION_VALUES[kind](plain)
    refused_by_both("provisions", load_provisions, plain, "provisions.yaml")

    kind = data.draw(st.sampled_from(sorted(LEDGER_VALUES)))
    note(f"ledger: {kind}")
    plain = {"version": 1, **copy.deepcopy(unstructure(world.ledger))}
    LEDGER_VALUES[kind](plain)
    refused_by_both("ledger", load_ledger, plain, "ledger.yaml")
