"""Rendering resolved bindings, ports and logins into one rendering per live instance.

Invariants:
- Every value a consumer is told comes from one place: the provider node's address and the
  host port assigned to the provider's listen; the published port and the firewall intent are
  derived from the same assignment, so the two ends agree by construction.
- Secrets appear only as `${secret:<credential id>}` tokens plus a SecretRef with the
  generation in force; a declaration never holds a value.
- Everything is attributed to one instance: its own containers, state directories,
  accesses and provides; as a consumer, its binding values and, by provider node, its grants
  and firewall allows. _assemble.py puts renderings together into node declarations, so a
  held instance's rendering (the one last written) fits in exactly where a live one would.
- A node's declaration digest is sha256 over the canonical JSON of the declaration without
  serial and digest (declaration_digest).
- What depends on a module alone is read once per module (resolver/_shape.py): each env value
  is compiled there, so filling it per instance only looks up what varies by instance.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import TYPE_CHECKING, Iterable, Mapping, Optional

from pyrsistent import pvector
from pyrsistent.typing import PVector

from ._bound import RESOURCE_KEYS, Bound, binding_record, secret_id, two_slots
from ._placeholders import secret_token
from ._declaration import (
    AccessDecl,
    Binding,
    BindingDecl,
    ContainerDecl,
    FirewallAllow,
    FirewallLocal,
    GrantDecl,
    InstanceRendering,
    MountDecl,
    ProviderDecl,
    PublishedPort,
    Request,
    SecretRef,
    StateDirDecl,
)
from ._artifacts import artifact_key, image_reference
from ._firewall import consumer_container_macs, exposures_of
from ._frozen import EMPTY_FROZEN, FrozenMap
from ._model import EMPTY_VEC, Module
from ._registry_access import MeshRegistry
from ._rotation import grant_view
from ._shape import TOLD_NOTHING, ModuleShape, Told
from ._secrets import secret_ref

if TYPE_CHECKING:  # pragma: no cover
    from ._context import Blocked, Context

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


def registry_containers(r: "Context", store: str,
                        containers: list[ContainerDecl]) -> list[ContainerDecl]:
    """The registry instance's containers with its certificate directory (once issued) and its
    accounts' directory mounted."""
    from ._registry_access import with_auth
    from ._tls import tls_ref, with_tls

    served = r.ledger.tls.get(store) if tls_ref(r.ledger, store) is not None else None
    if served is not None:
        containers = [with_tls(c, store, served.serial) for c in containers]
    return [with_auth(c, store) for c in containers]


