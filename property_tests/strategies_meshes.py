"""Whole meshes as operators write them, and ledgers recorded by an earlier life of the mesh.

`meshes()` draws a catalogue of modules shaped like catalogue/ (servers with an admin secret,
state directories, a run-once init step, parts, extra listens served by a second container;
apps with several containers, requirements of every provision and of other modules, optional
and part-gated requirements, manifest `provider:`, module secrets, mounts of all three kinds,
accessed paths, facilities, claims and fixed ports), several providers per provision on
several nodes, mesh defaults and instance overrides, floors and a substrate.

`recorded_ledgers()` writes the ledger independently of resolve(): pins (some missing),
ports (kept, moved to another node, outside the range, colliding, of removed instances),
bindings (live, to a provider that is gone, of a consumer that is gone), logins, credentials
(settled, half-way through a rotation, not sealed to every holder, of consumers that are
gone), certificates (current, of a changed address), node serials (of removed nodes too) and
the mesh registry's record: the digests it holds and its server certificate and key (issued
for its node's address or another, the key sealed to its node or to one it left).

Known-bad cases are injected on purpose (two draws in five carry some of FAULTS), so
that a few hundred draws reach every problem code and every `chosen_by` (test_strategies_reach.py
counts them): unknown module, node, part and provision, a missing facility, two owners of a
state path, an unpinned artifact, an exhausted port range, a second mesh-scoped provider,
claims and fixed ports taken twice or on a floor, providers named that do not exist, do not
provide or run on no known node, ambiguity, and nodes with no key to seal to.
"""

from __future__ import annotations

import base64
import functools

import attrs
from hypothesis import strategies as st
from pyrsistent import pmap, pvector

from resolver import (
    Access,
    Artifact,
    Catalogue,
    Certificate,
    Container,
    Credential,
    Floor,
    Generation,
    Health,
    HttpCheck,
    Instance,
    Ledger,
    Listen,
    Mesh,
    Module,
    Mount,
    Node,
    NodeSerial,
    Part,
    PortAssignment,
    PortRange,
    Provide,
    Provision,
    Require,
    StateDir,
    Substrate,
)

from .strategies import World, digest_of

PROVISIONS = {
    "postgres-database": Provision(
        scope="node", grant="database+login",
        keys=pvector(["host", "port", "database", "user", "password", "url"]),
        url="postgres://{user}@{host}:{port}/{database}"),
    "amqp": Provision(scope="node", grant="vhost+account",
                      keys=pvector(["host", "port", "vhost", "user", "password", "url"]),
                      url="amqp://{user}@{host}:{port}/{vhost}"),
    "s3-bucket": Provision(scope="node", grant="bucket+key",
                           keys=pvector(["host", "port", "bucket", "user", "password", "url"]),
                           url="http://{host}:{port}"),
    "oidc": Provision(scope="node", grant="client+secret",
                      keys=pvector(["host", "port", "client", "password", "url"]),
                      url="http://{host}:{port}/realms/mesh"),
    "mqtt": Provision(scope="node", grant="none", keys=pvector(["host", "port", "url"]),
                      url="mqtt://{host}:{port}"),
    "smtp-relay": Provision(scope="node", grant="none", keys=pvector(["host", "port"])),
    "mesh-ca": Provision(scope="mesh", grant="none", keys=pvector(["host", "port", "url"]),
                         url="http://{host}:{port}/ca"),
    "artifact-store": Provision(scope="node", grant="none", keys=pvector(["host", "port", "url"]),
                                url="http://{host}:{port}"),
}
RESOURCE = {"database+login": "database", "vhost+account": "vhost", "bucket+key": "bucket",
            "client+secret": "client"}
SERVERS = {  # provision → (module name, container port, repository)
    "postgres-database": ("postgres", 5432, "docker.io/library/postgres"),
    "amqp": ("lavinmq", 5672, "docker.io/cloudamqp/lavinmq"),
    "s3-bucket": ("minio", 9000, "docker.io/minio/minio"),
    "oidc": ("keycloak", 8080, "quay.io/keycloak/keycloak"),
    "mqtt": ("mosquitto", 1883, "docker.io/library/eclipse-mosquitto"),
    "smtp-relay": ("postfix", 587, "docker.io/boky/postfix"),
    "mesh-ca": ("control", 8443, "example.org/mesh/control"),
    "artifact-store": ("registry", 5000, "docker.io/library/registry"),
}
AS_NAMES = {"postgres-database": "db", "amqp": "mq", "s3-bucket": "files", "oidc": "sso",
            "mqtt": "events", "smtp-relay": "mail", "mesh-ca": "ca", "artifact-store": "images"}
