"""Metamorphic properties of resolve(), in the manner of cargo's resolver tests: change the input
in a way that must not matter (or must matter in one known way) and compare two resolutions.

- Renaming: consistently renaming nodes and instances (keeping their order) gives an isomorphic
  resolution: the first, renamed, equals the second, message texts and ledger included.
- Reordering mesh.yaml (nodes, instances, defaults, binds, parts, floors, facilities) changes
  nothing but where problems point, and those still point at the same text.
- Adding an unrelated node changes no existing node's declaration digest (apart from a floor
  that admits every node of the mesh, which must admit the new one too).
- Removing an instance and adding it back, the ledger kept in between, gives it back its host
  ports and its logins (the ledger was written by the resolver from scratch: ports of a
  removed instance are released, and a newcomer takes the lowest free ones).
"""

from __future__ import annotations

import json
import re

import attrs
from hypothesis import assume, given, note
from hypothesis import strategies as st
from pyrsistent import pmap, pvector

from resolver import (
    Node,
    PortAssignment,
    Sources,
    resolve,
)
from resolver import ProblemCode as codes
from resolver.documents import (
    load_mesh,
    dump_yaml,
    unstructure,
)

from .strategies_meshes import meshes

UNSAFE = re.compile(r"[^a-zA-Z0-9_.-]+")
PLACE = re.compile(r"(mesh\.yaml):\d+:\d+")


def canonical(resolution) -> dict:
    return json.loads(json.dumps({
        "declarations": unstructure(resolution.declarations),
        "bindings": unstructure(resolution.bindings),
        "problems": unstructure(resolution.problems),
        "requests": unstructure(resolution.requests),
        "changes": unstructure(resolution.changes),
        "ledger": unstructure(resolution.ledger),
    }))


