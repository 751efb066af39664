"""What each node's declaration must say, written from DESIGN.md and the manifests alone.

Given the decisions of oracle_mesh.expect (who is live, who serves whom, which host port each
listen has) and the logins of the new ledger (checked on their own by test_mesh_props), this
builds every node's declaration field by field: the containers an instance installs with
their environment filled in from the binding values, published ports, mounts, health and
labels; state directories with owner and mode; accessed paths; what each provider grants;
what each consumer is told; the firewall. The resolver's own value classes are used only as
containers for the expected values, so a field-by-field comparison names what differs.
"""

from __future__ import annotations

import re
from collections import defaultdict

from pyrsistent import pmap, pvector

from resolver import (
    AccessDecl,
    BindingDecl,
    ContainerDecl,
    FirewallAllow,
    FirewallFloor,
    FirewallIntent,
    FirewallLocal,
    GrantDecl,
    HealthDecl,
    MountDecl,
    ProviderDecl,
    FileDecl,
    PublishedPort,
    RegistryLogin,
    Request,
    SecretRef,
    StateDirDecl,
)

from resolver.rendering import assign_macs  # the naming function only: a hash of the name

from .oracle_mesh import credential, floor_conflicts, installed, state_path

RESOURCE = {"database+login": "database", "vhost+account": "vhost", "bucket+key": "bucket",
            "client+secret": "client"}
FACILITY_PATHS = {"docker-socket": "/var/run/docker.sock"}
TOKEN = re.compile(r"\$\$|\$\{([^}]*)\}")
UNSAFE = re.compile(r"[^a-zA-Z0-9_.-]+")


def token(credential_id: str) -> str:
    return "${secret:" + credential_id + "}"


def in_force(cred):
    """(newest, still accepted) generations a provider must hold: during a rotation of a
    two-slot credential both the new and the old; a one-password credential only the newest."""
    if cred is None or cred.active is None:
        return None, None
    if cred.active.slot is not None:
        held = [g for g in (cred.pending, cred.active, cred.retiring) if g is not None]
        return held[0], (held[1] if len(held) > 1 else None)
    return (cred.pending or cred.active), None


class Fill(dict):
    def __missing__(self, key):
        return "{" + key + "}"