UNKNOWN_PROVISION = "carrier-pigeon"
NODES = [("anchor", "10.44.0.10"), ("lab", "10.44.0.20"), ("edge", "fd00:44::30"),
         ("attic", "10.44.0.40")]
GONE = ["old-app@anchor", "retired-db@lab", "gone@attic"]
OWNERS = ["999:999", "1000:1001", "0:0", "70:70", "10001:10001"]
MODES = ["0700", "0750", "0755", "0775"]
SHARED_STATE = "/srv/shared/files"
RANGE_FIRST = 20000


@functools.lru_cache(maxsize=None)
def _choices(options: tuple) -> st.SearchStrategy:
    return st.sampled_from(options)


@functools.lru_cache(maxsize=None)
def _ints(low: int, high: int) -> st.SearchStrategy:
    return st.integers(low, high)


def pick(draw, options):
    """One of `options` (strategies are built once per tuple: drawing is the hot path)."""
    return draw(_choices(tuple(options)))


def number(draw, low: int, high: int) -> int:
    return draw(_ints(low, high))


def one_in(draw, n: int) -> bool:
    """True with probability 1/n (before hypothesis' own bias towards small choices)."""
    return draw(_ints(0, n - 1)) == 0


def coin(draw) -> bool:
    return draw(_ints(0, 1)) == 1


def public_key(node: str) -> str:
    return base64.b64encode(node.encode().ljust(32, b"k")[:32]).decode()


def _health(draw, listens: list[str]):
    kind = pick(draw, (["none", "command", "tcp", "http"] if listens else
                                ["none", "command"]))
    timeout = pick(draw, [60, 5, 120])
    if kind == "command":
        return Health(command=pvector(["check", "--quick"]), timeout=timeout)
    if kind == "tcp":
        return Health(tcp=pick(draw, listens), timeout=timeout)
    if kind == "http":
        return Health(http=HttpCheck(pick(draw, listens),
                                     pick(draw, ["/", "/healthz"])), timeout=timeout)
    return None


def _env_for(req: Require) -> dict:
    """What an app asks of a requirement: every key its provision offers (host and port of a
    module)."""
    prefix = req.as_.upper().replace("-", "_")
    if req.module is not None:
        keys = ["host", "port"]
    else:
        definition = PROVISIONS.get(req.provision)
        keys = list(definition.keys) + (["url"] if definition and definition.url else []) \
            if definition else ["host", "port"]
    return {f"{prefix}_{key.upper()}": "${" + req.as_ + "." + key + "}" for key in dict.fromkeys(keys)}