def without_digests(value):
    """`value` without digests, and with MAC addresses said as the container they belong to: a
    MAC is derived from its container's name (a hash), so renaming changes it the way it
    changes a digest; what must stay is which container each one names."""
    if isinstance(value, dict) and isinstance(value.get("declarations"), dict):
        value = {**value, "declarations": {node: macs_as_containers(d) for node, d
                                           in value["declarations"].items()}}
    if isinstance(value, dict):
        return {k: ("" if k == "digest" else without_digests(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [without_digests(v) for v in value]
    return value


def macs_as_containers(declaration: dict) -> dict:
    owner = {c["mac"]: f"mac of {c['name']}" for c in declaration.get("containers", [])
             if c.get("mac")}
    containers = [{**c, "mac": owner[c["mac"]]} if c.get("mac") else c
                  for c in declaration.get("containers", [])]
    firewall = dict(declaration.get("firewall") or {})
    if firewall.get("local"):
        firewall["local"] = [{**e, "macs": sorted(owner.get(m, m) for m in e["macs"])}
                             for e in firewall["local"]]
    return {**declaration, "containers": containers, "firewall": firewall}


# --------------------------------------------------------------------------- renaming


def instance_names(world) -> set:
    mesh, ledger = world.mesh, world.ledger
    names = set(mesh.instances)
    names |= {p for i in mesh.instances.values() for p in i.bind.values()}
    names |= set(mesh.defaults.values()) | {mesh.substrate.store, mesh.substrate.broker}
    names |= {r.provider for m in world.catalogue.modules.values() for r in m.requires}
    names |= set(ledger.ports) | set(ledger.bindings) | set(ledger.tls)
    names |= {p for v in ledger.bindings.values() for p in v.values()}
    for cred in list(ledger.logins) + list(ledger.credentials):
        parts = cred.split("/")
        names |= set(parts[1:]) if parts[0] != "secret" else {parts[1]}
    return {n for n in names if n}


def node_names(world) -> set:
    mesh, ledger = world.mesh, world.ledger
    names = set(mesh.nodes) | {i.node for i in mesh.instances.values()}
    names |= {e.node for v in ledger.ports.values() for e in v.values()}
    names |= set(ledger.certificates) | set(ledger.nodes)
    for cred in ledger.credentials.values():
        for g in (cred.active, cred.pending, cred.retiring):
            names |= set(g.sealed) if g else set()
        names |= set(cred.applied)
    return names


def order_keeping(names: set, prefix: str) -> dict:
    """Fresh names of one width in the same order, so every sort and tie-break is unchanged."""
    return {old: f"{prefix}{i:03d}" for i, old in enumerate(sorted(names))}


def rename(world, inst: dict, node: dict):
    def i(n):
        return inst.get(n, n)

    def d(n):
        return node.get(n, n)

    def cred(c):
        parts = c.split("/")
        if parts[0] == "secret":
            return f"secret/{i(parts[1])}/{parts[2]}"
        if parts[0] == "registry-pull":  # the pull account of a node on the registry
            return f"registry-pull/{i(parts[1])}/{d(parts[2])}"
        if len(parts) == 2:  # tls/<instance>
            return f"{parts[0]}/{i(parts[1])}"
        return f"{parts[0]}/{i(parts[1])}/{i(parts[2])}"

    def generation(g):
        return attrs.evolve(g, sealed=pmap({d(k): v for k, v in g.sealed.items()})) if g else g

    mesh, ledger = world.mesh, world.ledger
    mesh = attrs.evolve(
        mesh, nodes=pmap({d(k): v for k, v in mesh.nodes.items()}),
        instances=pmap({i(k): attrs.evolve(v, node=d(v.node), state_from=d(v.state_from),
                                           bind=pmap({a: i(p) for a, p in v.bind.items()}))
                        for k, v in mesh.instances.items()}),
        defaults=pmap({k: i(v) for k, v in mesh.defaults.items()}),
        substrate=attrs.evolve(mesh.substrate, store=i(mesh.substrate.store),
                               broker=i(mesh.substrate.broker)))
    modules = pmap({k: attrs.evolve(m, requires=pvector(
        attrs.evolve(r, provider=i(r.provider)) for r in m.requires))
        for k, m in world.catalogue.modules.items()})
    ledger = attrs.evolve(
        ledger,
        ports=pmap({i(k): pmap({l: PortAssignment(d(e.node), e.port) for l, e in v.items()})
                    for k, v in ledger.ports.items()}),
        bindings=pmap({i(k): pmap({a: i(p) for a, p in v.items()})
                       for k, v in ledger.bindings.items()}),
        logins=pmap({cred(k): v for k, v in ledger.logins.items()}),
        credentials=pmap({cred(k): attrs.evolve(
            v, active=generation(v.active), pending=generation(v.pending),
            retiring=generation(v.retiring), applied=pmap({d(n): g for n, g in v.applied.items()}))
            for k, v in ledger.credentials.items()}),
        certificates=pmap({d(k): v for k, v in ledger.certificates.items()}),
        tls=pmap({i(k): v for k, v in ledger.tls.items()}),
        nodes=pmap({d(k): v for k, v in ledger.nodes.items()}))
    return attrs.evolve(world, mesh=mesh, ledger=ledger,
                        catalogue=attrs.evolve(world.catalogue, modules=modules))


def renamed_text(text: str, mesh_name: str, inst: dict, node: dict) -> str:
    """`text` with every instance and node name replaced: instance names (they hold an @, so
    they are found whole) and their spelling in container names; node names as whole words."""
    for old in sorted(inst, key=len, reverse=True):
        text = text.replace(f"{mesh_name}-{UNSAFE.sub('-', old)}-",
                            f"{mesh_name}-{UNSAFE.sub('-', inst[old])}-")
        text = text.replace(old, inst[old])
    for old in sorted(node, key=len, reverse=True):
        text = text.replace(f"node-{old}", f"node-{node[old]}")  # a node's registry login
        text = re.sub(rf"(?<![A-Za-z0-9_@\-]){re.escape(old)}(?![A-Za-z0-9_@\-])", node[old],
                      text)
    return text


@given(meshes())
def test_renaming_nodes_and_instances_gives_an_isomorphic_resolution(world):
    # a ledger the resolver wrote, so every login is recorded (a login is derived from its
    # consumer's name); node serials dropped (a digest covers the names)
    ledger = resolve(world.catalogue, world.mesh, world.ledger).ledger
    world = attrs.evolve(world, ledger=attrs.evolve(ledger, nodes=pmap()))
    inst = order_keeping(instance_names(world), "i")
    node = order_keeping(node_names(world), "n")
    first = resolve(world.catalogue, world.mesh, world.ledger)
    other = rename(world, inst, node)
    second = resolve(other.catalogue, other.mesh, other.ledger)
    mapped = json.loads(renamed_text(json.dumps(canonical(first)), world.mesh.mesh, inst, node))
    want = without_digests(canonical(second))
    got = without_digests(mapped)
    for plain in (want, got):  # the push account's consumer, "control", is not renamed: the
        for decl in plain["declarations"].values():  # grants' order by consumer may change
            decl.get("grants", []).sort(key=lambda g: json.dumps(g, sort_keys=True))
            for allow in decl.get("firewall", {}).get("allow", []):  # nor are the runtimes
                what, _, consumers = allow["reason"].partition(" for ")  # pulling from it
                allow["reason"] = " for ".join(", ".join(sorted(part.split(", ")))
                                               for part in (what, consumers))
    for key in want:
        assert got[key] == want[key], key


# --------------------------------------------------------------------------- reordering


def shuffled(value, rnd):
    if isinstance(value, dict):
        items = list(value.items())
        rnd.shuffle(items)
        return {k: shuffled(v, rnd) for k, v in items}
    if isinstance(value, list):
        items = [shuffled(v, rnd) for v in value]
        rnd.shuffle(items)
        return items
    return value


def enclosing_keys(text: str, line: int, col: int) -> list[str]:
    """The keys of the YAML block structure around a 1-based position: every line above it
    (its own line too, when the position is a value after a key) whose key is indented less.
    A `- key:` line's key sits two columns right of its dash, and the item it opens encloses
    the position: from there only a line indented no deeper than the dash can be the parent
    (a block sequence may sit at its parent key's own indent), so an earlier item's keys,
    which are not around the position, are never taken."""
    lines = text.splitlines()
    keys, limit = [], col - 1
    for i in range(line - 1, -1, -1):
        stripped = lines[i].lstrip(" ")
        indent = len(lines[i]) - len(stripped)
        if not stripped:
            continue
        dash = stripped.startswith("- ")
        key_indent = indent + 2 if dash else indent
        if key_indent < limit:
            keys.append(stripped[2 if dash else 0:].split(":")[0])
            limit = key_indent
        if dash and indent < limit:
            limit = indent + 1
        if limit == 0:
            break
    return keys[::-1]


@given(meshes(), st.randoms(use_true_random=False))
def test_reordering_mesh_yaml_changes_nothing_but_where_problems_point(world, rnd):
    plain = unstructure(world.mesh)
    first_text = dump_yaml(plain)
    first_mesh, first_where = load_mesh(first_text, "mesh.yaml")
    reordered = shuffled(plain, rnd)
    second_text = dump_yaml(reordered)
    second_mesh, second_where = load_mesh(second_text, "mesh.yaml")
    for section in ("nodes", "instances", "defaults"):  # the written order is known
        assert second_where.key_order((section,)) == tuple(reordered.get(section, {}))
    assert second_where.key_order(("nodes", "nowhere-at-all")) == ()
    first = resolve(world.catalogue, first_mesh, world.ledger,
                    sources=Sources(pmap({"mesh": first_where})))
    second = resolve(world.catalogue, second_mesh, world.ledger,
                     sources=Sources(pmap({"mesh": second_where})))

    def placeless(resolution):
        plain = canonical(resolution)
        for problem in plain["problems"]:
            problem.pop("line", None)
            problem.pop("col", None)
            # a problem may name other places too (a kept port's holder): where, not what
            problem["message"] = PLACE.sub(r"\1:L:C", problem["message"])
            problem["also"] = [PLACE.sub(r"\1:L:C", at) for at in problem.get("also", [])]
        plain["problems"].sort(key=json.dumps)
        return plain

    assert placeless(first) == placeless(second)
    for a, b in zip(sorted(first.problems, key=lambda p: (p.code, p.instance or "", p.message)),
                    sorted(second.problems, key=lambda p: (p.code, p.instance or "", p.message))):
        assert (a.file, bool(a.line)) == (b.file, bool(b.line))
        if a.file == "mesh.yaml" and a.line:
            said = enclosing_keys(first_text, a.line, a.col)
            again = enclosing_keys(second_text, b.line, b.col)
            note(f"{a.code}: {said} / {again}")
            assert said == again, f"{a.code} points elsewhere once mesh.yaml is reordered"


# --------------------------------------------------------------------------- adding a node


def admits_the_mesh(declaration) -> bool:
    everyone = list(declaration.firewall.mesh_sources)
    return any(list(f.sources) == everyone and everyone for f in declaration.firewall.floors)


def without_puller(declaration, node: str, address: str):
    """The registry node's declaration without what a new node `node` pulling from it adds:
    its pull account's grant, its address among the sources of the registry's opening and its
    runtime among that opening's consumers. Anything else the new node changed stays."""
    puller = f"{node}'s container runtime"
    allows = []
    for allow in declaration.firewall.allow:
        what, _, consumers = allow.reason.partition(" for ")
        rest = [c for c in consumers.split(", ") if c != puller]
        if not rest:
            continue
        allows.append(attrs.evolve(allow, sources=pvector(s for s in allow.sources
                                                          if s != address),
                                   reason=f"{what} for {', '.join(rest)}"))
    firewall = attrs.evolve(declaration.firewall, allow=pvector(allows))
    grants = pvector(g for g in declaration.grants if g.consumer != node)
    return attrs.evolve(declaration, firewall=firewall, grants=grants, serial=0, digest="")


@given(meshes(), st.sampled_from(["10.44.0.99", "fd00:44::99"]), st.booleans())
def test_adding_an_unrelated_node_changes_no_existing_declaration(world, address, keyed):
    before = resolve(world.catalogue, world.mesh, world.ledger)
    spare = Node(address=address, facilities=pvector(["docker-socket"]),
                 public_key="c3BhcmVzcGFyZXNwYXJlc3BhcmVzcGFyZXNwYXJlc3A=" if keyed else None)
    bigger = attrs.evolve(world.mesh, nodes=world.mesh.nodes.set("spare", spare))
    after = resolve(world.catalogue, bigger, world.ledger)
    assert not after.declarations["spare"].containers
    registry_node = world.mesh.instances[before.registry_instance].node \
        if before.registry_instance else None
    for node, decl in before.declarations.items():
        if admits_the_mesh(decl):
            continue  # a floor open to every node of the mesh now admits the new one too
        if node == registry_node:  # the new node pulls from the registry: its account, opening
            assert without_puller(after.declarations[node], "spare", address) == \
                attrs.evolve(decl, serial=0, digest=""), node
            assert any(g.consumer == "spare" and g.resource == "pull"
                       for g in after.declarations[node].grants)
            continue
        assert after.declarations[node].digest == decl.digest, node
        assert after.declarations[node].serial == decl.serial, node
    assert after.bindings == before.bindings
    # a keyless new node is warned about only when it must hold its registry pull account
    told = [p for p in after.problems
            if p.code == codes.MISSING_PUBLIC_KEY and "spare" in p.message]
    assert len(told) == (1 if registry_node is not None and not keyed else 0)
    # the keyless registry node must hold one credential more (the new node's pull account)
    def counted(p):
        return p.code == codes.MISSING_PUBLIC_KEY and registry_node is not None and \
            p.message.startswith(f"node {registry_node} must hold ")
    assert [p for p in after.problems if p not in told and not counted(p)] == \
        [p for p in before.problems if not counted(p)]
    assert any(map(counted, after.problems)) == any(map(counted, before.problems))


# --------------------------------------------------------------------------- remove, add back


@given(meshes(bad=False, recorded=False), st.data())
def test_removing_an_instance_and_adding_it_back_returns_its_ports_and_logins(world, data):
    first = resolve(world.catalogue, world.mesh, world.ledger)
    live = sorted({n for d in first.declarations.values() for n in d.instances})
    assume(live)
    holding = sorted({b.consumer for b in first.bindings if b.login} |
                     {b.provider for b in first.bindings if b.login})  # the interesting ones
    gone = data.draw(st.sampled_from(holding if holding and data.draw(st.booleans()) else live))
    smaller = attrs.evolve(world.mesh, instances=world.mesh.instances.remove(gone))
    between = resolve(world.catalogue, smaller, first.ledger)
    now_live = {n for d in between.declarations.values() for n in d.instances}
    assume(now_live <= set(live))  # nobody else took what it held while it was gone
    assert gone not in between.ledger.ports
    back = resolve(world.catalogue, world.mesh, between.ledger)
    assert back.ledger.ports.get(gone) == first.ledger.ports.get(gone)
    for cred, login in first.ledger.logins.items():
        _, provider, consumer = cred.split("/")
        if consumer == gone or (provider == gone and between.ledger.bindings.get(
                consumer, {}) and gone in between.ledger.bindings[consumer].values()):
            assert back.ledger.logins.get(cred) == login, cred
