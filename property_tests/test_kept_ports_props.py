"""Kept means kept: whatever an operator adds, a host port the ledger keeps never moves.

For any mesh, resolved once so its ledger is a fixed point, and any one addition that claims a
kept port (a new module fixing it on that node, a floor on it, a node's ssh-port moved onto it,
or the same on another node, which must change nothing): every kept (instance, listen) → (node,
port) pair of the ledger is unchanged in the new ledger, or an error of the new resolution
names that instance. Never a silent move (issue 26: a new `fixed: 20001` took gitea's kept
port and gitea moved to 20011 with no refusal).
"""

from __future__ import annotations

import attrs
from hypothesis import assume, given, note
from hypothesis import strategies as st
from pyrsistent import pmap

from resolver import Floor, Instance, resolve

from .strategies import module_named, pins_for
from .strategies_meshes import meshes

ADDITIONS = ("fixed", "floor", "ssh-port", "fixed-elsewhere")


def kept_pairs(mesh, ledger) -> dict:
    return {(name, listen): (entry.node, entry.port)
            for name, entries in ledger.ports.items() if name in mesh.instances
            for listen, entry in entries.items()}


def protocol(world, instance: str, listen: str):
    """The protocol of `instance`'s listen `listen`, None when its module has no such listen
    (a kept record of a listen since removed)."""
    found = world.catalogue.modules[world.mesh.instances[instance].module].listens.get(listen)
    return found.protocol if found is not None else None


def added(world, ledger, node: str, port: int, how: str):
    """(catalogue, mesh, ledger) with one addition claiming `port` on `node`."""
    catalogue, mesh = world.catalogue, world.mesh
    if how in ("fixed", "fixed-elsewhere"):
        module = module_named("newcomer", fixed=port)
        modules = catalogue.modules.set("newcomer", module)
        catalogue = attrs.evolve(catalogue, modules=modules)
        name = f"newcomer@{node}"
        mesh = attrs.evolve(mesh, instances=mesh.instances.set(
            name, Instance(module="newcomer", node=node)))
        ledger = attrs.evolve(ledger, pins=ledger.pins.update(pmap(pins_for([module]))))
    elif how == "floor":
        mesh = attrs.evolve(mesh, floors=mesh.floors.append(Floor(port=port, reason="new")))
    else:
        nodes = mesh.nodes.set(node, attrs.evolve(mesh.nodes[node], ssh_port=port))
        mesh = attrs.evolve(mesh, nodes=nodes)
    return catalogue, mesh, ledger


@given(meshes(), st.data())
def test_an_addition_never_moves_a_kept_port_without_a_refusal_naming_its_holder(world, data):
    first = resolve(world.catalogue, world.mesh, world.ledger)
    kept = kept_pairs(world.mesh, first.ledger)
    assume(kept)
    (holder, listen), (node, port) = data.draw(st.sampled_from(sorted(kept.items())))
    how = data.draw(st.sampled_from(ADDITIONS))
    if how == "ssh-port":  # a port kept on a node the mesh no longer has: no node to move
        assume(node in world.mesh.nodes)
    if how == "fixed-elsewhere":
        others = sorted(set(world.mesh.nodes) - {node})
        assume(others)
        node = data.draw(st.sampled_from(others))
    note(f"{how} on {node}:{port} (kept for {holder}/{listen})")
    catalogue, mesh, ledger = added(world, first.ledger, node, port, how)
    second = resolve(catalogue, mesh, ledger)
    after = kept_pairs(mesh, second.ledger)
    errors = [p for p in second.problems if p.severity == "error"]
    for (name, listen_name), where in sorted(kept.items()):
        if after.get((name, listen_name)) == where:
            continue
        naming = [p for p in errors if name in p.candidates or name in p.message]
        assert naming, (f"{name}/{listen_name} moved from {where} to "
                        f"{after.get((name, listen_name))} and no error names {name}")
    if how == "fixed-elsewhere" and not any(  # a port kept on another node is no collision
            name == holder and where == (node, port) for (name, _), where in kept.items()):
        assert not [p for p in errors if p.instance == f"newcomer@{node}"
                    and p.code == "port-conflict" and holder in p.candidates]
    if how == "fixed" and any(protocol(world, name, listen_name) == "tcp"
                              for (name, listen_name), where in kept.items()
                              if where == (node, port)):  # the newcomer fixes a TCP port
        conflict = [p for p in errors if p.instance == f"newcomer@{node}"
                    and p.code == "port-conflict"]
        refused_otherwise = [p for p in errors if p.instance == f"newcomer@{node}"]
        assert conflict or refused_otherwise, "the newcomer took a kept port unrefused"
