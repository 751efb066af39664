"""Web apps by name (resolver/_names): the rules, held by properties against oracles written
apart from the resolver.

- a certificate per served name: the names certificates are requested for are exactly the
  named instances some ingress routes, each held by the nodes of the ingresses routing it;
- a move keeps the name: with every name's certificate kept in the ledger, moving web apps
  to any nodes requests no certificate and leaves the ingress's certificate files and every
  app's `${self.url}` as they were;
- one instance per name, every name in the domain: the instances mesh.yaml refuses are those
  an oracle reading the document in order refuses (a dotted name outside the domain, a name
  an earlier instance claimed).
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from pyrsistent import pmap, pvector

import resolver
from resolver import (Artifact, Catalogue, Container, Instance, Ledger, Listen, Mesh, Module, Node,
                      Provide, Provision, Require)
from resolver.documents import load_mesh
from resolver.picture import name_records

DOMAIN = "home.arpa"
ROUTE = "http-route"
NODES = ("n1", "n2", "n3")
PROVISIONS = pmap({ROUTE: Provision(keys=pvector(["host", "port", "url", "fqdn"]),
                                    url="http://{host}:{port}")})
WEB = Module(name="web", listens=pmap({"http": Listen(port=8080, http=True)}),
             provides=pvector([Provide(provision=ROUTE, listen="http")]),
             artifacts=pmap({"web": Artifact(repository="example.org/web", tag="1")}),
             containers=pvector([Container(name="app", artifact="web",
                                           env=pmap({"URL": "${self.url}"}))]))
INGRESS = Module(name="ingress", listens=pmap({"https": Listen(port=443, fixed=443, tls=True)}),
                 requires=pvector([Require(as_="routes", provision=ROUTE, each=True)]))
CATALOGUE = Catalogue(modules=pmap({"web": WEB, "ingress": INGRESS}), provisions=PROVISIONS)

PINS = pmap({"example.org/web:1": "sha256:" + "a" * 64})
labels = st.text(alphabet="abc", min_size=1, max_size=2)


@st.composite
def named_meshes(draw):
    """A mesh with one or two ingresses and some web apps, named or not (names distinct)."""
    instances = {}
    # on distinct nodes: two on one node contend for port 443 (a refusal, tested elsewhere)
    placed = draw(st.lists(st.sampled_from(NODES), min_size=1, max_size=2, unique=True))
    for i, node in enumerate(placed):
        instances[f"ingress{i}"] = Instance(module="ingress", node=node)
    taken: set[str] = set()
    for i in range(draw(st.integers(0, 5))):
        name = draw(st.one_of(st.none(), labels))
        if name in taken:
            name = None
        if name is not None:
            taken.add(name)
        instances[f"web{i}"] = Instance(module="web", node=draw(st.sampled_from(NODES)),
                                        name=name)
    return Mesh(mesh="names", domain=DOMAIN, instances=pmap(instances),
                nodes=pmap({n: Node(address=f"10.0.0.{i + 1}") for i, n in enumerate(NODES)}))


def name_requests(resolution: resolver.Resolution) -> dict[str, tuple[str, ...]]:
    return {r.id: tuple(r.holders) for r in resolution.requests
            if r.kind == "tls-certificate" and r.id.startswith("name:")}


def oracle_names(mesh: Mesh) -> dict[str, tuple[str, ...]]:
    """Each named web app's DNS name → the sorted nodes of the ingresses (every ingress takes
    every route)."""
    ingress_nodes = tuple(sorted({i.node for i in mesh.instances.values()
                                  if i.module == "ingress"}))
    return {f"name:{i.name}.{DOMAIN}": ingress_nodes for i in mesh.instances.values()
            if i.module == "web" and i.name is not None}


def kept_ledger(mesh: Mesh) -> Ledger:
    """A ledger holding every served name's certificate, its key sealed to its ingresses."""
    tls, credentials = {}, {}
    for key, nodes in oracle_names(mesh).items():
        tls[key] = resolver.Certificate(serial=key, not_before="2026-01-01T00:00:00Z",
                                        not_after="2036-01-01T00:00:00Z", pem=f"PEM {key}",
                                        address=key[len("name:"):])
        credentials[f"tls/{key}"] = resolver.Credential(active=resolver.Generation(
            generation=1, sealed=pmap({n: "sealed" for n in nodes})))
    for name, instance in mesh.instances.items():
        if instance.module == "ingress":  # its own certificate: an ingress is a TLS server
            tls[name] = resolver.Certificate(serial=name, not_before="2026-01-01T00:00:00Z",
                                             not_after="2036-01-01T00:00:00Z", pem="PEM",
                                             address=mesh.nodes[instance.node].address)
            credentials[f"tls/{name}"] = resolver.Credential(active=resolver.Generation(
                generation=1, sealed=pmap({instance.node: "sealed"})))
    return Ledger(tls=pmap(tls), credentials=pmap(credentials), pins=PINS)


