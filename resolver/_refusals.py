"""Refusals of singular things, decided before any binding is made.

Invariants:
- Each check is a pure stage: it reads the frozen Context (and, where it asks what is
  refused already, the blocked mapping it is handed) and returns its Findings, each naming
  exactly the instances it blocks (Problem.blocks) and pointing at the input that causes it
  (file:line:col through Sources); it writes nothing anywhere.
- Where two instances contend for one thing (a claim, a fixed port, a state path, a
  mesh-scoped provision), an instance refused already but held at its last written rendering
  keeps it (what it holds is in that rendering), else the one the ledger already records,
  else the first by name: adding an instance, or a typo in one, never takes a thing from the
  one that holds it.
- Warnings (a node with no key to seal to) block nothing; nor do the errors that name no
  instance (a default or substrate naming nothing): they fail `mesh check` and are stated in
  the plan. A provision provided under a name provisions.yaml does not define blocks its
  instance, as one required under such a name does.
- A kept host port never moves: a floor (or a node's ssh-port) that collides with one is
  refused at the floor's position, naming the holder, and is not applied (check_floors
  returns which, as FloorRefusals); it blocks no instance. A fixed port that collides with
  one refuses the instance that fixes it, naming the holder and both positions.
- A move of an instance that owns state directories is refused until the instance says what
  happens to the data (`state-from: <old node>`: the mesh carries it, resolver/_moves.py; or
  `fresh: true`); the state directories left on the old node are named either way, and
  nothing there is ever removed (only `mesh forget-state` removes them).
"""

from __future__ import annotations

from typing import Container, Optional, Union

from . import _codes as codes
from ._context import Blocked, Context, Findings, FloorRefusals
from ._declaration import Change, Problem, Request
from ._held import KeptPorts, held_candidates
from ._model import Listen, Module
from ._ports import fixed_on_kept
from ._render import state_host_path


def check_placement(r: Context) -> Findings:
    """Instances whose module, node, parts, provisions, facilities or artifacts the inputs
    do not have: each refused where its instance (or its module) says it."""
    found: list[Problem] = []
    unpinned: set[tuple[str, str]] = set()  # (instance, artifact) already reported
    # what depends on the module or the node alone, read once per module and per node
    unknown_provides: dict[str, list[tuple[int, str]]] = {}
    undigested: dict[str, set[str]] = {}  # module → its containers' artifacts with no digest
    offered_on: dict[str, set[str]] = {}
    for name in r.names:
        inst = r.instances[name]
        module = r.modules_of[name]
        if module is None:
            found.append(r.problem(
                codes.UNKNOWN_MODULE,
                f"instance {name} names module {inst.module!r}, which is not in the "
                f"catalogue", path=("instances", name, "module"), instance=name,
                blocks=[name]))
            continue
        if inst.node not in r.nodes:
            found.append(r.problem(
                codes.UNKNOWN_NODE,
                f"instance {name} is assigned to node {inst.node!r}, which is not "
                f"in the mesh's nodes", path=("instances", name, "node"),
                instance=name, blocks=[name]))
            continue
        for i, part in enumerate(inst.parts):
            if part not in module.parts:
                found.append(r.problem(
                    codes.UNKNOWN_PART,
                    f"instance {name} installs part {part!r}, which module "
                    f"{module.name} does not have", path=("instances", name, "parts", i),
                    instance=name, blocks=[name]))
        unknown = unknown_provides.get(module.name)
        if unknown is None:
            unknown = unknown_provides[module.name] = [
                (i, provide.provision) for i, provide in enumerate(module.provides)
                if provide.provision not in r.catalogue.provisions]
        for i, provision in unknown:
            found.append(r.problem(
                codes.UNKNOWN_PROVISION,
                f"{name} provides {provision!r}, which provisions.yaml does "
                f"not define", doc=f"module:{module.name}",
                path=("provides", i, "provision"), instance=name, blocks=[name]))
        if module.facilities:
            offered = offered_on.get(inst.node)
            if offered is None:
                offered = offered_on[inst.node] = {
                    f.split("=", 1)[0] for f in r.mesh.nodes[inst.node].facilities}
            for i, facility in enumerate(module.facilities):
                if facility not in offered:
                    found.append(r.problem(
                        codes.FACILITY_MISSING,
                        f"module {module.name} needs facility {facility!r}, which node "
                        f"{inst.node} does not offer", doc=f"module:{module.name}",
                        path=("facilities", i), instance=name, blocks=[name]))
        missing = undigested.get(module.name)
        if missing is None:
            missing = undigested[module.name] = {
                c.artifact for c in module.containers
                if r.image_digest(module, c.artifact) is None}
        if missing:
            for container in module.containers:
                if container.artifact in missing and \
                        (container.part is None or container.part in inst.parts):
                    found.extend(check_pinned(r, name, module, container.artifact, unpinned))
    return tuple(found)


