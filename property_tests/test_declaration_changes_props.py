"""The plan's changes (resolver.declaration_changes): complete, exact and minimal.

- Applying every listed change to the old declarations gives the new ones, serials and digests
  aside (resolver.apply_changes): for two unrelated meshes, and for a mesh and the same mesh
  after an operator's edit (an instance removed, an instance's node changed, a floor added, an
  issued credential forgotten).
- An unchanged mesh lists nothing, and a resolution compared with itself neither.
- Every change names a section the plan knows, its action is +, - or ~, a `+` has no element
  before it and a `-` none after, and a `~` element differs; subjects are unique per (node,
  section).
"""

from __future__ import annotations

import attrs
from hypothesis import given, note
from hypothesis import strategies as st

from resolver import (
    SECTION_NAMES,
    Floor,
    apply_changes,
    declaration_changes,
    resolve,
)

from .strategies_meshes import meshes


def without_serials(declarations) -> dict:
    return {node: attrs.evolve(d, serial=0, digest="") for node, d in declarations.items()}


def check(old, new) -> list:
    changes = declaration_changes(old, new)
    seen = set()
    for change in changes:
        assert change.section in SECTION_NAMES and change.action in "+-~"
        assert (change.node, change.section, change.subject) not in seen, change
        seen.add((change.node, change.section, change.subject))
        if change.action == "+":
            assert change.before is None and change.after is not None, change
        elif change.action == "-":
            assert change.before is not None and change.after is None, change
        else:
            assert change.before != change.after, change
    assert without_serials(apply_changes(old, changes)) == without_serials(new)
    return changes


@given(meshes(), meshes())
def test_applying_the_changes_between_two_meshes_gives_the_second(first, second):
    old = resolve(first.catalogue, first.mesh, first.ledger).declarations
    new = resolve(second.catalogue, second.mesh, second.ledger).declarations
    check(old, new)


def edited(world, data, before):
    """(mesh, ledger) after one edit: an instance removed or moved, a floor added, or an
    issued credential forgotten (its holders told it is pending again: a generation change),
    one a grant holds when there is one."""
    mesh, ledger = world.mesh, before.ledger
    how = data.draw(st.sampled_from(["remove", "move", "floor", "forget", "forget"]))
    names = sorted(mesh.instances)
    granted = sorted({g.credential.credential for d in before.declarations.values()
                      for g in d.grants if g.credential.credential in ledger.credentials})
    issued = granted or sorted(ledger.credentials)
    if how == "forget" and issued:
        gone = data.draw(st.sampled_from(issued))
        return mesh, attrs.evolve(ledger, credentials=ledger.credentials.remove(gone))
    return _edited_mesh(mesh, how, names, data), ledger


def _edited_mesh(mesh, how, names, data):
    if how == "remove" and names:
        gone = data.draw(st.sampled_from(names))
        return attrs.evolve(mesh, instances=mesh.instances.remove(gone))
    if how == "move" and names:
        name = data.draw(st.sampled_from(names))
        node = data.draw(st.sampled_from(sorted(mesh.nodes)))
        instance = attrs.evolve(mesh.instances[name], node=node)
        return attrs.evolve(mesh, instances=mesh.instances.set(name, instance))
    port = data.draw(st.integers(1, 65535))
    return attrs.evolve(mesh, floors=mesh.floors.append(Floor(port=port, reason="edit")))


@given(meshes(), st.data())
def test_applying_the_changes_of_an_edit_gives_the_edited_mesh(world, data):
    before = resolve(world.catalogue, world.mesh, world.ledger)
    mesh, ledger = edited(world, data, before)
    after = resolve(world.catalogue, mesh, ledger)
    changes = check(before.declarations, after.declarations)
    note("\n".join(f"{c.action} {c.node} {c.section} {c.subject}: {list(c.causes)}"
                   for c in changes))


@given(meshes())
def test_an_unchanged_mesh_lists_nothing(world):
    """Once its ledger is the resolver's own (a drawn ledger's port outside the range moves in
    the first resolution, and a floor it held is then applied), a mesh resolved again lists
    nothing."""
    first = resolve(world.catalogue, world.mesh, world.ledger)
    assert declaration_changes(first.declarations, first.declarations) == []
    second = resolve(world.catalogue, world.mesh, first.ledger)
    again = resolve(world.catalogue, world.mesh, second.ledger)
    assert declaration_changes(second.declarations, again.declarations) == []
