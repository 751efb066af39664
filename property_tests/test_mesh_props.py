"""resolve() against the plain model of oracle_mesh.py, on whole meshes as operators write them.

- Refusals: every problem (code, severity, instance, requirement, what it blocks, its
  candidates) is exactly the model's; the declared instances are exactly those not refused.
- Selection: every binding's provider and `chosen_by` are the model's, and no other binding
  exists (a consumer refused for another reason has none).
- Ports and logins: the new ledger's ports equal the model's (kept, moved, issued lowest
  first, released); every live listen is published on that port; logins are kept when
  recorded, derived once otherwise, never shared, and dropped exactly when a party is gone.
- Firewall: each node opens exactly the (port, protocol, source) pairs the model's bindings
  across nodes need, computed from mesh.yaml and the model, never from the resolution; a
  consumer on its provider's node is let in by its containers' MACs.
- Declarations: every field of every node's declaration equals what oracle_render.py builds
  from the manifests and the model (environment filled in, owners split into uid and gid,
  mounts, health, grants with the generations in force, what consumers are told, floors).
- Requests and serials: credentials are requested exactly when not issued or not sealed to a
  holder (re-sealed when the holders changed), certificates when missing or stale; a node's
  serial moves exactly when its digest (sha256 of its canonical JSON) does; what the resolver
  only reads (credentials, pins, the record of what was written: `nodes`, `declared`) is
  handed on untouched.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict

import attrs
from hypothesis import given, note
from pyrsistent import pvector

from resolver import resolve
from resolver import ProblemCode as codes  # the problem codes, one public enum
from resolver.documents import unstructure

from .oracle_mesh import LOGIN, credential, expect, floor_conflicts
from .oracle_render import (RESOURCE, Fill, artifact_state, build, certificate_reasons, mesh_registry,
                            registry_instance, request_key)
from .strategies_meshes import meshes


def run(world):
    return resolve(world.catalogue, world.mesh, world.ledger)


def problems_of(resolution) -> set:
    return {(p.severity, p.code, p.instance, p.requirement, tuple(p.blocks), tuple(p.candidates))
            for p in resolution.problems if p.code != codes.MISSING_PUBLIC_KEY}


@given(meshes())
def test_refusals_and_bindings_equal_the_model(world):
    resolution = run(world)
    expected = expect(world)
    note(f"expected refused: {expected.refused}")
    assert problems_of(resolution) == expected.problems
    chosen = {(b.consumer, b.requirement): (b.provider, b.chosen_by) for b in resolution.bindings}
    assert chosen == expected.bindings
    declared = {n: list(d.instances) for n, d in resolution.declarations.items()}
    by_node = defaultdict(list)
    for name in expected.live:
        by_node[world.mesh.instances[name].node].append(name)
    assert declared == {n: by_node.get(n, []) for n in world.mesh.nodes}
    containers = {c.instance for d in resolution.declarations.values() for c in d.containers}
    assert containers <= set(expected.live)


@given(meshes())
def test_ports_equal_the_model_and_are_published_as_issued(world):
    resolution = run(world)
    expected = expect(world)
    ledger = {name: {listen: (e.node, e.port) for listen, e in entries.items()}
              for name, entries in resolution.ledger.ports.items()}
    assert ledger == expected.ledger_ports
    published = {}
    for decl in resolution.declarations.values():
        for container in decl.containers:
            for port in container.ports:
                key = (container.instance, port.listen)
                assert key not in published, f"{key} published twice"
                published[key] = port.host_port
                assert port.host_ip == decl.address
    assert published == expected.ports
    moved = {c.subject for c in resolution.changes if c.kind == "moved"}
    assert moved == expected.moved
    released = {c.subject for c in resolution.changes if c.kind == "port-released"}
    assert released == {name for name, _ in expected.released}
    assert len([c for c in resolution.changes if c.kind == "port-released"]) == \
        len(expected.released)
    for node, decl in resolution.declarations.items():
        ports = [(p.host_port, p.protocol) for c in decl.containers for p in c.ports]
        assert len(ports) == len(set(ports)), f"two containers publish one port on {node}"


@given(meshes())
def test_logins_and_recorded_bindings_are_kept_derived_once_and_dropped_with_a_party(world):
    resolution = run(world)
    expected = expect(world)
    mesh, ledger, provisions = world.mesh, world.ledger, world.catalogue.provisions
    live_credentials = {}
    for b in resolution.bindings:
        grant = provisions[b.provision].grant if b.provision is not None else "none"
        cred = credential(b.provision, b.provider, b.consumer) if grant != "none" else None
        assert (b.secret.credential if b.secret else None) == cred
        if cred is None:
            assert b.login is None
            continue
        login = resolution.ledger.logins[cred]
        live_credentials[cred] = login
        if cred in ledger.logins:
            assert login == ledger.logins[cred], "a recorded login was re-derived"
        assert LOGIN.match(login), login
        issued = resolution.ledger.credentials.get(cred)
        dual = grant in ("database+login", "vhost+account") and (
            issued is None or issued.active is None or issued.active.slot is not None)
        slot = f"_{b.login.rsplit('_', 1)[1]}" if dual else ""
        assert not dual or slot in ("_a", "_b"), b.login
        assert b.login == login + slot
        assert b.resource == login
        # the resource (database, vhost, bucket, client) is named by the login, and the url
        # says it where its template names it
        template = provisions[b.provision].url
        if template is not None:
            assert b.url == template.format_map(Fill(
                host=b.host, port=b.port, user=b.login, **{RESOURCE[grant]: login}))
    kept = {c: v for c, v in ledger.logins.items() if c not in live_credentials
            and c.split("/")[1] in mesh.instances and c.split("/")[2] in mesh.instances}
    assert dict(resolution.ledger.logins) == {**kept, **live_credentials}
    values = list(resolution.ledger.logins.values())
    assert len(values) == len(set(values)), "two credentials share a login"
    # the ledger's bindings: those made now, and those of a refused instance, kept as recorded;
    # a live consumer keeps the record of a requirement it still has and that is left unbound
    # while the recorded provider is in mesh.yaml (never silently rebound by the next one)
    made = defaultdict(dict)
    for (consumer, as_), (provider, _) in expected.bindings.items():
        made[consumer][as_] = provider
    for consumer, recorded in ledger.bindings.items():
        if consumer in mesh.instances and consumer in expected.refused:
            made[consumer] = dict(recorded)
        elif consumer in expected.live:
            inst = mesh.instances[consumer]
            wanted = {q.as_ for q in world.catalogue.modules[inst.module].requires
                      if not q.each and (q.part is None or q.part in inst.parts)}
            for as_, provider in recorded.items():
                if as_ in wanted and as_ not in made[consumer] and provider in mesh.instances:
                    made[consumer][as_] = provider
    made = {k: v for k, v in made.items() if v}
    assert {k: dict(v) for k, v in resolution.ledger.bindings.items()} == dict(made)


@given(meshes())
def test_firewall_opens_exactly_the_models_pairs_and_the_floors(world):
    resolution = run(world)
    expected = expect(world)
    mesh, modules = world.mesh, world.catalogue.modules
    address = {n: node.address for n, node in mesh.nodes.items()}
    everyone = tuple(sorted(set(address.values())))
    wanted = defaultdict(set)
    for (consumer, as_), (provider, _) in expected.bindings.items():
        pnode, cnode = mesh.instances[provider].node, mesh.instances[consumer].node
        if pnode == cnode:
            continue
        listen = expected.listens[(consumer, as_)]
        protocol = modules[mesh.instances[provider].module].listens[listen].protocol
        wanted[pnode].add((expected.ports[(provider, listen)], protocol, address[cnode]))
    picked = registry_instance(world, expected)
    if picked is not None:  # every other node's container runtime pulls from the registry
        store, store_node = picked
        port = int(mesh_registry(world, expected).rsplit(":", 1)[1])
        wanted[store_node] |= {(port, "tcp", address[n]) for n in mesh.nodes
                               if address[n] != address[store_node]}
    broker = mesh.substrate.broker
    for node, decl in resolution.declarations.items():
        allows = without_transfer_openings(decl.firewall).allow  # test_state_move_props.py
        opened = {(a.port, a.protocol, s) for a in allows for s in a.sources}
        assert opened == wanted[node]
        assert all(a.published for a in allows)
        floors = {(f.port, f.protocol, tuple(f.sources)) for f in decl.firewall.floors}
        expected_floors = {(mesh.nodes[node].ssh_port, "tcp", ())}
        for i, f in enumerate(mesh.floors):
            if i in floor_conflicts(world)[0]:
                continue  # a kept host port holds it (floor-conflict)
            expected_floors.add((f.port, f.protocol, everyone if f.sources == "mesh" else ()))
        if broker in expected.live and mesh.instances[broker].node == node:
            module = modules[mesh.instances[broker].module]
            listen = next(p.listen for p in module.provides if p.provision == "amqp")
            expected_floors.add((expected.ports[(broker, listen)], "tcp", everyone))
        assert floors == expected_floors
        assert decl.firewall.address == address[node]


def without_transfer_openings(firewall):
    """A firewall intent without the openings of moves that carry their state (their rule is
    property_tests/test_state_move_props.py's)."""
    return attrs.evolve(firewall, allow=pvector(
        a for a in firewall.allow if not a.reason.startswith("state transfer")))


FIELDS = ("address", "containers", "state_dirs", "accesses", "firewall", "grants", "providers",
          "bindings", "instances", "certificate", "files", "registry_logins")


@given(meshes())
def test_every_declaration_says_what_the_manifests_and_the_model_say(world):
    resolution = run(world)
    expected = expect(world)
    declarations, _ = build(world, expected, resolution.ledger.logins)
    assert set(resolution.declarations) == set(world.mesh.nodes)
    assert resolution.artifacts == artifact_state(world, expected)
    for node, decl in resolution.declarations.items():
        for field in FIELDS:
            got = getattr(decl, field)
            if field == "firewall":  # a move's transfer opening: test_state_move_props.py
                got = without_transfer_openings(got)
            want = declarations[node][field]
            if isinstance(want, list):
                got = list(got)
            assert got == want, f"{node}: {field} differs"


@given(meshes())
def test_requests_and_serials_follow_the_ledger(world):
    resolution = run(world)
    expected = expect(world)
    _, wanted = build(world, expected, resolution.ledger.logins)
    wanted |= {("certificate", node) for node in certificate_reasons(world)}
    # a move's transfer certificates: test_state_move_props.py
    assert {request_key(r) for r in resolution.requests
            if not r.id.startswith("transfer:")} == wanted
    # a credential, and a TLS certificate's key (a move's transfer certificates too), is
    # sealed to each of its holders: a holder without a public key is warned about
    holders = {n for r in resolution.requests if r.kind in ("credential", "tls-certificate")
               for n in r.holders}
    keyless = {n for n in holders if world.mesh.nodes[n].public_key is None}
    warned = {p.message.split()[1] for p in resolution.problems
              if p.code == codes.MISSING_PUBLIC_KEY}
    assert warned == keyless
    assert all(p.severity == "warning" and not p.blocks for p in resolution.problems
               if p.code == codes.MISSING_PUBLIC_KEY)
    # serials: the recorded one when the digest is the recorded one, else one more
    for node, decl in resolution.declarations.items():
        body = json.dumps(unstructure(attrs.evolve(decl, serial=0, digest="")), sort_keys=True,
                          separators=(",", ":"), ensure_ascii=False)
        assert decl.digest == "sha256:" + hashlib.sha256(body.encode()).hexdigest()
        previous = world.ledger.nodes.get(node)
        if previous is not None and previous.digest == decl.digest:
            assert decl.serial == previous.serial
        else:
            assert decl.serial == (previous.serial if previous else 0) + 1
    # what the resolver reads only and must hand on untouched (a node's serial is recorded
    # by record_declared when its declaration is written, not by resolve())
    for field in ("credentials", "certificates", "pins", "builds", "mirrored", "version",
                  "nodes", "declared"):
        assert getattr(resolution.ledger, field) == getattr(world.ledger, field), field
