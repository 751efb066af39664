"""An independent, deliberately plain model of what resolve() decides for a whole mesh.

Written from DESIGN.md and the invariants the resolver's modules state, never by calling
them: which instances are refused and why, which provider serves each requirement and by
which rule, which host ports are kept and which are issued, which logins and bindings the
new ledger keeps. Sets, dicts and loops in the documented order; nothing clever.

The steps, each over the instances not refused by an earlier one:
1. placement: unknown module, unknown node, unknown part, missing facility, unpinned
   artifact (of every container the instance installs); then moves: an instance owning
   state directories whose recorded ports put it on another node is refused until mesh.yaml
   says `state-from:` that node or `fresh: true`;
2. singular things: a second provider of a mesh-scoped provision, a claim or fixed port taken
   twice on a node (or a fixed port on a floor), a state path with two owners. Where
   several contend, the one the ledger already knows keeps it (it has recorded ports or
   bindings, or is a recorded provider), else the first by name;
3. provider selection, in the documented order (instance override, manifest `provider:`,
   the recorded binding, the only candidate on the consumer's node, the mesh default, the
   only candidate in the mesh); a rule that names something not assigned, not providing or on
   no known node refuses instead of falling through; nothing left is ambiguous or no-provider;
4. a consumer of a refused provider is refused too (unless the requirement is optional);
5. host ports: fixed ports, the floors and every recorded port of a refused instance (where
   it was recorded) are taken; recorded ports on the same node are
   kept (first by name on a collision), whatever the range; then, by name, each listen
   without one takes its recorded port when it is in the range and free, else the lowest
   free port; none left is an exhausted range, which refuses the instance (and step 4 again).
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Optional

import attrs

from resolver import ProblemCode as codes  # the problem codes, one public enum

STATE_ROOT = "/var/lib/mesh"


@attrs.define
class Expected:
    """What the model expects of one resolution."""

    problems: set = attrs.Factory(set)  # (severity, code, instance, requirement, blocks,
    #                                        candidates)
    refused: dict = attrs.Factory(dict)  # instance → codes (in the order they refused it)
    bindings: dict = attrs.Factory(dict)  # (consumer, as) → (provider, chosen_by)
    listens: dict = attrs.Factory(dict)  # (consumer, as) → the provider's listen serving it
    ports: dict = attrs.Factory(dict)  # (instance, listen) → host port, live instances
    ledger_ports: dict = attrs.Factory(dict)  # instance → listen → (node, port)
    moved: set = attrs.Factory(set)  # instances told "moved"
    released: set = attrs.Factory(set)  # (instance, listen) released
    live: list = attrs.Factory(list)

    def refuse(self, code, name, requirement=None, *, block=True, severity="error",
               candidates=()):
        blocks = (name,) if block and name is not None else ()
        self.problems.add((severity, code, name, requirement, blocks,
                           tuple(sorted(candidates))))
        if blocks:
            self.refused.setdefault(name, []).append(code)


def state_path(instance: str, path: str) -> str:
    if path.startswith("/"):
        return path.rstrip("/") or "/"
    return f"{STATE_ROOT}/{instance}/{path.strip('/')}"


def installed(container, instance) -> bool:
    return container.part is None or container.part in instance.parts


def pinned(world, module, artifact_name) -> bool:
    artifact = module.artifacts[artifact_name]
    if artifact.repository is not None:
        return f"{artifact.repository}:{artifact.tag}" in world.ledger.pins
    return f"{module.name}/{artifact_name}" in world.ledger.builds


def keeper(world, contenders) -> str:
    """Who keeps a singular thing: one the ledger knows, else the first by name."""
    ledger = world.ledger
    known = set(ledger.ports) | set(ledger.bindings) | {
        p for recorded in ledger.bindings.values() for p in recorded.values()}
    remembered = sorted(c for c in contenders if c in known)
    return remembered[0] if remembered else min(contenders)


def serves(world, name: str, req) -> bool:
    inst = world.mesh.instances[name]
    module = world.catalogue.modules.get(inst.module)
    if module is None:
        return False
    if req.provision is not None:
        return any(p.provision == req.provision for p in module.provides)
    return module.name == req.module


def select(world, consumer: str, req, recorded: Optional[str]):
    """("chosen", provider, rule) or ("refused", state, candidates) for one requirement."""
    mesh, modules = world.mesh, world.catalogue.modules
    assigned = {n for n, i in mesh.instances.items() if i.module in modules}
    serving = sorted(n for n in assigned if n != consumer and serves(world, n, req))
    node = mesh.instances[consumer].node

    def placed(provider, rule):
        if mesh.instances[provider].node not in mesh.nodes:
            return ("refused", codes.PROVIDER_NODE_UNKNOWN, ())
        return ("chosen", provider, rule)

    for rule, named in (("instance override", mesh.instances[consumer].bind.get(req.as_)),
                        ("manifest", req.provider)):
        if named is None:
            continue
        if named not in assigned:
            return ("refused", codes.PROVIDER_NOT_ASSIGNED, tuple(serving))
        if named not in serving:
            return ("refused", codes.NOT_A_PROVIDER, tuple(serving))
        return placed(named, rule)
    here = [n for n in serving if mesh.instances[n].node == node]
    default = mesh.defaults.get(req.provision) if req.provision is not None else None
    automatic = None
    if len(here) == 1:
        automatic = (here[0], "co-located")
    elif default in serving:
        automatic = (default, "mesh default")
    elif len(serving) == 1:
        automatic = (serving[0], "sole provider")
    if recorded in serving:
        if automatic is not None and automatic[0] == recorded:
            return placed(*automatic)
        return placed(recorded, "recorded")
    if automatic is not None:
        return placed(*automatic)
    if serving:
        return ("refused", codes.AMBIGUOUS_PROVIDER, tuple(serving))
    return ("refused", codes.NO_PROVIDER, ())


def floor_conflicts(world):
    """(indexes of mesh floors not applied, nodes whose ssh floor is not, problems): a floor
    whose port a kept host port holds on any node of the mesh (a port recorded for an
    instance still in mesh.yaml never moves), and a node whose ssh-port is such a port, are
    refused instead. A port recorded on a node mesh.yaml no longer has holds nothing a floor
    opens (floors are opened on the mesh's nodes only)."""
    kept = defaultdict(dict)  # node → port → holder, the first by instance then listen name
    for name, entries in sorted(world.ledger.ports.items()):
        if name in world.mesh.instances:
            for listen, entry in sorted(entries.items()):
                if entry.node in world.mesh.nodes:
                    kept[entry.node].setdefault(entry.port, name)
    refused, problems = set(), set()
    for index, floor in enumerate(world.mesh.floors):
        holders = {h for ports in kept.values() for port, h in ports.items()
                   if port == floor.port}
        if holders:
            refused.add(index)
            problems.add(("error", codes.FLOOR_CONFLICT, None, None, (), tuple(sorted(holders))))
    ssh = set()
    for node, described in world.mesh.nodes.items():
        holder = kept.get(node, {}).get(described.ssh_port)
        if holder is not None:
            ssh.add(node)
            problems.add(("error", codes.FLOOR_CONFLICT, None, None, (), (holder,)))
    return refused, ssh, problems


def kept_floors(world, node) -> set:
    """(port, protocol) of the floors `node` keeps (floor_conflicts refuses the others)."""
    refused, ssh, _ = floor_conflicts(world)
    floors = set() if node in ssh else {(world.mesh.nodes[node].ssh_port, "tcp")}
    return floors | {(f.port, f.protocol) for i, f in enumerate(world.mesh.floors)
                     if i not in refused}


def expect(world) -> Expected:
    catalogue, mesh, ledger = world.catalogue, world.mesh, world.ledger
    modules, instances = catalogue.modules, mesh.instances
    names = sorted(instances)
    e = Expected()

    def live():
        return [n for n in names if n not in e.refused]

    def module_of(name):
        return modules[instances[name].module]

    e.problems |= floor_conflicts(world)[2]

    # 1. placement ------------------------------------------------------------------
    for name in names:
        inst = instances[name]
        module = modules.get(inst.module)
        if module is None:
            e.refuse(codes.UNKNOWN_MODULE, name)
            continue
        if inst.node not in mesh.nodes:
            e.refuse(codes.UNKNOWN_NODE, name)
            continue
        if any(part not in module.parts for part in inst.parts):
            e.refuse(codes.UNKNOWN_PART, name)
        offered = {f.split("=")[0] for f in mesh.nodes[inst.node].facilities}
        if any(f not in offered for f in module.facilities):
            e.refuse(codes.FACILITY_MISSING, name)
        if any(installed(c, inst) and not pinned(world, module, c.artifact)
               for c in module.containers):
            e.refuse(codes.UNPINNED_ARTIFACT, name)

    # 1b. moves: an instance owning state directories whose recorded ports put it on another
    # node waits for `state-from: <that node>` (its state copied) or `fresh: true` -------
    for name in names:
        inst = instances[name]
        module = modules.get(inst.module)
        if module is None or inst.node not in mesh.nodes:
            continue
        was = {entry.node for entry in ledger.ports.get(name, {}).values()}
        before = was.pop() if len(was) == 1 else None
        if before is None or before == inst.node:
            if before is not None and inst.state_from is not None:
                e.refuse(codes.STALE_STATE_FROM, name, block=False, severity="info")
            continue
        if not module.state or inst.fresh or inst.state_from == before:
            continue
        e.refuse(codes.STATE_FROM_MISMATCH if inst.state_from is not None
                 else codes.MOVE_WITH_STATE, name)

    # 2. singular things ------------------------------------------------------------
    for provision, definition in sorted(catalogue.provisions.items()):
        if definition.scope != "mesh":
            continue
        serving = [n for n in live() if any(p.provision == provision
                                            for p in module_of(n).provides)]
        if len(serving) > 1:
            keep = keeper(world, serving)
            for name in serving:
                if name != keep:
                    e.refuse(codes.SECOND_MESH_PROVIDER, name, candidates=serving)
    refused_before_claims, live_before_claims = set(e.refused), live()
    contended = defaultdict(set)
    for name in live():
        node, module = instances[name].node, module_of(name)
        for claim in module.claims:
            contended[(node, "claim", claim, "")].add(name)
        for listen in module.listens.values():
            if listen.fixed is not None:
                contended[(node, "port", listen.fixed, listen.protocol)].add(name)
    for (node, kind, what, protocol), group in contended.items():
        if kind == "port" and (what, protocol) in kept_floors(world, node):
            for name in group:
                e.refuse(codes.PORT_CONFLICT, name)
        elif len(group) > 1:
            keep = keeper(world, group)
            code = codes.DUPLICATE_CLAIM if kind == "claim" else codes.PORT_CONFLICT
            for name in group - {keep}:
                e.refuse(code, name, candidates=group)
    # a fixed port on a host port the ledger keeps for another (instance, listen) of that node
    # is refused: a kept port never moves (a holder placed on another node now holds nothing)
    kept = {}
    for holder, entries in sorted(ledger.ports.items()):
        if holder in instances:
            for listen_name, entry in sorted(entries.items()):
                kept.setdefault((entry.node, entry.port), (holder, listen_name))
    for name in live_before_claims:
        node = instances[name].node
        for listen_name, listen in module_of(name).listens.items():
            holder = kept.get((node, listen.fixed)) if listen.fixed is not None else None
            if holder is None or holder == (name, listen_name):
                continue
            other = holder[0]
            if other == name or other in refused_before_claims or instances[other].node == node:
                e.refuse(codes.PORT_CONFLICT, name, candidates={name, other})
    owners = defaultdict(list)
    for name in live():
        for state in module_of(name).state.values():
            owners[(instances[name].node, state_path(name, state.path))].append(name)
    for holders in owners.values():
        if len(holders) > 1:
            distinct = set(holders)
            keep = keeper(world, distinct) if len(distinct) > 1 else None
            for name in holders:
                if name != keep:
                    e.refuse(codes.STATE_PATH_OWNERS, name, candidates=distinct)
    for provision, name in mesh.defaults.items():
        if name not in instances:
            e.refuse(codes.UNKNOWN_DEFAULT, None)  # `mesh check` fails on it
    for role in (mesh.substrate.store, mesh.substrate.broker):
        if role is not None and role not in instances:
            e.refuse(codes.UNKNOWN_DEFAULT, None)

    # 3. provider selection ---------------------------------------------------------
    bound = {}
    for name in live():
        inst, module = instances[name], module_of(name)
        for req in module.requires:
            if req.part is not None and req.part not in inst.parts:
                continue
            if req.provision is not None and req.provision not in catalogue.provisions:
                e.refuse(codes.UNKNOWN_PROVISION, name, req.as_, block=not req.optional)
                continue
            outcome = select(world, name, req, ledger.bindings.get(name, {}).get(req.as_))
            if outcome[0] == "chosen":
                bound[(name, req.as_)] = (outcome[1], outcome[2], req)
            elif req.optional:
                e.refuse(outcome[1], name, req.as_, block=False, severity="warning",
                         candidates=outcome[2])
            else:
                e.refuse(outcome[1], name, req.as_, candidates=outcome[2])

    # 4. consumers of refused providers ---------------------------------------------
    def propagate():
        changed = True
        while changed:
            changed = False
            for (consumer, as_), (provider, _rule, req) in sorted(bound.items(),
                                                                 key=lambda kv: kv[0]):
                if consumer not in e.refused and provider in e.refused and not req.optional:
                    e.refuse(codes.BLOCKED_BY_PROVIDER, consumer, as_)
                    changed = True

    propagate()

    # 5. host ports -----------------------------------------------------------------
    first, last = mesh.host_ports.first, mesh.host_ports.last
    taken = {node: {port for port, _ in kept_floors(world, node)} for node in mesh.nodes}
    for name in names:  # a refused instance keeps its recorded ports, where they are
        if name in e.refused:
            for entry in ledger.ports.get(name, {}).values():
                if entry.node in taken:
                    taken[entry.node].add(entry.port)
    assigned = {}
    placed = live()
    for name in placed:
        node = instances[name].node
        for listen_name, listen in module_of(name).listens.items():
            if listen.fixed is not None:
                taken[node].add(listen.fixed)
                assigned[(name, listen_name)] = listen.fixed
    waiting = []
    for name in placed:
        node = instances[name].node
        for listen_name in sorted(module_of(name).listens):
            if module_of(name).listens[listen_name].fixed is not None:
                continue
            entry = ledger.ports.get(name, {}).get(listen_name)
            if entry is not None and entry.node == node and entry.port not in taken[node]:
                taken[node].add(entry.port)
                assigned[(name, listen_name)] = entry.port
            else:
                waiting.append((name, listen_name, entry))
    for name, listen_name, entry in waiting:
        node = instances[name].node
        if entry is not None and first <= entry.port <= last and entry.port not in taken[node]:
            port = entry.port
        else:
            port = next((p for p in range(first, last + 1) if p not in taken[node]), None)
        if port is None:
            e.refuse(codes.PORT_RANGE_EXHAUSTED, name)
            continue
        taken[node].add(port)
        assigned[(name, listen_name)] = port
        if entry is not None and entry.node != node:
            e.moved.add(name)
    propagate()

    # the new ledger's ports: what was assigned (not fixed), else what was recorded --------
    issued = defaultdict(dict)
    for (name, listen_name), port in assigned.items():
        if module_of(name).listens[listen_name].fixed is None:
            issued[name][listen_name] = (instances[name].node, port)
    for name, entries in ledger.ports.items():
        recorded = {k: (v.node, v.port) for k, v in entries.items()}
        if name not in instances:
            e.released.update((name, listen) for listen in entries)
        elif name not in issued or name in e.refused:
            issued[name] = recorded
    e.ledger_ports = {k: v for k, v in issued.items()}

    e.live = live()
    alive = set(e.live)
    e.ports = {k: v for k, v in assigned.items() if k[0] in alive}
    for (consumer, as_), (provider, rule, req) in bound.items():
        if consumer in alive and provider in alive:
            e.bindings[(consumer, as_)] = (provider, rule)
            provider_module = module_of(provider)
            if req.provision is not None:
                listen = next(p.listen for p in provider_module.provides
                              if p.provision == req.provision)
            else:
                listen = req.listen or sorted(provider_module.listens)[0]
            e.listens[(consumer, as_)] = listen
    return e


LOGIN = re.compile(r"^[a-z][a-z0-9_]{0,60}$")


def credential(provision: str, provider: str, consumer: str) -> str:
    return f"{provision}/{provider}/{consumer}"
