"""Properties of the firewall intents resolve() computes (resolver/_firewall.py).

Published = announced = firewalled: what a node opens is derived from the same assignments
its containers publish and its consumers are told. Bindings on another node open the port to
that node's address; bindings on the same node open it to the consumer's containers by their
MAC addresses, which the containers carry; exposures open assigned ports beyond the mesh and
never move one. Each property was seen to fail when its rule was broken in resolver/.
"""

from __future__ import annotations

import ipaddress

import attrs
from hypothesis import assume, given
from hypothesis import strategies as st
from pyrsistent import pmap, pvector

from resolver import Exposure, resolve
from resolver import ProblemCode as codes
from resolver.rendering import assign_macs

from .strategies import worlds
from .strategies_firewall import NETWORKS

SOURCES = NETWORKS + ["any", "10.77.0.9", "fd00::9", "10.0.0.1/32"]


def run(world, ledger=None):
    if ledger is None:
        ledger = world.ledger
    else:
        ledger = attrs.evolve(ledger, pins=world.ledger.pins.update(ledger.pins))
    return resolve(world.catalogue, world.mesh, ledger)


def canonical(source: str) -> str:
    if source == "any":
        return source
    network = ipaddress.ip_network(source)
    return str(network.network_address) if network.prefixlen == network.max_prefixlen \
        else str(network)


@given(worlds(with_binding=True))
def test_same_node_bindings_open_the_port_to_the_consumers_containers(world):
    resolution = run(world)
    for node, decl in resolution.declarations.items():
        macs = {}
        for c in decl.containers:
            macs.setdefault(c.instance, set()).add(c.mac)
        opened = {(lo.port, lo.protocol, m) for lo in decl.firewall.local for m in lo.macs}
        expected = {(b.port, "tcp", m) for b in resolution.bindings
                    if b.provider_node == node == b.consumer_node for m in macs[b.consumer]}
        assert opened == expected
        assert None not in {m for _, _, m in opened}  # every container of such a consumer has one
        local_consumers = {b.consumer for b in resolution.bindings
                           if b.provider_node == node == b.consumer_node}
        for c in decl.containers:
            assert (c.mac is not None) == (c.instance in local_consumers), c.name
        given_macs = [c.mac for c in decl.containers if c.mac]
        assert len(given_macs) == len(set(given_macs)), "two containers share a MAC on a node"
        for mac in given_macs:
            first = int(mac.split(":")[0], 16)
            assert first & 0b10 and not first & 0b1 and not mac.startswith("02:42")
        # the port opened is the port published by the provider and told to the consumer
        published = {p.host_port for c in decl.containers for p in c.ports}
        assert {port for port, _, _ in opened} <= published


@given(worlds(with_binding=True))
def test_a_containers_mac_is_stable(world):
    """The MAC depends on the mesh and the container's name only: resolving again with the
    ledger it produced, or with another node added, gives the same one."""
    first = run(world)
    again = run(world, first.ledger)

    def macs(resolution):
        return {c.name: c.mac for d in resolution.declarations.values() for c in d.containers}

    assert macs(again) == macs(first)
    bigger = attrs.evolve(world, mesh=attrs.evolve(world.mesh, nodes=world.mesh.nodes.set(
        "zz", world.mesh.nodes[sorted(world.mesh.nodes)[0]].__class__(address="10.0.9.9"))))
    assert macs(run(bigger, first.ledger)) == macs(first)


@given(st.text(min_size=1, max_size=8),
       st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=8, unique=True),
       st.data())
def test_a_mac_already_taken_on_the_node_is_never_given_again(mesh, names, data):
    """A container whose MAC is taken on its node (by a container outside this list) gets
    another, still derived from mesh and name alone, unique on the node; the others keep the
    MAC they would have had. (A collision of 40 hashed bits never happens by chance: the
    taken set is how this branch is reached at all.)"""
    plain = assign_macs(mesh, names)
    clash = data.draw(st.lists(st.sampled_from(names), min_size=1, unique=True))
    taken = frozenset(plain[name] for name in clash)
    moved = assign_macs(mesh, names, taken)
    assert sorted(moved) == sorted(names)
    assert len(set(moved.values())) == len(names) and not set(moved.values()) & taken
    assert {n: m for n, m in moved.items() if n not in clash} == \
        {n: m for n, m in plain.items() if n not in clash}
    assert all(moved[n].split(":")[0] == plain[n].split(":")[0] for n in clash)
    assert assign_macs(mesh, names, taken) == moved

