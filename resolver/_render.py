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
from typing import TYPE_CHECKING, Iterable, Mapping, Optional, TypedDict

from pyrsistent import pmap, pvector

from ._bound import RESOURCE_KEYS, Bound, binding_record, secret_id
from ._placeholders import Body, secret_token, template
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
from ._model import Health, Module
from ._registry_access import MeshRegistry
from ._rotation import grant_view
from ._secrets import secret_ref

if TYPE_CHECKING:  # pragma: no cover
    from ._resolve import _Resolver

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


def registry_containers(r: "_Resolver", store: str,
                        containers: list[ContainerDecl]) -> list[ContainerDecl]:
    """The registry instance's containers with its certificate directory (once issued) and its
    accounts' directory mounted."""
    from ._registry_access import with_auth
    from ._tls import tls_ref, with_tls

    served = r.ledger.tls.get(store) if tls_ref(r.ledger, store) is not None else None
    if served is not None:
        containers = [with_tls(c, store, served.serial) for c in containers]
    return [with_auth(c, store) for c in containers]


class _Parts(TypedDict):
    """What one instance's rendering is gathered from, before it is frozen."""

    containers: list[ContainerDecl]
    state_dirs: list[StateDirDecl]
    accesses: dict[str, str]  # path → mode
    providers: list[ProviderDecl]
    bindings: list[BindingDecl]
    grants: dict[str, list[GrantDecl]]  # provider node → grants
    allows: dict[str, list[FirewallAllow]]  # provider node → allows
    locals: dict[str, list[FirewallLocal]]  # own node → same-node openings