def render_instances(r: "Context", blocked: "Blocked", bound: dict[tuple[str, str], Bound],
                     assigned: dict[tuple[str, str], int], logins: dict[str, str],
                     registry: Optional[MeshRegistry]
                     ) -> tuple[dict[str, InstanceRendering], list[Binding], list[Request]]:
    """Every live instance's rendering, the bindings (as the plan lists them, in (consumer,
    requirement) order: the order of `bound`'s keys, which they are rendered in) and the
    credential requests the rendered references need (live: not in `blocked`).
    `registry` is the mesh's own artifact store, when one serves (images come from it).

    Each part of a rendering is frozen as soon as it is whole (a consumer's bindings once its
    last binding is rendered, a rendering once its containers are): a large mesh then never
    holds a second, mutable copy of everything it renders."""
    mesh, instances = r.mesh, r.instances
    images: dict[str, Optional[str]] = {}  # artifact key → its image reference, this call only
    registry_address = registry.address if registry is not None else None
    requests: list[Request] = []  # what the references given out need issued or re-sealed
    # plain dicts for the hot lookups (a pmap lookup costs several times a dict's), and one
    # SecretRef per (credential, generation): references are values, so sharing is invisible
    provisions = dict(r.catalogue.provisions)
    listens_of = {name: dict(module.listens) for name, module in r.catalogue.modules.items()}
    interned: dict[SecretRef, SecretRef] = {}  # (keyed by itself: no key tuple kept for each)
    holder_vectors: dict[tuple[str, ...], PVector[str]] = {}

    def intern(secret: SecretRef) -> SecretRef:
        return interned.setdefault(secret, secret)

    def ref(cred_id: str, holders: set[str], reason: str,
            slot: Optional[str] = None) -> SecretRef:
        secret, needed = secret_ref(r.credentials, cred_id, holders, reason, slot,
                                    vectors=holder_vectors)
        requests.extend(needed)
        return intern(secret)

    def image_of(module: Module, artifact_name: str) -> str:
        # the same for every container of the module's artifact: worked out once per artifact
        key = artifact_key(module.name, artifact_name)
        if key not in images:
            images[key] = image_reference(module.artifacts[artifact_name], r.ledger,
                                          registry_address, key=key)
        image = images[key]
        assert image is not None, key  # check_pinned refused every live instance without one
        return image

    address = {n: node.address for n, node in mesh.nodes.items()}
    live = r.placed(blocked)
    node_of = {name: instances[name].node for name in instances}

    # --- module-own secrets, one credential each, held by the instance's node only
    own_secrets: dict[tuple[str, str], SecretRef] = {}
    for name in live:
        node = node_of[name]
        for own in r.placed_module(name).secrets:
            own_secrets[(name, own)] = ref(secret_id(name, own), {node}, f"secret {own} of {name}")

    # --- binding values, grants and firewall allows: the consumer's, by provider node; the
    # bindings come sorted by (consumer, requirement), so each consumer's are consecutive
    # consumer → requirement → its BindingDecl: the values it is told, the credential its
    # `password` refers to
    told_of: dict[str, dict[str, Told]] = {}
    bindings: list[Binding] = []
    # a consumer's bindings, grants and allows, frozen (kept apart: a tuple of the three would
    # be one more object per consumer for the collector)
    consumed_of: dict[str, PVector[BindingDecl]] = {}
    granted_of: dict[str, FrozenMap[str, PVector[GrantDecl]]] = {}
    allowed_of: dict[str, FrozenMap[str, PVector[FirewallAllow]]] = {}
    sources_of: dict[str, PVector[str]] = {}  # consumer node → the allows' sources
    admin_of: dict[tuple[str, str], Optional[str]] = {}  # (module, provision) → admin secret
    ordered = sorted(bound)
    decls: list[BindingDecl] = []
    told: dict[str, Told] = {}
    grants: defaultdict[str, list[GrantDecl]] = defaultdict(list)
    allows: defaultdict[str, list[FirewallAllow]] = defaultdict(list)
    for index, key in enumerate(ordered):
        b = bound[key]
        req = b.requirement
        provider_node = node_of[b.provider]
        consumer_node = node_of[b.consumer]
        port = assigned[(b.provider, b.listen)]
        values = _Missing(host=address[provider_node], port=str(port))
        secret: Optional[SecretRef] = None
        if b.credential is not None:
            login = logins[b.credential]
            cred = r.credentials.get(b.credential)
            active = cred.active if cred is not None else None
            dual = two_slots(b.kind, active.slot if active is not None else None,
                             active is not None)
            slot = (active.slot if active is not None and active.slot else "a") if dual else None
            secret = ref(b.credential, {provider_node, consumer_node},
                         f"{req.provision} for {b.consumer} from {b.provider}", slot)
            values["user"] = f"{login}_{slot}" if dual else login
            values[RESOURCE_KEYS[b.kind]] = login
            values["password"] = secret_token(b.credential)
            # the provider is told the newest generation (pending, during a rotation) and the
            # one it must still accept; holders stay on `active` until the provider applied
            newest, retiring = grant_view(cred) if cred is not None and active is not None \
                else (None, None)
            grant_secret = intern(SecretRef(b.credential, newest.generation)) if newest \
                else secret
            grant_slot = newest.slot if newest else slot
            assert req.provision is not None  # only a provision grants a login
            provider_module = instances[b.provider].module
            if (provider_module, req.provision) not in admin_of:
                admin_of[(provider_module, req.provision)] = next(
                    (p.admin for p in r.placed_module(b.provider).provides
                     if p.provision == req.provision), None)
            admin_name = admin_of[(provider_module, req.provision)]
            grants[provider_node].append(GrantDecl(
                provision=req.provision, kind=b.kind, provider=b.provider,
                consumer=b.consumer, consumer_node=consumer_node, login=login, resource=login,
                credential=grant_secret, slot=grant_slot,
                retiring=intern(SecretRef(b.credential, retiring.generation))
                if retiring else None,
                retiring_slot=retiring.slot if retiring else None,
                admin=own_secrets.get((b.provider, admin_name)) if admin_name else None))
        template: Optional[str] = None
        if req.provision is not None:
            template = provisions[req.provision].url
        else:
            template = "http://{host}:{port}"
        if template:
            values["url"] = template.format_map(values)
        frozen = FrozenMap(values)
        bindings.append(binding_record(b, consumer_node, provider_node, port, frozen, secret))
        decl = BindingDecl(b.consumer, req.as_, b.provider, req.provision, frozen, secret,
                           b.kind)
        decls.append(decl)
        told[req.as_] = decl  # (what the consumer's env is filled from: no second record)
        if provider_node != consumer_node:
            listen = listens_of[instances[b.provider].module][b.listen]
            allows[provider_node].append(FirewallAllow(
                port, listen.protocol, _one_source(sources_of, address[consumer_node]),
                f"{b.provider}/{b.listen}"))
        if index + 1 == len(ordered) or ordered[index + 1][0] != b.consumer:
            consumed_of[b.consumer] = pvector(sorted(decls, key=_binding_order))
            told_of[b.consumer] = told
            if grants:
                granted_of[b.consumer] = FrozenMap({node: pvector(sorted(g, key=_grant_order))
                                                   for node, g in grants.items()})
            if allows:
                allowed_of[b.consumer] = FrozenMap({node: pvector(a)
                                                   for node, a in allows.items()})
            decls, told, grants, allows = [], {}, defaultdict(list), defaultdict(list)

    # --- what each instance provides, with its provisioner's admin credential
    providers_of: dict[str, PVector[ProviderDecl]] = {}
    for name in live:
        module = r.placed_module(name)
        if not module.provides:
            continue
        provided: list[ProviderDecl] = []
        for provide in module.provides:
            if (name, provide.listen) not in assigned:
                continue
            definition = provisions.get(provide.provision)
            provided.append(ProviderDecl(
                instance=name, provision=provide.provision,
                kind=definition.grant if definition is not None else "none",
                listen=provide.listen, port=assigned[(name, provide.listen)],
                container_port=listens_of[instances[name].module][provide.listen].port,
                admin=own_secrets.get((name, provide.admin)) if provide.admin else None,
                admin_pending=_pending_ref(r, secret_id(name, provide.admin))
                if provide.admin else None))
        if provided:
            providers_of[name] = pvector(sorted(provided, key=_provider_order))

    # --- consumers bound on their own node are let in by their containers' MAC addresses
    runtime_names: dict[tuple[str, str], str] = {}  # (instance, container) → its name

    def name_of(mesh_name: str, instance: str, container: str) -> str:
        found = runtime_names.get((instance, container))
        if found is None:
            found = runtime_names[(instance, container)] = container_name(
                mesh_name, instance, container)
        return found

    mac_of, consumer_macs = consumer_container_macs(r, bound, name_of, node_of)
    macs_of = {name: pvector(macs) for name, macs in consumer_macs.items() if macs}
    locals_of: dict[str, FrozenMap[str, PVector[FirewallLocal]]] = {}
    openings: defaultdict[str, list[FirewallLocal]] = defaultdict(list)
    for index, key in enumerate(ordered):
        b = bound[key]
        provider_node = node_of[b.provider]
        if provider_node == node_of[b.consumer] and b.consumer in macs_of:
            listen = listens_of[instances[b.provider].module][b.listen]
            openings[provider_node].append(FirewallLocal(
                assigned[(b.provider, b.listen)], listen.protocol,
                macs_of[b.consumer], f"{b.provider}/{b.listen}"))
        # (a consumer with no container has nothing to let in)
        if openings and (index + 1 == len(ordered) or ordered[index + 1][0] != b.consumer):
            locals_of[b.consumer] = FrozenMap({node: pvector(o) for node, o in openings.items()})
            openings = defaultdict(list)

    # --- containers, state, accesses, and with them the rendering (what depends on the
    # module alone is read once per module, what depends on the node once per node)
    facilities_of: dict[str, dict[str, str]] = {}
    shapes: dict[str, ModuleShape] = {}
    store = registry.instance if registry is not None else None
    renderings: dict[str, InstanceRendering] = {}
    mesh_name = mesh.mesh
    for name in live:
        inst = instances[name]
        node = inst.node
        shape = shapes.get(inst.module)
        if shape is None:
            shape = shapes[inst.module] = ModuleShape(r.placed_module(name), image_of)
        facilities = facilities_of.get(node)
        if facilities is None:
            facilities = facilities_of[node] = _facility_paths(mesh.nodes[node].facilities)
        at = address[node]
        tells: Mapping[str, Told] = told_of.get(name, TOLD_NOTHING)
        containers: list[ContainerDecl] = []
        for each, publishes in shape.layout(inst.parts):
            container = each.container
            refs: set[SecretRef] = set()
            env = each.env_for(name, node, at, tells, own_secrets, assigned, refs)
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
            runtime_name = name_of(mesh_name, name, container.name)
            containers.append(ContainerDecl(
                name=runtime_name, instance=name,
                container=container.name, image=each.image,
                command=container.command, env=FrozenMap(env) if env else EMPTY_FROZEN,
                secrets=pvector(sorted(refs, key=_ref_order)) if refs else EMPTY_VEC,
                ports=pvector(ports), mounts=pvector(mounts), run_once=container.run_once,
                health=each.health(name, assigned),
                labels=FrozenMap({"mesh.mesh": mesh_name, "mesh.instance": name,
                                  "mesh.container": container.name}),
                mac=mac_of.get(runtime_name)))
        if name == store:  # the mesh's registry: its TLS and accounts, mounted (resolver/_tls)
            containers = registry_containers(r, name, containers)
        state_dirs = [StateDirDecl(path=state_host_path(name, path), uid=uid, gid=gid,
                                   mode=mode, instance=name, name=dir_name)
                      for dir_name, path, uid, gid, mode in shape.state]
        renderings[name] = InstanceRendering(
            node=node,
            containers=pvector(containers),
            state_dirs=pvector(sorted(state_dirs)),
            accesses=pvector(AccessDecl(path, mode, pvector([name]))
                             for path, mode in shape.accesses),
            providers=providers_of.get(name, EMPTY_VEC),
            bindings=consumed_of.get(name, EMPTY_VEC),
            grants=granted_of.get(name, EMPTY_FROZEN),
            allows=allowed_of.get(name, EMPTY_FROZEN),
            locals=locals_of.get(name, EMPTY_FROZEN),
            exposures=exposures_of(r, name, assigned) if inst.expose else EMPTY_VEC,
            claims=shape.claims)
    return renderings, bindings, requests


