"""Strategies that generate whole meshes: catalogue, mesh description and a ledger of pins.

References are drawn as indices into what was already drawn, so every generated mesh is valid
by construction (pubgrub's registry strategy); known-bad cases are injected deliberately by
the `bad` strategies, never by accident. The meshes reach every selection rule: instance
overrides, manifest providers, co-location, mesh defaults, sole providers and ambiguity;
parts, optional requirements, fixed ports, claims and a mesh-scoped provision.
"""

from __future__ import annotations

import hashlib

import attrs
from hypothesis import strategies as st
from pyrsistent import pmap, pvector

from resolver import (
    Artifact,
    Catalogue,
    Container,
    Instance,
    Ledger,
    Listen,
    Mesh,
    Module,
    Node,
    Part,
    PortRange,
    Provide,
    Provision,
    Require,
)

PROVISIONS = {
    "sql": Provision(scope="node", grant="database+login",
                     keys=pvector(["host", "port", "database", "user", "password", "url"]),
                     url="postgres://{user}@{host}:{port}/{database}"),
    "queue": Provision(scope="node", grant="vhost+account",
                       keys=pvector(["host", "port", "vhost", "user", "password"])),
    "web": Provision(scope="node", grant="none", keys=pvector(["host", "port", "url"]),
                     url="http://{host}:{port}"),
    "ca": Provision(scope="mesh", grant="none", keys=pvector(["host", "port"])),
}
NODE_NAMES = ["n0", "n1", "n2", "n3", "n4"]
#: Node names that sort among the credential ids ("queue/…", "secret/…", "sql/…") instead of
#: before them all, so an order that compares ids first and kinds second shows.
SPREAD_NODE_NAMES = ["b0", "r1", "sz2", "z3", "zz4"]