@given(worlds(with_binding=True), st.data())
def test_exposures_open_assigned_ports_and_move_none(world, data):
    first = run(world)
    live = sorted({c.instance for d in first.declarations.values() for c in d.containers})
    if not live:
        return
    chosen = data.draw(st.lists(st.sampled_from(live), min_size=1, max_size=3, unique=True))
    instances = dict(world.mesh.instances)
    wanted = {}
    for name in chosen:
        module = world.catalogue.modules[instances[name].module]
        listens = data.draw(st.lists(st.sampled_from(sorted(module.listens)), min_size=1,
                                     max_size=2, unique=True))
        expose = {}
        for listen in listens:
            sources = data.draw(st.one_of(st.just(["any"]), st.lists(
                st.sampled_from([s for s in SOURCES if s != "any"]), min_size=1, max_size=3,
                unique_by=canonical)))
            expose[listen] = Exposure(to=pvector(sources), reason="because")
            wanted[(name, listen)] = {canonical(s) for s in sources}
        instances[name] = attrs.evolve(instances[name], expose=pmap(expose))
    exposed = attrs.evolve(world, mesh=attrs.evolve(world.mesh, instances=pmap(instances)))
    second = run(exposed, first.ledger)
    assert second.ledger.ports == first.ledger.ports  # an exposure never moves a port
    for node, decl in second.declarations.items():
        before = first.declarations[node]
        # nothing but the exposures changes in the firewall
        assert (decl.firewall.allow, decl.firewall.local, decl.firewall.floors) == (
            before.firewall.allow, before.firewall.local, before.firewall.floors)
        assert [c.ports for c in decl.containers] == [c.ports for c in before.containers]
        published = {(p.host_port, p.protocol, c.instance, p.listen)
                     for c in decl.containers for p in c.ports}
        opened = {}
        for e in decl.firewall.expose:
            instance, listen = e.reason.split(" exposed", 1)[0].split("/", 1)
            assert (e.port, e.protocol, instance, listen) in published  # the published port
            opened[(instance, listen)] = set(e.sources)
        assert opened == {k: v for k, v in wanted.items() if k[0] in decl.instances}



@given(worlds(with_binding=True), st.data())
def test_an_exposure_of_no_listen_refuses_its_instance_by_name(world, data):
    """An `expose:` naming no listen of the module is refused (unknown-listen), blocking that
    instance and stating nothing else; a valid exposure beside it does not save it."""
    first = run(world)
    live = sorted(first.renderings)
    assume(live)
    name = data.draw(st.sampled_from(live))
    module = world.catalogue.modules[world.mesh.instances[name].module]
    known = sorted(module.listens)
    typo = data.draw(st.sampled_from(known)) + "x" if known else "main"
    expose = {typo: Exposure(to=pvector(["any"]), reason="typo")}
    if known and data.draw(st.booleans()):
        expose[known[0]] = Exposure(to=pvector(["10.77.0.9"]), reason="fine")
    instances = world.mesh.instances.set(
        name, attrs.evolve(world.mesh.instances[name], expose=pmap(expose)))
    second = run(attrs.evolve(world, mesh=attrs.evolve(world.mesh, instances=instances)),
                 first.ledger)
    refused = [(p.code, p.severity, p.instance, tuple(p.blocks)) for p in second.problems
               if p.code == codes.UNKNOWN_LISTEN]
    assert refused == [(codes.UNKNOWN_LISTEN, "error", name, (name,))]
    assert name not in second.renderings
    assert {p.code for p in second.problems} - {p.code for p in first.problems} <= {
        codes.UNKNOWN_LISTEN, codes.BLOCKED_BY_PROVIDER, codes.HELD}


FAMILY_SOURCES = {4: ["10.77.0.0/24", "10.77.0.9", "192.168.1.0/24", "10.0.0.1/32"],
                  6: ["fd00::/64", "fd00::9", "2001:db8::/32", "fd00:77::a"]}


@given(worlds(with_binding=True), st.data())
def test_an_exposure_to_the_other_address_family_is_a_warning_that_refuses_nothing(world, data):
    """A source of the other address family than its node's address can never reach the port
    (it is published on that address only): one warning per such source, at that source,
    naming it; nothing is refused, the exposure's sources of the node's family state nothing,
    and no instance's rendering is lost."""
    first = run(world)
    live = [name for name in sorted(first.renderings)
            if world.catalogue.modules[world.mesh.instances[name].module].listens]
    assume(live)
    name = data.draw(st.sampled_from(live))
    inst = world.mesh.instances[name]
    listen = data.draw(st.sampled_from(sorted(world.catalogue.modules[inst.module].listens)))
    family = ipaddress.ip_address(world.mesh.nodes[inst.node].address).version
    wrong = data.draw(st.lists(st.sampled_from(FAMILY_SOURCES[10 - family]), min_size=1,
                               max_size=3, unique=True))
    right = data.draw(st.lists(st.sampled_from(FAMILY_SOURCES[family]), max_size=2,
                               unique=True))
    to = data.draw(st.permutations(wrong + right))
    instances = world.mesh.instances.set(name, attrs.evolve(
        inst, expose=pmap({listen: Exposure(to=pvector(to), reason="family")})))
    second = run(attrs.evolve(world, mesh=attrs.evolve(world.mesh, instances=instances)),
                 first.ledger)
    warned = [p for p in second.problems if p.code == codes.EXPOSURE_FAMILY]
    assert [(p.severity, p.instance, tuple(p.blocks)) for p in warned] == \
        [("warning", name, ())] * len(wrong)
    named = sorted(next(canonical(s) for s in wrong if f"exposed to {canonical(s)}," in p.message)
                   for p in warned)
    assert named == sorted(canonical(s) for s in wrong)
    assert sorted(second.renderings) == sorted(first.renderings)
    assert {p.code for p in second.problems} - {p.code for p in first.problems} == {
        codes.EXPOSURE_FAMILY}
