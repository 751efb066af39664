"""Incremental resolution equals resolution from scratch (resolver.incremental).

For a random mesh (property_tests/strategies_meshes.py) resolved with resolve_from(None, …),
then a random sequence of edits (a module's env changed, an instance moved, a node added,
removed or given another address, an instance's `bind:` changed, the ledger replaced by the
one the resolution wrote, or a pin, the CA, a credential or a login changed, `now` changed,
the inputs reloaded as equal but new objects), each step resolved with resolve_from(reuse of
the step before, …) equals resolve(…) of the same inputs: every field of the Resolution,
every declaration's canonical JSON bytes and its digest, and the same InputError when the
inputs are refused.
"""

from __future__ import annotations

import copy
import json

import attrs
from hypothesis import given, note
from hypothesis import strategies as st
from pyrsistent import pmap

from resolver import InputError, Node, Resolution, resolve
from resolver.documents import unstructure
from resolver.incremental import Reuse, resolve_from
from resolver.rendering import declaration_digest

from .strategies_meshes import meshes

EDITS = ("env", "moved", "node-added", "node-removed", "readdressed", "bind", "ledger-written",
         "pin", "ca", "credential-dropped", "login-changed", "now", "reloaded", "nothing")
NOWS = (None, "2026-01-01T00:00:00Z", "2031-06-01T12:00:00Z")


def canonical(declaration) -> bytes:
    """The canonical JSON a declaration's digest is the sha256 of (docs/schema.md)."""
    body = attrs.evolve(declaration, serial=0, digest="")
    return json.dumps(unstructure(body), sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False).encode()


def outcome(run):
    """(the Resolution, None) or (None, the InputError's text) of `run()`."""
    try:
        return run(), None
    except InputError as refused:
        return None, str(refused)