def build(world, expected, logins):
    """node → dict of the declaration's fields, and the credential requests expected."""
    mesh, catalogue, ledger = world.mesh, world.catalogue, world.ledger
    modules, instances = catalogue.modules, mesh.instances
    address = {n: node.address for n, node in mesh.nodes.items()}
    everyone = sorted(set(address.values()))
    live = expected.live

    # consumers bound to a provider on their own node are let in by their containers' MACs
    # (DESIGN: same-node traffic arrives on the bridge, not from the node's address)
    def cname(name, container):
        return UNSAFE.sub("-", f"{mesh.mesh}-{name}-{container}")

    same_node = sorted({c for (c, _as), (p, _rule) in expected.bindings.items()
                        if instances[c].node == instances[p].node})
    own_containers = {c: [cname(c, k.name) for k in modules[instances[c].module].containers
                          if installed(k, instances[c])] for c in same_node}
    mac_of = {}
    for node in sorted(mesh.nodes):
        mac_of.update(assign_macs(mesh.mesh, [n for c in same_node if instances[c].node == node
                                              for n in own_containers[c]]))

    def generation(cred_id):
        cred = ledger.credentials.get(cred_id)
        return cred.active.generation if cred is not None and cred.active is not None else None

    requests = set()

    def ask(cred_id, holders, slot=None):
        cred = ledger.credentials.get(cred_id)
        if cred is None or cred.active is None:
            requests.add(("credential", cred_id, tuple(sorted(holders)), slot, "issue"))
            return
        sealed = (cred.pending or cred.active).sealed
        if set(holders) != set(sealed):  # a holder added or gone: the same values re-sealed
            requests.add(("credential", cred_id, tuple(sorted(holders)), cred.active.slot,
                          "reseal"))

    own = {}
    for name in live:
        node = instances[name].node
        for secret in modules[instances[name].module].secrets:
            cred_id = f"secret/{name}/{secret}"
            own[(name, secret)] = SecretRef(cred_id, generation(cred_id))
            ask(cred_id, {node})

    told, kinds, secrets = {}, {}, {}
    fields = defaultdict(lambda: defaultdict(list))
    for (consumer, as_), (provider, _rule) in sorted(expected.bindings.items()):
        req = next(r for r in modules[instances[consumer].module].requires if r.as_ == as_)
        pnode, cnode = instances[provider].node, instances[consumer].node
        listen = expected.listens[(consumer, as_)]
        values = {"host": address[pnode], "port": str(expected.ports[(provider, listen)])}
        kind = catalogue.provisions[req.provision].grant if req.provision else "none"
        secret = None
        if kind != "none":
            cred_id = credential(req.provision, provider, consumer)
            cred = ledger.credentials.get(cred_id)
            active = cred.active if cred is not None else None
            # two logins per credential (PostgreSQL's, the broker's), but a credential issued
            # before its kind had two keeps its one
            dual = kind in ("database+login", "vhost+account") and (
                active is None or active.slot is not None)
            slot = ((active.slot if active is not None and active.slot else "a")
                    if dual else None)
            login = logins[cred_id]
            secret = SecretRef(cred_id, generation(cred_id))
            ask(cred_id, {pnode, cnode}, slot)
            values["user"] = f"{login}_{slot}" if dual else login
            values[RESOURCE[kind]] = login
            values["password"] = token(cred_id)
            newest, retiring = in_force(cred)
            admin = next((p.admin for p in modules[instances[provider].module].provides
                          if p.provision == req.provision), None)
            fields[pnode]["grants"].append(GrantDecl(
                provision=req.provision, kind=kind, provider=provider, consumer=consumer,
                consumer_node=cnode, login=login, resource=login,
                credential=SecretRef(cred_id, newest.generation) if newest else secret,
                slot=newest.slot if newest else slot,
                retiring=SecretRef(cred_id, retiring.generation) if retiring else None,
                retiring_slot=retiring.slot if retiring else None,
                admin=own.get((provider, admin)) if admin else None))
        template = catalogue.provisions[req.provision].url if req.provision else \
            "http://{host}:{port}"
        if template:
            values["url"] = template.format_map(Fill(values))
        told[(consumer, as_)], kinds[(consumer, as_)], secrets[(consumer, as_)] = \
            values, kind, secret
        fields[cnode]["bindings"].append(BindingDecl(
            consumer=consumer, requirement=as_, provider=provider, provision=req.provision,
            values=pmap(values), secret=secret, kind=kind))

    def fill(raw, name, refs):
        inst = instances[name]
        module = modules[inst.module]

        def one(match):
            if match.group(0) == "$$":
                return "$"
            parts = match.group(1).split(".")
            if parts[0] == "self":
                rest = parts[1:]
                if rest == ["address"]:
                    return address[inst.node]
                if rest == ["instance"]:
                    return name
                if rest == ["node"]:
                    return inst.node
                if len(rest) == 2 and rest[1] == "password" and rest[0] in module.secrets:
                    refs.add(own[(name, rest[0])])
                    return token(f"secret/{name}/{rest[0]}")
                if len(rest) == 2 and rest[1] == "port" and (name, rest[0]) in expected.ports:
                    return str(expected.ports[(name, rest[0])])
                return match.group(0)
            key = (name, parts[0])
            if key not in told:
                return ""  # an optional requirement left unbound is told nothing
            if parts[1] == "password" and secrets[key] is not None:
                refs.add(secrets[key])
            return told[key].get(parts[1], "")

        return TOKEN.sub(one, raw)

    registry = mesh_registry(world, expected)
    store = store_node = tls_key = served = None
    if registry is not None:
        store, store_node = registry_instance(world, expected)
        tls_cred = ledger.credentials.get(f"tls/{store}")
        if store in ledger.tls and tls_cred is not None and tls_cred.active is not None:
            served = ledger.tls[store]
            tls_key = SecretRef(f"tls/{store}", tls_cred.active.generation)
    for name in live:
        inst = instances[name]
        module, node = modules[inst.module], inst.node
        facility_paths = dict(FACILITY_PATHS)
        for entry in mesh.nodes[node].facilities:
            key, _, path = entry.partition("=")
            if path:
                facility_paths[key] = path
        runs = [c.name for c in module.containers if not c.run_once and installed(c, inst)]
        for dir_name, state in module.state.items():
            uid, _, gid = state.owner.partition(":")
            fields[node]["state_dirs"].append(StateDirDecl(
                path=state_path(name, state.path), uid=int(uid), gid=int(gid),
                mode=state.mode, instance=name, name=dir_name))
        for container in module.containers:
            if not installed(container, inst):
                continue
            refs = set()
            env = {k: fill(v, name, refs) for k, v in container.env.items()}
            ports = [PublishedPort(address[node], expected.ports[(name, listen_name)],
                                   listen.port, listen.protocol, listen_name)
                     for listen_name, listen in sorted(module.listens.items())
                     if (listen.container or (runs[0] if runs else None)) == container.name]
            mounts = []
            for m in container.mounts:
                if m.state is not None:
                    mounts.append(MountDecl("state", state_path(name, module.state[m.state].path),
                                            m.target, m.read_only))
                elif m.access is not None:
                    access = module.accesses[m.access]
                    mounts.append(MountDecl("access", access.path, m.target,
                                            m.read_only or access.mode == "ro"))
                else:
                    mounts.append(MountDecl("facility", facility_paths.get(m.facility, m.facility),
                                            m.target, m.read_only))
            health = container.health
            if health is None:
                check = None
            elif health.command is not None:
                check = HealthDecl("command", command=health.command, timeout=health.timeout)
            else:
                listen_name = health.tcp or health.http.listen
                check = HealthDecl("tcp" if health.tcp else "http",
                                   port=module.listens[listen_name].port,
                                   host_port=expected.ports.get((name, listen_name)),
                                   path=health.http.path if health.http else "/",
                                   timeout=health.timeout)
            artifact = module.artifacts[container.artifact]
            image = image_of(artifact, module.name, container.artifact, ledger, registry)
            labels = {"mesh.mesh": mesh.mesh, "mesh.instance": name,
                      "mesh.container": container.name}
            if name == store:  # the registry: its TLS directory once issued, its accounts' one
                if served is not None:
                    mounts.append(MountDecl("tls", f"/etc/mesh/tls/{store}", "/etc/mesh/tls",
                                            True))
                    labels["mesh.tls-serial"] = served.serial
                mounts.append(MountDecl("auth", f"/etc/mesh/auth/{store}", "/etc/mesh/auth",
                                        True))
            fields[node]["containers"].append(ContainerDecl(
                name=UNSAFE.sub("-", f"{mesh.mesh}-{name}-{container.name}"), instance=name,
                container=container.name, image=image, command=container.command,
                env=pmap(env), secrets=pvector(sorted(refs)), ports=pvector(ports),
                mounts=pvector(mounts), run_once=container.run_once, health=check,
                labels=pmap(labels),
                mac=mac_of.get(cname(name, container.name))))
        for provide in module.provides:
            definition = catalogue.provisions.get(provide.provision)
            fields[node]["providers"].append(ProviderDecl(
                instance=name, provision=provide.provision,
                kind=definition.grant if definition is not None else "none",
                listen=provide.listen, port=expected.ports[(name, provide.listen)],
                container_port=module.listens[provide.listen].port,
                admin=own.get((name, provide.admin)) if provide.admin else None))

    accessed = defaultdict(dict)
    for name in live:
        inst = instances[name]
        for access in modules[inst.module].accesses.values():
            users, mode = accessed[inst.node].get(access.path, (set(), "ro"))
            accessed[inst.node][access.path] = (users | {name},
                                                "rw" if access.mode == "rw" else mode)

    allowed = defaultdict(lambda: [set(), set(), set()])
    for (consumer, as_), (provider, _rule) in sorted(expected.bindings.items()):
        pnode, cnode = instances[provider].node, instances[consumer].node
        if pnode == cnode:
            continue
        listen_name = expected.listens[(consumer, as_)]
        listen = modules[instances[provider].module].listens[listen_name]
        entry = allowed[(pnode, expected.ports[(provider, listen_name)], listen.protocol)]
        entry[0].add(address[cnode])
        entry[1].add(consumer)
        entry[2].add(f"{provider}/{listen_name}")
    if registry is not None:  # every other node's container runtime pulls from the registry
        for other in sorted(mesh.nodes):
            if other != store_node and address[other] != address[store_node]:
                entry = allowed[(store_node, int(registry.rsplit(":", 1)[1]), "tcp")]
                entry[0].add(address[other])
                entry[1].add(f"{other}'s container runtime")
                entry[2].add(f"{store}/artifact-store")

    # the registry's accounts: a pull account per node, one push account for the control node
    logins_of = {}
    if registry is not None:
        control = next((n for n, d in sorted(mesh.nodes.items()) if d.control), None)
        accounts = [(f"registry-pull/{store}/{n}", n, n, f"node-{n}", "pull", {store_node, n})
                    for n in sorted(mesh.nodes)]
        accounts.append((f"registry-push/{store}/control", "control", control or store_node,
                         "mesh-push", "push", {store_node} | ({control} if control else set())))
        for cred_id, consumer, consumer_node, login, resource, holders in accounts:
            cred = ledger.credentials.get(cred_id)
            active = cred.active if cred is not None else None
            # two htpasswd entries per account (`<login>_a`, `<login>_b`), holders on the active
            # one; an account issued with one slot keeps its one entry
            slot = (active.slot or None) if active is not None else "a"
            ask(cred_id, holders, slot)
            newest, retiring = in_force(cred)
            ref = SecretRef(cred_id, generation(cred_id))
            fields[store_node]["grants"].append(GrantDecl(
                provision="artifact-store", kind="registry+account", provider=store,
                consumer=consumer, consumer_node=consumer_node, login=login, resource=resource,
                credential=SecretRef(cred_id, newest.generation) if newest else ref,
                slot=newest.slot if newest else slot,
                retiring=SecretRef(cred_id, retiring.generation) if retiring else None,
                retiring_slot=retiring.slot if retiring else None))
            if resource == "pull":
                user = f"{login}_{slot}" if slot else login
                logins_of[consumer] = RegistryLogin(registry, user, ref)
        if served is None or tls_reason(world, store, store_node) is not None:
            requests.add(("tls-certificate", store))

    local = defaultdict(lambda: [set(), set(), set()])
    for (consumer, as_), (provider, _rule) in sorted(expected.bindings.items()):
        node = instances[provider].node
        if node != instances[consumer].node or not own_containers.get(consumer):
            continue
        listen_name = expected.listens[(consumer, as_)]
        listen = modules[instances[provider].module].listens[listen_name]
        entry = local[(node, expected.ports[(provider, listen_name)], listen.protocol)]
        entry[0].update(mac_of[n] for n in own_containers[consumer])
        entry[1].add(consumer)
        entry[2].add(f"{provider}/{listen_name}")

    declarations = {}
    broker = mesh.substrate.broker
    refused_floors = floor_conflicts(world)[0]
    for node in sorted(mesh.nodes):
        floors = [FirewallFloor(mesh.nodes[node].ssh_port, "tcp", pvector(), "ssh")]
        if broker in live and instances[broker].node == node:
            provide = next(p for p in modules[instances[broker].module].provides
                           if p.provision == "amqp")
            floors.append(FirewallFloor(expected.ports[(broker, provide.listen)], "tcp",
                                        pvector(everyone), "broker (enrolment)"))
        for i, f in enumerate(mesh.floors):
            if i in refused_floors:
                continue  # a kept host port holds it (floor-conflict)
            floors.append(FirewallFloor(f.port, f.protocol,
                                        pvector(everyone if f.sources == "mesh" else []),
                                        f.reason or f"floor {f.port}/{f.protocol}"))
        allows = [FirewallAllow(port, protocol, pvector(sorted(sources)),
                                f"{', '.join(sorted(what))} for {', '.join(sorted(consumers))}")
                  for (n, port, protocol), (sources, consumers, what) in sorted(allowed.items())
                  if n == node]
        f = fields[node]
        certificate = ledger.certificates.get(node)
        admits_everyone = any(list(floor.sources) == everyone for floor in floors)
        declarations[node] = {
            "address": address[node],
            "containers": f["containers"],
            "state_dirs": sorted(f["state_dirs"], key=lambda d: (d.path, d.instance, d.name)),
            "accesses": [AccessDecl(path, mode, pvector(sorted(users)))
                         for path, (users, mode) in sorted(accessed[node].items())],
            "firewall": FirewallIntent(
                address[node], pvector(allows), pvector(sorted(floors)),
                pvector(everyone if admits_everyone else []),
                local=pvector(FirewallLocal(port, protocol, pvector(sorted(macs)),
                                            f"{', '.join(sorted(what))} for "
                                            f"{', '.join(sorted(consumers))}")
                              for (n, port, protocol), (macs, consumers, what)
                              in sorted(local.items()) if n == node)),
            "grants": sorted(f["grants"], key=lambda g: (g.provider, g.consumer, g.provision)),
            "providers": sorted(f["providers"], key=lambda p: (p.instance, p.provision)),
            "bindings": sorted(f["bindings"], key=lambda b: (b.consumer, b.requirement)),
            "instances": [n for n in live if instances[n].node == node],
            "certificate": certificate.pem if certificate is not None else None,
            "files": sorted(files_of(world, node, registry, store, store_node, served, tls_key)),
            "registry_logins": [logins_of[node]] if node in logins_of else [],
        }
    return declarations, requests