def server_module(draw, name: str, provision: str) -> Module:
    """A provider shaped like catalogue/postgres: an admin secret its grants use, state, an
    init step, sometimes a metrics listen served by a second container and a backups part."""
    _, port, repository = SERVERS[provision]
    grant = PROVISIONS[provision].grant
    mirror = provision != "artifact-store"  # the mesh's registry cannot run from itself
    artifacts = {"server": Artifact(repository=repository, tag=pick(draw, ["1", "2.4"]),
                                    mirror=mirror)}
    listens = {"main": Listen(port=port)}
    secrets = ["admin"] if grant != "none" else []
    containers = []
    parts, requires = {}, []
    if coin(draw):
        containers.append(Container(name="init", artifact="server", run_once=True,
                                    command=pvector(["init", "--once"]),
                                    env=pmap({"ADMIN": "${self.admin.password}"} if secrets
                                             else {})))
    env = {"PORT": "${self.main.port}", "ADDRESS": "${self.address}", "NAME": "${self.instance}",
           "ON": "${self.node}", "LITERAL": "$$HOME"}
    if secrets:
        env["ADMIN_PASSWORD"] = "${self.admin.password}"
    state = {"data": StateDir(path=f"{name}/data", owner=pick(draw, OWNERS),
                              mode=pick(draw, MODES))}
    mounts = [Mount(target="/var/lib/data", state="data")]
    if one_in(draw, 4):  # a socket directory, sometimes at a fixed host path
        path = f"/run/{name}" if one_in(draw, 4) else f"{name}/run"
        state["socket"] = StateDir(path=path, owner=pick(draw, OWNERS))
        mounts.append(Mount(target="/run/sock", state="socket", read_only=coin(draw)))
    server = Container(name="server", artifact="server", env=pmap(env), mounts=pvector(mounts),
                       health=_health(draw, ["main"]))
    containers.append(server)
    if coin(draw):
        listens["metrics"] = Listen(port=9100, container="exporter")
        artifacts["exporter"] = Artifact(repository="docker.io/prom/exporter", tag="0.15",
                                         mirror=mirror)
        containers.append(Container(name="exporter", artifact="exporter",
                                    env=pmap({"TARGET": "127.0.0.1:${self.main.port}"}),
                                    health=_health(draw, ["metrics"])))
    if one_in(draw, 4):
        listens["discovery"] = Listen(port=5353, protocol="udp")
    if provision != "s3-bucket" and one_in(draw, 4):
        parts["backups"] = Part("nightly dumps copied to a bucket")
        requires.append(Require(as_="offsite", provision="s3-bucket", part="backups",
                                optional=coin(draw)))
        containers.append(Container(name="offsite", artifact="server", part="backups",
                                    env=pmap(_env_for(requires[-1])),
                                    mounts=pvector([Mount(target="/backup", state="data",
                                                          read_only=True)])))
    return Module(
        name=name, artifacts=pmap(artifacts), listens=pmap(listens),
        provides=pvector([Provide(provision, "main", admin="admin" if secrets else None)]),
        requires=pvector(requires), secrets=pvector(secrets), state=pmap(state),
        parts=pmap(parts), containers=pvector(containers))


def app_module(draw, name: str, provisions: list[str], apps_before: list[str],
               faults: frozenset) -> Module:
    """An app shaped like catalogue/gitea or act-runner: requirements of provisions and of
    another module, optional and part-gated ones, several containers, every kind of mount."""
    wanted = draw(st.lists(_choices(tuple(provisions)), max_size=3, unique=True))
    requires, parts = [], {}
    for provision in wanted:
        optional = one_in(draw, 5)
        requires.append(Require(as_=AS_NAMES[provision], provision=provision, optional=optional))
    if apps_before and one_in(draw, 4):
        requires.append(Require(as_="upstream", module=pick(draw, apps_before),
                                listen=pick(draw, [None, "http"])))
    if "unknown-provision" in faults:
        requires.append(Require(as_="pigeon", provision=UNKNOWN_PROVISION,
                                optional=coin(draw)))
    extras = one_in(draw, 4)
    if extras:
        parts["extras"] = Part("an optional add-on")
        if coin(draw):
            provision = pick(draw, provisions)
            requires.append(Require(as_="extra", provision=provision, part="extras",
                                    optional=coin(draw)))
    listens = {"http": Listen(port=8080)}
    claims, secrets, facilities = [], [], []
    state, accesses = {}, {}
    fixed = pick(draw, [None] * 16 + [25, 587, 22])
    if fixed is not None:
        listens["smtp"] = Listen(port=fixed, fixed=fixed)
    if one_in(draw, 5):
        claims.append(pick(draw, ["seat", "seat", "gpu0"]))
    if coin(draw):
        secrets.append("session")
    mounts = []
    if number(draw, 0, 3) > 0:
        state["data"] = StateDir(path=f"{name}/data", owner=pick(draw, OWNERS),
                                 mode=pick(draw, MODES))
        mounts.append(Mount(target="/data", state="data"))
    if one_in(draw, 12) or ("shared-state" in faults and one_in(draw, 2)):
        state["shared"] = StateDir(path=SHARED_STATE, owner=pick(draw, OWNERS))
        mounts.append(Mount(target="/shared", state="shared"))
    if one_in(draw, 3):
        accesses["media"] = Access(path="/srv/media", mode=pick(draw, ["ro", "rw"]))
        mounts.append(Mount(target="/media", access="media", read_only=coin(draw)))
    if one_in(draw, 5):
        accesses["downloads"] = Access(path="/srv/downloads", mode="rw")
        mounts.append(Mount(target="/downloads", access="downloads"))
    if one_in(draw, 5):
        facility = pick(draw, ["docker-socket", "docker-socket", "gpu"])
        facilities.append(facility)
        mounts.append(Mount(target="/var/run/docker.sock" if facility == "docker-socket"
                            else "/dev/dri", facility=facility))
    env = {"SELF": "${self.address}:${self.http.port}", "INSTANCE": "${self.instance}",
           "PLAIN": "value with $$ dollar"}
    if secrets:
        env["SESSION_SECRET"] = "${self.session.password}"
    for req in requires:
        if req.part is None:
            env.update(_env_for(req))
    artifacts = {"app": Artifact(repository=f"ghcr.io/example/{name}",
                                 tag=pick(draw, ["1.0", "2"]))}
    containers = []
    if one_in(draw, 3):
        containers.append(Container(name="migrate", artifact="app", run_once=True,
                                    command=pvector(["migrate"]), env=pmap(env)))
    containers.append(Container(name="app", artifact="app", env=pmap(env),
                                mounts=pvector(mounts), health=_health(draw, list(listens))))
    if one_in(draw, 3):
        listens["metrics"] = Listen(port=9100, container="worker")
        artifacts["worker"] = Artifact(repository=f"ghcr.io/example/{name}-worker", tag="1.0")
        containers.append(Container(name="worker", artifact="worker",
                                    command=pvector(["work", "--queue"]), env=pmap(env)))
    if extras:
        extra_env = {}
        for req in requires:
            if req.part == "extras":
                extra_env.update(_env_for(req))
        containers.append(Container(name="extras", artifact="app", part="extras",
                                    env=pmap(extra_env)))
    return Module(name=name, artifacts=pmap(artifacts), listens=pmap(listens),
                  requires=pvector(requires), claims=pvector(claims),
                  secrets=pvector(secrets), state=pmap(state), accesses=pmap(accesses),
                  facilities=pvector(facilities), parts=pmap(parts),
                  containers=pvector(containers))