def check_pinned(r: Context, name: str, module: Module, artifact_name: str,
                 reported: set[tuple[str, str]]) -> Findings:
    """An artifact of a placed instance with no digest in the ledger refuses the instance
    (once per instance and artifact: `reported`, the caller's, holds those said already)."""
    found: list[Problem] = []
    if r.image_digest(module, artifact_name) is None and \
            (name, artifact_name) not in reported:
        reported.add((name, artifact_name))
        artifact = module.artifacts[artifact_name]
        what = (f"{artifact.repository}:{artifact.tag}" if artifact.repository
                else f"build {module.name}/{artifact_name}")
        how = ("run `mesh pin DIR` to record its digest" if artifact.repository
               else "`mesh build DIR --local` builds it in this machine's Docker Engine and "
               "records it (`mesh build DIR " + module.name + "/" + artifact_name
               + "` once the mesh's registry runs)")
        found.append(r.problem(
            codes.UNPINNED_ARTIFACT,
            f"artifact {artifact_name} ({what}) of instance {name} has no digest in "
            f"the ledger; {how}", doc=f"module:{module.name}",
            path=("artifacts", artifact_name), instance=name, blocks=[name]))
    return tuple(found)


def check_mesh_scope(r: Context, blocked: Blocked) -> Findings:
    held = held_candidates(r, blocked)
    found: list[Problem] = []
    providers: dict[str, list[str]] = {}
    for name in r.placed(blocked):
        for provide in r.placed_module(name).provides:
            providers.setdefault(provide.provision, []).append(name)
    for name, rendering in held.items():
        for served in rendering.providers:
            providers.setdefault(served.provision, []).append(name)
    for provision, names in sorted(providers.items()):
        definition = r.catalogue.provisions.get(provision)
        names = sorted(set(names))
        if definition is None or definition.scope != "mesh" or len(names) < 2:
            continue
        keep = r.first_holder(names, held)
        for name in names:
            if name != keep and name not in held:
                found.append(r.problem(
                    codes.SECOND_MESH_PROVIDER,
                    f"{provision} is mesh-scoped and {keep} already provides it; "
                    f"{name} is a second provider", path=("instances", name),
                    instance=name, candidates=names, blocks=[name]))
    return tuple(found)


