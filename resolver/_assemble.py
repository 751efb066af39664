"""Putting instance renderings together into one declaration per node.

Invariants:
- A node's declaration holds exactly the renderings of the instances declared on it (live,
  or held at the rendering last written for them), plus what its providers hold for
  consumers elsewhere: their grants and firewall openings (allows from other nodes, same-node
  containers by MAC), and the exposures of its own instances; the mesh's registry's node also
  allows every other node to the registry's port (each node's container runtime pulls from it),
  and every node holds the trust file of that registry (resolver/_tls.py) and the files its
  instances' renderings hold (a TLS server's certificate and key, the mesh CA its consumers
  verify with; resolver/_tls.py), each once, and the state transfers it takes part in with
  the source node's opening for each and its transfer certificate's files (resolver/_moves.py),
  and the upgrade guards of its
  stateful instances (resolver/_upgrades.py), and their backup duties with the backup
  store's logins, openings and the mesh CA file restic verifies it with
  (resolver/_backup_target.py). Nothing else is in it.
- A held instance's grants and allows on a provider's node are placed only while that
  provider is declared on that node (live or held there): a provider that moved or went takes
  its grants with it.
- Collections are ordered as a single rendering would order them (containers by instance
  name, then module order; everything else sorted), so the digest is byte-stable and a node
  whose instances did not change gets the same digest as before.
- Serials come from the record of what was written (resolver/_records.py): the same serial
  for the same digest, one more otherwise.
- A node's declaration and digest are taken from a previous run (assemble_reusing) only when
  its key, which holds every value the declaration is made from, equals the kept one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Mapping, Optional

import attrs
from pyrsistent import pmap, pvector
from pyrsistent.typing import PMap

from ._declaration import (
    AccessDecl,
    Declaration,
    FirewallAllow,
    FirewallFloor,
    FirewallIntent,
    FirewallLocal,
    FileDecl,
    GrantDecl,
    HeldDecl,
    InstanceRendering,
    RegistryLogin,
    Request,
)
from ._differ import differing
from ._digest import declaration_digest
from ._firewall import merge_openings
from ._frozen import FrozenMap
from ._model import Mesh
from ._moves import transfer_allows, transfer_certificates, transfers
from ._upgrades import guards
from ._backup_target import backup_plan, guard_repository
from ._records import next_serial
from ._registry_access import MeshRegistry, registry_accounts
from ._tls import trust_file

if TYPE_CHECKING:  # pragma: no cover
    from ._context import Context, FloorRefusals


def registry_pullers(mesh: Mesh, store: str, store_node: str,
                     port: int) -> list[tuple[str, FirewallAllow]]:
    """The openings of the mesh's registry: every other node pulls from it (its container
    runtime consumes the artifact store), so each node's address is allowed to its port."""
    own = mesh.nodes[store_node].address
    return [(f"{name}'s container runtime",
             FirewallAllow(port, "tcp", pvector([node.address]), f"{store}/artifact-store"))
            for name, node in sorted(mesh.nodes.items())
            if name != store_node and node.address != own]


NodeKey = tuple[object, ...]
"""Exactly what one node's declaration is made from (assemble_reusing): equal keys, equal
contents."""

Digests = Mapping[str, tuple[NodeKey, Declaration, str]]
"""Node → the key its declaration was made from, its contents (serial 0, no digest) and its
digest."""


@attrs.frozen(eq=False)
class Layout:
    """Where assemble_reusing found each rendering (for a later run to work out again only
    the nodes a changed rendering was or is on, or reaches): the renderings it read (no
    instance held), by node the instances declared there, by provider node the consumers
    elsewhere it serves with their renderings (both in name order), and each node's
    declaration as returned."""

    renderings: Mapping[str, InstanceRendering]
    by_node: Mapping[str, list[str]]
    foreign: Mapping[str, list[tuple[str, InstanceRendering]]]
    declarations: Mapping[str, Declaration]


def _provider_nodes(rendering: InstanceRendering) -> Iterable[str]:
    """The nodes whose declaration holds a part of `rendering` (its grants, allows and
    same-node openings), sorted."""
    grants_, allows_, locals_ = rendering.grants, rendering.allows, rendering.locals
    if not (grants_ or allows_ or locals_):
        return ()
    if (grants_ and (allows_ or locals_)) or (allows_ and locals_):
        return sorted({*grants_, *allows_, *locals_})
    only = grants_ or allows_ or locals_  # (most: one map, of one node; no set made for them)
    return only if len(only) == 1 else sorted(only)