def pins_of(modules) -> dict:
    return {f"{a.repository}:{a.tag}": digest_of(f"{a.repository}:{a.tag}")
            for m in modules for a in m.artifacts.values() if a.repository}


def providers_of(mesh: Mesh, modules, provision: str) -> list[str]:
    return sorted(n for n, i in mesh.instances.items() if i.module in modules
                  and any(p.provision == provision for p in modules[i.module].provides))


FLOORS = (Floor(port=25, protocol="tcp", sources="any", reason="smtp"),
          Floor(port=9999, protocol="tcp", sources="mesh", reason="metrics"),
          Floor(port=53, protocol="udp", sources="mesh"))
FAULTS = ("unknown-module", "unknown-node", "unknown-part", "unknown-provision", "unpinned",
          "narrow-range", "ghost-default", "ghost-broker", "ghost-provider", "wrong-provider",
          "no-key", "shared-state", "second-ca")


@st.composite
def meshes(draw, *, bad: bool = True, recorded: bool = True, max_nodes: int = 4):
    """A whole mesh: catalogue, mesh.yaml and (with `recorded`, four draws in five) a ledger
    of an earlier life. With `bad`, two draws in five carry some of FAULTS (each in about
    one in four of those); other draws make only the mistakes an operator makes by accident (claims, a facility a node
    lacks, a provision nobody serves, several candidates and no rule)."""
    faulty = bad and number(draw, 0, 4) >= 3  # two draws in five make mistakes on purpose
    faults = frozenset(f for f in FAULTS if faulty and one_in(draw, 4))
    node_count = number(draw, 1, max_nodes)
    chosen_nodes = NODES[:node_count]
    nodes = {}
    for i, (name, address) in enumerate(chosen_nodes):
        facilities = []
        if not one_in(draw, 4):
            facilities.append("docker-socket")
        if coin(draw):
            facilities.append("gpu=/dev/dri")
        keyed = "no-key" not in faults or i > 0
        nodes[name] = Node(address=address, ssh_port=pick(draw, [22, 22, 2222]),
                           facilities=pvector(facilities), control=i == 0,
                           public_key=public_key(name) if keyed else None)
    node_names = [n for n, _ in chosen_nodes]

    modules: dict[str, Module] = {}
    servers: dict[str, list[str]] = {}
    for provision in PROVISIONS:
        base = SERVERS[provision][0]
        count = number(draw, 0, 1 if provision in ("mesh-ca", "smtp-relay", "artifact-store")
                       else 2)
        for k in range(count):
            name = base if k == 0 else f"{base}-alt"
            modules[name] = server_module(draw, name, provision)
            servers.setdefault(provision, []).append(name)
    # --- instances: servers of a kind on one or several nodes, then apps once or twice
    instances: dict[str, Instance] = {}

    def place(module_name: str, low: int, high: int) -> None:
        module, used = modules[module_name], []
        for _ in range(number(draw, low, high)):
            others = [n for n in node_names if n not in used]
            node = pick(draw, others if others and not one_in(draw, 4) else node_names)
            name = f"{module_name}@{node}" if node not in used else f"{module_name}-2@{node}"
            used.append(node)
            parts = [p for p in module.parts if coin(draw)]
            instances[name] = Instance(module=module_name, node=node, parts=pvector(parts))

    for provision in PROVISIONS:
        for module_name in servers.get(provision, ()):
            single = provision == "mesh-ca" and not one_in(draw, 4)
            place(module_name, 0 if one_in(draw, 5) else 1, 1 if single else 2)
    served = sorted({p for p, names in servers.items()
                     if any(instances[i].module in names for i in instances)})
    apps = []
    for k in range(number(draw, 1, 4)):
        name = f"app{k}"
        modules[name] = app_module(draw, name, served if served and not one_in(draw, 12)
                                   else sorted(PROVISIONS), list(apps), faults)
        apps.append(name)
        place(name, 1, 2)
    if "unknown-module" in faults:
        instances["wiki@" + node_names[0]] = Instance(module="wikijs", node=node_names[0])
    lost = None
    if "unknown-node" in faults:  # a provider on a node the mesh does not list
        wanted = sorted({r.provision for a in apps for r in modules[a].requires} & set(servers))
        provision = pick(draw, wanted or sorted(servers) or ["mqtt"])
        module_name = servers.get(provision, [sorted(modules)[0]])[0]
        lost = (provision, f"{module_name}@nowhere")
        instances[lost[1]] = Instance(module=module_name, node="nowhere")
    if "second-ca" in faults:
        if "mesh-ca" not in servers:
            modules["control"] = server_module(draw, "control", "mesh-ca")
            servers["mesh-ca"] = ["control"]
        for node in (node_names[0], node_names[-1]):
            name = f"control@{node}" if f"control@{node}" not in instances else f"control-2@{node}"
            instances[name] = Instance(module="control", node=node)
    if "unknown-part" in faults and instances:
        victim = pick(draw, sorted(instances))
        inst = instances[victim]
        instances[victim] = attrs.evolve(inst, parts=inst.parts.append("nightly"))
    for name in sorted(instances):  # what an operator says of a move: the state was copied
        if one_in(draw, 6):         # from a node (right, wrong or stale), or starts empty
            instances[name] = attrs.evolve(instances[name], state_from=pick(draw, node_names))
        elif one_in(draw, 12):
            instances[name] = attrs.evolve(instances[name], fresh=True)
    names = sorted(instances)

    # --- manifest `provider:` and instance overrides, named once the instances exist
    def target_for(provision, consumer):
        valid = [n for n in names if n != consumer and instances[n].module in modules
                 and any(p.provision == provision for p in modules[instances[n].module].provides)]
        wrong = [n for n in names if n not in valid][:1]
        if "ghost-provider" in faults and coin(draw):
            return "ghost@" + node_names[0]
        if "wrong-provider" in faults and wrong and coin(draw):
            return wrong[0]
        return pick(draw, valid) if valid else None

    for module_name in apps:
        module = modules[module_name]
        changed = []
        for req in module.requires:
            if req.provision in PROVISIONS and one_in(draw, 6):
                target = target_for(req.provision, None)
                if target is not None:
                    req = attrs.evolve(req, provider=target)
            changed.append(req)
        modules[module_name] = attrs.evolve(module, requires=pvector(changed))
    for name in names:
        module = modules.get(instances[name].module)
        if module is None:
            continue
        bind = {}
        for req in module.requires:
            if req.provision in PROVISIONS and one_in(draw, 5):
                target = target_for(req.provision, name)
                if target is not None:
                    bind[req.as_] = target
        if bind:
            instances[name] = attrs.evolve(instances[name], bind=pmap(bind))
    # a fault that names a provider is made at least once, on an app that requires something
    consumers = [(n, r) for n in names if instances[n].module in apps
                 for r in modules[instances[n].module].requires if r.provision in PROVISIONS]
    for fault in ("ghost-provider", "wrong-provider", "unknown-node"):
        if fault not in faults or not consumers:
            continue
        name, req = pick(draw, consumers)
        if fault == "ghost-provider":
            target = "ghost@" + node_names[0]
        elif fault == "unknown-node":
            wanting = [(n, r) for n, r in consumers if lost and r.provision == lost[0]]
            name, req = pick(draw, wanting) if wanting else (name, req)
            target = lost[1] if wanting else None
        else:
            target = next((n for n in names if n != name and instances[n].module in modules
                           and not any(p.provision == req.provision
                                       for p in modules[instances[n].module].provides)), None)
        if target is not None:
            instances[name] = attrs.evolve(instances[name],
                                           bind=instances[name].bind.set(req.as_, target))

    defaults = {}
    for provision in sorted(PROVISIONS):
        providers = [n for n in names if instances[n].module in modules and any(
            p.provision == provision for p in modules[instances[n].module].provides)]
        if "ghost-default" in faults and one_in(draw, 3):
            defaults[provision] = "retired@" + node_names[0]
        elif lost is not None and lost[0] == provision and not one_in(draw, 4):
            defaults[provision] = lost[1]
        elif providers and not one_in(draw, 3):
            defaults[provision] = pick(draw, providers)
    floors = [floor for floor in FLOORS if one_in(draw, 3)]
    substrate = Substrate()
    brokers = [n for n in names if instances[n].module in servers.get("amqp", [])]
    stores = [n for n in names if instances[n].module in servers.get("postgres-database", [])]
    if brokers and not one_in(draw, 4):  # the substrate names its broker more often than not
        substrate = attrs.evolve(substrate, broker=pick(draw, brokers))
    if stores and coin(draw):
        substrate = attrs.evolve(substrate, store=pick(draw, stores))
    if "ghost-broker" in faults:
        substrate = attrs.evolve(substrate, broker="lavinmq@gone")
    size = number(draw, 0, 6) if "narrow-range" in faults else 999
    mesh = Mesh(mesh="home", nodes=pmap(nodes), instances=pmap(instances),
                defaults=pmap(defaults), substrate=substrate, floors=pvector(floors),
                host_ports=PortRange(RANGE_FIRST, RANGE_FIRST + size))
    catalogue = Catalogue(modules=pmap(modules), provisions=pmap(PROVISIONS))
    pins = pins_of(modules.values())
    if "unpinned" in faults:  # an app's image, not pinned yet
        app = modules[pick(draw, apps)]
        pins.pop(pick(draw, sorted(f"{a.repository}:{a.tag}" for a in app.artifacts.values())))
    ledger = Ledger(pins=pmap(pins))
    if recorded and not one_in(draw, 5):
        ledger = draw(recorded_ledgers(catalogue, mesh, ledger))
    return World(catalogue, mesh, ledger)