def check_claims(r: Context, blocked: Blocked, floor_refusals: FloorRefusals,
                 kept: KeptPorts) -> Findings:
    """Claims and fixed ports taken twice on a node, on a floor, or on a port the ledger keeps
    for another instance (`kept`: held.kept_ports, worked out once per resolution)."""
    held = held_candidates(r, blocked)
    found: list[Problem] = []
    # (node, "claim", claim) or (node, "port", host port, protocol) → its takers
    by_node: dict[Union[tuple[str, str, str], tuple[str, str, int, str]], list[str]] = {}
    fixed_of: dict[str, list[tuple[int, str]]] = {}  # module → its fixed ports (read once)
    for name in r.placed(blocked):
        module, node = r.placed_module(name), r.instances[name].node
        for claim in module.claims:
            by_node.setdefault((node, "claim", claim), []).append(name)
        fixed = fixed_of.get(module.name)
        if fixed is None:
            fixed = fixed_of[module.name] = [(listen.fixed, listen.protocol)
                                             for listen in module.listens.values()
                                             if listen.fixed is not None]
        for port, protocol in fixed:
            by_node.setdefault((node, "port", port, protocol), []).append(name)
    for name, rendering in held.items():  # a held instance keeps what it holds
        for claim in rendering.claims:
            by_node.setdefault((rendering.node, "claim", claim), []).append(name)
        for container in rendering.containers:
            for p in container.ports:
                by_node.setdefault((rendering.node, "port", p.host_port, p.protocol),
                                   []).append(name)
    found.extend(_fixed_on_kept(r, blocked, held, kept))
    for key, names in sorted(by_node.items(), key=lambda kv: str(kv[0])):
        names = sorted(set(names))
        node = key[0]
        floor_ports = r.floor_ports(floor_refusals, node)
        if len(key) == 4 and (key[2], key[3]) in floor_ports:  # (node, "port", port, protocol)
            for name in names:
                if name in held:
                    continue  # a kept port: check_floors refused the floor instead
                found.append(r.problem(
                    codes.PORT_CONFLICT,
                    f"{name} fixes host port {key[2]}/{key[3]} on node {node}, which "
                    f"is a floor every node keeps", path=("instances", name),
                    instance=name, blocks=[name]))
            continue
        if len(names) < 2:
            continue
        keep = r.first_holder(names, held)
        code = codes.DUPLICATE_CLAIM if key[1] == "claim" else codes.PORT_CONFLICT
        what = f"claim {key[2]!r}" if len(key) == 3 else f"host port {key[2]}/{key[3]}"
        for name in names:
            if name != keep and name not in held:
                found.append(r.problem(
                    code, f"{name} and {keep} both take {what} on node {node}; "
                    f"{keep} keeps it", path=("instances", name), instance=name,
                    candidates=names, blocks=[name]))
    return tuple(found)


def _fixed_on_kept(r: Context, blocked: Blocked, held: Container[str],
                   kept: KeptPorts) -> list[Problem]:
    """Live instances whose module fixes a host port the ledger keeps for another instance
    (or for another listen of the same one) on that node: refused, naming both; the holder
    keeps its port. A holder now placed on another node (a move this plan makes) holds
    nothing on the old node any more."""
    found: list[Problem] = []
    fixed_of: dict[str, list[tuple[str, Listen]]] = {}  # module → its fixed listens, sorted
    for name in r.placed(blocked):
        if name in held:
            continue
        module, node = r.placed_module(name), r.instances[name].node
        fixed = fixed_of.get(module.name)
        if fixed is None:
            fixed = fixed_of[module.name] = [(listen_name, listen) for listen_name, listen
                                             in sorted(module.listens.items())
                                             if listen.fixed is not None]
        for listen_name, listen in fixed:
            assert listen.fixed is not None  # (only those are kept above)
            holder = kept.get(node, {}).get(listen.fixed)
            if holder is None or holder == f"{name}/{listen_name}":
                continue
            holder_instance = holder.split("/", 1)[0]
            if holder_instance != name and holder_instance not in blocked \
                    and r.instances[holder_instance].node != node:
                continue
            found.append(fixed_on_kept(r, name, module.name, node, listen_name, listen,
                                       holder))
    return found


