"""Properties of the moves that carry their data (resolver/_moves.py).

The transfers in the declarations equal an oracle's, written from the documented rule alone:
an instance that owns state, was declared on the node its `state-from:` names and now is on
another node of the mesh is carried from there, the same record in both declarations
(`leave` on the source, `arrive` on the target), and the source opens its transfer port to exactly its targets' addresses, nobody else's. A
`state-from:` naming a node the instance never ran on carries nothing, now or later. A move
keeps its transfer declared for as long as `state-from:` stays, removing it ends the transfer
and closes the port, and a refused move carries nothing. Each property was seen to fail when
its rule was broken in resolver/_moves.py (every `state-from:` carried, moved or not; the
transfer dropped once the rendering was written on the new node; the opening given to the
source's own address too).

The two nodes authenticate each other with their transfer certificates (resolver/_tls,
`transfer:<node>`): one is requested for exactly the nodes of declared transfers, each to be
held by its node alone; until issued every transfer waits and no node holds transfer files;
once issued, no request is left, every transfer is ready, and exactly the nodes taking part
hold their own certificate and key (a sealed reference to their own credential). Seen to
fail with the rule broken in resolver/_moves.py: requests for the source only, and files
declared on every node whose certificate is issued.
"""

from __future__ import annotations

import attrs
from hypothesis import assume, given
from hypothesis import strategies as st
from pyrsistent import pmap

from resolver import Certificate, Credential, Generation, Instance, StateDir, resolve
from resolver.certificates import TRANSFER_DIR
from resolver.rendering import record_declared

from .strategies import module_named, with_instance, worlds

PORT = 7470


def run(world, ledger=None):
    if ledger is None:
        ledger = world.ledger
    else:
        ledger = attrs.evolve(ledger, pins=world.ledger.pins.update(ledger.pins))
    return resolve(world.catalogue, world.mesh, ledger)


def oracle(world, resolution, before: dict) -> set:
    """(node, role, instance, source, target) the rule declares: an instance that
    owns state, was declared on the node its `state-from:` names (`before`: instance → node)
    and now is on another node of the mesh is carried from there."""
    expected = set()
    nodes = world.mesh.nodes
    for name, rendering in resolution.renderings.items():
        inst = world.mesh.instances.get(name)
        if inst is None or inst.state_from is None or inst.state_from == rendering.node:
            continue
        if inst.state_from not in nodes or not rendering.state_dirs:
            continue
        if before.get(name) != inst.state_from:
            continue  # it never ran there: nothing to carry
        source, target = inst.state_from, rendering.node
        expected.add((target, "arrive", name, source, target))
        expected.add((source, "leave", name, source, target))
    return expected


def declared(resolution) -> set:
    return {(node, t.role, t.instance, t.source, t.target)
            for node, decl in resolution.declarations.items() for t in decl.transfers}


KEEPER = attrs.evolve(module_named("keeper"), state=pmap({"data": StateDir(path="data")}))


@st.composite
def keeper_moves(draw):
    """A world with one to three instances of a module owning state, resolved and written
    once; then each perhaps moved, perhaps saying `state-from:` a node of the mesh (the one
    it was on, another, its new one) or one the mesh lacks."""
    world = draw(worlds(with_binding=True))
    nodes = sorted(world.mesh.nodes)
    count = draw(st.integers(1, 3))
    for i in range(count):
        world = with_instance(world, f"keeper-{i}",
                              Instance(KEEPER.name, draw(st.sampled_from(nodes))), KEEPER)
    first = run(world)
    before = {n: r.node for n, r in first.renderings.items()}
    moved = world
    for i in range(count):
        how = draw(st.sampled_from(["none", "where it was", "where it was", "any"]))
        source = None if how == "none" else before.get(f"keeper-{i}") \
            if how == "where it was" else draw(st.sampled_from(nodes + ["ghost"]))
        moved = with_instance(moved, f"keeper-{i}",
                              Instance(KEEPER.name, draw(st.sampled_from(nodes)),
                                       state_from=source), KEEPER)
    return moved, record_declared(first), before


@given(keeper_moves())
def test_transfers_and_their_openings_are_exactly_the_rules(case):
    world, ledger, before = case
    resolution = run(world, ledger)
    assert declared(resolution) == oracle(world, resolution, before)
    for node, decl in resolution.declarations.items():
        held = {h.instance for h in decl.held}
        for t in decl.transfers:
            assert t.instance not in held
            assert t.port == PORT
            dirs = resolution.renderings[t.instance].state_dirs
            assert list(t.dirs) == sorted(dirs)
        targets = sorted({t.target_address for t in decl.transfers if t.role == "leave"})
        openings = [a for a in decl.firewall.allow if a.reason.startswith("state transfer")]
        if targets:
            (opening,) = openings
            assert (opening.port, opening.protocol, list(opening.sources), opening.published) \
                == (PORT, "tcp", targets, False)
        else:
            assert openings == []


