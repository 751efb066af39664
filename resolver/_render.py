"""Rendering the live instances: each one's containers, state directories and accesses, put
together with its part of every binding into one rendering per live instance.

Invariants:
- Every value a consumer is told comes from one place: the provider node's address and the
  host port assigned to the provider's listen; the published port and the firewall intent are
  derived from the same assignment, so the two ends agree by construction. Binding values,
  grants, allows and what a provider serves are rendered by resolver/_render_bindings.py; the
  openings for consumers on the provider's own node, by their containers' MACs, here.
- Secrets appear only as `${secret:<credential id>}` tokens plus a SecretRef with the
  generation in force; a declaration never holds a value.
- Everything is attributed to one instance: its own containers, state directories,
  accesses and provides; as a consumer, its binding values and, by provider node, its grants
  and firewall allows. _assemble.py puts renderings together into node declarations, so a
  held instance's rendering (the one last written) fits in exactly where a live one would.
- Pure stages of resolution(), each handed the parts of the inputs it reads and the values the
  stages before it returned, returning a value; nothing is gathered by side effect.
- A node's declaration digest is sha256 over the canonical JSON of the declaration without
  serial and digest (declaration_digest).
- What depends on a module alone is read once per module (resolver/_shape.py): each env value
  is compiled there, so filling it per instance only looks up what varies by instance.
- Reuse (render_instances_reusing, for resolver/incremental.py): a rendering is taken from a
  previous run only when its RenderingKey, which holds every value the rendering reads, equals
  the kept one (known equal without being made when none of its parts differs from what the
  kept run read: _suspects); instances that read the ledger's TLS parts are always rendered
  anew. A
  consumer's same-node openings are taken from a previous run (local_openings_reusing) only
  when its key (its node and MACs, each binding with its provider's module, node and port)
  and the modules' listens are the same; a node's MACs only for the same containers' names
  (and from the last run's, only the consumers not in Consumed.same and the nodes they were
  or are on are worked out again: _local_again).
"""

from __future__ import annotations

import re
from collections import Counter
from operator import itemgetter
from typing import AbstractSet, Iterable, Mapping, Optional, Sequence

import attrs
from pyrsistent import pvector
from pyrsistent.typing import PVector

from ._declaration import (
    AccessDecl,
    ContainerDecl,
    FileDecl,
    FirewallLocal,
    InstanceRendering,
    LogsDecl,
    MountDecl,
    ProviderDecl,
    PublishedPort,
    SecretRef,
    StateDirDecl,
)
from ._artifacts import artifact_key, image_reference
from ._binding_files import mount_files, with_ca_at
from ._bound import Bound, BoundKey
from ._differ import differing, differing_plain
from ._firewall import (KeptMacs, assign_macs, consumer_container_macs_reusing,
                        exposures_of)
from ._frozen import EMPTY_FROZEN, FrozenMap
from ._ledger import Ledger
from ._model import EMPTY_VEC, Instance, Listen, Mesh, Module, Node
from ._ports import Moved, moved_since
from ._registry_access import MeshRegistry, with_auth
from ._tool_tokens import serves_backup_logins, serves_tokens
from ._render_bindings import Consumed, Live
from ._shape import TOLD_NOTHING, ModuleShape, Told
from ._tls import CA_CONTAINER_FILE, ca_file, name_parts, server_files, tls_ref, with_tls
from ._names import NAMES_LABEL, direct_url, own_names

#: Where a facility a node offers without saying `name=path` is found on it.
DEFAULT_FACILITY_PATHS = {"docker-socket": "/var/run/docker.sock"}
_NAME_UNSAFE = re.compile(r"[^a-zA-Z0-9_.-]+")

#: The directory under which each instance's relative state directories live on its node.
STATE_ROOT = "/var/lib/mesh"


def state_host_path(instance: str, path: str) -> str:
    """Where a state directory lives on its node: a relative path is the instance's own
    (`/var/lib/mesh/<instance>/<path>`, so two instances never collide); an absolute path is
    taken as written, and two owners of it are refused."""
    if path.startswith("/"):
        return path.rstrip("/") or "/"
    return f"{STATE_ROOT}/{instance}/{path.strip('/')}"


def container_name(mesh: str, instance: str, container: str) -> str:
    """The runtime's name of a container: unique per mesh, instance and container, with any
    character a runtime refuses replaced by '-'."""
    return _NAME_UNSAFE.sub("-", f"{mesh}-{instance}-{container}")


