"""Kept means kept: whatever an operator adds, a host port the ledger keeps never moves.

For any mesh, resolved once so its ledger is a fixed point, and any one addition that claims a
kept port (a new module fixing it on that node, a floor on it, a node's ssh-port moved onto it,
or the same on another node, which must change nothing): every kept (instance, listen) → (node,
port) pair of the ledger is unchanged in the new ledger, or an error of the new resolution
names that instance. Never a silent move (issue 26: a new `fixed: 20001` took gitea's kept
port and gitea moved to 20011 with no refusal).

Half the draws write the first resolution's declarations (record_declared): the ledger then
keeps each instance's last rendering too, whose published ports are kept as well — among
them fixed ports, which ledger.ports never records (so those draws pick such a port half the
time), and, when its holder is then refused by a typo (one draw in three), the ports of a
held instance. A floor or an ssh-port on any kept port is refused (`floor-conflict`): a port
only a rendering keeps is never opened as a floor beside its held holder (silently), nor does
the floor refuse its running holder in its own stead. The second property makes that case
every time: a running instance fixing a port, its rendering written, then a floor or its
node's ssh-port on that port (the holder held by a typo in half the draws).
"""

from __future__ import annotations

import attrs
from hypothesis import assume, given, note
from hypothesis import strategies as st
from pyrsistent import pmap

from resolver import Floor, Instance, resolve
from resolver.rendering import record_declared

from .strategies import module_named, pins_for
from .strategies_meshes import meshes

ADDITIONS = ("fixed", "floor", "ssh-port", "fixed-elsewhere")
MAILER_PORTS = (465, 993, 8443)  # fixed by no generated module, on no generated floor


def kept_pairs(mesh, ledger) -> dict:
    return {(name, listen): (entry.node, entry.port)
            for name, entries in ledger.ports.items() if name in mesh.instances
            for listen, entry in entries.items()}


def published_pairs(mesh, ledger) -> dict:
    """(instance, listen) → (node, host port) published by each last written rendering
    (`declared`) of an instance still in mesh.yaml."""
    return {(name, p.listen): (rendering.node, p.host_port)
            for name, rendering in ledger.declared.items() if name in mesh.instances
            for container in rendering.containers for p in container.ports}


def declared_now(resolution) -> dict:
    """(instance, listen) → (node, host port) published by a resolution's declarations (held
    renderings included)."""
    return {(c.instance, p.listen): (node, p.host_port)
            for node, declaration in resolution.declarations.items()
            for c in declaration.containers for p in c.ports}


def with_typo(mesh, name: str):
    """`mesh` with `name`'s module misspelt: refused (held when its rendering was written)."""
    inst = mesh.instances[name]
    return attrs.evolve(mesh, instances=mesh.instances.set(
        name, attrs.evolve(inst, module=inst.module + "x")))


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
    base = first.ledger
    if data.draw(st.booleans(), label="declarations written"):
        base = record_declared(first)
    kept = kept_pairs(world.mesh, base)
    published = published_pairs(world.mesh, base)
    pool = {**published, **kept}
    assume(pool)
    only_declared = sorted(item for item in published.items() if item[1] not in kept.values())
    (holder, listen), (node, port) = data.draw(st.sampled_from(
        only_declared if only_declared and data.draw(st.booleans(), label="a fixed port")
        else sorted(pool.items())))
    how = data.draw(st.sampled_from(ADDITIONS))
    typo = holder in base.declared and data.draw(
        st.sampled_from([False, False, True]), label="holder refused by a typo")
    if how == "ssh-port":  # a port kept on a node the mesh no longer has: no node to move
        assume(node in world.mesh.nodes)
    if how == "fixed-elsewhere":
        others = sorted(set(world.mesh.nodes) - {node})
        assume(others)
        node = data.draw(st.sampled_from(others))
    note(f"{how} on {node}:{port} (kept for {holder}/{listen})")
    changed = world
    if typo:
        note(f"{holder} refused by a typo")
        changed = attrs.evolve(world, mesh=with_typo(world.mesh, holder))
    catalogue, mesh, ledger = added(changed, base, node, port, how)
    second = resolve(catalogue, mesh, ledger)
    after, now_published = kept_pairs(mesh, second.ledger), declared_now(second)
    errors = [p for p in second.problems if p.severity == "error"]
    for pairs, now in ((kept, after), (published, now_published)):
        for (name, listen_name), where in sorted(pairs.items()):
            if now.get((name, listen_name)) == where:
                continue
            naming = [p for p in errors if name in p.candidates or name in p.message]
            assert naming, (f"{name}/{listen_name} moved from {where} to "
                            f"{now.get((name, listen_name))} and no error names {name}")
    if how in ("floor", "ssh-port") and node in mesh.nodes:  # refused, naming the port
        assert [p for p in errors if p.code == "floor-conflict"
                and f"host port {port} kept by " in p.message], \
            f"a {how} on {node}:{port}, kept for {holder}/{listen}, was not refused"
    if how == "fixed-elsewhere" and not any(  # a port kept on another node is no collision
            name == holder and where == (node, port) for (name, _), where in pool.items()):
        assert not [p for p in errors if p.instance == f"newcomer@{node}"
                    and p.code == "port-conflict" and holder in p.candidates]
    if how == "fixed" and any(protocol(world, name, listen_name) == "tcp"
                              for (name, listen_name), where in pool.items()
                              if where == (node, port)):  # the newcomer fixes a TCP port
        conflict = [p for p in errors if p.instance == f"newcomer@{node}"
                    and p.code == "port-conflict"]
        refused_otherwise = [p for p in errors if p.instance == f"newcomer@{node}"]
        assert conflict or refused_otherwise, "the newcomer took a kept port unrefused"