def render_instances(r: "_Resolver", bound: dict[tuple[str, str], Bound],
                     assigned: dict[tuple[str, str], int], logins: dict[str, str],
                     registry: Optional[MeshRegistry]
                     ) -> tuple[dict[str, InstanceRendering], list[Binding], list[Request]]:
    """Every live instance's rendering, the bindings (as the plan lists them) and the
    credential requests the rendered references need.
    `registry` is the mesh's own artifact store, when one serves (images come from it)."""
    mesh, instances = r.mesh, r.instances
    images: dict[str, Optional[str]] = {}  # artifact key → its image reference, this call only
    registry_address = registry.address if registry is not None else None
    requests: list[Request] = []  # what the references given out need issued or re-sealed

    def ref(cred_id: str, holders: set[str], reason: str,
            slot: Optional[str] = None) -> SecretRef:
        secret, needed = secret_ref(r.credentials, cred_id, holders, reason, slot)
        requests.extend(needed)
        return secret

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
    live = r.placed()
    parts: dict[str, _Parts] = {name: {"containers": [], "state_dirs": [], "accesses": {},
                                     "providers": [], "bindings": [], "grants": {},
                                     "allows": {}, "locals": {}} for name in live}

    # --- module-own secrets, one credential each, held by the instance's node only
    own_secrets: dict[tuple[str, str], SecretRef] = {}
    for name in live:
        node = instances[name].node
        for own in r.placed_module(name).secrets:
            own_secrets[(name, own)] = ref(secret_id(name, own), {node}, f"secret {own} of {name}")

    # --- binding values, grants and firewall allows: the consumer's, by provider node
    values_of: dict[tuple[str, str], dict[str, str]] = {}
    bindings: list[Binding] = []
    for key in sorted(bound):
        b = bound[key]
        mine = parts[b.consumer]
        provider_node = instances[b.provider].node
        consumer_node = instances[b.consumer].node
        values = {"host": address[provider_node], "port": str(assigned[(b.provider, b.listen)])}
        secret: Optional[SecretRef] = None
        if b.credential is not None:
            login = logins[b.credential]
            cred = r.credentials.get(b.credential)
            active = cred.active if cred is not None else None
            dual = b.kind == "database+login"
            slot = (active.slot if active is not None and active.slot else "a") if dual else None
            secret = ref(b.credential, {provider_node, consumer_node},
                                  f"{b.requirement.provision} for {b.consumer} from {b.provider}",
                                  slot)
            values["user"] = f"{login}_{slot}" if dual else login
            values[RESOURCE_KEYS[b.kind]] = login
            values["password"] = secret_token(b.credential)
            # the provider is told the newest generation (pending, during a rotation) and the
            # one it must still accept; holders stay on `active` until the provider applied
            newest, retiring = grant_view(cred) if cred is not None and active is not None \
                else (None, None)
            grant_secret = SecretRef(b.credential, newest.generation) if newest else secret
            grant_slot = newest.slot if newest else slot
            admin_name = next((p.admin for p in r.placed_module(b.provider).provides
                               if p.provision == b.requirement.provision), None)
            assert b.requirement.provision is not None  # only a provision grants a login
            mine["grants"].setdefault(provider_node, []).append(GrantDecl(
                provision=b.requirement.provision, kind=b.kind, provider=b.provider,
                consumer=b.consumer, consumer_node=consumer_node, login=login, resource=login,
                credential=grant_secret, slot=grant_slot,
                retiring=SecretRef(b.credential, retiring.generation) if retiring else None,
                retiring_slot=retiring.slot if retiring else None,
                admin=own_secrets.get((b.provider, admin_name)) if admin_name else None))
        template: Optional[str] = None
        if b.requirement.provision is not None:
            template = r.catalogue.provisions[b.requirement.provision].url
        else:
            template = "http://{host}:{port}"
        if template:
            values["url"] = template.format_map(_Missing(values))
        values_of[key] = values
        bindings.append(binding_record(r.mesh.instances, b, values, secret))
        mine["bindings"].append(BindingDecl(
            consumer=b.consumer, requirement=b.requirement.as_, provider=b.provider,
            provision=b.requirement.provision, values=pmap(values), secret=secret, kind=b.kind))
        if provider_node != consumer_node:
            listen = r.placed_module(b.provider).listens[b.listen]
            mine["allows"].setdefault(provider_node, []).append(FirewallAllow(
                assigned[(b.provider, b.listen)], listen.protocol,
                pvector([address[consumer_node]]), f"{b.provider}/{b.listen}"))

    # --- what each instance provides, with its provisioner's admin credential
    for name in live:
        for provide in r.placed_module(name).provides:
            if (name, provide.listen) not in assigned:
                continue
            definition = r.catalogue.provisions.get(provide.provision)
            parts[name]["providers"].append(ProviderDecl(
                instance=name, provision=provide.provision,
                kind=definition.grant if definition is not None else "none",
                listen=provide.listen, port=assigned[(name, provide.listen)],
                container_port=r.placed_module(name).listens[provide.listen].port,
                admin=own_secrets.get((name, provide.admin)) if provide.admin else None,
                admin_pending=_pending_ref(r, secret_id(name, provide.admin))
                if provide.admin else None))

    # --- consumers bound on their own node are let in by their containers' MAC addresses
    mac_of, consumer_macs = consumer_container_macs(r, bound, container_name)
    for key in sorted(bound):
        b = bound[key]
        provider_node = instances[b.provider].node
        if provider_node != instances[b.consumer].node or not consumer_macs.get(b.consumer):
            continue  # a consumer with no container has nothing to let in
        listen = r.placed_module(b.provider).listens[b.listen]
        parts[b.consumer]["locals"].setdefault(provider_node, []).append(FirewallLocal(
            assigned[(b.provider, b.listen)], listen.protocol,
            pvector(consumer_macs[b.consumer]), f"{b.provider}/{b.listen}"))

    # --- containers, state, accesses
    for name in live:
        inst, module, mine = instances[name], r.placed_module(name), parts[name]
        node = inst.node
        facilities = _facility_paths(mesh.nodes[node].facilities)
        long_running = [c.name for c in module.containers if not c.run_once
                        and (c.part is None or c.part in inst.parts)]
        for dir_name, state in sorted(module.state.items()):
            uid, _, gid = state.owner.partition(":")
            mine["state_dirs"].append(StateDirDecl(
                path=state_host_path(name, state.path), uid=int(uid), gid=int(gid or uid),
                mode=state.mode, instance=name, name=dir_name))
        for access in module.accesses.values():
            if mine["accesses"].get(access.path) != "rw":
                mine["accesses"][access.path] = access.mode
        for container in module.containers:
            if container.part is not None and container.part not in inst.parts:
                continue
            env: dict[str, str] = {}
            refs: set[SecretRef] = set()
            for env_key, raw in sorted(container.env.items()):
                env[env_key] = _fill(raw, r, name, bound, values_of, own_secrets, assigned, refs)
            ports: list[PublishedPort] = []
            for listen_name, listen in sorted(module.listens.items()):
                serves = listen.container or (long_running[0] if long_running else None)
                if serves == container.name and (name, listen_name) in assigned:
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
            mine["containers"].append(ContainerDecl(
                name=container_name(mesh.mesh, name, container.name), instance=name,
                container=container.name, image=image_of(module, container.artifact),
                command=container.command, env=pmap(env), secrets=pvector(sorted(refs)),
                ports=pvector(ports), mounts=pvector(mounts), run_once=container.run_once,
                health=_health(container.health, module, name, assigned),
                labels=pmap({"mesh.mesh": mesh.mesh, "mesh.instance": name,
                             "mesh.container": container.name}),
                mac=mac_of.get(container_name(mesh.mesh, name, container.name))))

    renderings: dict[str, InstanceRendering] = {}
    store = registry.instance if registry is not None else None
    for name in live:
        mine = parts[name]
        if name == store:  # the mesh's registry: its TLS and accounts, mounted (resolver/_tls)
            mine["containers"] = registry_containers(r, name, mine["containers"])
        renderings[name] = InstanceRendering(
            node=instances[name].node,
            containers=pvector(mine["containers"]),
            state_dirs=pvector(sorted(mine["state_dirs"])),
            accesses=pvector(AccessDecl(path, mode, pvector([name]))
                             for path, mode in sorted(mine["accesses"].items())),
            providers=pvector(sorted(mine["providers"], key=lambda p: (p.instance, p.provision))),
            bindings=pvector(sorted(mine["bindings"], key=lambda b: (b.consumer, b.requirement))),
            grants=pmap({node: pvector(sorted(g, key=lambda g: (g.provider, g.consumer,
                                                                 g.provision)))
                         for node, g in mine["grants"].items()}),
            allows=pmap({node: pvector(a) for node, a in mine["allows"].items()}),
            locals=pmap({node: pvector(a) for node, a in mine["locals"].items()}),
            exposures=exposures_of(r, name, assigned),
            claims=pvector(sorted(set(r.placed_module(name).claims))))
    return renderings, bindings, requests


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