def check_state_paths(r: Context, blocked: Blocked) -> Findings:
    held = held_candidates(r, blocked)
    found: list[Problem] = []
    owners: dict[tuple[str, str], list[tuple[str, str, str]]] = {}  # → (instance, module, dir)
    for name in r.placed(blocked):
        module, node = r.placed_module(name), r.instances[name].node
        if not module.state:
            continue
        for dir_name, state in module.state.items():
            owners.setdefault((node, state_host_path(name, state.path)), []).append(
                (name, module.name, dir_name))
    for name, rendering in held.items():
        for d in rendering.state_dirs:
            owners.setdefault((rendering.node, d.path), []).append((name, "", d.name))
    for (node, path), holders in sorted(owners.items()):
        names = sorted({h[0] for h in holders})
        if len(holders) < 2:
            continue
        keep = r.first_holder(names, held) if len(names) > 1 else None
        for name, module_name, dir_name in sorted(holders):
            if name == keep or name in held:
                continue
            found.append(r.problem(
                codes.STATE_PATH_OWNERS,
                f"state path {path} on node {node} has several owners: "
                f"{', '.join(f'{h[0]}/{h[2]}' for h in sorted(holders))}",
                doc=f"module:{module_name}", path=("state", dir_name, "path"),
                instance=name, candidates=names, blocks=[name]))
    return tuple(found)


def check_floors(r: Context, kept: KeptPorts) -> tuple[Findings, FloorRefusals]:
    """(the floor conflicts, the floors and ssh-ports not applied because a kept host port
    collides with them); `kept`: held.kept_ports."""
    found: list[Problem] = []
    refused: set[int] = set()
    ssh_conflicts: set[str] = set()
    for index, floor in enumerate(r.mesh.floors):
        holders = sorted((node, holder) for node in sorted(r.nodes)
                         for port, holder in kept.get(node, {}).items() if port == floor.port)
        if not holders:
            continue
        refused.add(index)
        where = ", ".join(f"{holder} on node {node}" for node, holder in holders)
        found.append(r.problem(
            codes.FLOOR_CONFLICT,
            f"floor {floor.port}/{floor.protocol} collides with host port {floor.port} "
            f"kept by {where}: a kept port never moves, so this floor is not applied; "
            f"give the floor another port (or remove the instance first)",
            path=("floors", index, "port"),
            candidates=sorted({holder.split("/", 1)[0] for _, holder in holders})))
    for node in sorted(r.nodes):
        ssh = r.mesh.nodes[node].ssh_port
        holder = kept.get(node, {}).get(ssh)
        if holder is None:
            continue
        ssh_conflicts.add(node)
        found.append(r.problem(
            codes.FLOOR_CONFLICT,
            f"ssh-port {ssh} of node {node} is host port {ssh} kept by {holder}: a kept "
            f"port never moves; give the node's ssh another port (or remove the "
            f"instance first)", path=("nodes", node, "ssh-port"),
            candidates=[holder.split("/", 1)[0]]))
    return tuple(found), FloorRefusals(frozenset(refused), frozenset(ssh_conflicts))


def previous_node(r: Context, name: str) -> Optional[str]:
    """The node an instance was last declared on (its rendering, else its recorded ports)."""
    rendering = r.declared.get(name)
    if rendering is not None:
        return rendering.node
    nodes = {entry.node for entry in r.ledger.ports.get(name, {}).values()}
    return nodes.pop() if len(nodes) == 1 else None


