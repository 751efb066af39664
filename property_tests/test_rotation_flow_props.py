"""A rotation carried through the whole loop: resolve, every node applies its declaration and
reports it (`record_applied`), resolve again, until the rotation is over.

On whole meshes with every credential issued and applied, one credential is rotated; then in
rounds every node applies the newest declaration and reports. At every round:
- a holder's containers and binding files refer to the generation holders are told (the
  active one), never to one the provider has not reported in force;
- the provider's grant puts the newest generation in force and keeps the one still in use;
- nothing else moves: no other credential changes generation.
Within three rounds the rotation is over (nothing pending, nothing retiring, no holder left
in a window), the new
generation is the active one everywhere and the old one is retired. The plan's sentence for
the credential says where it stands: a window exactly for a one-password credential waiting
for its provider, and "settled" once it is over.
"""

from __future__ import annotations

import attrs
from hypothesis import given, note
from hypothesis import strategies as st
from pyrsistent import pmap

from resolver import resolve
from resolver.rotation import (
    begin_rotation,
    describe_rotation,
    first_generation,
    in_progress,
    record_applied,
    window_holders,
)

from .strategies_meshes import meshes


def issued(world):
    """The world's ledger with every requested credential issued (sealed to its holders) and
    every declaration applied and reported."""
    ledger = world.ledger
    for _ in range(2):
        resolution = resolve(world.catalogue, world.mesh, ledger)
        credentials = dict(ledger.credentials)
        for request in resolution.requests:
            if request.kind == "credential":
                credentials[request.id] = first_generation(
                    {n: f"sealed-{n}" for n in request.holders}, slot=request.slot)
        ledger = attrs.evolve(ledger, credentials=pmap(credentials))
    return ledger


def apply_everywhere(world, ledger):
    resolution = resolve(world.catalogue, world.mesh, ledger)
    for node in sorted(resolution.declarations):
        ledger = record_applied(ledger, node, resolution.declarations[node])
    return resolution, ledger


@given(meshes(bad=False), st.data())
def test_a_rotation_goes_through_reports_to_its_end(world, data):
    ledger = issued(world)
    resolution, ledger = apply_everywhere(world, ledger)
    _, ledger = apply_everywhere(world, ledger)
    settled = {c for c, cred in ledger.credentials.items() if in_progress(cred) is None}
    used = {g.credential.credential for d in resolution.declarations.values() for g in d.grants}
    used |= {s.credential for d in resolution.declarations.values() for c in d.containers
             for s in c.secrets}
    kinds = {}  # two slots, one password, a module's own secret: each as often as the others
    for cred_id in sorted(settled & used):
        kind = ("own" if cred_id.startswith("secret/") else
                "dual" if ledger.credentials[cred_id].active.slot else "single")
        kinds.setdefault(kind, []).append(cred_id)
    if not kinds:
        return
    kind = data.draw(st.sampled_from(sorted(kinds)))
    chosen = data.draw(st.sampled_from(kinds[kind]))
    before = ledger.credentials[chosen]
    old = before.active.generation
    rotated = begin_rotation(chosen, before, {n: f"sealed-{n}-new" for n in before.active.sealed})
    ledger = attrs.evolve(ledger, credentials=ledger.credentials.set(chosen, rotated))
    others = {c: cred.active.generation for c, cred in ledger.credentials.items() if c != chosen}
    sentence = describe_rotation(chosen, rotated)
    assert sentence.startswith(chosen)
    single = rotated.pending is not None and rotated.pending.slot is None
    assert ("WINDOW" in sentence) == single, sentence
    for round_ in range(3):
        told = ledger.credentials[chosen]  # what this round's declarations were made from
        resolution, ledger = apply_everywhere(world, ledger)
        note(f"round {round_}: {describe_rotation(chosen, ledger.credentials[chosen])}")
        cred = ledger.credentials[chosen]
        newest = (told.pending or told.active).generation
        for decl in resolution.declarations.values():
            for container in decl.containers:
                for ref in container.secrets:
                    if ref.credential == chosen:  # holders: only what the provider holds
                        assert ref.generation == told.active.generation
            for binding in decl.bindings:
                if binding.secret is not None and binding.secret.credential == chosen:
                    assert binding.secret.generation == told.active.generation
            for grant in decl.grants:
                if grant.credential.credential == chosen:  # the provider: the newest first
                    assert grant.credential.generation == newest
        assert {c: g.active.generation for c, g in ledger.credentials.items()
                if c != chosen} == others, "another credential moved"
        if in_progress(cred) is None and not window_holders(cred):
            break
    cred = ledger.credentials[chosen]
    assert in_progress(cred) is None, describe_rotation(chosen, cred)
    assert not window_holders(cred), "a holder was left in the window"
    assert cred.active.generation == old + 1
    assert old in cred.retired
    assert describe_rotation(chosen, cred).endswith("settled")
    final = resolve(world.catalogue, world.mesh, ledger)
    for decl in final.declarations.values():
        for container in decl.containers:
            for ref in container.secrets:
                if ref.credential == chosen:
                    assert ref.generation == old + 1