def tls_parts(ledger: Ledger, name: str, servers: Mapping[str, tuple[str, str]],
              verifies: bool, containers: list[ContainerDecl],
              names: Sequence[str] = ()) -> tuple[list[ContainerDecl], list[FileDecl]]:
    """An instance's containers and files with what TLS adds (resolver/_tls.py): a TLS server
    (in `servers`) mounts its certificate directory and holds its certificate and key, once
    issued; a consumer of a TLS binding (`verifies`) mounts the mesh CA's certificate, once
    the ledger records it."""
    files: list[FileDecl] = []
    key = tls_ref(ledger, name) if name in servers else None
    if key is not None:
        served = ledger.tls[name]
        containers = [with_tls(c, name, served.serial) for c in containers]
        files.extend(server_files(name, served.pem, key, servers[name][1]))
        named, serials = name_parts(ledger, name, names, servers[name][1])
        if serials:  # an ingress: the certificates of the names it serves (resolver/_names)
            files.extend(named)
            containers = [attrs.evolve(c, labels=c.labels.set(NAMES_LABEL, " ".join(serials)))
                          for c in containers]
    if verifies and ledger.ca:
        containers = [with_ca_at(c, CA_CONTAINER_FILE, ledger.ca) for c in containers]
        files.append(ca_file(ledger.ca))
    return containers, files


# ---------------------------------------------------------------------- same-node consumers

@attrs.frozen
class LocalOpenings:
    """Consumers bound to a provider on their own node are let in by their containers' MAC
    addresses (resolver/_firewall.py derives them)."""

    macs: Mapping[str, str]
    """Container runtime name → the MAC it is created with (the containers of such consumers)."""
    by_consumer: Mapping[str, FrozenMap[str, PVector[FirewallLocal]]]
    """Consumer → provider node (its own) → the openings of its providers' ports to its MACs."""
    with_macs: frozenset[str] = frozenset()
    """The instances any of whose containers has a MAC in `macs` (the others have none)."""
    names: Mapping[str, tuple[object, object, list[str]]] = EMPTY_FROZEN
    """Instance bound on its own node → (its Instance, its Module, the runtime names of its
    containers (parts switched on, in the module's order)): container_name's, made once."""


def local_openings(mesh: str, live: Live, bound: Mapping[BoundKey, Bound],
                   assigned: Mapping[tuple[str, str], int]) -> LocalOpenings:
    """The MACs of the containers of every consumer bound on its own node (in mesh `mesh`),
    and by consumer, the openings of its providers' assigned ports to them (a consumer with no
    container has nothing to let in)."""
    return local_openings_reusing(mesh, live, bound, assigned, None)[0]


_Opened = tuple[tuple[object, ...], FrozenMap[str, PVector[FirewallLocal]]]
"""A consumer's same-node openings key and the openings made from it (by node)."""


@attrs.frozen
class KeptLocal:
    """What local_openings_reusing made that a later run may reuse."""

    macs: KeptMacs = KeptMacs()
    """The containers' names and MACs (resolver/_firewall.py)."""
    listens: Mapping[str, Mapping[str, Listen]] = EMPTY_FROZEN
    """Module → its listens (when they differ, no consumer's openings are reused)."""
    consumers: Mapping[str, _Opened] = EMPTY_FROZEN
    """Consumer → the key of its openings (its node and MACs; each binding with its
    provider's module, node and assigned port) and the openings made from it."""
    made: Optional[LocalOpenings] = None
    """What the run returned (None: nothing to work out again from)."""
    macs_of: Mapping[str, PVector[str]] = EMPTY_FROZEN
    """Consumer bound on its own node → its containers' MACs, sorted."""
    on_node: Mapping[str, tuple[str, ...]] = EMPTY_FROZEN
    """Node → the consumers bound on it (on their own node), sorted."""


