"""Rendering resolved bindings, ports and logins into per-node declarations.

Invariants:
- Every value a consumer is told comes from one place: the provider node's address and the
  host port assigned to the provider's listen; the published port and the firewall intent are
  derived from the same assignment, so the two ends agree by construction.
- Secrets appear only as `${secret:<credential id>}` tokens plus a SecretRef with the
  generation in force; a declaration never holds a value.
- A node's declaration digest is sha256 over the canonical JSON of the declaration without
  serial and digest; the serial increases exactly when that digest changes.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import TYPE_CHECKING

import attrs
from pyrsistent import pmap, pvector

from ._convert import unstructure
from ._declaration import (
    AccessDecl,
    BindingDecl,
    ContainerDecl,
    Declaration,
    FirewallAllow,
    FirewallFloor,
    FirewallIntent,
    GrantDecl,
    HealthDecl,
    MountDecl,
    ProviderDecl,
    PublishedPort,
    SecretRef,
    StateDirDecl,
    secret_token,
)
from ._ledger import NodeSerial
from ._rotation import grant_view

if TYPE_CHECKING:  # pragma: no cover
    from ._resolve import _Resolver

PLACEHOLDER = re.compile(r"\$\$|\$\{([^}]*)\}")
DEFAULT_FACILITY_PATHS = {"docker-socket": "/var/run/docker.sock"}
_NAME_UNSAFE = re.compile(r"[^a-zA-Z0-9_.-]+")


STATE_ROOT = "/var/lib/mesh"


def state_host_path(instance: str, path: str) -> str:
    """Where a state directory lives on its node: a relative path is the instance's own
    (`/var/lib/mesh/<instance>/<path>`, so two instances never collide); an absolute path is
    taken as written, and two owners of it are refused."""
    if path.startswith("/"):
        return path.rstrip("/") or "/"
    return f"{STATE_ROOT}/{instance}/{path.strip('/')}"


def container_name(mesh: str, instance: str, container: str) -> str:
    return _NAME_UNSAFE.sub("-", f"{mesh}-{instance}-{container}")


def declaration_digest(declaration: Declaration) -> str:
    body = unstructure(attrs.evolve(declaration, serial=0, digest=""))
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def render_declarations(r: "_Resolver", bound: dict, assigned: dict, logins: dict):
    from ._resolve import RESOURCE_KEYS, binding_record, secret_id

    mesh, instances = r.mesh, r.instances
    address = {n: node.address for n, node in mesh.nodes.items()}
    live = [n for n in r.placed()]
    live_set = set(live)

    # --- module-own secrets, one credential each, held by the instance's node only
    own_secrets: dict[tuple, SecretRef] = {}
    for name in live:
        node = instances[name].node
        for secret in r.module_of(name).secrets:
            own_secrets[(name, secret)] = r.secret_ref(secret_id(name, secret), {node},
                                                       f"secret {secret} of {name}")

    # --- binding values and grants
    values_of: dict[tuple, dict] = {}
    bindings, grants, binding_decls = [], {}, {}
    for key in sorted(bound):
        b = bound[key]
        provider_node = instances[b.provider].node
        consumer_node = instances[b.consumer].node
        values = {"host": address[provider_node], "port": str(assigned[(b.provider, b.listen)])}
        secret = None
        if b.credential is not None:
            login = logins[b.credential]
            cred = r.credentials.get(b.credential)
            active = cred.active if cred is not None else None
            dual = b.kind == "database+login"
            slot = (active.slot if active is not None and active.slot else "a") if dual else None
            secret = r.secret_ref(b.credential, {provider_node, consumer_node},
                                  f"{b.requirement.provision} for {b.consumer} from {b.provider}",
                                  slot)
            values["user"] = f"{login}_{slot}" if dual else login
            values[RESOURCE_KEYS[b.kind]] = login
            values["password"] = secret_token(b.credential)
            # the provider is told the newest generation (pending, during a rotation) and the
            # one it must still accept; holders stay on `active` until the provider applied
            newest, retiring = grant_view(cred) if active is not None else (None, None)
            grant_secret = SecretRef(b.credential, newest.generation) if newest else secret
            grant_slot = newest.slot if newest else slot
            admin_name = next((p.admin for p in r.module_of(b.provider).provides
                               if p.provision == b.requirement.provision), None)
            grants.setdefault(provider_node, []).append(GrantDecl(
                provision=b.requirement.provision, kind=b.kind, provider=b.provider,
                consumer=b.consumer, consumer_node=consumer_node, login=login, resource=login,
                credential=grant_secret, slot=grant_slot,
                retiring=SecretRef(b.credential, retiring.generation) if retiring else None,
                retiring_slot=retiring.slot if retiring else None,
                admin=own_secrets.get((b.provider, admin_name)) if admin_name else None))
        template = None
        if b.requirement.provision is not None:
            template = r.catalogue.provisions[b.requirement.provision].url
        else:
            template = "http://{host}:{port}"
        if template:
            values["url"] = template.format_map(_Missing(values))
        values_of[key] = values
        bindings.append(binding_record(r, b, values, secret))
        binding_decls.setdefault(consumer_node, []).append(BindingDecl(
            consumer=b.consumer, requirement=b.requirement.as_, provider=b.provider,
            provision=b.requirement.provision, values=pmap(values), secret=secret, kind=b.kind))

    # --- what each instance provides, with its provisioner's admin credential
    providers: dict[str, list] = {}
    for name in live:
        for provide in r.module_of(name).provides:
            if (name, provide.listen) not in assigned:
                continue
            definition = r.catalogue.provisions.get(provide.provision)
            providers.setdefault(instances[name].node, []).append(ProviderDecl(
                instance=name, provision=provide.provision,
                kind=definition.grant if definition is not None else "none",
                listen=provide.listen, port=assigned[(name, provide.listen)],
                container_port=r.module_of(name).listens[provide.listen].port,
                admin=own_secrets.get((name, provide.admin)) if provide.admin else None))

    # --- containers, state, accesses per node
    containers: dict[str, list] = {}
    state_dirs: dict[str, list] = {}
    accesses: dict[str, dict] = {}
    for name in live:
        inst, module = instances[name], r.module_of(name)
        node = inst.node
        facilities = _facility_paths(mesh.nodes[node].facilities)
        long_running = [c.name for c in module.containers if not c.run_once
                        and (c.part is None or c.part in inst.parts)]
        for dir_name, state in sorted(module.state.items()):
            uid, _, gid = state.owner.partition(":")
            state_dirs.setdefault(node, []).append(StateDirDecl(
                path=state_host_path(name, state.path), uid=int(uid), gid=int(gid or uid), mode=state.mode,
                instance=name, name=dir_name))
        for access in module.accesses.values():
            entry = accesses.setdefault(node, {}).setdefault(access.path, [set(), "ro"])
            entry[0].add(name)
            if access.mode == "rw":
                entry[1] = "rw"
        for container in module.containers:
            if container.part is not None and container.part not in inst.parts:
                continue
            env, refs = {}, set()
            for key, raw in sorted(container.env.items()):
                env[key] = _fill(raw, r, name, bound, values_of, own_secrets, assigned, refs)
            ports = []
            for listen_name, listen in sorted(module.listens.items()):
                serves = listen.container or (long_running[0] if long_running else None)
                if serves == container.name and (name, listen_name) in assigned:
                    ports.append(PublishedPort(address[node], assigned[(name, listen_name)],
                                               listen.port, listen.protocol, listen_name))
            mounts = []
            for m in container.mounts:
                if m.state is not None:
                    mounts.append(MountDecl("state", state_host_path(name, module.state[m.state].path), m.target,
                                            m.read_only))
                elif m.access is not None:
                    acc = module.accesses[m.access]
                    mounts.append(MountDecl("access", acc.path, m.target,
                                            m.read_only or acc.mode == "ro"))
                else:
                    mounts.append(MountDecl("facility", facilities.get(m.facility, m.facility),
                                            m.target, m.read_only))
            containers.setdefault(node, []).append(ContainerDecl(
                name=container_name(mesh.mesh, name, container.name), instance=name,
                container=container.name, image=r.image_reference(module, container.artifact),
                command=container.command, env=pmap(env), secrets=pvector(sorted(refs)),
                ports=pvector(ports), mounts=pvector(mounts), run_once=container.run_once,
                health=_health(container.health, module, name, assigned),
                labels=pmap({"mesh.mesh": mesh.mesh, "mesh.instance": name,
                             "mesh.container": container.name})))

    # --- firewall intent
    mesh_sources = sorted({n.address for n in mesh.nodes.values()})
    allow: dict[tuple, dict] = {}
    for key in sorted(bound):
        b = bound[key]
        pnode, cnode = instances[b.provider].node, instances[b.consumer].node
        if pnode == cnode:
            continue
        listen = r.module_of(b.provider).listens[b.listen]
        entry = allow.setdefault((pnode, assigned[(b.provider, b.listen)], listen.protocol),
                                 {"sources": set(), "what": f"{b.provider}/{b.listen}",
                                  "consumers": set()})
        entry["sources"].add(address[cnode])
        entry["consumers"].add(b.consumer)
    broker = mesh.substrate.broker
    allow_by_node: dict[str, list] = {}
    for (pnode, port, proto), e in sorted(allow.items()):
        allow_by_node.setdefault(pnode, []).append(FirewallAllow(
            port, proto, pvector(sorted(e["sources"])),
            f"{e['what']} for {', '.join(sorted(e['consumers']))}"))
    live_by_node: dict[str, list] = {}
    for n in live:
        live_by_node.setdefault(instances[n].node, []).append(n)
    declarations, serials = {}, {}
    for node_name in sorted(mesh.nodes):
        node = mesh.nodes[node_name]
        floors = [FirewallFloor(node.ssh_port, "tcp", pvector(), "ssh")]
        if broker in live_set and instances[broker].node == node_name:
            listen_name = next((p.listen for p in r.module_of(broker).provides
                                if p.provision == "amqp"), None)
            if listen_name and (broker, listen_name) in assigned:
                floors.append(FirewallFloor(assigned[(broker, listen_name)], "tcp",
                                            pvector(mesh_sources), "broker (enrolment)"))
        for f in mesh.floors:
            floors.append(FirewallFloor(f.port, f.protocol,
                                        pvector(mesh_sources if f.sources == "mesh" else []),
                                        f.reason or f"floor {f.port}/{f.protocol}"))
        allows = allow_by_node.get(node_name, [])
        # the mesh's addresses are part of a node's declaration only where a floor admits them
        # all: adding a node must not change the declaration of a node it has nothing to do with
        admits_mesh = any(list(f.sources) == mesh_sources for f in floors if f.sources)
        cert = r.ledger.certificates.get(node_name)
        decl = Declaration(
            mesh=mesh.mesh, node=node_name, address=node.address,
            containers=pvector(containers.get(node_name, [])),
            state_dirs=pvector(sorted(state_dirs.get(node_name, []),
                                      key=lambda d: (d.path, d.instance, d.name))),
            accesses=pvector(AccessDecl(path, mode, pvector(sorted(names)))
                             for path, (names, mode) in sorted(accesses.get(node_name, {}).items())),
            firewall=FirewallIntent(node.address, pvector(allows), pvector(sorted(floors)),
                                    pvector(mesh_sources if admits_mesh else [])),
            grants=pvector(sorted(grants.get(node_name, []),
                                  key=lambda g: (g.provider, g.consumer, g.provision))),
            providers=pvector(sorted(providers.get(node_name, []),
                                     key=lambda p: (p.instance, p.provision))),
            bindings=pvector(sorted(binding_decls.get(node_name, []),
                                    key=lambda b: (b.consumer, b.requirement))),
            instances=pvector(live_by_node.get(node_name, [])),
            certificate=cert.pem if cert is not None else None,
        )
        digest = declaration_digest(decl)
        previous = r.ledger.nodes.get(node_name)
        if previous is not None and previous.digest == digest:
            serial = previous.serial
        else:
            serial = (previous.serial if previous is not None else 0) + 1
        declarations[node_name] = attrs.evolve(decl, serial=serial, digest=digest)
        serials[node_name] = NodeSerial(serial, digest)
    for node_name, previous in r.ledger.nodes.items():
        serials.setdefault(node_name, previous)  # a removed node keeps its last serial
    return pmap(declarations), bindings, pmap(serials)


class _Missing(dict):
    def __missing__(self, key):
        return "{" + key + "}"


def _facility_paths(entries) -> dict:
    paths = dict(DEFAULT_FACILITY_PATHS)
    for entry in entries:
        name, _, path = entry.partition("=")
        if path:
            paths[name] = path
    return paths


def _health(health, module, instance, assigned):
    if health is None:
        return None
    if health.command is not None:
        return HealthDecl("command", command=health.command, timeout=health.timeout)
    listen_name = health.tcp if health.tcp is not None else health.http.listen
    listen = module.listens[listen_name]
    return HealthDecl("tcp" if health.tcp is not None else "http", port=listen.port,
                      host_port=assigned.get((instance, listen_name)),
                      path=health.http.path if health.http is not None else "/",
                      timeout=health.timeout)


def _fill(raw, r, name, bound, values_of, own_secrets, assigned, refs) -> str:
    if "$" not in raw:
        return raw
    inst = r.instances[name]

    def one(match):
        if match.group(0) == "$$":
            return "$"
        parts = match.group(1).split(".")
        if parts[0] == "self":
            if parts[1:] == ["address"]:
                return r.mesh.nodes[inst.node].address
            if parts[1:] == ["instance"]:
                return name
            if parts[1:] == ["node"]:
                return inst.node
            if len(parts) == 3 and parts[2] == "password" and (name, parts[1]) in own_secrets:
                ref = own_secrets[(name, parts[1])]
                refs.add(ref)
                return secret_token(ref.credential)
            if len(parts) == 3 and parts[2] == "port" and (name, parts[1]) in assigned:
                return str(assigned[(name, parts[1])])
            return match.group(0)
        key = (name, parts[0])
        if key not in values_of:  # an optional requirement left unbound: told nothing
            return ""
        value = values_of[key].get(parts[1], "") if len(parts) == 2 else ""
        if parts[1] == "password" and bound[key].credential is not None:
            cred = bound[key].credential
            for ref in _refs_for(r, cred):
                refs.add(ref)
        return value

    return PLACEHOLDER.sub(one, raw)


def _refs_for(r, cred_id):
    cred = r.credentials.get(cred_id)
    active = cred.active if cred is not None else None
    return [SecretRef(cred_id, active.generation if active is not None else None)]