@given(meshes(), st.sampled_from(MAILER_PORTS), st.sampled_from(["floor", "ssh-port"]),
       st.booleans(), st.data())
def test_a_floor_on_a_fixed_port_only_a_written_declaration_keeps_is_refused(
        world, port, how, typo, data):
    """A running `mailer` fixes `port` (which ledger.ports never records: only its written
    rendering, `declared`, keeps it). A floor, or its node's ssh-port, on that port is refused
    (`floor-conflict` naming mailer), is in no firewall, and costs mailer nothing: not refused
    by it, its port published as before. Refused by a typo in its module, mailer is held, and
    the floor is refused all the same (never silently opened beside the held container)."""
    node = data.draw(st.sampled_from(sorted(world.mesh.nodes)))
    module = module_named("mailer", fixed=port)
    name = f"mailer@{node}"
    catalogue = attrs.evolve(world.catalogue,
                             modules=world.catalogue.modules.set("mailer", module))
    mesh = attrs.evolve(world.mesh, instances=world.mesh.instances.set(
        name, Instance(module="mailer", node=node)))
    ledger = attrs.evolve(world.ledger, pins=world.ledger.pins.update(pmap(pins_for([module]))))
    first = resolve(catalogue, mesh, ledger)
    assume(name in first.renderings)  # running (a narrow range may leave it no port)
    written = record_declared(first)
    assert all(entry.port != port or entry.node != node
               for entries in written.ports.values() for entry in entries.values())
    if typo:
        mesh = with_typo(mesh, name)
    if how == "floor":
        mesh = attrs.evolve(mesh, floors=mesh.floors.append(Floor(port=port, reason="new")))
    else:
        mesh = attrs.evolve(mesh, nodes=mesh.nodes.set(
            node, attrs.evolve(mesh.nodes[node], ssh_port=port)))
    note(f"{how} on {port}, {name} {'held' if typo else 'running'}")
    second = resolve(catalogue, mesh, written)
    errors = [p for p in second.problems if p.severity == "error"]
    conflict = [p for p in errors if p.code == "floor-conflict" and name in p.candidates]
    assert conflict, [(p.code, p.instance, p.message) for p in errors]
    assert f"host port {port} kept by {name}/fixed" in conflict[0].message
    refusals = {p.code for p in errors if name in p.blocks}
    assert refusals == ({"unknown-module"} if typo else set()), refusals
    assert (name in second.held) == typo
    assert declared_now(second).get((name, "fixed")) == (node, port), "its port moved"
    if how == "floor":
        assert not [(n, f) for n, d in second.declarations.items() for f in d.firewall.floors
                    if f.port == port], "the refused floor is in a firewall"