def local_openings_reusing(mesh: str, live: Live, bound: Mapping[BoundKey, Bound],
                           assigned: Mapping[tuple[str, str], int], kept: Optional[KeptLocal],
                           same: AbstractSet[str] = frozenset(),
                           consumers: Optional[AbstractSet[str]] = None
                           ) -> tuple[LocalOpenings, KeptLocal]:
    """local_openings, reusing what a previous run made (`kept`; None: keep nothing, make no
    keys): a consumer whose key (its node, its MACs, and for each of its bindings the Bound,
    its provider's module, node and assigned port) equals the kept one gets the kept openings
    (the same object), when the modules' listens are the same. `same`: consumers whose
    bindings' _GroupKey equals the one kept by the same earlier run (Consumed.same): that key
    holds every part of this one but the MACs (the consumer's node; each Bound, its provider's
    node and module, and the ports of every listen of that module), so for them only the MACs
    are compared (the key is not made again: the kept one is equal). `consumers`: every
    consumer bound now (a superset will do); with it, and a `kept` that holds what its run
    made, only the consumers not in `same` and the nodes they were or are on are worked out
    again (_local_again)."""
    if kept is not None and kept.made is not None and consumers is not None \
            and kept.macs.mesh == mesh and kept.listens == live.listens_of:
        return _local_again(mesh, live, bound, assigned, kept, kept.made, same, consumers)
    keeping = kept is not None
    mac_of, consumer_macs, kept_macs = consumer_container_macs_reusing(
        mesh, bound, container_name, live.node_of, live.instances, live.modules,
        kept.macs if kept is not None else None)
    if kept is not None and kept.listens != live.listens_of:
        kept = None  # a listen's protocol changed: no opening is reused
    macs_of = {name: pvector(macs) for name, macs in consumer_macs.items() if macs}
    locals_of: dict[str, FrozenMap[str, PVector[FirewallLocal]]] = {}
    made: dict[str, _Opened] = {}
    node_of = live.node_of
    ordered = sorted(bound)  # each consumer's bindings are consecutive
    last = 0
    # (consumer → its number of bindings, counted in C, in the order of `ordered`)
    for consumer, count in Counter(map(itemgetter(0), ordered)).items():
        start = last
        last += count
        macs = macs_of.get(consumer)
        if macs is None:
            continue  # no container bound on its own node: nothing to let in
        if consumer in same and kept is not None:
            before = kept.consumers.get(consumer)
            if before is not None and before[0][1] == macs:
                locals_of[consumer] = before[1]
                made[consumer] = before
                continue
        entry = _consumer_openings(node_of[consumer], macs, ordered[start:last], live, bound,
                                   assigned, keeping,
                                   kept.consumers.get(consumer) if kept is not None else None)
        if entry is not None:
            locals_of[consumer] = entry[1]
            if keeping:
                made[consumer] = entry
    opened = LocalOpenings(macs=mac_of, by_consumer=locals_of, with_macs=frozenset(macs_of),
                           names=kept_macs.names)
    if not keeping:
        return opened, KeptLocal()
    on_node: dict[str, list[str]] = {}
    for name in sorted(kept_macs.names):
        on_node.setdefault(node_of[name], []).append(name)
    return opened, KeptLocal(kept_macs, live.listens_of, FrozenMap(made), opened, macs_of,
                             {node: tuple(names) for node, names in on_node.items()})


def _consumer_openings(node: str, macs: PVector[str], keys: list[BoundKey], live: Live,
                       bound: Mapping[BoundKey, Bound], assigned: Mapping[tuple[str, str], int],
                       keeping: bool, before: Optional[_Opened]) -> Optional[_Opened]:
    """(its key, its openings by node) for a consumer on `node` whose containers have `macs`:
    `before` (what a run kept for it) itself when its key is the one made now; None when it
    has no opening. Without `keeping` no key is made (an empty one)."""
    key = _opening_key(node, macs, keys, live, bound, assigned) if keeping else ()
    if before is not None and before[0] == key:
        return before
    openings = _openings(node, macs, keys, live, bound, assigned)
    return (key, FrozenMap({node: pvector(openings)})) if openings else None


def _opening_key(node: str, macs: PVector[str], keys: list[BoundKey], live: Live,
                 bound: Mapping[BoundKey, Bound], assigned: Mapping[tuple[str, str], int]
                 ) -> tuple[object, ...]:
    """A consumer's openings key: its node, its MACs, and for each of its bindings (`keys`)
    the Bound, its provider's module, node and assigned port."""
    parts: list[object] = [node, macs]
    for k in keys:
        b = bound[k]
        parts.append((b, live.instances[b.provider].module, live.node_of[b.provider],
                      assigned.get((b.provider, b.listen))))
    return tuple(parts)


def _openings(node: str, macs: PVector[str], keys: list[BoundKey], live: Live,
              bound: Mapping[BoundKey, Bound], assigned: Mapping[tuple[str, str], int]
              ) -> list[FirewallLocal]:
    """The same-node openings of a consumer on `node` whose containers have `macs`: one per
    binding (`keys`) to a provider on that node, its assigned port and protocol."""
    openings: list[FirewallLocal] = []
    for k in keys:
        b = bound[k]
        if live.node_of[b.provider] == node:
            listen = live.listens_of[live.instances[b.provider].module][b.listen]
            openings.append(FirewallLocal(assigned[(b.provider, b.listen)], listen.protocol,
                                          macs, f"{b.provider}/{b.listen}"))
    return openings


