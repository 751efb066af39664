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
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Callable, Iterable, Mapping, Optional

from pyrsistent import pvector
from pyrsistent.typing import PVector

from ._bound import RESOURCE_KEYS, Bound, binding_record, secret_id
from ._placeholders import Body, Template, secret_token, template
from ._declaration import (
    AccessDecl,
    Binding,
    BindingDecl,
    ContainerDecl,
    FirewallAllow,
    FirewallLocal,
    GrantDecl,
    HealthDecl,
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
from ._model import Health, Module
from ._registry_access import MeshRegistry
from ._rotation import grant_view
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
    """Every live instance's rendering, the bindings (as the plan lists them) and the
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
    interned: dict[tuple[str, Optional[int]], SecretRef] = {}
    holder_vectors: dict[tuple[str, ...], PVector[str]] = {}

    def intern(secret: SecretRef) -> SecretRef:
        return interned.setdefault((secret.credential, secret.generation), secret)

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
    values_of: dict[tuple[str, str], dict[str, str]] = {}
    env_refs: dict[str, SecretRef] = {}  # credential → what a holder's env refers to
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
    grants: dict[str, list[GrantDecl]] = {}
    allows: dict[str, list[FirewallAllow]] = {}
    for index, key in enumerate(ordered):
        b = bound[key]
        req = b.requirement
        provider_node = node_of[b.provider]
        consumer_node = node_of[b.consumer]
        port = assigned[(b.provider, b.listen)]
        values = {"host": address[provider_node], "port": str(port)}
        secret: Optional[SecretRef] = None
        if b.credential is not None:
            login = logins[b.credential]
            cred = r.credentials.get(b.credential)
            active = cred.active if cred is not None else None
            dual = b.kind == "database+login"
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
            grants.setdefault(provider_node, []).append(GrantDecl(
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
            values["url"] = template.format_map(_Missing(values))
        values_of[key] = values
        bindings.append(binding_record(instances, b, values, secret))
        decls.append(BindingDecl(
            consumer=b.consumer, requirement=req.as_, provider=b.provider,
            provision=req.provision, values=FrozenMap(values), secret=secret, kind=b.kind))
        if provider_node != consumer_node:
            listen = listens_of[instances[b.provider].module][b.listen]
            allows.setdefault(provider_node, []).append(FirewallAllow(
                port, listen.protocol, _one_source(sources_of, address[consumer_node]),
                f"{b.provider}/{b.listen}"))
        if index + 1 == len(ordered) or ordered[index + 1][0] != b.consumer:
            consumed_of[b.consumer] = pvector(sorted(decls, key=_binding_order))
            if grants:
                granted_of[b.consumer] = FrozenMap({node: pvector(sorted(g, key=_grant_order))
                                                   for node, g in grants.items()})
            if allows:
                allowed_of[b.consumer] = FrozenMap({node: pvector(a)
                                                   for node, a in allows.items()})
            decls, grants, allows = [], {}, {}

    # --- what each instance provides, with its provisioner's admin credential
    providers_of: dict[str, PVector[ProviderDecl]] = {}
    for name in live:
        module = r.placed_module(name)
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
    mac_of, consumer_macs = consumer_container_macs(r, bound, container_name)
    macs_of = {name: pvector(macs) for name, macs in consumer_macs.items() if macs}
    locals_of: dict[str, FrozenMap[str, PVector[FirewallLocal]]] = {}
    openings: dict[str, list[FirewallLocal]] = {}
    for index, key in enumerate(ordered):
        b = bound[key]
        provider_node = node_of[b.provider]
        if provider_node == node_of[b.consumer] and b.consumer in macs_of:
            listen = listens_of[instances[b.provider].module][b.listen]
            openings.setdefault(provider_node, []).append(FirewallLocal(
                assigned[(b.provider, b.listen)], listen.protocol,
                macs_of[b.consumer], f"{b.provider}/{b.listen}"))
        # (a consumer with no container has nothing to let in)
        if openings and (index + 1 == len(ordered) or ordered[index + 1][0] != b.consumer):
            locals_of[b.consumer] = FrozenMap({node: pvector(o) for node, o in openings.items()})
            openings = {}

    # --- containers, state, accesses, and with them the rendering (what depends on the
    # module alone is read once per module, what depends on the node once per node)
    facilities_of: dict[str, dict[str, str]] = {}
    shapes: dict[str, _ModuleShape] = {}
    store = registry.instance if registry is not None else None
    renderings: dict[str, InstanceRendering] = {}
    for name in live:
        inst, module = instances[name], r.placed_module(name)
        node = inst.node
        shape = shapes.get(inst.module)
        if shape is None:
            shape = shapes[inst.module] = _ModuleShape(module)
        facilities = facilities_of.get(node)
        if facilities is None:
            facilities = facilities_of[node] = _facility_paths(mesh.nodes[node].facilities)
        serving = shape.serving(inst.parts)
        state_dirs: list[StateDirDecl] = []
        for dir_name, state in shape.state:
            uid, _, gid = state.owner.partition(":")
            state_dirs.append(StateDirDecl(
                path=state_host_path(name, state.path), uid=int(uid), gid=int(gid or uid),
                mode=state.mode, instance=name, name=dir_name))
        accesses: dict[str, str] = {}  # path → mode
        for access in module.accesses.values():
            if accesses.get(access.path) != "rw":
                accesses[access.path] = access.mode
        fill = _filler(r, name, node, bound, values_of, own_secrets, assigned, env_refs,
                       intern)
        containers: list[ContainerDecl] = []
        for container, env_templates in shape.containers:
            if container.part is not None and container.part not in inst.parts:
                continue
            env: dict[str, str] = {}
            refs: set[SecretRef] = set()
            for env_key, raw, parsed in env_templates:
                env[env_key] = raw if parsed is None else fill(parsed, refs)
            ports: list[PublishedPort] = []
            for listen_name, listen in shape.listens:
                if serving.get(listen_name) == container.name \
                        and (name, listen_name) in assigned:
                    ports.append(PublishedPort(address[node], assigned[(name, listen_name)],
                                               listen.port, listen.protocol, listen_name))
            mounts: list[MountDecl] = []
            for m in container.mounts:
                if m.state is not None:
                    mounts.append(MountDecl("state", state_host_path(name, module.state[m.state].path), m.target,
                                            m.read_only))
                elif m.access is not None:
                    acc = module.accesses[m.access]
                    mounts.append(MountDecl("access", acc.path, m.target,
                                            m.read_only or acc.mode == "ro"))
                else:
                    assert m.facility is not None, m  # validated: a mount names one source
                    mounts.append(MountDecl("facility", facilities.get(m.facility, m.facility),
                                            m.target, m.read_only))
            runtime_name = container_name(mesh.mesh, name, container.name)
            containers.append(ContainerDecl(
                name=runtime_name, instance=name,
                container=container.name, image=image_of(module, container.artifact),
                command=container.command, env=FrozenMap(env), secrets=pvector(sorted(refs)),
                ports=pvector(ports), mounts=pvector(mounts), run_once=container.run_once,
                health=_health(container.health, module, name, assigned),
                labels=FrozenMap({"mesh.mesh": mesh.mesh, "mesh.instance": name,
                                 "mesh.container": container.name}),
                mac=mac_of.get(runtime_name)))
        if name == store:  # the mesh's registry: its TLS and accounts, mounted (resolver/_tls)
            containers = registry_containers(r, name, containers)
        renderings[name] = InstanceRendering(
            node=node,
            containers=pvector(containers),
            state_dirs=pvector(sorted(state_dirs)),
            accesses=pvector(AccessDecl(path, mode, pvector([name]))
                             for path, mode in sorted(accesses.items())),
            providers=providers_of.get(name, pvector()),
            bindings=consumed_of.get(name, pvector()),
            grants=granted_of.get(name, EMPTY_FROZEN),
            allows=allowed_of.get(name, EMPTY_FROZEN),
            locals=locals_of.get(name, EMPTY_FROZEN),
            exposures=exposures_of(r, name, assigned) if inst.expose else pvector(),
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


def _grant_order(g: GrantDecl) -> tuple[str, str, str]:
    return (g.provider, g.consumer, g.provision)


class _ModuleShape:
    """What rendering reads of a module that is the same for each of its instances: its
    state directories and listens in order, each container with its env read (key, text, and
    the placeholders parsed, None when the text has none), and its claims."""

    def __init__(self, module: Module) -> None:
        self.module = module
        self.state = sorted(module.state.items())
        self.listens = sorted(module.listens.items())
        self.containers = [
            (container, [(key, raw, template(raw) if "$" in raw else None)
                         for key, raw in sorted(container.env.items())])
            for container in module.containers]
        self.claims: PVector[str] = pvector(sorted(set(module.claims)))
        self._serving: dict[frozenset[str], dict[str, Optional[str]]] = {}

    def serving(self, parts: Iterable[str]) -> dict[str, Optional[str]]:
        """listen → the container that publishes it, for an instance with `parts` switched on:
        the listen's own `container`, else the first long-running container."""
        key = frozenset(parts)
        found = self._serving.get(key)
        if found is None:
            long_running = [c.name for c in self.module.containers if not c.run_once
                            and (c.part is None or c.part in key)]
            found = self._serving[key] = {
                name: listen.container or (long_running[0] if long_running else None)
                for name, listen in self.listens}
        return found


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


def _health(health: Optional[Health], module: Module, instance: str,
            assigned: Mapping[tuple[str, str], int]) -> Optional[HealthDecl]:
    if health is None:
        return None
    if health.command is not None:
        return HealthDecl("command", command=health.command, timeout=health.timeout)
    if health.tcp is not None:
        listen_name = health.tcp
    else:
        assert health.http is not None, health  # validated: exactly one check
        listen_name = health.http.listen
    listen = module.listens[listen_name]
    return HealthDecl("tcp" if health.tcp is not None else "http", port=listen.port,
                      host_port=assigned.get((instance, listen_name)),
                      path=health.http.path if health.http is not None else "/",
                      timeout=health.timeout)


def _filler(r: "Context", name: str, node: str, bound: Mapping[tuple[str, str], Bound],
            values_of: Mapping[tuple[str, str], Mapping[str, str]],
            own_secrets: Mapping[tuple[str, str], SecretRef],
            assigned: Mapping[tuple[str, str], int],
            env_refs: dict[str, SecretRef],
            intern: Callable[[SecretRef], SecretRef]) -> Callable[[Template, set[SecretRef]], str]:
    """How instance `name` (on `node`) fills a parsed env value: each placeholder replaced by
    what it names, every credential the value refers to added to `refs`."""

    def one(parts: Body, refs: set[SecretRef]) -> str:
        if parts[0] == "self":
            if parts[1:] == ("address",):
                return r.mesh.nodes[node].address
            if parts[1:] == ("instance",):
                return name
            if parts[1:] == ("node",):
                return node
            if len(parts) == 3 and parts[2] == "password" and (name, parts[1]) in own_secrets:
                ref = own_secrets[(name, parts[1])]
                refs.add(ref)
                return secret_token(ref.credential)
            if len(parts) == 3 and parts[2] == "port" and (name, parts[1]) in assigned:
                return str(assigned[(name, parts[1])])
            return "${" + ".".join(parts) + "}"
        key = (name, parts[0])
        if key not in values_of:  # an optional requirement left unbound: told nothing
            return ""
        value = values_of[key].get(parts[1], "") if len(parts) == 2 else ""
        cred = bound[key].credential
        if parts[1] == "password" and cred is not None:
            held = env_refs.get(cred)
            if held is None:
                held = env_refs[cred] = intern(_ref_for(r, cred))
            refs.add(held)
        return value

    def fill(parsed: Template, refs: set[SecretRef]) -> str:
        return "".join(part if isinstance(part, str) else one(part, refs) for part in parsed)

    return fill


def _pending_ref(r: "Context", cred_id: str) -> Optional[SecretRef]:
    """The pending generation of a rotation of `cred_id` in progress, or None."""
    cred = r.credentials.get(cred_id)
    pending = cred.pending if cred is not None else None
    return SecretRef(cred_id, pending.generation) if pending is not None else None


def _ref_for(r: "Context", cred_id: str) -> SecretRef:
    """The reference holders of `cred_id` are given: its active generation (None: pending)."""
    cred = r.credentials.get(cred_id)
    active = cred.active if cred is not None else None
    return SecretRef(cred_id, active.generation if active is not None else None)
