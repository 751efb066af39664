"""The `prometheus-file-sd` binding file against its documented rule, written out plainly.

A monitor taking every provider of a provision (`each: true`) mounts its binding in the
format Prometheus's file-based discovery reads. Whatever the providers and wherever they run:

- the file is a JSON list with exactly one target group per entry of the binding, in the
  binding's order; each group's `targets` is that provider's `host:port` (one target), its
  `mesh_instance` label the provider instance, and its `__scheme__` and `__metrics_path__`
  the scheme and the path (query left out) of the url the provision's template makes;
- the file holds no secret: no `${secret:…}` token, no SecretRef (file or container), even
  when the provision grants each binding a credential.
"""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st
from pyrsistent import pmap, pvector

import resolver
from resolver import (Artifact, Catalogue, Container, Instance, Ledger, Listen, Mesh, Module,
                      Mount, Node, Provide, Provision, Require)

METRICS = "metrics"
NODES = ("n1", "n2", "n3")
MONITOR = "monitor@n1"
TARGET = "/etc/prometheus/targets.json"
PIN = "sha256:" + "5" * 64
ARTIFACT = Artifact(repository="example.org/image", tag="1")
# (the path a provision's url template ends in, the path scraped: the query is not part of it)
PATHS = [("/metrics", "/metrics"), ("", "/"), ("/", "/"), ("/probe?module=http", "/probe"),
         ("/a/b/metrics", "/a/b/metrics")]
GRANTS = [("none", ["host", "port", "url"]),
          ("client+secret", ["host", "port", "client", "password", "url"])]

names = st.text(alphabet="abcdefgh", min_size=1, max_size=4)


@st.composite
def monitored_meshes(draw):
    """(mesh, catalogue, expected path, scheme): the monitor on n1 taking every metrics
    provider, some exporters and some unrelated instances on random nodes."""
    scheme = draw(st.sampled_from(["http", "https"]))
    path, scraped = draw(st.sampled_from(PATHS))
    grant, keys = draw(st.sampled_from(GRANTS))
    provisions = pmap({METRICS: Provision(grant=grant, keys=pvector(keys),
                                          url=f"{scheme}://{{host}}:{{port}}{path}")})
    exporter = Module(name="exporter", listens=pmap({"m": Listen(port=9100)}),
                      artifacts=pmap({"img": ARTIFACT}),
                      provides=pvector([Provide(provision=METRICS, listen="m")]),
                      containers=pvector([Container(name="exporter", artifact="img")]))
    other = Module(name="other", listens=pmap({"web": Listen(port=80)}),
                   artifacts=pmap({"img": ARTIFACT}),
                   containers=pvector([Container(name="web", artifact="img")]))
    monitor = Module(
        name="monitor", artifacts=pmap({"img": ARTIFACT}),
        requires=pvector([Require(as_="targets", provision=METRICS, each=True)]),
        containers=pvector([Container(name="server", artifact="img", mounts=pvector([
            Mount(target=TARGET, binding="targets", format="prometheus-file-sd")]))]))
    taken = {MONITOR}
    instances = {MONITOR: Instance(module="monitor", node="n1")}
    for module in ("exporter", "other"):
        for _ in range(draw(st.integers(0, 5))):
            name = f"{draw(names)}@{draw(st.sampled_from(NODES))}"
            if name not in taken:
                taken.add(name)
                instances[name] = Instance(module=module, node=name.split("@")[1])
    mesh = Mesh(mesh="mon", nodes=pmap({n: Node(address=f"10.0.0.{i + 1}")
                                        for i, n in enumerate(NODES)}),
                instances=pmap(instances))
    catalogue = Catalogue(modules=pmap({"exporter": exporter, "other": other,
                                        "monitor": monitor}), provisions=provisions)
    return mesh, catalogue, scraped, scheme


def resolved(mesh: Mesh, catalogue: Catalogue):
    resolution = resolver.resolve(catalogue, mesh,
                                  Ledger(pins=pmap({"example.org/image:1": PIN})))
    declaration = resolution.declarations["n1"]
    (listed,) = [b for b in declaration.bindings if b.consumer == MONITOR]
    (sd,) = [f for f in declaration.files if f.path.endswith("/targets.prometheus-file-sd")]
    (server,) = [c for c in declaration.containers if c.labels["mesh.instance"] == MONITOR]
    return listed, sd, server


@given(monitored_meshes())
def test_one_target_group_per_provider_with_its_address_and_the_urls_scheme_and_path(case):
    mesh, catalogue, scraped, scheme = case
    listed, sd, _ = resolved(mesh, catalogue)
    groups = json.loads(sd.content)
    assert [g["labels"]["mesh_instance"] for g in groups] == [e.provider for e in listed.entries]
    for group, entry in zip(groups, listed.entries):
        assert group["targets"] == [f"{entry.values['host']}:{entry.values['port']}"]
        assert group["labels"] == {"mesh_instance": entry.provider, "__scheme__": scheme,
                                   "__metrics_path__": scraped}
        provider_node = mesh.instances[entry.provider].node
        assert entry.values["host"] == mesh.nodes[provider_node].address


@given(monitored_meshes())
def test_the_file_holds_no_secret_even_when_each_binding_has_a_credential(case):
    mesh, catalogue, _, _ = case
    listed, sd, server = resolved(mesh, catalogue)
    assert "${secret:" not in sd.content and "password" not in sd.content
    assert sd.secret is None and not sd.more_secrets
    assert not server.secrets