def _local_again(mesh: str, live: Live, bound: Mapping[BoundKey, Bound],
                 assigned: Mapping[tuple[str, str], int], kept: KeptLocal,
                 last: LocalOpenings, same: AbstractSet[str], consumers: AbstractSet[str]
                 ) -> tuple[LocalOpenings, KeptLocal]:
    """local_openings_reusing from what the kept run made (`last`), working out again only
    the consumers not in `same` (bound now or then) and every consumer on a node one of them
    was or is on: a consumer in `same` has the very Instance, Module and Bounds it had, and
    its providers the same nodes, modules and ports (Consumed.same), so whether it is bound
    on its own node, its containers' names and its openings' key but for the MACs are what
    they were; a node's MACs are made from its consumers' names alone (the same names, the
    same MACs, as consumer_container_macs_reusing keeps them)."""
    node_of, instances, modules = live.node_of, live.instances, live.modules
    kept_names = kept.macs.names
    changed = (consumers | kept_names.keys() | kept.consumers.keys()) - same
    nodes: set[str] = set()  # the nodes worked out again
    for name in changed:
        before = kept_names.get(name)
        if before is not None:
            nodes.add(before[0].node)
        if name in node_of:
            nodes.add(node_of[name])
    around = set(changed)  # the consumers worked out again
    for node in nodes:
        around.update(kept.on_node.get(node, ()))
    keys_of: dict[str, list[BoundKey]] = {}  # their bindings
    for key in bound:
        if key[0] in around:
            keys_of.setdefault(key[0], []).append(key)
    local_now = {name for name in changed if any(
        node_of[name] == node_of[k[2]] for k in keys_of.get(name, ()))}
    names_of: dict[str, tuple[Instance, Module, list[str]]] = dict(kept_names)
    for name in changed:
        names_of.pop(name, None)
    for name in sorted(local_now):
        inst, module = instances[name], modules[name]
        before = kept_names.get(name)
        if before is not None and before[0] is inst and before[1] is module:
            names_of[name] = before
        else:
            names_of[name] = (inst, module, [container_name(mesh, name, c.name)
                                             for c in module.containers
                                             if c.part is None or c.part in inst.parts])
    on_node = dict(kept.on_node)
    made_nodes = dict(kept.macs.nodes)
    mac_of = dict(last.macs)
    remade: set[str] = set()  # the nodes whose MACs are not the kept ones
    for node in sorted(nodes):
        on = tuple(sorted((set(kept.on_node.get(node, ())) - changed)
                          | {n for n in local_now if node_of[n] == node}))
        before_node = kept.macs.nodes.get(node)
        if not on:
            on_node.pop(node, None)
            made_nodes.pop(node, None)
            remade.add(node)
            continue
        on_node[node] = on
        runtime_names = [c for n in on for c in names_of[n][2]]
        if before_node is not None and before_node[0] == runtime_names:
            continue  # the same names: the same MACs
        made_nodes[node] = (runtime_names, assign_macs(mesh, runtime_names))
        remade.add(node)
    for node in remade:  # (a container's name may leave one node for another: all out first)
        before_node = kept.macs.nodes.get(node)
        if before_node is not None:
            for runtime in before_node[0]:
                mac_of.pop(runtime, None)
    for node in remade:
        if node in made_nodes:
            mac_of.update(made_nodes[node][1])
    macs_of = dict(kept.macs_of)
    locals_of = dict(last.by_consumer)
    made = dict(kept.consumers)
    listens_of = live.listens_of
    for name in sorted(around):
        macs_of.pop(name, None)
        if name in names_of and (name in changed or node_of[name] in remade):
            mine = names_of[name][2]
            sorted_macs = [mac_of[mine[0]]] if len(mine) == 1 \
                else sorted([mac_of[c] for c in mine])  # (none: an empty list)
            was = kept.macs_of.get(name)
            if sorted_macs:
                macs_of[name] = was if was is not None and list(was) == sorted_macs \
                    else pvector(sorted_macs)
        elif name in names_of and name in kept.macs_of:
            macs_of[name] = kept.macs_of[name]
        if name not in changed and node_of.get(name) not in remade:
            continue  # (its openings and their key: the kept ones)
        locals_of.pop(name, None)
        made.pop(name, None)
        given = macs_of.get(name)
        if given is None:
            continue  # no container bound on its own node: nothing to let in
        entry = _consumer_openings(node_of[name], given, sorted(keys_of.get(name, ())), live,
                                   bound, assigned, True, kept.consumers.get(name))
        if entry is not None:
            locals_of[name] = entry[1]
            made[name] = entry
    opened = LocalOpenings(macs=mac_of, by_consumer=locals_of, with_macs=frozenset(macs_of),
                           names=names_of)
    return opened, KeptLocal(KeptMacs(mesh, names_of, made_nodes), listens_of, FrozenMap(made),
                             opened, macs_of, on_node)