def check_moves(r: Context) -> tuple[Findings, list[Change]]:
    """Moves of instances that own state: refused until the instance says what happens to
    its data; a `state-left-behind` change for each move that says it (returned)."""
    found: list[Problem] = []
    changes: list[Change] = []
    instances, modules_of, nodes, declared_of = r.instances, r.modules_of, r.nodes, r.declared
    for name in r.names:
        inst, module = instances[name], modules_of[name]
        if module is None or inst.node not in nodes:
            continue
        declared = declared_of.get(name)  # (previous_node's first answer, read once here)
        before = declared.node if declared is not None else previous_node(r, name)
        if before is None or before == inst.node:
            if inst.state_from is not None and declared is not None \
                    and declared.carried_from == inst.state_from:
                found.append(r.problem(
                    codes.STALE_STATE_FROM,
                    f"{name}'s state is carried from {inst.state_from} to {inst.node} while "
                    f"`state-from: {inst.state_from}` stays (both nodes' declarations say "
                    f"so); once `mesh apply` on {inst.node} reports it arrived, remove "
                    f"`state-from` (that closes {inst.state_from}'s transfer port); the copy "
                    f"on {inst.state_from} stays until the operator lets it go there (`mesh "
                    f"forget-state`)", path=("instances", name, "state-from"),
                    instance=name, severity="info"))
            elif inst.state_from is not None and before is not None:
                found.append(r.problem(
                    codes.STALE_STATE_FROM,
                    f"{name} is on {inst.node} already: `state-from: "
                    f"{inst.state_from}` confirms no move now; remove it, so that a "
                    f"later move asks again", path=("instances", name, "state-from"),
                    instance=name, severity="info"))
            continue
        if not module.state:
            continue
        paths = ", ".join(state_host_path(name, s.path) for _, s in sorted(module.state.items()))
        if inst.fresh:
            changes.append(Change("state-left-behind", name,
                                  f"{name} moves from {before} to {inst.node} with `fresh: "
                                  f"true`: it starts with empty state directories on "
                                  f"{inst.node}; on {before} these stay as they are (a move "
                                  f"deletes nothing): {paths}"))
        elif inst.state_from == before:
            changes.append(Change("state-left-behind", name,
                                  f"{name} moves from {before} to {inst.node}; `state-from: "
                                  f"{before}`: {before} stops it and serves its state, "
                                  f"{inst.node} copies and verifies it (checksums, count, "
                                  f"sizes) before starting it; on {before} the copy stays "
                                  f"until the operator lets it go there (`mesh "
                                  f"forget-state`; a move deletes nothing): {paths}"))
        elif inst.state_from is not None:
            found.append(r.problem(
                codes.STATE_FROM_MISMATCH,
                f"`state-from: {inst.state_from}` names a node {name} was not on: "
                f"{name} was on {before}; say `state-from: {before}` and the mesh "
                f"copies its state directories from {before} to {inst.node}",
                path=("instances", name, "state-from"), instance=name, blocks=[name]))
        else:
            found.append(r.problem(
                codes.MOVE_WITH_STATE,
                f"{name} moves from {before} to {inst.node}, but its state directories "
                f"stay on {before}: {paths}. Add `state-from: {before}` to the instance "
                f"(the mesh copies them to {inst.node} and verifies them before it "
                f"starts there), or `fresh: true` to start empty; until then {name} stays "
                f"on {before}",
                path=("instances", name, "node"), instance=name, blocks=[name]))
    return tuple(found), changes


def check_public_keys(r: Context, requests: list[Request]) -> Findings:
    """A node that must hold a credential to be issued needs a key to seal it to: say so
    in the plan, before the issuer has to refuse."""
    waiting: dict[str, int] = {}
    found: list[Problem] = []
    keyless = {n for n, node in r.mesh.nodes.items() if node.public_key is None}
    for request in requests:
        if request.kind in ("credential", "tls-certificate"):
            for node in request.holders:
                if node in keyless:
                    waiting[node] = waiting.get(node, 0) + 1
    for node, count in sorted(waiting.items()):
        found.append(r.problem(
            codes.MISSING_PUBLIC_KEY,
            f"node {node} must hold {count} credential(s) to be issued but has no "
            f"public-key; run `mesh node-key {node} --path FILE` on it and put the "
            f"printed key under nodes.{node} in mesh.yaml",
            path=("nodes", node), severity="warning"))
    return tuple(found)


def check_defaults(r: Context) -> Findings:
    """Mesh defaults and substrate roles naming no instance of the mesh (they block nothing)."""
    found: list[Problem] = []
    for provision, name in sorted(r.mesh.defaults.items()):
        if name not in r.mesh.instances:
            found.append(r.problem(
                codes.UNKNOWN_DEFAULT,
                f"the mesh default for {provision} names {name}, which is not an "
                f"instance of this mesh", path=("defaults", provision)))
    for role in ("store", "broker"):
        name = getattr(r.mesh.substrate, role)
        if name is not None and name not in r.mesh.instances:
            found.append(r.problem(
                codes.UNKNOWN_DEFAULT,
                f"the substrate {role} names {name}, which is not an instance of "
                f"this mesh", path=("substrate", role), severity="error"))
    return tuple(found)