def live_stores(world, expected) -> dict:
    """instance → "address:port" of every live instance providing artifact-store."""
    stores = {}
    for name in expected.live:
        inst = world.mesh.instances[name]
        for provide in world.catalogue.modules[inst.module].provides:
            if provide.provision == "artifact-store":
                port = expected.ports[(name, provide.listen)]
                stores[name] = f"{world.mesh.nodes[inst.node].address}:{port}"
    return stores


def registry_instance(world, expected):
    """(instance, node) of the mesh's own registry: the artifact-store default when it names a
    live store, else the only live store; None when there is none or several and no default."""
    stores = live_stores(world, expected)
    default = world.mesh.defaults.get("artifact-store")
    chosen = default if default in stores else (next(iter(stores)) if len(stores) == 1
                                                 else None)
    return None if chosen is None else (chosen, world.mesh.instances[chosen].node)


def mesh_registry(world, expected):
    """host:port of the mesh's own registry (registry_instance picks it), or None."""
    picked = registry_instance(world, expected)
    return None if picked is None else live_stores(world, expected)[picked[0]]


def tls_reason(world, store, node):
    """Why the registry's server certificate must be issued anew (no `now`: no renewal), or
    None when the one the ledger keeps still fits."""
    certificate = world.ledger.tls.get(store)
    cred = world.ledger.credentials.get(f"tls/{store}")
    if certificate is None or cred is None or cred.active is None:
        return "missing"
    if certificate.address != world.mesh.nodes[node].address:
        return "address"
    if set(cred.active.sealed) != {node}:
        return "moved"
    return None


