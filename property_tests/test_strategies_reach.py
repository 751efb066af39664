"""What the mesh strategies reach, counted over a fixed number of draws.

A property suite proves only what its strategies reach. This test draws DRAWS meshes from
`meshes()` (derandomized, so the count is the same on every run), resolves each, and fails
when a problem code the resolver can emit, a `chosen_by` rule, or a shape of input the
design cares about never appears, or appears in too few draws to matter. The codes are read
from resolver/ itself (every `codes.NAME` it uses), so a new code must be reached too.

Three codes come from what `meshes()` does not write (an instance's `expose:` and a typo on
a mesh that was declared); each is reached by the property written for it, and a second
test runs that property with its resolutions recorded and fails when the code never shows.
"""

from __future__ import annotations

import re
import importlib
from collections import Counter
from pathlib import Path

import pytest

from hypothesis import HealthCheck, Phase, given, settings

from resolver import resolve
from resolver import ProblemCode as codes  # the problem codes, one public enum

from .strategies_meshes import GONE, meshes

DRAWS = 300
CHOSEN_BY = ("instance override", "manifest", "recorded", "co-located", "mesh default",
             "sole provider")
RESOLVER = Path(__file__).resolve().parent.parent / "resolver"


def emitted_codes() -> set[str]:
    """The problem codes resolver/ emits: every `codes.NAME` naming a string constant."""
    names = set()
    for path in RESOLVER.glob("*.py"):
        names.update(re.findall(r"\bcodes\.([A-Z_]+)\b", path.read_text()))
    return {getattr(codes, n) for n in names if isinstance(getattr(codes, n, None), str)}


def features(world, resolution) -> set[str]:
    """The shapes of input and output one draw shows."""
    found = set()
    mesh, ledger, modules = world.mesh, world.ledger, world.catalogue.modules
    if resolution.bindings:
        found.add("a binding")
    if any(b.chosen_by != "instance override" for b in resolution.bindings):
        found.add("an organic binding")
    if any(b.consumer_node != b.provider_node for b in resolution.bindings):
        found.add("a binding across nodes")
    if any(b.login for b in resolution.bindings):
        found.add("a binding with a login")
    live = {n for d in resolution.declarations.values() for n in d.instances}
    for name in live:
        module = modules[mesh.instances[name].module]
        if len([c for c in module.containers if not c.run_once]) > 1:
            found.add("several long-running containers")
        if any(c.run_once for c in module.containers):
            found.add("a run-once step")
        if module.secrets:
            found.add("a module secret")
        if module.facilities:
            found.add("a facility granted")
        if mesh.instances[name].parts:
            found.add("a part installed")
        if any(r.provider for r in module.requires):
            found.add("a manifest provider:")
        if any(r.module for r in module.requires):
            found.add("a requirement of a module")
        if any(r.optional for r in module.requires):
            found.add("an optional requirement")
    for decl in resolution.declarations.values():
        if decl.state_dirs:
            found.add("a state directory")
        if decl.accesses:
            found.add("an accessed path")
        for c in decl.containers:
            for m in c.mounts:
                found.add(f"a mount of kind {m.kind}")
            if c.health is not None:
                found.add(f"a health check of kind {c.health.kind}")
        if decl.grants:
            found.add("a grant")
        if any(g.retiring is not None for g in decl.grants):
            found.add("a grant with a retiring generation")
        if decl.firewall.allow:
            found.add("a firewall allow")
        if any("@sha256:" in c.image and c.image.split("/")[0].count(".") == 3
               for c in decl.containers):
            found.add("an image from the mesh's own registry")
    if mesh.defaults:
        found.add("a mesh default")
    if any(i.bind for i in mesh.instances.values()):
        found.add("an instance override")
    if mesh.substrate.broker in live:
        found.add("a live broker")
    # the ledger, written independently of resolve()
    if ledger.ports:
        found.add("recorded ports")
    if ledger.bindings:
        found.add("recorded bindings")
    if ledger.logins:
        found.add("recorded logins")
    if ledger.credentials:
        found.add("recorded credentials")
    if ledger.certificates:
        found.add("recorded certificates")
    if any(n in ledger.ports for n in GONE):
        found.add("ports of a removed instance")
    if any(not mesh.host_ports.first <= e.port <= mesh.host_ports.last
           for entries in ledger.ports.values() for e in entries.values()):
        found.add("a recorded port outside the range")
    if any(p not in mesh.instances for v in ledger.bindings.values() for p in v.values()):
        found.add("a recorded binding to a provider that is gone")
    if any(c.split("/")[-1] not in mesh.instances for c in ledger.credentials
           if not c.startswith("secret/")):
        found.add("a credential of a consumer that is gone")
    if any(c.pending is not None for c in ledger.credentials.values()):
        found.add("a rotation waiting for its provider")
    if any(c.retiring is not None for c in ledger.credentials.values()):
        found.add("a rotation waiting for its holders")
    if resolution.artifacts == "self-hosting":
        found.add("a self-hosting mesh")
    for change in resolution.changes:
        found.add(f"a {change.kind} change")
    for request in resolution.requests:
        found.add(f"a {request.kind} request")
        if request.reason.startswith("re-seal"):
            found.add("a credential to reseal")
    return found