# ---------------------------------------------------------------------- the renderings

@attrs.frozen
class Images:
    """The image each artifact of a module runs (None: unpinned), by artifact key
    (`module/artifact`)."""

    by_key: Mapping[str, Optional[str]]

    def of(self, module: Module, artifact_name: str) -> str:
        """The image of `module`'s artifact `artifact_name`, which an installed container
        runs (check_pinned refused every live instance whose containers have none)."""
        key = artifact_key(module.name, artifact_name)
        image = self.by_key[key]
        assert image is not None, key
        return image


def artifact_images(module: Module, ledger: Ledger, registry_address: Optional[str]) -> Images:
    """The image of every artifact of `module`, from the ledger's pins and builds
    (`registry_address`: the mesh's own registry, when one serves: images come from it)."""
    by_key: dict[str, Optional[str]] = {}
    for artifact_name, artifact in module.artifacts.items():
        key = artifact_key(module.name, artifact_name)
        by_key[key] = image_reference(artifact, ledger, registry_address, key=key)
    return Images(by_key)


def _module_key(module: Module, images: Images) -> RenderingKey:
    """The part of its instances' RenderingKeys a module gives: the module and the images of
    its artifacts."""
    return (module, tuple(sorted(images.by_key.items())))


def render_instances(live: Live, mesh: Mesh, ledger: Ledger, registry: Optional[MeshRegistry],
                     assigned: Mapping[tuple[str, str], int],
                     own: Mapping[tuple[str, str], SecretRef], consumed: Consumed,
                     providers: Mapping[str, PVector[ProviderDecl]], local: LocalOpenings,
                     servers: Mapping[str, tuple[str, str]] = EMPTY_FROZEN,
                     served: Mapping[str, tuple[str, ...]] = EMPTY_FROZEN
                     ) -> FrozenMap[str, InstanceRendering]:
    """Every live instance's rendering: its containers (env filled from what it is told,
    `consumed`, and its own secrets, `own`; ports published as `assigned`; MACs from `local`;
    the TLS servers `servers` with their certificates, consumers of TLS bindings with the CA),
    state directories and accesses, with the parts of it the stages before rendered (what it
    provides, `providers`; its bindings, grants and allows; its local openings). `mesh`: its
    name, nodes' facilities and addresses, every container's log limits; `ledger`: pins, builds and the registry's TLS;
    `registry`: the mesh's own artifact store, when one serves (images come from it).

    What depends on the module alone is read once per module (ModuleShape), what depends on
    the node once per node (its facilities); each rendering is frozen as soon as it is whole."""
    return render_instances_reusing(live, mesh, ledger, registry, assigned, own, consumed,
                                    providers, local, servers, served)[0]


RenderingKey = tuple[object, ...]
"""Exactly what one instance's rendering is made from (render_instances_reusing): equal keys,
equal renderings."""

@attrs.frozen
class Kept:
    """What render_instances_reusing made that a later run may reuse."""

    run: RenderingKey = ()
    """The values every rendering reads (when they differ, nothing else here is reused)."""
    modules: Mapping[str, RenderingKey] = EMPTY_FROZEN
    """Module name → (the module, the images of its artifacts)."""
    instances: Mapping[str, tuple[RenderingKey, InstanceRendering]] = EMPTY_FROZEN
    """Instance → the key and the rendering made from it."""
    read: Optional["_Read"] = None
    """The maps the run read each key's parts from (render_instances_reusing: an instance
    none of whose parts differs from them is taken without making its key)."""


@attrs.frozen(eq=False)
class _Read:
    """The maps one render_instances_reusing run read its keys' parts from, each by instance
    (or by (instance, listen or secret), or by container runtime name): the next run finds
    the instances any of whose parts differs from what these held (_suspects)."""

    instances: Mapping[str, Instance]
    nodes: Mapping[str, Node]
    consumers: Mapping[str, object]
    """The instances the run's Consumed told something (its `decls`)."""
    fqdn_of: Mapping[str, str]
    assigned: Mapping[tuple[str, str], int]
    own: Mapping[tuple[str, str], SecretRef]
    macs: Mapping[str, str]
    names: Mapping[str, tuple[object, object, list[str]]]
    providers: Mapping[str, PVector[ProviderDecl]]
    openings: Mapping[str, FrozenMap[str, PVector[FirewallLocal]]]


NOTHING_KEPT = Kept()


