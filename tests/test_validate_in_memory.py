"""resolver.validate(): inputs built in code are held to the rules files are held to, and
resolve() runs it on entry (issue 14). Before, an address `not-an-ip`, `ssh-port: 0` and a
host-port range 30000–10 resolved with no problem, `${db.host}` without a `db` requirement
rendered as '', and a container naming an unknown artifact raised a bare KeyError."""

from __future__ import annotations

import attrs
import pytest
from pyrsistent import pmap, pvector

import resolver
from resolver import (
    Artifact,
    Catalogue,
    Container,
    Instance,
    Mesh,
    Module,
    Node,
    PortRange,
    validate,
)


def inputs(**node_fields):
    module = Module(name="app",
                    artifacts=pmap({"main": Artifact(repository="example.org/app", tag="1")}),
                    containers=pvector([Container(name="app", artifact="main")]))
    mesh = Mesh(mesh="m", nodes=pmap({"a": Node(address="10.0.0.1", **node_fields)}),
                instances=pmap({"app": Instance("app", "a")}))
    return Catalogue(modules=pmap({"app": module})), mesh


def messages(faults) -> list[str]:
    return [str(f) for f in faults]


def test_sound_inputs_have_no_faults_and_resolve():
    catalogue, mesh = inputs()
    assert validate(catalogue, mesh) == []
    resolver.resolve(catalogue, mesh, resolver.EMPTY_LEDGER)


@pytest.mark.parametrize("change, expected", [
    (lambda c, m: (c, attrs.evolve(m, nodes=pmap({"a": Node(address="not-an-ip")}))),
     "mesh: nodes.a.address: 'not-an-ip' is not an IP address"),
    (lambda c, m: (c, attrs.evolve(m, nodes=pmap({"a": Node(address="10.0.0.1", ssh_port=0)}))),
     "mesh: nodes.a.ssh-port: port 0 is out of range"),
    (lambda c, m: (c, attrs.evolve(m, host_ports=PortRange(30000, 10))),
     "host-ports run from 30000 down to 10"),
])
def test_mesh_faults_are_named_by_key_path(change, expected):
    catalogue, mesh = change(*inputs())
    assert any(expected in m for m in messages(validate(catalogue, mesh)))
    with pytest.raises(resolver.InputError) as caught:
        resolver.resolve(catalogue, mesh, resolver.EMPTY_LEDGER)
    assert any(expected in m for m in messages(caught.value.faults))


def test_a_placeholder_naming_no_requirement_is_a_fault_not_an_empty_value():
    catalogue, mesh = inputs()
    module = catalogue.modules["app"]
    container = attrs.evolve(module.containers[0], env=pmap({"DB_HOST": "${db.host}"}))
    catalogue = attrs.evolve(catalogue, modules=pmap({"app": attrs.evolve(
        module, containers=pvector([container]))}))
    with pytest.raises(resolver.InputError) as caught:
        resolver.resolve(catalogue, mesh, resolver.EMPTY_LEDGER)
    assert any("module:app: containers[0].env.DB_HOST" in m and "no requirement named 'db'" in m
               for m in messages(caught.value.faults)), messages(caught.value.faults)


def test_a_container_naming_an_unknown_artifact_is_a_fault_not_a_key_error():
    catalogue, mesh = inputs()
    module = catalogue.modules["app"]
    container = attrs.evolve(module.containers[0], artifact="missing")
    catalogue = attrs.evolve(catalogue, modules=pmap({"app": attrs.evolve(
        module, containers=pvector([container]))}))
    with pytest.raises(resolver.InputError) as caught:
        resolver.resolve(catalogue, mesh, resolver.EMPTY_LEDGER)
    assert any("module:app: containers[0].artifact" in m and "'missing'" in m
               for m in messages(caught.value.faults)), messages(caught.value.faults)


def test_a_loaded_mesh_keeps_its_positions_in_resolves_faults(tmp_path):
    from executors.control.loading import load_mesh_dir

    (tmp_path / "mesh.yaml").write_text(
        "mesh: m\ncatalogue: catalogue\nnodes:\n  a:\n    address: 10.0.0.1\ninstances: {}\n")
    (tmp_path / "catalogue").mkdir()
    (tmp_path / "catalogue" / "provisions.yaml").write_text("{}\n")
    loaded = load_mesh_dir(tmp_path)
    mesh = attrs.evolve(loaded.mesh, nodes=pmap({"a": Node(address="not-an-ip")}))
    faults = validate(loaded.catalogue, mesh, loaded.ledger, loaded.sources)
    assert [(f.line > 0, "not an IP address" in f.message) for f in faults] == [(True, True)]
    assert faults[0].file.endswith("mesh.yaml")


def test_checked_inputs_skip_validation_knowingly():
    catalogue, mesh = inputs()
    mesh = attrs.evolve(mesh, nodes=pmap({"a": Node(address="not-an-ip")}))
    resolution = resolver.resolve(catalogue, mesh, resolver.EMPTY_LEDGER, checked=True)
    assert [p.code for p in resolution.problems] == \
        [resolver.ProblemCode.UNPINNED_ARTIFACT]  # resolved


def test_a_lone_surrogate_built_in_code_is_an_input_error_naming_where_it_was_rendered():
    """A string UTF-8 cannot hold (a lone surrogate) cannot be digested: resolve() says which
    declaration holds it and where, instead of raising UnicodeEncodeError from the digest."""
    catalogue, mesh = inputs()
    module = catalogue.modules["app"]
    container = attrs.evolve(module.containers[0], env=pmap({"NAME": "app\ud800"}))
    catalogue = attrs.evolve(catalogue, modules=pmap({"app": attrs.evolve(
        module, containers=pvector([container]))}))
    pinned = resolver.Ledger(pins=pmap({"example.org/app:1": "sha256:" + "ab" * 32}))
    with pytest.raises(resolver.InputError) as caught:
        resolver.resolve(catalogue, mesh, pinned)
    assert any("declaration of node a: containers[0].env.NAME" in m and "lone surrogate" in m
               for m in messages(caught.value.faults)), messages(caught.value.faults)
