"""Golden cases: every fixture resolves to the bindings and problems its expected.yaml states.

A new case is a new directory under fixtures/, not new code. Refusal cases whose fault is in a
document itself (`load_fault:`) are covered by tests/test_loading.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ruamel.yaml import YAML

import resolver
from executors.control.loading import load_mesh_dir

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
CASES = sorted(p.parent for p in FIXTURES.glob("**/expected.yaml"))


def expected_of(case: Path) -> dict:
    return YAML(typ="safe").load((case / "expected.yaml").read_text())


def resolve_case(case: Path):
    inputs = load_mesh_dir(case)
    return resolver.resolve(inputs.catalogue, inputs.mesh, inputs.ledger, sources=inputs.sources)


@pytest.mark.parametrize("case", [c for c in CASES if "problems" in expected_of(c)],
                         ids=lambda c: str(c.relative_to(FIXTURES)))
def test_fixture_gives_exactly_its_expected_problems(case):
    expected = expected_of(case)
    resolution = resolve_case(case)
    errors = sorted((p.code, p.instance or "") for p in resolution.problems
                    if p.severity == "error")
    assert errors == sorted((e["code"], e["instance"] or "") for e in expected["problems"])
    held = set(expected.get("held", []))
    assert set(resolution.held) == held
    declared = {c.instance for d in resolution.declarations.values() for c in d.containers}
    for problem in resolution.problems:
        if problem.severity == "error":
            assert problem.line > 0, f"{problem.code} has no position"
            if problem.instance is None:  # about the mesh: a default naming nothing, or a
                # mesh-wide setting refused (a floor on a kept port names the holders)
                if problem.code == resolver.ProblemCode.FLOOR_CONFLICT:
                    assert problem.candidates
                assert not problem.blocks
                continue
            assert problem.instance in problem.blocks
            assert (problem.instance in declared) == (problem.instance in held)
    for name in held:  # held: its declaration is the one the ledger records, byte for byte
        rendering = resolution.ledger.declared[name]
        node = resolution.declarations[rendering.node]
        assert [c for c in node.containers if c.instance == name] == list(rendering.containers)
        assert any(p.code == resolver.ProblemCode.HELD and p.instance == name and p.line > 0
                   for p in resolution.problems)


@pytest.mark.parametrize("case", [c for c in CASES if "bindings" in expected_of(c)],
                         ids=lambda c: str(c.relative_to(FIXTURES)))
def test_fixture_gives_its_golden_bindings(case):
    expected = expected_of(case)
    resolution = resolve_case(case)
    got = sorted((b.consumer, b.requirement, b.provider, b.chosen_by) for b in resolution.bindings)
    want = sorted((b["consumer"], b["requirement"], b["provider"], b["chosen_by"])
                  for b in expected["bindings"])
    assert got == want


@pytest.mark.parametrize("case", [c for c in CASES if "bindings" in expected_of(c)],
                         ids=lambda c: str(c.relative_to(FIXTURES)))
def test_fixture_resolution_is_a_fixed_point(case):
    inputs = load_mesh_dir(case)
    first = resolver.resolve(inputs.catalogue, inputs.mesh, inputs.ledger)
    second = resolver.resolve(inputs.catalogue, inputs.mesh, first.ledger)
    assert second.declarations == first.declarations
    assert second.ledger == first.ledger


def test_homelab_consumers_are_told_the_assigned_host_port_never_the_container_port():
    resolution = resolve_case(FIXTURES / "homelab")
    umami = next(b for b in resolution.bindings if b.consumer == "umami@home")
    lab = resolution.declarations["lab"]
    server = next(c for c in lab.containers if c.instance == "postgres@lab" and c.ports)
    assert (umami.host, umami.port) == (lab.address, server.ports[0].host_port)
    assert umami.port != 5432
    allow = {(a.port, s) for a in lab.firewall.allow for s in a.sources}
    assert (umami.port, resolution.declarations["home"].address) in allow
