"""Properties of resolve(): each test guards one rule of DESIGN.md and was seen to fail when
the rule was broken in resolver/ (see the closing note of the resolution issue)."""

from __future__ import annotations

import json
from collections import Counter

import attrs
from hypothesis import assume, given, note
from hypothesis import strategies as st
from pyrsistent import pmap, pvector

from resolver import Instance, Node, resolve
from resolver.documents import unstructure
from resolver.rotation import first_generation
from resolver import ProblemCode as codes

from .oracle_mesh import expect
from .strategies import (NODE_NAMES, SPREAD_NODE_NAMES, module_named, selection_worlds,
                         with_instance, without_instance, worlds)


def run(world, ledger=None):
    """Resolve `world`, with an earlier resolution's ledger when given (plus the world's pins,
    so instances of modules added since are pinned as an operator would have pinned them)."""
    if ledger is None:
        ledger = world.ledger
    else:
        ledger = attrs.evolve(ledger, pins=world.ledger.pins.update(ledger.pins))
    return resolve(world.catalogue, world.mesh, ledger)


def canonical(resolution) -> str:
    return json.dumps(
        {
            "declarations": unstructure(resolution.declarations),
            "bindings": unstructure(resolution.bindings),
            "problems": unstructure(resolution.problems),
            "requests": unstructure(resolution.requests),
            "ledger": unstructure(resolution.ledger),
        },
        sort_keys=True,
    )


def declared_instances(resolution) -> set:
    return {c.instance for d in resolution.declarations.values() for c in d.containers}


def blocked(resolution) -> set:
    return {name for p in resolution.problems if p.severity == "error" for name in p.blocks}


# 1 ---------------------------------------------------------------------------------------


@given(worlds())
def test_deterministic_and_order_independent(world):
    first = canonical(run(world))
    assert canonical(run(world)) == first
    mesh = world.mesh
    reordered = attrs.evolve(
        mesh,
        nodes=pmap(dict(reversed(list(mesh.nodes.items())))),
        instances=pmap(dict(reversed(sorted(mesh.instances.items())))),
    )
    catalogue = attrs.evolve(world.catalogue, modules=pmap(
        dict(reversed(sorted(world.catalogue.modules.items())))))
    assert canonical(resolve(catalogue, reordered, world.ledger)) == first


# 2 ---------------------------------------------------------------------------------------


@given(worlds())
def test_fixed_point(world):
    first = run(world)
    second = run(world, first.ledger)
    assert second.declarations == first.declarations
    assert second.ledger == first.ledger
    third = run(world, second.ledger)
    assert canonical(third) == canonical(second)


@given(st.sampled_from([NODE_NAMES, SPREAD_NODE_NAMES]).flatmap(
    lambda names: worlds(min_nodes=2, with_binding=True, names=names)), st.data())
def test_the_plans_lists_come_in_their_stated_order(world, data):
    """Bindings by (consumer, requirement); requests by kind, id, reason, holders, slot (none
    first). Also after every credential is issued and an instance then moves, so requests
    to issue and to re-seal, with their holders and slots, are ordered together. Node names
    are also drawn to sort among the credential ids, so certificate requests (id: a node)
    fall between credential requests when ordered by id alone."""
    def request_key(q):
        return (q.kind, q.id, q.reason, tuple(q.holders), q.slot or "")

    first = run(world)
    credentials = {q.id: first_generation({n: f"sealed-{n}" for n in q.holders}, slot=q.slot)
                   for q in first.requests if q.kind == "credential"}
    ledger = attrs.evolve(first.ledger, credentials=pmap(credentials))
    name = data.draw(st.sampled_from(sorted(world.mesh.instances)))
    elsewhere = data.draw(st.sampled_from(sorted(set(world.mesh.nodes) - {
        world.mesh.instances[name].node})))
    moved = attrs.evolve(world.mesh, instances=world.mesh.instances.set(
        name, attrs.evolve(world.mesh.instances[name], node=elsewhere)))
    for resolution in (first, resolve(world.catalogue, moved, ledger)):
        bindings = list(resolution.bindings)
        assert bindings == sorted(bindings, key=lambda b: (b.consumer, b.requirement))
        requests = list(resolution.requests)
        assert requests == sorted(requests, key=request_key)
        assert len(set(requests)) == len(requests)


# 4 ---------------------------------------------------------------------------------------


@given(worlds(with_binding=True), st.sampled_from(["node", "module", "instance", "provider"]),
       st.data())