WANTED_FEATURES = {  # feature → the least share of draws that must show it
    "a binding": 0.5, "an organic binding": 0.5, "a binding across nodes": 0.2,
    "a binding with a login": 0.3, "several long-running containers": 0.2,
    "a run-once step": 0.2, "a module secret": 0.3, "a facility granted": 0.05,
    "a part installed": 0.1, "a manifest provider:": 0.1, "a requirement of a module": 0.05,
    "an optional requirement": 0.1, "a state directory": 0.5, "an accessed path": 0.1,
    "a mount of kind state": 0.5, "a mount of kind access": 0.1,
    "a mount of kind facility": 0.05, "a health check of kind command": 0.1,
    "a health check of kind tcp": 0.1, "a health check of kind http": 0.1,
    "a grant": 0.3, "a grant with a retiring generation": 0.01, "a firewall allow": 0.2,
    "a mesh default": 0.3, "an instance override": 0.2, "a live broker": 0.1,
    "recorded ports": 0.3, "recorded bindings": 0.3, "recorded logins": 0.3,
    "recorded credentials": 0.3, "recorded certificates": 0.3,
    "ports of a removed instance": 0.2, "a recorded port outside the range": 0.05,
    "a recorded binding to a provider that is gone": 0.1,
    "a credential of a consumer that is gone": 0.05,
    "a rotation waiting for its provider": 0.05, "a rotation waiting for its holders": 0.05,
    "a moved change": 0.02, "a port-released change": 0.2, "a credential request": 0.3,
    "a certificate request": 0.3, "a credential to reseal": 0.02,
    "an image from the mesh's own registry": 0.02, "a self-hosting mesh": 0.01,
}


# Codes `meshes()` does not reach: its oracles do not model exposures, and `held` needs a
# typo made on a mesh whose declarations were written. Each is reached by the property
# named here instead, which test_each_code_outside_meshes_is_reached_by_its_own_property
# checks by recording that property's resolutions.
REACHED_BY_THEIR_OWN_PROPERTY = {
    "held": ("test_held_props", "test_a_typo_holds_every_declaration_byte_for_byte"),
    "unknown-listen": ("test_firewall_intent_props",
                       "test_an_exposure_of_no_listen_refuses_its_instance_by_name"),
    "exposure-family": ("test_firewall_intent_props",
                        "test_an_exposure_to_the_other_address_family_is_a_warning_that_"
                        "refuses_nothing"),
    # a requirement taking every provider (`each: true`): its own meshes, property_tests/
    # test_fan_in_props.py
    "too-few-providers": ("test_fan_in_props",
                          "test_fewer_than_at_least_refuses_the_consumer_and_nothing_else"),
    "bind-on-each": ("test_fan_in_props", "test_a_bind_of_a_list_refuses_its_consumer_by_name"),
    # a `ca: true` mount while the ledger records no mesh CA: property_tests/
    # test_binding_mount_props.py
    # guarded upgrades: their own catalogue and pins, property_tests/test_upgrade_props.py
    "upgrade-needs-migration": ("test_upgrade_props",
                                "test_a_major_change_is_refused_until_it_is_confirmed"),
    "upgrade-unknown-step": ("test_upgrade_props", "test_a_confirmation_names_a_known_step_and_"
                             "is_stale_once_nothing_crosses"),
    "stale-upgrade": ("test_upgrade_props", "test_a_confirmation_names_a_known_step_and_is_"
                      "stale_once_nothing_crosses"),
    # a stateful instance on its backup target's node: property_tests/test_backup_target_props.py
    "backup-target": ("test_backup_target_props",
                      "test_each_stateful_instance_elsewhere_has_its_own_login_and_one_on_the_"
                      "store_node_is_refused"),
    "no-mesh-ca": ("test_binding_mount_props",
                   "test_a_ca_mount_without_a_mesh_ca_is_stated_and_blocks_nothing"),
}


def test_meshes_reach_every_code_rule_and_shape():
    problems, chosen, shapes = Counter(), Counter(), Counter()

    @settings(max_examples=DRAWS, derandomize=True, database=None, deadline=None,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(meshes())
    def draw_one(world):
        resolution = resolve(world.catalogue, world.mesh, world.ledger)
        problems.update({p.code for p in resolution.problems})
        chosen.update({b.chosen_by for b in resolution.bindings})
        shapes.update(features(world, resolution))
        shapes["draws"] += 1

    draw_one()
    draws = shapes.pop("draws")
    assert draws == DRAWS
    never = sorted(emitted_codes() - set(problems) - set(REACHED_BY_THEIR_OWN_PROPERTY))
    assert not never, f"problem codes never reached in {draws} draws: {never}"
    unchosen = sorted(set(CHOSEN_BY) - set(chosen))
    assert not unchosen, f"chosen_by never reached in {draws} draws: {unchosen}"
    rare = {f: f"{shapes[f]}/{draws}" for f, share in WANTED_FEATURES.items()
            if shapes[f] < max(1, share * draws)}
    assert not rare, f"shapes reached too rarely: {rare}"


@pytest.mark.parametrize("code", sorted(REACHED_BY_THEIR_OWN_PROPERTY))
def test_each_code_outside_meshes_is_reached_by_its_own_property(code, monkeypatch):
    """The property named for `code` runs (with the profile's examples) and at least one of
    the resolutions it makes through its module's `run` states that code."""
    module_name, test_name = REACHED_BY_THEIR_OWN_PROPERTY[code]
    module = importlib.import_module(f"{__package__}.{module_name}")
    seen: Counter = Counter()
    original = module.run

    def recording(*args, **kwargs):
        resolution = original(*args, **kwargs)
        seen.update({p.code for p in resolution.problems})
        return resolution

    monkeypatch.setattr(module, "run", recording)
    getattr(module, test_name)()
    assert seen[code] > 0, f"{module_name}.{test_name} never stated {code}"