def credential_ids(catalogue: Catalogue, mesh: Mesh) -> list[tuple[str, str, str, str]]:
    """(credential id, provision, provider, consumer) of every pair that could be bound."""
    found = []
    for consumer, inst in sorted(mesh.instances.items()):
        module = catalogue.modules.get(inst.module)
        if module is None:
            continue
        for req in module.requires:
            definition = catalogue.provisions.get(req.provision or "")
            if definition is None or definition.grant == "none":
                continue
            for provider in providers_of(mesh, catalogue.modules, req.provision):
                if provider != consumer:
                    found.append((f"{req.provision}/{provider}/{consumer}", req.provision,
                                  provider, consumer))
    return found


@st.composite
def generations(draw, holders: list[str], dual: bool, own: bool):
    """A credential's rotation state: settled, pending at the provider, or retiring."""
    gen = number(draw, 1, 4)
    slot = pick(draw, ["a", "b"]) if dual else None
    sealed = {n: f"c2VhbGVk-{n}-{gen}" for n in holders if not one_in(draw, 7)}
    active = Generation(gen, slot, pmap(sealed))
    retired = pvector(range(1, gen - 1)) if gen > 2 else pvector()
    applied = pmap({n: number(draw, max(1, gen - 1), gen) for n in sealed if coin(draw)})
    stage = pick(draw, ["pending", "retiring", "retiring", "settled"] if dual
                 else ["settled", "settled", "pending", "retiring"])
    if stage == "pending" and not own:
        other = ("b" if slot == "a" else "a") if dual else None
        pending = Generation(gen + 1, other, pmap({n: f"c2VhbGVk-{n}-{gen + 1}"
                                                      for n in holders}))
        return Credential(active=active, pending=pending, applied=applied, retired=retired,
                          provider_applied=gen)
    if stage == "retiring" and (dual or own) and gen > 1:
        previous = Generation(gen - 1, ("b" if slot == "a" else "a") if dual else None,
                              pmap(sealed))
        return Credential(active=active, retiring=previous, applied=applied,
                          retired=pvector(range(1, gen - 1)),
                          provider_applied=gen)
    return Credential(active=active, applied=applied, retired=retired,
                      provider_applied=gen)