@given(keeper_moves())
def test_a_state_from_on_an_instance_that_never_ran_there_carries_nothing(case):
    """Now or on the next resolve (the renderings written), a transfer's source is the node
    the instance was declared on before it moved."""
    world, ledger, before = case
    resolution = run(world, ledger)
    again = run(world, record_declared(resolution))
    for r in (resolution, again):
        for decl in r.declarations.values():
            for t in decl.transfers:
                assert before.get(t.instance) == t.source, (t, before)


@given(worlds(), st.data())
def test_a_move_stays_carried_while_state_from_stays_and_ends_without_it(world, data):
    nodes = sorted(world.mesh.nodes)
    assume(len(nodes) >= 2)
    keeper = attrs.evolve(module_named("keeper"),
                          state=pmap({"data": StateDir(path="data")}))
    name, before = f"keeper@{nodes[0]}", nodes[0]
    world = with_instance(world, name, Instance(keeper.name, before), keeper)
    first = run(world)
    assume(name in first.renderings)
    after = data.draw(st.sampled_from(nodes[1:]))
    moving = with_instance(world, name, Instance(keeper.name, after, state_from=before), keeper)
    second = run(moving, record_declared(first))
    assume(name in second.renderings)

    def carried(resolution):
        return {(node, t.role) for node, d in resolution.declarations.items()
                for t in d.transfers if t.instance == name}

    assert carried(second) == {(before, "leave"), (after, "arrive")}
    # the rendering now says `after`: the transfer stays while state-from does
    third = run(moving, record_declared(second))
    assert carried(third) == {(before, "leave"), (after, "arrive")}
    # a state-from naming a node it was not on: refused, held where it was, nothing carried
    wrong = with_instance(world, name, Instance(keeper.name, after, state_from=after), keeper)
    refused = run(wrong, record_declared(first))
    assert name not in refused.renderings and carried(refused) == set()
    done = with_instance(world, name, Instance(keeper.name, after), keeper)
    fourth = run(done, record_declared(third))
    assert carried(fourth) == set()
    assert not any(a.reason.startswith("state transfer")
                   for a in fourth.declarations[before].firewall.allow)


def with_transfer_certificates(world, ledger):
    """`ledger` as `mesh plan --issue` leaves it for every node's transfer certificate: the
    CA recorded, a certificate for the node's address, its key sealed to that node alone."""
    tls, credentials = ledger.tls, ledger.credentials
    for node, described in world.mesh.nodes.items():
        tls = tls.set(f"transfer:{node}", Certificate(
            serial=f"s-{node}", not_before="2026-01-01T00:00:00Z",
            not_after="2036-01-01T00:00:00Z", pem=f"PEM of {node}", address=described.address))
        credentials = credentials.set(f"tls/transfer:{node}", Credential(
            active=Generation(generation=1, sealed=pmap({node: f"box for {node}"}))))
    return attrs.evolve(ledger, ca=ledger.ca or "the mesh CA", tls=tls, credentials=credentials)


def transfer_files(resolution) -> dict:
    """node → the paths of its declared files under TRANSFER_DIR, with their contents."""
    return {node: {f.path: (f.content, f.secret.credential if f.secret else None)
                   for f in decl.files if f.path.startswith(TRANSFER_DIR + "/")}
            for node, decl in resolution.declarations.items()}


@given(keeper_moves())
def test_transfer_certificates_are_requested_for_and_held_by_exactly_the_transfers_nodes(case):
    world, ledger, _before = case
    resolution = run(world, ledger)
    parties = {n for decl in resolution.declarations.values() for t in decl.transfers
               for n in (t.source, t.target)}
    requested = {r.id: tuple(r.holders) for r in resolution.requests
                 if r.id.startswith("transfer:")}
    assert requested == {f"transfer:{n}": (n,) for n in parties}
    for decl in resolution.declarations.values():
        for t in decl.transfers:  # nothing issued: it waits, never runs unauthenticated
            assert t.waits and not (t.certificate or t.key or t.ca), t
    assert not any(transfer_files(resolution).values())

    issued = run(world, with_transfer_certificates(world, ledger))
    assert not any(r.id.startswith("transfer:") for r in issued.requests)
    for node, files in transfer_files(issued).items():
        decl = issued.declarations[node]
        if node not in parties:
            assert files == {} and not decl.transfers
            continue
        for t in decl.transfers:
            assert not t.waits and {t.certificate, t.key} == set(files)
            assert t.ca in {f.path for f in decl.files}
        assert sorted(files.values(), key=str) == sorted(
            [(f"PEM of {node}", None),
             ("${secret:tls/transfer:" + node + "}", f"tls/transfer:{node}")], key=str)