def resolve(mesh: Mesh, ledger: Ledger) -> resolver.Resolution:
    return resolver.resolve(CATALOGUE, mesh, ledger)


@given(named_meshes())
def test_a_certificate_per_served_name_held_by_its_ingresses(mesh):
    resolution = resolve(mesh, Ledger(pins=PINS))
    assert name_requests(resolution) == oracle_names(mesh)
    records = {r.name: r.addresses for r in name_records(mesh, resolution.bindings)}
    for key, nodes in oracle_names(mesh).items():
        assert records[key[len("name:"):]] == tuple(sorted(mesh.nodes[n].address for n in nodes))


@given(named_meshes(), st.lists(st.sampled_from(NODES), min_size=5, max_size=5))
def test_a_move_keeps_the_name_its_url_and_its_certificate(mesh, targets):
    ledger = kept_ledger(mesh)
    before = resolve(mesh, ledger)
    assert name_requests(before) == {}
    moved = dict(mesh.instances)
    for (name, instance), node in zip(sorted(mesh.instances.items()), targets):
        if instance.module == "web":
            moved[name] = Instance(module="web", node=node, name=instance.name)
    after = resolve(Mesh(mesh=mesh.mesh, domain=DOMAIN, nodes=mesh.nodes,
                         instances=pmap(moved)), ledger)
    assert name_requests(after) == {}

    def name_files(resolution: resolver.Resolution) -> set:
        return {(f.path, f.content) for d in resolution.declarations.values()
                for f in d.files if "/names/" in f.path}

    def urls(resolution: resolver.Resolution) -> dict[str, str]:
        return {c.instance: c.env["URL"] for d in resolution.declarations.values()
                for c in d.containers if "URL" in c.env}

    assert name_files(after) == name_files(before)
    ingresses = [i for i in mesh.instances.values() if i.module == "ingress"]
    assert len(name_files(before)) == 2 * len(oracle_names(mesh)) * len(ingresses)
    named = {i for i, inst in mesh.instances.items() if inst.name}
    assert {i: u for i, u in urls(after).items() if i in named} == \
        {i: u for i, u in urls(before).items() if i in named}
    assert all(urls(after)[i] == f"https://{mesh.instances[i].name}.{DOMAIN}"
               for i in named if i in urls(after))
    # an unnamed web app is told where it answers directly: its (new) node's address and the
    # host port its web listen is published on there
    published = {c.instance: f"http://{p.host_ip}:{p.host_port}"
                 for d in after.declarations.values() for c in d.containers
                 for p in c.ports if p.listen == "http"}
    assert all(url == published[i] for i, url in urls(after).items() if i not in named), \
        (urls(after), published)


@st.composite
def written_names(draw):
    """(mesh.yaml text, the instances in document order with their names)."""
    entries = []
    for i in range(draw(st.integers(1, 6))):
        label = draw(labels)
        name = draw(st.sampled_from([label, f"{label}.{DOMAIN}", f"{label}.example.org"]))
        entries.append((f"web{i}", name))
    lines = [f"mesh: names\ndomain: {DOMAIN}\nnodes:\n  n1: {{address: 10.0.0.1}}\ninstances:"]
    for instance, name in entries:
        lines.append(f"  {instance}: {{module: web, node: n1, name: {name}}}")
    return "\n".join(lines) + "\n", entries


def oracle_refused(entries: list[tuple[str, str]]) -> set[str]:
    refused, claimed = set(), set()
    for instance, name in entries:
        full = name if "." in name else f"{name}.{DOMAIN}"
        if not full.endswith("." + DOMAIN) or full in claimed:
            refused.add(instance)
        else:
            claimed.add(full)
    return refused


@given(written_names())
def test_one_instance_per_name_every_name_in_the_domain(case):
    text, entries = case
    lines = text.splitlines()
    expected = oracle_refused(entries)
    try:
        load_mesh(text, "mesh.yaml")
        faulted: set[str] = set()
    except resolver.InputError as error:
        faulted = {lines[f.line - 1].split(":")[0].strip() for f in error.faults}
    assert faulted == expected