def test_adding_unrelated_things_changes_no_binding_port_or_login(world, what, data):
    first = run(world)
    if what == "node":
        mesh = attrs.evolve(world.mesh, nodes=world.mesh.nodes.set("n9", Node("10.0.0.99")))
        bigger = attrs.evolve(world, mesh=mesh)
    elif what == "module":
        module = module_named("lonely")
        bigger = attrs.evolve(world, catalogue=attrs.evolve(
            world.catalogue, modules=world.catalogue.modules.set("lonely", module)))
    elif what == "instance":
        node = data.draw(st.sampled_from(sorted(world.mesh.nodes)))
        bigger = with_instance(world, f"aaa-lonely@{node}", Instance("lonely", node),
                               module_named("lonely"))
    else:
        node = data.draw(st.sampled_from(sorted(world.mesh.nodes)))
        provision = data.draw(st.sampled_from(["sql", "queue", "web"]))
        bigger = with_instance(world, f"aaa-extra-{provision}@{node}",
                               Instance(f"extra-{provision}", node),
                               module_named(f"extra-{provision}", provides=[provision]))
    second = run(bigger, first.ledger)
    if what in ("instance", "provider"):
        assert declared_instances(second) - declared_instances(first), "the new instance runs"
    before = {(b.consumer, b.requirement): b for b in first.bindings}
    after = {(b.consumer, b.requirement): b for b in second.bindings}
    for key, b in before.items():
        assert key in after, f"binding {key} lost"
        assert (after[key].provider, after[key].login, after[key].port) == (
            b.provider, b.login, b.port)
    for name, ports in first.ledger.ports.items():
        assert second.ledger.ports[name] == ports
    for cred, login in first.ledger.logins.items():
        assert second.ledger.logins[cred] == login


# 5 ---------------------------------------------------------------------------------------


@given(worlds(max_instances=14))
def test_no_port_collisions_on_any_node(world):
    resolution = run(world)
    for node, decl in resolution.declarations.items():
        ports = [(p.host_port, p.protocol) for c in decl.containers for p in c.ports]
        assert len(ports) == len(set(ports)), Counter(ports).most_common(3)
        floors = {(f.port, f.protocol) for f in decl.firewall.floors}
        assert not floors & set(ports)
        assert (world.mesh.nodes[node].ssh_port, "tcp") not in set(ports)


# 6, 7 ------------------------------------------------------------------------------------


@given(worlds(with_binding=True))
def test_both_ends_agree_and_logins_are_never_shared(world):
    resolution = run(world)
    grants = {(g.provider, g.consumer, g.provision): g
              for d in resolution.declarations.values() for g in d.grants}
    logins = {}
    for b in resolution.bindings:
        provider_decl = resolution.declarations[b.provider_node]
        assert b.host == provider_decl.address
        published = {p.host_port for c in provider_decl.containers if c.instance == b.provider
                     for p in c.ports}
        assert b.port in published
        if b.login is None:
            continue
        grant = grants[(b.provider, b.consumer, b.provision)]
        assert b.login == (f"{grant.login}_{grant.slot}" if grant.slot else grant.login)
        assert b.resource == grant.resource
        assert b.secret == grant.credential
        triple = (b.provision, b.provider, b.consumer)
        assert logins.setdefault(grant.login, triple) == triple, "two bindings share a login"


# 8 ---------------------------------------------------------------------------------------


@given(worlds(min_nodes=2, with_binding=True))
def test_firewall_allows_exactly_cross_node_bindings_plus_floors(world):
    resolution = run(world)
    address = {n: node.address for n, node in world.mesh.nodes.items()}
    for node, decl in resolution.declarations.items():
        allowed = {(a.port, a.protocol, s) for a in decl.firewall.allow for s in a.sources}
        expected = {(b.port, "tcp", address[b.consumer_node]) for b in resolution.bindings
                    if b.provider_node == node and b.consumer_node != node}
        assert allowed == expected
        assert any(f.reason == "ssh" and f.port == world.mesh.nodes[node].ssh_port
                   and not f.sources for f in decl.firewall.floors)


# 9 ---------------------------------------------------------------------------------------


def oracle(world, consumer, requirement, recorded=None):
    """The documented order, written independently: a list of rules tried in turn."""
    mesh, modules = world.mesh, world.catalogue.modules
    node_of = {n: i.node for n, i in mesh.instances.items()}
    serving = sorted(n for n, i in mesh.instances.items() if n != consumer
                     and requirement.provision in {p.provision for p in modules[i.module].provides})
    named = [("instance override", mesh.instances[consumer].bind.get(requirement.as_)),
             ("manifest", requirement.provider)]
    for rule, name in named:
        if name:
            if name not in mesh.instances:
                return ("refused", codes.PROVIDER_NOT_ASSIGNED, ())
            if name not in serving:
                return ("refused", codes.NOT_A_PROVIDER, tuple(serving))
            if mesh.instances[name].node not in mesh.nodes:
                return ("refused", codes.PROVIDER_NODE_UNKNOWN, ())
            return ("chosen", name, rule)
    here = [n for n in serving if node_of[n] == node_of[consumer]]
    default = mesh.defaults.get(requirement.provision)
    rules = [("co-located", here if len(here) == 1 else []),
             ("mesh default", [default] if default in serving else []),
             ("sole provider", serving if len(serving) == 1 else [])]
    automatic = next((("chosen", picked[0], rule) for rule, picked in rules if picked), None)
    if recorded in serving:
        if automatic is not None and automatic[1] == recorded:
            return automatic
        return ("chosen", recorded, "recorded")
    if automatic is not None:
        return automatic
    if serving:
        return ("refused", codes.AMBIGUOUS_PROVIDER, tuple(serving))
    return ("refused", codes.NO_PROVIDER, ())


