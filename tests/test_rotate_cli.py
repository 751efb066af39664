"""Rotation through the ledger and the command line: rotate, the provider applies, holders move,
holders apply, the old generation is retired; refusals are named."""

from __future__ import annotations

import json

import attrs
import pytest
from pyrsistent import pmap, pvector

import resolver
from executors.control.loading import load_mesh_dir
from resolver import ContainerDecl, Declaration, GrantDecl, SecretRef
from resolver.rotation import (
    begin_rotation,
    declared_grants,
    first_generation,
    grant_view,
    provider_applied,
    record_applied,
)
from resolver import Ledger

from _meshdir import FIXTURES, prepare, run_cli

CRED = "postgres-database/pg@anchor/app@lab"


def _declarations(credential):
    """What a resolver following grant_view declares for one binding anchor → lab."""
    newest, retiring = grant_view(credential)
    active = credential.active
    grant = GrantDecl(provision="postgres-database", kind="database+login", provider="pg@anchor",
                      consumer="app@lab", consumer_node="lab", login="app", resource="app",
                      credential=SecretRef(CRED, newest.generation), slot=newest.slot,
                      retiring=SecretRef(CRED, retiring.generation) if retiring else None,
                      retiring_slot=retiring.slot if retiring else None)
    app = ContainerDecl(name="app", instance="app@lab", container="main", image="x@sha256:0",
                        secrets=pvector([SecretRef(CRED, active.generation)]))
    return (Declaration(mesh="m", node="anchor", address="10.0.0.1", grants=pvector([grant])),
            Declaration(mesh="m", node="lab", address="10.0.0.2", containers=pvector([app])))


def declared_in(mesh_dir, node):
    """The declaration the mesh directory declares for `node` now."""
    inputs = load_mesh_dir(mesh_dir)
    return resolver.resolve(inputs.catalogue, inputs.mesh, inputs.ledger,
                            sources=inputs.sources).declarations[node]


def applied_report(mesh_dir, node) -> str:
    """The applied.json a successful apply of `node`'s current declaration writes."""
    declaration = declared_in(mesh_dir, node)
    return json.dumps({"version": 2, "node": node, "result": "applied",
                       "serial": declaration.serial, "digest": declaration.digest,
                       "granted": declared_grants(declaration)})


def test_record_applied_walks_a_dual_rotation_to_retirement():
    cred = first_generation({"anchor": "s1", "lab": "s1"}, slot="a")
    ledger = Ledger(credentials=pmap({CRED: cred}))
    for decl in _declarations(cred):
        ledger = record_applied(ledger, decl.node, decl)
    assert ledger.credentials[CRED].applied == pmap({"anchor": 1, "lab": 1})

    ledger = attrs.evolve(ledger, credentials=ledger.credentials.set(
        CRED, begin_rotation(CRED, ledger.credentials[CRED], {"anchor": "s2", "lab": "s2"})))
    anchor, lab = _declarations(ledger.credentials[CRED])
    assert lab.containers[0].secrets[0].generation == 1  # holders wait for the provider
    ledger = record_applied(ledger, "lab", lab)  # the holder first: nothing moves
    assert ledger.credentials[CRED].pending is not None
    ledger = record_applied(ledger, "anchor", anchor)  # the provider put slot b in force
    cred = ledger.credentials[CRED]
    assert (cred.active.generation, cred.active.slot, cred.retiring.generation) == (2, "b", 1)
    anchor_after, lab_after = _declarations(cred)
    assert anchor_after == anchor  # the provider's grant does not change on promotion
    assert lab_after.containers[0].secrets[0].generation == 2
    ledger = record_applied(ledger, "lab", lab_after)
    cred = ledger.credentials[CRED]
    assert cred.retiring is None and list(cred.retired) == [1]
    assert grant_view(cred)[1] is None  # the old password is dropped at the next apply


def test_a_provider_node_that_also_holds_does_not_retire_before_its_containers_moved():
    cred = provider_applied(first_generation({"lab": "s1"}, slot="a"), 1, credential_id=CRED)
    cred = begin_rotation(CRED, cred, {"lab": "s2"})
    ledger = Ledger(credentials=pmap({CRED: cred}))
    anchor, lab = _declarations(cred)
    both = attrs.evolve(lab, grants=anchor.grants)  # provider and consumer on one node
    ledger = record_applied(ledger, "lab", both)
    cred = ledger.credentials[CRED]
    assert cred.active.generation == 2 and cred.retiring.generation == 1, \
        "retired while lab's container still held generation 1"