def _fill(raw: str, r: "_Resolver", name: str, bound: Mapping[tuple[str, str], Bound],
          values_of: Mapping[tuple[str, str], Mapping[str, str]],
          own_secrets: Mapping[tuple[str, str], SecretRef],
          assigned: Mapping[tuple[str, str], int], refs: set[SecretRef]) -> str:
    if "$" not in raw:
        return raw
    inst = r.instances[name]

    def one(parts: Body) -> str:
        if parts[0] == "self":
            if parts[1:] == ("address",):
                return r.mesh.nodes[inst.node].address
            if parts[1:] == ("instance",):
                return name
            if parts[1:] == ("node",):
                return inst.node
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
            for ref in _refs_for(r, cred):
                refs.add(ref)
        return value

    return "".join(part if isinstance(part, str) else one(part) for part in template(raw))


def _pending_ref(r: "_Resolver", cred_id: str) -> Optional[SecretRef]:
    """The pending generation of a rotation of `cred_id` in progress, or None."""
    cred = r.credentials.get(cred_id)
    pending = cred.pending if cred is not None else None
    return SecretRef(cred_id, pending.generation) if pending is not None else None


def _refs_for(r: "_Resolver", cred_id: str) -> list[SecretRef]:
    """The reference holders of `cred_id` are given: its active generation (None: pending)."""
    cred = r.credentials.get(cred_id)
    active = cred.active if cred is not None else None
    return [SecretRef(cred_id, active.generation if active is not None else None)]