def edited(draw, what: str, catalogue, mesh, ledger, now, before: Resolution | None):
    """The inputs after one edit `what`."""
    names, nodes = sorted(mesh.instances), sorted(mesh.nodes)
    if what == "env" and catalogue.modules:
        name = draw(st.sampled_from(sorted(catalogue.modules)))
        module = catalogue.modules[name]
        if module.containers:
            index = draw(st.integers(0, len(module.containers) - 1))
            container = module.containers[index]
            value = draw(st.sampled_from(["on", "off", "${self.instance}", "${self.address}"]))
            container = attrs.evolve(container, env=container.env.set("EDITED", value))
            module = attrs.evolve(module, containers=module.containers.set(index, container))
            catalogue = attrs.evolve(catalogue, modules=catalogue.modules.set(name, module))
    elif what == "moved" and names:
        name = draw(st.sampled_from(names))
        to = draw(st.sampled_from(nodes))
        mesh = attrs.evolve(mesh, instances=mesh.instances.set(
            name, attrs.evolve(mesh.instances[name], node=to)))
    elif what == "node-added":
        spare = Node(address=draw(st.sampled_from(["10.44.0.99", "fd00:44::99"])))
        mesh = attrs.evolve(mesh, nodes=mesh.nodes.set("spare", spare))
    elif what == "node-removed" and len(nodes) > 1:
        gone = draw(st.sampled_from(nodes))
        mesh = attrs.evolve(mesh, nodes=mesh.nodes.remove(gone))
    elif what == "readdressed":
        node = draw(st.sampled_from(nodes))
        mesh = attrs.evolve(mesh, nodes=mesh.nodes.set(node, attrs.evolve(
            mesh.nodes[node], address=draw(st.sampled_from(["10.44.0.77", "fd00:44::77"])))))
    elif what == "bind" and len(names) > 1:
        name, provider = draw(st.sampled_from(names)), draw(st.sampled_from(names))
        module = catalogue.modules.get(mesh.instances[name].module)
        wanted = [r.as_ for r in module.requires if not r.each] if module is not None else []
        if wanted:
            as_ = draw(st.sampled_from(wanted))
            inst = mesh.instances[name]
            mesh = attrs.evolve(mesh, instances=mesh.instances.set(
                name, attrs.evolve(inst, bind=inst.bind.set(as_, provider))))
    elif what == "ledger-written" and before is not None:
        ledger = before.ledger  # the control loop's next run: the ledger the last one wrote
    elif what == "pin" and ledger.pins:
        pin = draw(st.sampled_from(sorted(ledger.pins)))
        ledger = attrs.evolve(ledger, pins=ledger.pins.set(pin, "sha256:" + "e" * 64))
    elif what == "credential-dropped" and ledger.credentials:
        # one a binding holds, more often than not: that is what a rendering is keyed by
        held = sorted({b.secret.credential for b in before.bindings if b.secret is not None}
                      & set(ledger.credentials)) if before is not None else []
        choices = held if held and draw(st.booleans()) else sorted(ledger.credentials)
        ledger = attrs.evolve(ledger, credentials=ledger.credentials.remove(
            draw(st.sampled_from(choices))))
    elif what == "login-changed" and ledger.logins:
        cred = draw(st.sampled_from(sorted(ledger.logins)))
        ledger = attrs.evolve(ledger, logins=ledger.logins.set(cred, ledger.logins[cred] + "x"))
    elif what == "ca":
        ledger = attrs.evolve(ledger, ca="" if ledger.ca else
                              "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
    elif what == "now":
        now = draw(st.sampled_from(NOWS))
    elif what == "reloaded":  # read again from the files: equal values, none of them the same
        catalogue, mesh, ledger = (copy.deepcopy(catalogue), copy.deepcopy(mesh),
                                   copy.deepcopy(ledger))
    return catalogue, mesh, ledger, now


@given(meshes(), st.data())
def test_resolving_from_the_last_reuse_equals_resolving_from_scratch(world, data):
    catalogue, mesh, ledger = world.catalogue, world.mesh, world.ledger
    now = data.draw(st.sampled_from(NOWS))
    reuse: Reuse | None = None
    before: Resolution | None = None
    steps = data.draw(st.lists(st.sampled_from(EDITS), min_size=1, max_size=4))
    for step, what in enumerate(["start", *steps]):
        if step:
            catalogue, mesh, ledger, now = edited(data.draw, what, catalogue, mesh, ledger, now,
                                                  before)
        note(f"step {step}: {what}")
        full, refused = outcome(lambda: resolve(catalogue, mesh, ledger, now=now))
        made, refused_too = outcome(lambda: resolve_from(reuse, catalogue, mesh, ledger, now=now))
        assert refused_too == refused
        if full is None:
            continue  # refused inputs: the same error; the reuse of the last good run stays
        assert made is not None
        incremental, reuse = made
        assert sorted(incremental.declarations) == sorted(full.declarations)
        for node, declaration in full.declarations.items():
            mine = incremental.declarations[node]
            assert canonical(mine) == canonical(declaration), node
            assert mine.digest == declaration.digest == declaration_digest(declaration), node
            assert mine.serial == declaration.serial, node
        assert incremental == full
        before = full


@given(meshes(bad=False))
def test_a_reuse_of_other_inputs_changes_nothing(world):
    """Any Reuse gives the same Resolution: one made from a different mesh included."""
    try:
        _, other = resolve_from(None, world.catalogue, attrs.evolve(world.mesh, instances=pmap()),
                                world.ledger)
        full = resolve(world.catalogue, world.mesh, world.ledger)
    except InputError:
        return
    first, reuse = resolve_from(other, world.catalogue, world.mesh, world.ledger)
    again, _ = resolve_from(reuse, world.catalogue, world.mesh, world.ledger)
    assert first == full and again == full


@given(meshes(), st.data())
def test_a_changed_credential_or_login_is_never_taken_from_the_reuse(world, data):
    """What the ledger issued per binding (its credential's generations, its login) is part of
    what a reused binding is keyed by: dropping a credential a binding holds, or recording
    its login otherwise, changes that binding."""
    try:
        full, reuse = resolve_from(None, world.catalogue, world.mesh, world.ledger)
    except InputError:
        return
    ledger = world.ledger
    held = sorted({b.secret.credential for b in full.bindings if b.secret is not None}
                  & set(ledger.credentials))
    if held:
        ledger = attrs.evolve(ledger, credentials=ledger.credentials.remove(
            data.draw(st.sampled_from(held))))
    logins = sorted(ledger.logins)
    if logins and data.draw(st.booleans()):  # recorded otherwise than it would be derived
        cred = data.draw(st.sampled_from(logins))
        ledger = attrs.evolve(ledger, logins=ledger.logins.set(cred, ledger.logins[cred] + "x"))
    incremental, _ = resolve_from(reuse, world.catalogue, world.mesh, ledger)
    assert incremental == resolve(world.catalogue, world.mesh, ledger)