@given(st.one_of(worlds(with_claims=False), selection_worlds()))
def test_provider_selection_equals_the_oracle(world):
    """Every requirement is decided as the oracle says, and no consumer is skipped: a chosen
    provider is a binding exactly when neither end is refused (the model of oracle_mesh.py
    says who is), and the refused instances are exactly the model's."""
    resolution = run(world)
    chosen = {(b.consumer, b.requirement): b for b in resolution.bindings}
    refused = {(p.instance, p.requirement): p for p in resolution.problems if p.state}
    model = expect(world)
    assert blocked(resolution) == set(model.refused)
    assert declared_instances(resolution) == set(world.mesh.instances) - set(model.refused)
    for name, inst in world.mesh.instances.items():
        module = world.catalogue.modules[inst.module]
        for req in module.requires:
            if req.part is not None and req.part not in inst.parts:
                continue
            recorded = world.ledger.bindings.get(name, {}).get(req.as_)
            expected = oracle(world, name, req, recorded)
            key = (name, req.as_)
            note(f"{key}: {expected}")
            if expected[0] == "chosen":
                if name in model.refused or expected[1] in model.refused:
                    # chosen, but one end is refused: no binding, and unless the requirement
                    # is optional the consumer is refused (by its provider, or for another
                    # requirement of its own)
                    assert key not in chosen
                    assert req.optional or name in model.refused
                    continue
                assert (chosen[key].provider, chosen[key].chosen_by) == expected[1:]
            else:
                assert key in refused, f"{key} should be refused: {expected}"
                assert refused[key].state == expected[1]
                if expected[1] == codes.AMBIGUOUS_PROVIDER:
                    assert tuple(refused[key].candidates) == expected[2]


@given(worlds(with_claims=False, with_binding=True), st.data())
def test_recorded_binding_wins_over_automatic_rules(world, data):
    """A recorded consumer keeps its provider when a default or a closer provider appears."""
    first = run(world)
    provision = data.draw(st.sampled_from(["sql", "queue", "web"]))
    node = data.draw(st.sampled_from(sorted(world.mesh.nodes)))
    name = f"closer-{provision}@{node}"
    bigger = with_instance(world, name, Instance(f"closer-{provision}", node),
                           module_named(f"closer-{provision}", provides=[provision]))
    bigger = attrs.evolve(bigger, mesh=attrs.evolve(
        bigger.mesh, defaults=bigger.mesh.defaults.set(provision, name)))
    second = run(bigger, first.ledger)
    after = {(b.consumer, b.requirement): b for b in second.bindings}
    for b in first.bindings:
        now = after[(b.consumer, b.requirement)]
        assert now.provider == b.provider
        if b.provision == provision and b.chosen_by not in ("instance override", "manifest"):
            expected = oracle(bigger, b.consumer, _requirement(bigger, b), recorded=b.provider)
            assert now.chosen_by == expected[2]


def _requirement(world, binding):
    module = world.catalogue.modules[world.mesh.instances[binding.consumer].module]
    return next(r for r in module.requires if r.as_ == binding.requirement)


# 10 --------------------------------------------------------------------------------------


@given(worlds(min_nodes=2, max_nodes=3, with_binding=True), st.data())
def test_relocating_a_provider_keeps_bindings_and_logins(world, data):
    first = run(world)
    providers = sorted({b.provider for b in first.bindings})
    assume(providers and len(world.mesh.nodes) > 1)
    moved = data.draw(st.sampled_from(providers))
    inst = world.mesh.instances[moved]
    target = data.draw(st.sampled_from(sorted(n for n in world.mesh.nodes if n != inst.node)))
    mesh = attrs.evolve(world.mesh, instances=world.mesh.instances.set(
        moved, attrs.evolve(inst, node=target)))
    second = run(attrs.evolve(world, mesh=mesh), first.ledger)
    after = {(b.consumer, b.requirement): b for b in second.bindings}
    for b in first.bindings:
        if b.provider != moved:
            continue
        key = (b.consumer, b.requirement)
        if key not in after:  # the consumer may collide with something on its node now
            assert b.consumer in blocked(second) or moved in blocked(second)
            continue
        assert after[key].provider == moved
        assert after[key].login == b.login
        assert after[key].host == world.mesh.nodes[target].address
    assert any(c.kind == "moved" and c.subject == moved for c in second.changes) or \
        moved not in first.ledger.ports