def render_instances_reusing(
        live: Live, mesh: Mesh, ledger: Ledger, registry: Optional[MeshRegistry],
        assigned: Mapping[tuple[str, str], int], own: Mapping[tuple[str, str], SecretRef],
        consumed: Consumed, providers: Mapping[str, PVector[ProviderDecl]],
        local: LocalOpenings, servers: Mapping[str, tuple[str, str]] = EMPTY_FROZEN,
        served: Mapping[str, tuple[str, ...]] = EMPTY_FROZEN, kept: Optional[Kept] = None,
        modules: Optional[Mapping[str, Module]] = None,
        moved: Optional[Moved] = None,
        ) -> tuple[FrozenMap[str, InstanceRendering], Kept]:
    """render_instances, reusing what a previous resolution rendered: with `kept` (None: keep
    nothing, make no keys), an instance whose RenderingKey equals the one kept for it gets the
    kept rendering (the same object), and every keyed rendering is returned with its key for
    the next run. The key holds every value the instance's rendering reads (its Instance, its
    module and the images of its artifacts, its node's address and facilities, what it is told,
    its own ports, secrets and MACs, its parts of the bindings, its providers and local
    openings) and `run` the values every rendering reads (the mesh's name, logs, domain and
    acme, the CA, the registry's address); instances that read the ledger's TLS parts (a TLS
    server, a consumer of a TLS binding, an ingress, the registry, a tool server) are rendered
    anew each time and not kept. With `modules` (the catalogue's) and a `kept` that holds
    what its run read (Kept.read), an instance none of whose key's parts differs from what
    that run read (_suspects) gets the kept rendering without its key being made: its key
    is made of the very parts the kept one was made of, or equal ones, so it equals it.
    `moved`: the instances whose host ports differ from those of a run (_ports.ports_moved),
    when the caller worked them out already."""
    registry_address = registry.address if registry is not None else None
    run: RenderingKey = (mesh.mesh, mesh.logs, live.domain,
                         mesh.acme.email if mesh.acme is not None else None, ledger.ca,
                         registry_address)
    keeping = kept is not None
    if kept is not None and kept.run != run:
        kept = NOTHING_KEPT  # something every rendering reads changed: nothing is kept
    made: dict[str, tuple[RenderingKey, InstanceRendering]] = {}
    module_keys: dict[str, RenderingKey] = {}  # module name → (module, its images)
    facilities_of: dict[str, dict[str, str]] = {}  # node → facility → its path
    offered: dict[str, PVector[str]] = {}  # node → its facilities as mesh.yaml says them
    # module name → (its listens sorted, its secrets): read once each
    read_by: dict[str, tuple[list[str], list[str]]] = {}
    shapes: dict[str, ModuleShape] = {}  # module name → its shape
    store = registry.instance if registry is not None else None
    renderings: dict[str, InstanceRendering] = {}
    mesh_name = mesh.mesh
    logs = LogsDecl(mesh.logs.driver, mesh.logs.max_size, mesh.logs.max_files)
    macs_get, assigned_get = local.macs.get, assigned.get
    # (what the loop reads of each instance, looked up once: 10,000 instances read them)
    told_get, decls_get, grants_get, allows_get = (consumed.told.get, consumed.decls.get,
                                                   consumed.grants.get, consumed.allows.get)
    openings_get, fqdn_get, providers_get = (local.by_consumer.get, live.fqdn_of.get,
                                             providers.get)
    verifying, with_macs, runtime_names_of = consumed.verifying, local.with_macs, local.names
    kept_get = kept.instances.get if kept is not None else None
    suspects: Optional[AbstractSet[str]] = None
    if kept is not None and kept.read is not None and modules is not None:
        suspects = _suspects(kept.read, kept.modules, module_keys, live, mesh, ledger,
                             registry_address, assigned, own, consumed, providers, local,
                             servers, served, store, modules, moved)
    for name in live.names:
        if suspects is not None and name not in suspects:
            before = kept_get(name) if kept_get is not None else None
            if before is not None:  # every part of its key is what the kept one read
                renderings[name] = before[1]
                made[name] = before
                continue
        inst = live.instances[name]
        node = inst.node
        shape = shapes.get(inst.module)
        if shape is None:
            module = live.modules[name]
            images = artifact_images(module, ledger, registry_address)
            shape = shapes[inst.module] = ModuleShape(module, images.of)
            if keeping:
                module_key = _module_key(module, images)
                known = kept.modules.get(inst.module) if kept is not None else None
                # the kept key object itself when equal: instance keys then compare by identity
                module_keys[inst.module] = known if known == module_key else module_key
        facilities = facilities_of.get(node)
        if facilities is None:
            node_facilities = offered[node] = mesh.nodes[node].facilities
            facilities = facilities_of[node] = _facility_paths(node_facilities)
        at = live.address[node]
        tells: Mapping[str, Told] = told_get(name, TOLD_NOTHING)
        provided = providers_get(name, EMPTY_VEC)
        # the registry, a tool server: their accounts (htpasswd, tokens) are mounted
        auth = name == store or (bool(provided) and (serves_tokens(provided)
                                                     or serves_backup_logins(provided)))
        key: Optional[RenderingKey] = None
        if keeping and not (auth or name in servers or name in verifying or name in served):
            listens, secrets = read_by.get(inst.module) or read_by.setdefault(
                inst.module, _read_by(live.modules[name]))
            runtime_names = runtime_names_of[name][2] if name in with_macs else ()
            key = (inst, module_keys[inst.module], offered[node], at, tells,
                   fqdn_get(name),
                   # (one listen, one container: the most; their tuples made without a loop)
                   (assigned_get((name, listens[0])),) if len(listens) == 1
                   else tuple([assigned_get((name, listen)) for listen in listens]),
                   tuple([own.get((name, secret)) for secret in secrets]) if secrets else (),
                   (macs_get(runtime_names[0]),) if len(runtime_names) == 1
                   else tuple([macs_get(c) for c in runtime_names]),
                   provided, decls_get(name), grants_get(name), allows_get(name),
                   openings_get(name))
            before = kept_get(name) if kept_get is not None else None
            if before is not None and before[0] == key:
                renderings[name] = before[1]
                made[name] = before
                continue
        web = shape.web_listen
        if live.domain is not None or web is not None:  # ${self.url}… (resolver/_names)
            port = assigned.get((name, web)) if web is not None else None
            tells = {**tells, "self": own_names(
                name, live.fqdn_of.get(name), live.domain,
                direct_url(at, port) if port is not None else None,
                mesh.acme.email if mesh.acme is not None else None)}
        containers: list[ContainerDecl] = []
        for each, publishes in shape.layout(inst.parts):
            container = each.container
            refs: set[SecretRef] = set()
            env = each.env_for(name, node, at, tells, own, assigned, refs)
            secret_files = each.files_for(name, node, at, tells, own, assigned, refs)
            ports: list[PublishedPort] = []
            for listen_name, container_port, protocol in publishes:
                host_port = assigned.get((name, listen_name))
                if host_port is not None:
                    ports.append(PublishedPort(at, host_port, container_port, protocol,
                                               listen_name))
            mounts: list[MountDecl] = []
            for mount_kind, source, target, read_only, fixed in each.mounts:
                if fixed is not None:  # an access: the same for every instance
                    mounts.append(fixed)
                elif mount_kind == "state":
                    mounts.append(MountDecl("state", state_host_path(name, source), target,
                                            read_only))
                else:
                    mounts.append(MountDecl("facility", facilities.get(source, source),
                                            target, read_only))
            runtime_name = container_name(mesh_name, name, container.name)
            containers.append(ContainerDecl(
                name=runtime_name, instance=name,
                container=container.name, image=each.image,
                command=container.command, env=FrozenMap(env) if env else EMPTY_FROZEN,
                secrets=pvector(sorted(refs, key=_ref_order)) if refs else EMPTY_VEC,
                ports=pvector(ports), mounts=pvector(mounts), run_once=container.run_once,
                health=each.health(name, assigned),
                labels=FrozenMap({"mesh.mesh": mesh_name, "mesh.instance": name,
                                  "mesh.container": container.name}),
                mac=local.macs.get(runtime_name), logs=logs, secret_files=secret_files))
        # binding files and the CA where the app reads them (resolver/_binding_files.py)
        containers, mounted = mount_files(
            containers, (each.file_mounts for each, _ in shape.layout(inst.parts)), name,
            tells, ledger.ca)
        # TLS (resolver/_tls): a server's certificate, a consumer's CA; the registry's accounts
        containers, files = tls_parts(ledger, name, servers, name in consumed.verifying,
                                      containers, served.get(name, ()))
        files = mounted + [f for f in files if f not in mounted]
        if auth:
            # the registry's htpasswd, a tool server's tokens (resolver/_tool_tokens.py)
            containers = [with_auth(c, name) for c in containers]
        state_dirs = [StateDirDecl(path=state_host_path(name, path), uid=uid, gid=gid,
                                   mode=mode, instance=name, name=dir_name)
                      for dir_name, path, uid, gid, mode in shape.state]
        renderings[name] = InstanceRendering(
            node=node,
            containers=pvector(containers),
            state_dirs=pvector(sorted(state_dirs)),
            accesses=pvector(AccessDecl(path, mode, pvector([name]))
                             for path, mode in shape.accesses),
            providers=provided,
            bindings=consumed.decls.get(name, EMPTY_VEC),
            grants=consumed.grants.get(name, EMPTY_FROZEN),
            allows=consumed.allows.get(name, EMPTY_FROZEN),
            locals=local.by_consumer.get(name, EMPTY_FROZEN),
            exposures=exposures_of(name, inst, live.modules[name], assigned) if inst.expose
            else EMPTY_VEC,
            claims=shape.claims,
            files=pvector(files))
        if key is not None:
            made[name] = (key, renderings[name])
    if not keeping:
        return FrozenMap(renderings), NOTHING_KEPT
    read = _Read(live.instances, mesh.nodes, consumed.decls, live.fqdn_of, assigned, own,
                 local.macs, local.names, providers, local.by_consumer) \
        if modules is not None else None
    return FrozenMap(renderings), Kept(run, FrozenMap(module_keys), FrozenMap(made), read)