def test_rotate_refusals_are_named(tmp_path):
    mesh_dir, _, _ = prepare(FIXTURES / "homelab", tmp_path)
    code, output = run_cli("rotate", mesh_dir, "amqp/nobody@x/y@z")
    assert code == 2 and "no credential amqp/nobody@x/y@z in the ledger" in output
    run_cli("ca", "init", mesh_dir)
    assert run_cli("plan", "--issue", mesh_dir)[0] == 0
    code, output = run_cli("rotate", mesh_dir, "--consumer", "nobody@x")
    assert code == 2 and "no credential in the ledger belongs to consumer nobody@x" in output
    cred = "amqp/lavinmq@home/control@home"
    code, output = run_cli("rotate", mesh_dir, cred)
    assert code == 0, output
    assert "dual login, no window" in output  # two accounts on the broker, as postgres's logins
    code, output = run_cli("rotate", mesh_dir, cred)
    assert code == 2 and "rotation is in progress" in output
    code, output = run_cli("applied", mesh_dir, "home", "--digest", "sha256:00")
    assert code == 2 and "nothing recorded" in output


def test_dry_run_writes_nothing_and_names_holders_and_containers(tmp_path):
    mesh_dir, _, _ = prepare(FIXTURES / "homelab", tmp_path)
    run_cli("ca", "init", mesh_dir)
    run_cli("plan", "--issue", mesh_dir)
    before = (mesh_dir / "ledger.yaml").read_bytes()
    code, output = run_cli("rotate", mesh_dir, "postgres-database/postgres@lab/umami@home",
                           "--dry-run")
    assert code == 0, output
    assert (mesh_dir / "ledger.yaml").read_bytes() == before
    assert "holders: home, lab" in output and "no window" in output
    assert "recreate home/" in output and "umami" in output


def test_rotation_end_to_end_through_the_cli(tmp_path):
    mesh_dir, _, _ = prepare(FIXTURES / "homelab", tmp_path)
    run_cli("ca", "init", mesh_dir)
    run_cli("plan", "--issue", mesh_dir)
    cred = "postgres-database/postgres@lab/umami@home"
    code, output = run_cli("rotate", mesh_dir, cred)
    assert code == 0, output

    def digest(node):
        return declared_in(mesh_dir, node).digest

    code, output = run_cli("applied", mesh_dir, "lab", "--digest", digest("lab"))
    assert code == 0, output
    assert "recreate home/" in output  # the holder moves once the provider applied
    for node in ("home", "lab"):
        report = tmp_path / f"{node}.json"
        # a record of an earlier version (written before its provisioners ran) is refused
        report.write_text(json.dumps({"digest": digest(node)}))
        code, output = run_cli("applied", mesh_dir, node, "--report", report)
        assert code == 1 and "earlier version" in output
        report.write_text(applied_report(mesh_dir, node))
        assert run_cli("applied", mesh_dir, node, "--report", report)[0] == 0
    state = load_mesh_dir(mesh_dir).ledger.credentials[cred]
    assert state.active.generation == 2 and state.retiring is None and list(state.retired) == [1]


def test_a_holder_that_moves_away_mid_rotation_lets_the_rotation_end(tmp_path):
    """umami@home's database password rotates (two logins); postgres@lab puts the new one in
    force and lab reports it applied, then umami moves to lab before home applied: re-sealing
    leaves no holder waiting, so the old generation retires and the next rotation may start."""
    mesh_dir, keys, _ = prepare(FIXTURES / "homelab", tmp_path)
    run_cli("ca", "init", mesh_dir)
    run_cli("plan", "--issue", mesh_dir)
    cred = "postgres-database/postgres@lab/umami@home"
    assert run_cli("rotate", mesh_dir, cred)[0] == 0

    assert run_cli("applied", mesh_dir, "lab", "--digest",
                   declared_in(mesh_dir, "lab").digest)[0] == 0
    report = tmp_path / "lab.json"
    report.write_text(applied_report(mesh_dir, "lab"))
    assert run_cli("applied", mesh_dir, "lab", "--report", report)[0] == 0
    state = load_mesh_dir(mesh_dir).ledger.credentials[cred]
    assert (state.active.generation, state.retiring.generation) == (2, 1)
    assert sorted(state.active.sealed) == ["home", "lab"] and dict(state.applied)["lab"] == 2

    text = (mesh_dir / "mesh.yaml").read_text()
    moved = "  umami@home:\n    module: umami\n    node: lab"
    (mesh_dir / "mesh.yaml").write_text(
        text.replace("  umami@home:\n    module: umami\n    node: home", moved, 1))
    assert moved in (mesh_dir / "mesh.yaml").read_text(), "fixture layout changed"
    code, output = run_cli("plan", mesh_dir, "--issue", "--key", keys["home"])
    assert code == 0, output
    state = load_mesh_dir(mesh_dir).ledger.credentials[cred]
    assert sorted(state.active.sealed) == ["lab"]
    assert state.retiring is None and list(state.retired) == [1], state
    code, output = run_cli("rotate", mesh_dir, cred)
    assert code == 0, output
    assert load_mesh_dir(mesh_dir).ledger.credentials[cred].pending.generation == 3