# 11 --------------------------------------------------------------------------------------


@given(worlds(with_claims=False, with_binding=True, min_instances=3), st.data())
def test_removing_a_consumer_changes_nothing_about_others(world, data):
    first = run(world)
    # a consumer: an instance that provides nothing (removing a provider, even an unused one,
    # may change why another binding was chosen: `mesh default` becomes `recorded`)
    consumers = sorted(n for n, i in world.mesh.instances.items()
                       if not world.catalogue.modules[i.module].provides)
    assume(consumers)
    gone = data.draw(st.sampled_from(consumers))
    second = run(without_instance(world, gone), first.ledger)
    for b in first.bindings:
        if b.consumer != gone:
            assert b in second.bindings
    before = {c.name: c for d in first.declarations.values() for c in d.containers}
    after = {c.name: c for d in second.declarations.values() for c in d.containers}
    for name, container in before.items():
        if container.instance != gone:
            assert after.get(name) == container


# 12 --------------------------------------------------------------------------------------


@given(worlds(max_instances=14))
def test_refusals_block_exactly_the_instances_they_name(world):
    resolution = run(world)
    refused = blocked(resolution)
    for p in resolution.problems:
        if p.severity == "error":
            assert p.blocks, f"{p.code} blocks nothing"
            assert p.instance in p.blocks
    assert declared_instances(resolution) == set(world.mesh.instances) - refused
    listed = {n for d in resolution.declarations.values() for n in d.instances}
    assert listed == set(world.mesh.instances) - refused


# 3 ---------------------------------------------------------------------------------------


@given(worlds(max_instances=6, with_binding=True), st.lists(st.tuples(st.sampled_from(["add", "remove", "move"]),
                                                   st.integers(0, 99)), max_size=6))
def test_issued_once_over_a_sequence_of_edits(world, edits):
    """A ledger entry of an instance that stays, on its node, never changes value: compared
    with what was first issued (a plain model), not only with the previous ledger, so a value
    that changes and changes back is caught too."""
    ledger = run(world).ledger
    first_ports = {(n, listen): e for n, entries in ledger.ports.items()
                   for listen, e in entries.items()}
    first_logins = dict(ledger.logins)
    added = 0
    for kind, pick in edits:
        names = sorted(world.mesh.instances)
        if kind == "add" or not names:
            node = sorted(world.mesh.nodes)[pick % len(world.mesh.nodes)]
            module = sorted(world.catalogue.modules)[pick % len(world.catalogue.modules)]
            world = with_instance(world, f"new{added}@{node}", Instance(module, node))
            added += 1
        elif kind == "remove":
            world = without_instance(world, names[pick % len(names)])
        else:
            name = names[pick % len(names)]
            nodes = sorted(world.mesh.nodes)
            inst = world.mesh.instances[name]
            world = attrs.evolve(world, mesh=attrs.evolve(world.mesh, instances=world.mesh.instances.set(
                name, attrs.evolve(inst, node=nodes[pick % len(nodes)]))))
        resolution = run(world, ledger)
        new = resolution.ledger
        for name, entries in ledger.ports.items():
            inst = world.mesh.instances.get(name)
            if inst is None:
                assert name not in new.ports, "a removed instance's ports are released"
                continue
            for listen, entry in entries.items():
                if entry.node == inst.node:
                    assert new.ports[name][listen] == entry
        for cred, login in ledger.logins.items():
            _, provider, consumer = cred.split("/")
            present = provider in world.mesh.instances and consumer in world.mesh.instances
            assert (cred in new.logins) == present, "a login is kept exactly while both run"
            if present:
                assert new.logins[cred] == login
        for consumer, recorded in ledger.bindings.items():
            for req, provider in recorded.items():
                inst = world.mesh.instances.get(consumer)
                if inst is None or provider not in world.mesh.instances or req in inst.bind:
                    continue
                now = new.bindings.get(consumer, {}).get(req)
                # an optional requirement of a refused provider is left unbound, and its
                # record is kept all the same: once the provider is back it serves again
                assert now == provider, f"{consumer}/{req} rebound from {provider} to {now}"
        for name, entries in new.ports.items():
            for listen, entry in entries.items():
                issued = first_ports.setdefault((name, listen), entry)
                if issued.node == entry.node:
                    assert entry == issued, f"{name}/{listen} re-issued on {entry.node}"
                first_ports[(name, listen)] = entry  # a move issues anew
        for key in [k for k in first_ports if k[0] not in world.mesh.instances]:
            del first_ports[key]  # released with its instance
        for cred, login in new.logins.items():
            assert first_logins.setdefault(cred, login) == login, f"{cred} re-derived"
        ledger = new