def files_of(world, node, registry, store, store_node, served, key) -> list:
    """The files a node declares: the trust of the mesh CA for the registry (once the ledger
    has a CA), and on the registry's node its server certificate and key (a secret token)."""
    files = []
    if registry is not None and world.ledger.ca:
        files.append(FileDecl(f"/etc/docker/certs.d/{registry}/ca.crt", world.ledger.ca, "0644",
                              reason=f"the container runtime trusts the mesh CA for {registry}"))
    if served is not None and node == store_node:
        files.append(FileDecl(f"/etc/mesh/tls/{store}/server.crt", served.pem, "0644",
                              reason=f"server certificate of {store}"))
        files.append(FileDecl(f"/etc/mesh/tls/{store}/server.key", token(f"tls/{store}"),
                              "0600", key, reason=f"server key of {store}"))
    return files


def repository_path(repository: str) -> str:
    """The path of a repository inside its registry (docker.io's official images in library/)."""
    first, _, rest = repository.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return rest
    return repository if "/" in repository else f"library/{repository}"


def image_of(artifact, module_name, artifact_name, ledger, registry):
    """An image by digest, from the mesh's registry exactly when it holds that digest."""
    if artifact.repository is not None:
        digest = ledger.pins[f"{artifact.repository}:{artifact.tag}"]
        name = artifact.repository
        mirrored = f"{registry}/{repository_path(artifact.repository)}"
    else:  # a build: held once pushed, whatever `mirror:` says; a local one by its image ID
        name = f"{module_name}/{artifact_name}"
        record = ledger.builds[name]
        if registry is not None and ledger.mirrored.get(record.digest) == registry:
            return f"{registry}/{name}@{record.digest}"
        return record.digest if record.local else f"{name}@{record.digest}"
    held = registry is not None and artifact.mirror and ledger.mirrored.get(digest) == registry
    return f"{mirrored if held else name}@{digest}"