def _suspects(read: _Read, kept_modules: Mapping[str, RenderingKey],
              module_keys: dict[str, RenderingKey], live: Live, mesh: Mesh, ledger: Ledger,
              registry_address: Optional[str], assigned: Mapping[tuple[str, str], int],
              own: Mapping[tuple[str, str], SecretRef], consumed: Consumed,
              providers: Mapping[str, PVector[ProviderDecl]], local: LocalOpenings,
              servers: Mapping[str, tuple[str, str]], served: Mapping[str, tuple[str, ...]],
              store: Optional[str], modules: Mapping[str, Module],
              moved_ports: Optional[Moved] = None) -> set[str]:
    """The live instances a part of whose RenderingKey may differ from the one the kept run
    (which read `read`) made: its Instance is another; its module's key (the module, its
    images) or its node is not the one that run read; it is told something and its parts of
    the bindings are not the kept ones (Consumed.same); its DNS name, a host port, an own
    secret's reference, a MAC, its runtime names, what it provides or its local openings
    differ from what that run read; or it is rendered without a key (a TLS server or
    consumer, a name holder, the registry). Every other live instance that run kept has a
    key equal to the kept one. `module_keys` gets the key of each module whose key is the
    kept one (that object). `moved_ports`: the instances whose host ports differ
    from those of a run (ports_moved), when worked out already."""
    suspects: set[str] = set()
    instances = live.instances
    gone: set[str] = set()  # modules whose key is not the kept one
    for module_name, key in kept_modules.items():
        module = modules.get(module_name)
        if module is None:
            gone.add(module_name)
            continue
        images = artifact_images(module, ledger, registry_address)
        if _module_key(module, images) == key:
            module_keys[module_name] = key
        else:
            gone.add(module_name)
    nodes = mesh.nodes
    moved = set() if read.nodes is nodes else {
        n for n, node in read.nodes.items() if nodes.get(n) is not node}
    if gone or moved:
        suspects.update(n for n, i in instances.items() if i.module in gone or i.node in moved)
    if read.instances is not instances:
        was = read.instances
        suspects.update(n for n, i in instances.items() if was.get(n) is not i)
    suspects.update((consumed.decls.keys() | read.consumers.keys()) - consumed.same)
    suspects.update(differing_plain(read.fqdn_of, live.fqdn_of))
    suspects.update(moved_since(read.assigned, assigned, moved_ports))
    suspects.update(k[0] for k in differing(read.own, own))
    macs = differing_plain(read.macs, local.macs)
    if macs:
        suspects.update(n for n, (_, _, runtime) in local.names.items()
                        if not macs.isdisjoint(runtime))
    suspects.update(differing(read.names, local.names, same=True))
    suspects.update(differing(read.providers, providers))
    suspects.update(differing(read.openings, local.by_consumer, same=True))
    suspects.update(servers.keys() | consumed.verifying | served.keys())
    if store is not None:
        suspects.add(store)
    return suspects


def _read_by(module: Module) -> tuple[list[str], list[str]]:
    """What a rendering key reads of `module`: its listens sorted, its secrets."""
    return (sorted(module.listens), list(module.secrets))


def _ref_order(s: SecretRef) -> tuple[str, Optional[int]]:
    return (s.credential, s.generation)  # SecretRef's own order, without building its tuple

def _facility_paths(entries: Iterable[str]) -> dict[str, str]:
    paths = dict(DEFAULT_FACILITY_PATHS)
    for entry in entries:
        name, _, path = entry.partition("=")
        if path:
            paths[name] = path
    return paths