def _laid_again(layout: Layout, renderings: Mapping[str, InstanceRendering]
                ) -> tuple[dict[str, list[str]], dict[str, list[tuple[str, InstanceRendering]]]]:
    """(by node its instances, by provider node its consumers elsewhere with their
    renderings), as the walk over every rendering in assemble_reusing makes them, from the
    last run's `layout`: only the nodes a rendering that is not the very one it read was
    on, or is on, or reaches are made again (the others hold the very same entries)."""
    was = layout.renderings
    changed = differing(was, renderings, same=True)
    nodes: set[str] = set()
    for name in changed:
        for rendering in (was.get(name), renderings.get(name)):
            if rendering is not None:
                nodes.add(rendering.node)
                nodes.update(_provider_nodes(rendering))
    by_node = dict(layout.by_node)
    foreign = dict(layout.foreign)
    came = sorted(n for n in changed if n in renderings)
    for node in nodes:
        names = sorted({n for n in layout.by_node.get(node, ()) if n not in changed}
                       | {n for n in came if renderings[n].node == node})
        if names:
            by_node[node] = names
        else:
            by_node.pop(node, None)
        pairs = [pair for pair in layout.foreign.get(node, ()) if pair[0] not in changed]
        pairs += [(n, renderings[n]) for n in came if node in _provider_nodes(renderings[n])]
        pairs.sort(key=_first)
        if pairs:
            foreign[node] = pairs
        else:
            foreign.pop(node, None)
    return by_node, foreign


def _first(pair: tuple[str, InstanceRendering]) -> str:
    return pair[0]


def assemble(r: "Context", floor_refusals: "FloorRefusals",
             live: Mapping[str, InstanceRendering],
             held: dict[str, tuple[InstanceRendering, list[HeldDecl]]],
             mesh_registry: Optional[MeshRegistry]
             ) -> tuple[PMap[str, Declaration], list[Request]]:
    """(node → Declaration, the requests of the registry's accounts and of the transfer
    certificates of the nodes of state transfers), from the live
    renderings and the held ones; `mesh_registry` is the mesh's own artifact store when one
    serves (its pullers, trust file, accounts); `floor_refusals` the floors not applied."""
    declarations, requests, _, _ = assemble_reusing(r, floor_refusals, live, held,
                                                    mesh_registry)
    return declarations, requests