def artifact_state(world, expected) -> str:
    """Self-hosting when the mesh's registry holds every mirrorable image of every module
    assigned in mesh.yaml (refused or not: `mesh mirror` copies what the mesh is to run).
    An image not pinned yet has no digest to hold: it is refused as unpinned, not pending."""
    registry = mesh_registry(world, expected)
    if registry is None:
        return "external"
    assigned = {i.module for i in world.mesh.instances.values()
                if i.module in world.catalogue.modules}
    for module_name in sorted(assigned):
        module = world.catalogue.modules[module_name]
        for artifact in module.artifacts.values():
            if artifact.mirror and artifact.repository:
                digest = world.ledger.pins.get(f"{artifact.repository}:{artifact.tag}")
                if digest is not None and world.ledger.mirrored.get(digest) != registry:
                    return "external"
    return "self-hosting"


def certificate_reasons(world) -> dict:
    """node → why a certificate is to be issued (no `now`: nothing is due for renewal)."""
    reasons = {}
    for node, described in sorted(world.mesh.nodes.items()):
        cert = world.ledger.certificates.get(node)
        if cert is None:
            reasons[node] = "none"
        elif cert.address and cert.address != described.address:
            reasons[node] = "address"
        elif cert.public_key and described.public_key and cert.public_key != described.public_key:
            reasons[node] = "key"
    return reasons


def request_key(request: Request) -> tuple:
    if request.kind in ("certificate", "tls-certificate"):
        return (request.kind, request.id)
    reason = "reseal" if request.reason.startswith("re-seal") else "issue"
    return ("credential", request.id, tuple(request.holders), request.slot, reason)