@st.composite
def recorded_ledgers(draw, catalogue: Catalogue, mesh: Mesh, base: Ledger = Ledger()):
    """A ledger as an earlier life of this mesh could have left it, written without resolve():
    entries for instances that still run, that moved, and that are gone."""
    modules = catalogue.modules
    names = sorted(mesh.instances)
    node_names = sorted(mesh.nodes)
    first, last = mesh.host_ports.first, mesh.host_ports.last
    ports: dict[str, dict] = {}
    used: set = set()
    for name in names + GONE:
        inst = mesh.instances.get(name)
        module = modules.get(inst.module) if inst is not None else None
        listens = sorted(module.listens) if module is not None else ["main"]
        said = inst is not None and inst.state_from is not None  # the operator spoke of a move
        if inst is not None and number(draw, 0, 2) > 0 and not said:
            continue  # a third of the instances that run were recorded before
        entries = {}
        was = pick(draw, node_names) if said and coin(draw) else None  # the whole instance moved
        for listen in listens:
            if module is not None and module.listens[listen].fixed is not None:
                continue
            node = inst.node if inst is not None else pick(draw, node_names)
            if was is not None:
                node = was
            elif one_in(draw, 6):
                node = pick(draw, node_names)  # it moved since
            where = pick(draw, ["in", "in", "in", "in", "out", "again"])
            if where == "out":
                port = pick(draw, [first - 1, 19000, last + 1, 30999, 25, 22, 9999, 587, 25])
            elif where == "again" and used:
                port = pick(draw, sorted(used))
            else:
                port = number(draw, first, max(first, min(last, first + 40)))
            used.add(port)
            entries[listen] = PortAssignment(node, port)
        if entries:
            ports[name] = pmap(entries)

    bindings: dict[str, dict] = {}
    for name in names + GONE[:1]:
        inst = mesh.instances.get(name)
        module = modules.get(inst.module) if inst is not None else None
        requires = list(module.requires) if module is not None else [
            Require(as_="db", provision="postgres-database")]
        recorded = {}
        for req in requires:
            if not coin(draw):
                continue
            if req.provision is not None:
                pool = providers_of(mesh, modules, req.provision)
            else:
                pool = sorted(n for n, i in mesh.instances.items() if i.module == req.module)
            pool = [p for p in pool if p != name] * 2 + ["retired-db@lab"]
            recorded[req.as_] = pick(draw, pool)
        if recorded:
            bindings[name] = pmap(recorded)

    logins, credentials, issued = {}, {}, 0
    pairs = credential_ids(catalogue, mesh)
    pairs += [("postgres-database/retired-db@lab/app0@anchor", "postgres-database",
               "retired-db@lab", "app0@anchor"),
              ("amqp/lavinmq@anchor/old-app@anchor", "amqp", "lavinmq@anchor", "old-app@anchor")]
    recorded_pairs = {f"{p}/{bindings[c][r.as_]}/{c}" for c in bindings if c in mesh.instances
                      and mesh.instances[c].module in modules
                      for r in modules[mesh.instances[c].module].requires
                      if r.as_ in bindings[c] and (p := r.provision) is not None}
    for cred, provision, provider, consumer in pairs:
        if one_in(draw, 3) and cred not in recorded_pairs:
            continue  # a pair the ledger recorded a binding of has its credential more often
        if coin(draw):
            issued += 1  # numbered by a count of its own: a pair drawn twice overwrites
            logins[cred] = f"{consumer.split('@')[0].replace('-', '_')}_{issued:08x}"
        if coin(draw):
            holders = sorted({mesh.instances[n].node for n in (provider, consumer)
                              if n in mesh.instances} or {node_names[0]})
            grant = PROVISIONS[provision].grant  # an account issued single, before accounts
            dual = grant == "database+login" or (grant == "vhost+account" and coin(draw))  # had two
            credentials[cred] = draw(generations(holders, dual, own=False))
    for name in names:
        inst = mesh.instances[name]
        module = modules.get(inst.module)
        for secret in (module.secrets if module is not None else ()):
            if coin(draw):
                credentials[f"secret/{name}/{secret}"] = draw(generations(
                    [inst.node], dual=False, own=True))

    certificates = {}
    for node in node_names:
        if coin(draw):
            address = mesh.nodes[node].address
            if one_in(draw, 5):
                address = "10.99.0.1"  # the node was renumbered since
            certificates[node] = Certificate(
                serial=f"{len(certificates) + 1:04x}", not_before="2025-01-01T00:00:00Z",
                not_after="2027-01-01T00:00:00Z", pem=f"-----BEGIN CERTIFICATE-----\n{node}",
                address=address, public_key=mesh.nodes[node].public_key or "")
    serials = {}
    for node in node_names + ["decommissioned"]:
        if coin(draw):
            serials[node] = NodeSerial(number(draw, 1, 9), digest_of(f"old {node}"))
    mirrored = {}  # digests the mesh's registry (as it was recorded, or a guess) holds
    tls = {}  # the registry's server certificate, when one was issued
    stores = [n for n in names if mesh.instances[n].module in modules and any(
        p.provision == "artifact-store" for p in modules[mesh.instances[n].module].provides)]
    if stores and not one_in(draw, 4):
        store = stores[0]
        node = mesh.instances[store].node
        port = first + 50  # where the registry was recorded (kept however the range changed)
        ports[store] = pmap({**ports.get(store, {}), "main": PortAssignment(node, port)})
        address = f"{mesh.nodes[node].address}:{port}" if node in mesh.nodes else "10.9.9.9:1"
        complete = coin(draw)  # the mesh's registry holds everything (self-hosting), or not
        for digest in sorted(set(base.pins.values())):
            if complete or not one_in(draw, 4):
                mirrored[digest] = address if complete or not one_in(draw, 8) else \
                    "10.44.0.99:5000"
        if coin(draw):  # its server certificate was issued: for its node's address, or another
            served_at = (mesh.nodes[node].address if node in mesh.nodes and not one_in(draw, 5)
                         else "10.99.0.2")
            tls[store] = Certificate(
                serial="0f01", not_before="2025-01-01T00:00:00Z",
                not_after="2027-01-01T00:00:00Z", pem="-----BEGIN CERTIFICATE-----\nserver 0f01",
                address=served_at)
            if not one_in(draw, 4):  # and its key, sealed to the registry's node (or one it left)
                holder = node if node in mesh.nodes and not one_in(draw, 5) else node_names[0]
                credentials[f"tls/{store}"] = draw(generations([holder], dual=False, own=True))
    return attrs.evolve(base, ports=pmap(ports), bindings=pmap(bindings), logins=pmap(logins),
                        credentials=pmap(credentials), certificates=pmap(certificates),
                        nodes=pmap(serials), mirrored=pmap(mirrored), tls=pmap(tls))