def _one_source(sources: dict[str, PVector[str]], address: str) -> PVector[str]:
    """The sources vector of an allow from one node's address, one per address."""
    found = sources.get(address)
    if found is None:
        found = sources[address] = pvector([address])
    return found


def _provider_order(p: ProviderDecl) -> tuple[str, str]:
    return (p.instance, p.provision)


def _binding_order(b: BindingDecl) -> tuple[str, str]:
    return (b.consumer, b.requirement)


def _ref_order(s: SecretRef) -> tuple[str, Optional[int]]:
    return (s.credential, s.generation)  # SecretRef's own order, without building its tuple


def _grant_order(g: GrantDecl) -> tuple[str, str, str]:
    return (g.provider, g.consumer, g.provision)


class _Missing(dict[str, str]):
    """Binding values for a url template: a key it does not hold stays as `{key}`."""

    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def _facility_paths(entries: Iterable[str]) -> dict[str, str]:
    paths = dict(DEFAULT_FACILITY_PATHS)
    for entry in entries:
        name, _, path = entry.partition("=")
        if path:
            paths[name] = path
    return paths


def _pending_ref(r: "Context", cred_id: str) -> Optional[SecretRef]:
    """The pending generation of a rotation of `cred_id` in progress, or None."""
    cred = r.credentials.get(cred_id)
    pending = cred.pending if cred is not None else None
    return SecretRef(cred_id, pending.generation) if pending is not None else None