def assemble_reusing(r: "Context", floor_refusals: "FloorRefusals",
                     live: Mapping[str, InstanceRendering],
                     held: dict[str, tuple[InstanceRendering, list[HeldDecl]]],
                     mesh_registry: Optional[MeshRegistry], kept: Optional[Digests] = None,
                     layout: Optional[Layout] = None,
                     ) -> tuple[PMap[str, Declaration], list[Request], Digests,
                                Optional[Layout]]:
    """assemble, with the declarations a previous run made (`kept`): a node whose NodeKey
    (every value its declaration reads: the node, its renderings and held parts, the consumers
    elsewhere it serves with their renderings, its transfers, guards, backup parts,
    certificate and registry login, and `run`, what every node reads) equals the kept one
    takes the kept contents and digest (the same renderings compare by identity) instead of
    building and encoding them again; the key, contents and digest of every node are returned
    for the next run (none when `kept` is None). With a `layout` (what the last run found
    where: Layout), the instances by node and the consumers by provider node are made again
    only for the nodes a changed rendering was or is on, or reaches (_laid_again), when no
    instance is held; a node's declaration whose serial and digest are the ones the last run
    returned is that very object. The Layout of this run is returned when `kept` is given and
    no instance is held."""
    mesh = r.mesh
    digested: dict[str, tuple[NodeKey, Declaration, str]] = {}
    renderings = {**live, **{name: rendering for name, (rendering, _) in held.items()}}
    by_node: dict[str, list[str]] = {}
    foreign: dict[str, list[tuple[str, InstanceRendering]]] = {}  # provider node → consumers
    if layout is not None and not held:
        by_node, foreign = _laid_again(layout, renderings)
    else:
        layout = None
        for name in sorted(renderings):
            rendering = renderings[name]
            by_node.setdefault(rendering.node, []).append(name)
            for provider_node in _provider_nodes(rendering):
                foreign.setdefault(provider_node, []).append((name, rendering))
    mesh_sources = sorted({n.address for n in mesh.nodes.values()})
    registry = mesh_registry.address if mesh_registry is not None else None
    store, store_node = (mesh_registry.instance, mesh_registry.node) \
        if mesh_registry is not None else (None, None)
    accounts: list[GrantDecl]
    logins: dict[str, RegistryLogin]
    requests: list[Request]
    if mesh_registry is not None and mesh_registry.instance in renderings:
        accounts, logins, requests = registry_accounts(r, mesh_registry.instance,
                                                       mesh_registry.node, mesh_registry.address)
    else:
        accounts, logins, requests = [], {}, []
    declarations: dict[str, Declaration] = {}
    moving = transfers(r, live)  # moves that carry their state (resolver/_moves.py)
    transfer_files, transfer_requests = transfer_certificates(r, moving)
    guarded = guards(r, live)  # snapshots before a new image (resolver/_upgrades.py)
    backed = backup_plan(r, live)  # backups into the backup target (resolver/_backup_target)
    broker = mesh.substrate.broker
    keeping = kept is not None
    run: NodeKey = (mesh.mesh, registry, store, store_node, r.ledger.ca, tuple(mesh.floors),
                    floor_refusals.floors, broker, tuple(accounts)) if keeping else ()
    # the mesh's addresses reach a node's declaration only through a floor admitting them all
    # (a mesh floor, or the broker's on its node): a node added changes no other node's key
    mesh_wide = any(f.sources == "mesh" for i, f in enumerate(mesh.floors)
                    if i not in floor_refusals.floors)
    sources_key = tuple(mesh_sources)
    for node_name, node in sorted(mesh.nodes.items()):
        names = by_node.get(node_name, [])
        mine = [renderings[n] for n in names]
        cert = r.ledger.certificates.get(node_name)
        key: NodeKey = ()
        if keeping:
            key = (run, node_name, node, tuple(mine),
                   sources_key if mesh_wide or broker in names else None,
                   tuple((n, tuple(held[n][1])) for n in names if n in held),
                   # (no instance held: none of them is; the pairs as they are)
                   tuple(foreign.get(node_name, ())) if not held
                   else tuple((consumer, rendering, consumer in held)
                              for consumer, rendering in foreign.get(node_name, ())),
                   tuple(backed.allows.get(node_name, ())), tuple(backed.grants.get(node_name, ())),
                   backed.ca_files.get(node_name), tuple(backed.duties.get(node_name, ())),
                   tuple(guarded.get(node_name, ())), tuple(moving.get(node_name, ())),
                   tuple(transfer_files.get(node_name, ())), cert, logins.get(node_name),
                   tuple(registry_pullers(mesh, store, node_name, int(registry.rsplit(":", 1)[1])))
                   if registry is not None and store is not None and store_node == node_name
                   else ())
            known = kept.get(node_name) if kept is not None else None
            if known is not None and known[0] == key:
                digested[node_name] = known
                serial = next_serial(r.ledger.nodes.get(node_name), known[2])
                last = layout.declarations.get(node_name) if layout is not None else None
                # (the last run's: made from these contents, `known`, as this would be)
                declarations[node_name] = last if last is not None and \
                    last.serial == serial and last.digest == known[2] \
                    else attrs.evolve(known[1], serial=serial, digest=known[2])
                continue
        here = set(names)
        accesses: dict[str, tuple[set[str], str]] = {}  # path → (instances, mode)
        for name, rendering in zip(names, mine):
            for access in rendering.accesses:
                names_, mode = accesses.get(access.path, (set(), "ro"))
                names_.add(name)
                accesses[access.path] = (names_, "rw" if access.mode == "rw" else mode)
        grants: list[GrantDecl] = []
        allow: list[tuple[str, FirewallAllow]] = []
        local: list[tuple[str, FirewallLocal]] = []
        for consumer, rendering in foreign.get(node_name, []):
            if consumer in held:  # a held consumer's grants follow only a provider still here
                grants.extend(g for g in rendering.grants.get(node_name, ()) if g.provider in here)
                allow.extend((consumer, a) for a in rendering.allows.get(node_name, ())
                             if a.reason.split("/", 1)[0] in here)
                local.extend((consumer, a) for a in rendering.locals.get(node_name, ())
                             if a.reason.split("/", 1)[0] in here)
            else:
                grants.extend(rendering.grants.get(node_name, ()))
                allow.extend((consumer, a) for a in rendering.allows.get(node_name, ()))
                local.extend((consumer, a) for a in rendering.locals.get(node_name, ()))
        allow.extend(backed.allows.get(node_name, ()))  # the backup store's, to its users
        if registry is not None and store is not None and store_node == node_name \
                and store in here:
            allow.extend(registry_pullers(mesh, store, node_name, int(registry.rsplit(":", 1)[1])))
        floors = [FirewallFloor(node.ssh_port, "tcp", pvector(), "ssh")]
        if broker in here:
            port = next((p.port for p in renderings[broker].providers
                         if p.provision == "amqp"), None)
            if port is not None:
                floors.append(FirewallFloor(port, "tcp", pvector(mesh_sources),
                                            "broker (enrolment)"))
        for index, f in enumerate(mesh.floors):
            if index in floor_refusals.floors:
                continue
            floors.append(FirewallFloor(f.port, f.protocol,
                                        pvector(mesh_sources if f.sources == "mesh" else []),
                                        f.reason or f"floor {f.port}/{f.protocol}"))
        # the mesh's addresses are part of a node's declaration only where a floor admits them
        # all: adding a node must not change the declaration of a node it has nothing to do with
        admits_mesh = any(list(f.sources) == mesh_sources for f in floors if f.sources)
        files: list[FileDecl] = []
        if registry is not None and r.ledger.ca:  # every node's runtime pulls from it
            files.append(trust_file(registry, r.ledger.ca))
        containers = [c for rendering in mine for c in rendering.containers]
        # TLS servers' certificates and keys, the CA its consumers verify with (resolver/_tls)
        files.extend({*(f for rendering in mine for f in rendering.files),
                      *transfer_files.get(node_name, ())})
        if accounts and store_node == node_name and store in here:
            grants.extend(accounts)  # the registry's accounts, kept by its htpasswd provisioner
        grants.extend(backed.grants.get(node_name, ()))  # backup store logins (its htpasswd)
        backup_ca = backed.ca_files.get(node_name)
        if backup_ca is not None and backup_ca not in files:
            files.append(backup_ca)  # the mesh CA restic verifies the backup store with
        decl = Declaration(
            mesh=mesh.mesh, node=node_name, address=node.address,
            containers=pvector(containers),
            state_dirs=pvector(sorted((d for rendering in mine for d in rendering.state_dirs),
                                      key=lambda d: (d.path, d.instance, d.name))),
            accesses=pvector(AccessDecl(path, mode, pvector(sorted(names_)))
                             for path, (names_, mode) in sorted(accesses.items())),
            firewall=FirewallIntent(
                node.address, pvector(sorted([*merge_openings(allow, FirewallAllow),
                                              *transfer_allows(moving.get(node_name, []))],
                                             key=lambda a: (a.port, a.protocol))),
                pvector(sorted(floors)),
                pvector(mesh_sources if admits_mesh else []), local=merge_openings(local, FirewallLocal),
                expose=pvector(sorted(e for rendering in mine for e in rendering.exposures))),
            grants=pvector(sorted(grants, key=lambda g: (g.provider, g.consumer, g.provision))),
            providers=pvector(sorted((p for rendering in mine for p in rendering.providers),
                                     key=lambda p: (p.instance, p.provision))),
            bindings=pvector(sorted((b for rendering in mine for b in rendering.bindings),
                                    key=lambda b: (b.consumer, b.requirement))),
            instances=pvector(names),
            certificate=cert.pem if cert is not None else None,
            held=pvector(sorted(h for name in names if name in held for h in held[name][1])),
            files=pvector(sorted(files)),
            registry_logins=pvector([logins[node_name]] if node_name in logins else []),
            transfers=pvector(moving.get(node_name, [])),
            upgrades=pvector(attrs.evolve(g, repository=guard_repository(
                backed, node_name, g.instance, g.repository))
                for g in guarded.get(node_name, [])
                if guard_repository(backed, node_name, g.instance, g.repository)),
            backups=pvector(backed.duties.get(node_name, [])),
        )
        digest = declaration_digest(decl)
        if keeping:
            digested[node_name] = (key, decl, digest)
        serial = next_serial(r.ledger.nodes.get(node_name), digest)
        declarations[node_name] = attrs.evolve(decl, serial=serial, digest=digest)
    made = Layout(renderings, by_node, foreign, declarations) \
        if keeping and not held else None
    return (pmap(declarations), [*requests, *transfer_requests, *backed.requests],
            FrozenMap(digested), made)