def digest_of(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def module_named(name: str, *, provides=(), requires=(), fixed=None, claims=(), parts=(),
                 admin=False):
    """A small, valid module: one artifact, one container, one listen per provision + one.
    admin: its provisions are administered with its own secret `admin`, which its server
    container reads to initialise and a `backup` container uses while it runs."""
    listens = {"main": Listen(port=8000)}
    for provision in provides:
        listens[f"serve-{provision}"] = Listen(port=9000 + len(listens))
    if fixed is not None:
        listens["fixed"] = Listen(port=fixed, fixed=fixed)
    env = {}
    for req in requires:
        env[f"{req.as_.upper()}_HOST"] = "${" + req.as_ + ".host}"
        env[f"{req.as_.upper()}_PORT"] = "${" + req.as_ + ".port}"
        if PROVISIONS.get(req.provision or "", PROVISIONS["web"]).grant != "none":
            env[f"{req.as_.upper()}_PASSWORD"] = "${" + req.as_ + ".password}"
    containers = [Container(name="main", artifact="image", env=pmap(env))]
    if admin:
        env["ADMIN_PASSWORD"] = "${self.admin.password}"
        containers = [Container(name="main", artifact="image", env=pmap(env)),
                      Container(name="backup", artifact="image",
                                env=pmap({"PASSWORD": "${self.admin.password}"}))]
    return Module(
        name=name,
        artifacts=pmap({"image": Artifact(repository=f"example.org/{name}", tag="1")}),
        listens=pmap(listens),
        provides=pvector(Provide(p, f"serve-{p}", admin="admin" if admin else None)
                         for p in provides),
        requires=pvector(requires),
        claims=pvector(claims),
        parts=pmap({p: Part() for p in parts}),
        secrets=pvector(["admin"] if admin else []),
        containers=pvector(containers),
    )


def pins_for(modules) -> dict:
    return {f"{a.repository}:{a.tag}": digest_of(f"{a.repository}:{a.tag}")
            for m in modules for a in m.artifacts.values() if a.repository}


@attrs.frozen
class World:
    """A generated mesh and everything needed to resolve it."""

    catalogue: Catalogue
    mesh: Mesh
    ledger: Ledger


@st.composite
def worlds(draw, *, min_instances=1, max_instances=10, min_nodes=1, max_nodes=4, with_ca=True,
           with_overrides=True, with_claims=True, with_binding=False, names=NODE_NAMES):
    node_count = draw(st.integers(min_nodes, max_nodes))
    nodes = {names[i]: Node(address=f"10.0.0.{i + 1}") for i in range(node_count)}
    node_names = sorted(nodes)

    provider_modules = []
    for provision in ("sql", "queue", "web"):
        for k in range(draw(st.integers(0, 2))):
            provider_modules.append(module_named(f"{provision}-server{k}", provides=[provision]))
    if with_ca and draw(st.booleans()):
        provider_modules.append(module_named("ca-server", provides=["ca"]))

    consumer_modules = []
    for k in range(draw(st.integers(1, 4))):
        wanted = draw(st.lists(st.sampled_from(["sql", "queue", "web", "ca"]), max_size=2,
                               unique=True))
        parts = ["extra"] if draw(st.booleans()) else []
        requires = []
        for j, provision in enumerate(wanted):
            requires.append(Require(as_=f"r{j}", provision=provision,
                                    optional=draw(st.booleans()) and provision == "web",
                                    part="extra" if parts and j == 1 else None))
        fixed = draw(st.sampled_from([None, None, 25, 587])) if with_claims else None
        claims = ["seat"] if with_claims and draw(st.integers(0, 5)) == 0 else []
        consumer_modules.append(module_named(f"app{k}", requires=requires, fixed=fixed,
                                             claims=claims, parts=parts))
    modules = {m.name: m for m in provider_modules + consumer_modules}
    module_names = sorted(modules)

    count = draw(st.integers(min_instances, max_instances))
    instances = {}
    for i in range(count):
        module = modules[draw(st.sampled_from(module_names))]
        node = draw(st.sampled_from(node_names))
        parts = list(module.parts) if module.parts and draw(st.booleans()) else []
        instances[f"{module.name}.{i}@{node}"] = Instance(module=module.name, node=node,
                                                          parts=pvector(parts))
    names = sorted(instances)
    if with_overrides and names:
        for name in names:
            module = modules[instances[name].module]
            bind = {}
            for req in module.requires:
                if draw(st.integers(0, 3)) == 0:
                    target = draw(st.sampled_from(names))
                    if target != name:
                        bind[req.as_] = target
            if bind:
                instances[name] = attrs.evolve(instances[name], bind=pmap(bind))
    defaults = {}
    for provision in ("sql", "queue", "web"):
        providers = [n for n in names if any(p.provision == provision
                                             for p in modules[instances[n].module].provides)]
        if providers and draw(st.booleans()):
            defaults[provision] = draw(st.sampled_from(providers))
    mesh = Mesh(mesh="prop", nodes=pmap(nodes), instances=pmap(instances),
                defaults=pmap(defaults), host_ports=PortRange(first=20000, last=20999))
    catalogue = Catalogue(modules=pmap(modules), provisions=pmap(PROVISIONS))
    world = World(catalogue, mesh, Ledger(pins=pmap(pins_for(modules.values()))))
    if with_binding:  # two bindings that certainly resolve, across nodes when there are two
        first = draw(st.sampled_from(["sql", "queue", "web"]))
        second = "queue" if first == "sql" else "sql"
        client = module_named("bound-client", requires=[Require(as_="dep", provision=first),
                                                          Require(as_="dep2", provision=second)])
        bind = {}
        for as_, provision in (("dep", first), ("dep2", second)):
            server = module_named(f"bound-{provision}", provides=[provision],
                                  admin=provision != "web")
            world = with_instance(world, f"bound-{provision}@{node_names[0]}",
                                  Instance(server.name, node_names[0]), server)
            bind[as_] = f"bound-{provision}@{node_names[0]}"
        world = with_instance(world, f"bound-client@{node_names[-1]}",
                              Instance(client.name, node_names[-1], bind=pmap(bind)), client)
    return world


@st.composite
def selection_worlds(draw):
    """Meshes dense in providers of one provision, reaching every selection rule: overrides
    and manifest providers (valid, unassigned or not providing), recorded bindings (live and
    stale), co-location, mesh defaults, sole providers and ambiguity."""
    node_names = NODE_NAMES[:draw(st.integers(1, 3))]
    nodes = {n: Node(address=f"10.0.0.{i + 1}") for i, n in enumerate(node_names)}
    server = module_named("db", provides=["sql"])
    other = module_named("cache", provides=["queue"])
    providers = [f"db{i}@{draw(st.sampled_from(node_names))}"
                 for i in range(draw(st.integers(0, 4)))]
    names_pool = providers + ["cache0@" + node_names[0], "ghost@nowhere"]
    instances = {p: Instance("db", p.split("@")[1]) for p in providers}
    instances["cache0@" + node_names[0]] = Instance("cache", node_names[0])
    modules = {"db": server, "cache": other}
    recorded = {}
    for i in range(draw(st.integers(1, 5))):
        manifest = draw(st.sampled_from([None, None, None] + names_pool))
        module = module_named(f"app{i}", requires=[Require(as_="db", provision="sql",
                                                            provider=manifest)])
        modules[module.name] = module
        node = draw(st.sampled_from(node_names))
        override = draw(st.sampled_from([None, None, None] + names_pool))
        name = f"app{i}@{node}"
        instances[name] = Instance(module.name, node,
                                   bind=pmap({"db": override} if override else {}))
        if draw(st.booleans()):
            recorded[name] = pmap({"db": draw(st.sampled_from(names_pool + ["gone@x"]))})
    defaults = {}
    if draw(st.booleans()):
        defaults["sql"] = draw(st.sampled_from(names_pool))
    mesh = Mesh(mesh="sel", nodes=pmap(nodes), instances=pmap(instances),
                defaults=pmap(defaults))
    ledger = Ledger(pins=pmap(pins_for(modules.values())), bindings=pmap(recorded))
    return World(Catalogue(pmap(modules), pmap(PROVISIONS)), mesh, ledger)


def with_instance(world: World, name: str, instance: Instance, module: Module = None) -> World:
    catalogue = world.catalogue
    if module is not None:
        catalogue = attrs.evolve(catalogue, modules=catalogue.modules.set(module.name, module))
        world = attrs.evolve(world, ledger=attrs.evolve(
            world.ledger, pins=world.ledger.pins.update(pmap(pins_for([module])))))
    mesh = attrs.evolve(world.mesh, instances=world.mesh.instances.set(name, instance))
    return attrs.evolve(world, catalogue=catalogue, mesh=mesh)


def without_instance(world: World, name: str) -> World:
    mesh = attrs.evolve(world.mesh, instances=world.mesh.instances.remove(name))
    return attrs.evolve(world, mesh=mesh)
