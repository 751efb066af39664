"""The backup target as a provision (resolver/_backup_target.py, through resolve()).

Properties:
- With `backups: target: store` (an instance of a module providing backup-target), every live
  stateful instance on another node than the store's has exactly one backup duty, on its own
  node, with a login of its own (no two duties share one), a repository under that login on
  the store's address and port, and the `${secret:…}` tokens of its two credentials (never a
  value); the store's node holds exactly one backup-login grant per duty (same login), and
  opens the store's port to exactly the nodes of the backed-up instances. Each stateful
  instance on the store's own node is refused (`backup-target`, at `backups.target`) and has
  no duty. A stateless instance never has one.
- Renaming an unrelated (stateless) instance changes no duty, login or credential
  (metamorphic).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from pyrsistent import pmap, pvector

from resolver import (Artifact, Backups, BackupTarget, Catalogue, Container, Instance, Ledger,
                      Listen, Mesh, Module, Node, Provide, StateDir, resolve)
from resolver.documents import load_provisions

from pathlib import Path

PROVISIONS, _ = load_provisions(
    (Path(__file__).resolve().parent.parent / "catalogue" / "provisions.yaml").read_text(),
    "provisions.yaml")
NODES = ("n1", "n2", "n3")
ADDRESS = {"n1": "10.0.0.1", "n2": "10.0.0.2", "n3": "10.0.0.3"}
DIGEST = "sha256:" + "a" * 64


def _catalogue() -> Catalogue:
    def artifact(name: str) -> Artifact:
        return Artifact(repository=f"r/{name}", tag="1")

    pg = Module(name="pg", artifacts=pmap({"pg": artifact("pg")}),
                state=pmap({"data": StateDir(path="data")}),
                containers=pvector([Container(name="server", artifact="pg")]))
    app = Module(name="app", artifacts=pmap({"app": artifact("app")}),
                 containers=pvector([Container(name="web", artifact="app")]))
    store = Module(name="store", artifacts=pmap({"store": Artifact(repository="r/store", tag="1",
                                                                   tls=True)}),
                   listens=pmap({"restic": Listen(port=8000, tls=True)}),
                   provides=pvector([Provide(provision="backup-target", listen="restic")]),
                   state=pmap({"repos": StateDir(path="repos")}),
                   containers=pvector([Container(name="rclone", artifact="store")]))
    return Catalogue(modules=pmap({"pg": pg, "app": app, "store": store}),
                     provisions=PROVISIONS.provisions)


PINS = pmap({f"r/{name}:1": DIGEST for name in ("pg", "app", "store")})

placements = st.dictionaries(
    st.from_regex(r"\A[a-z]{1,6}@[a-z]{1,3}\Z"), st.tuples(st.sampled_from(("pg", "app")),
                                                          st.sampled_from(NODES)),
    max_size=6)


def _mesh(instances: dict[str, tuple[str, str]], store_node: str) -> Mesh:
    declared = {name: Instance(module=module, node=node)
                for name, (module, node) in instances.items()}
    declared["store"] = Instance(module="store", node=store_node)
    return Mesh(mesh="m", nodes=pmap({n: Node(address=ADDRESS[n]) for n in NODES}),
                instances=pmap(declared),
                backups=Backups(target=BackupTarget(instance="store")))


def run(instances: dict[str, tuple[str, str]], store_node: str):
    """The resolution every property here checks (test_strategies_reach records its codes)."""
    return resolve(_catalogue(), _mesh(instances, store_node), Ledger(pins=PINS))


def _duties(resolution) -> dict[str, tuple[str, object]]:
    return {d.instance: (node, d) for node, decl in resolution.declarations.items()
            for d in decl.backups}


@settings(max_examples=40, deadline=None)
@given(placements, st.sampled_from(NODES))
def test_each_stateful_instance_elsewhere_has_its_own_login_and_one_on_the_store_node_is_refused(
        instances, store_node):
    resolution = run(instances, store_node)
    duties = _duties(resolution)
    stateful = {n for n, (module, _) in instances.items() if module == "pg"}
    elsewhere = {n for n in stateful if instances[n][1] != store_node}
    here = stateful - elsewhere
    assert set(duties) == elsewhere, (duties, instances, store_node)
    logins = [d.login for _, d in duties.values()]
    assert len(set(logins)) == len(logins)
    store_decl = resolution.declarations[store_node]
    (provider,) = [p for p in store_decl.providers if p.provision == "backup-target"]
    for name, (node, duty) in duties.items():
        assert node == instances[name][1] and duty.target_node == store_node
        assert duty.repository == \
            f"rest:https://{ADDRESS[store_node]}:{provider.port}/{duty.login}/"
        assert duty.password.startswith("${secret:") and duty.key.startswith("${secret:")
    grants = sorted(g.login for g in store_decl.grants if g.kind == "backup-login")
    assert grants == sorted(logins)
    openings = [a for a in store_decl.firewall.allow if a.reason.startswith("store/backup-target for ")]
    sources = {s for a in openings for s in a.sources}
    assert sources == {ADDRESS[instances[n][1]] for n in elsewhere}
    refused = {p.instance for p in resolution.problems if p.code == "backup-target"}
    assert refused == here


@settings(max_examples=40, deadline=None)
@given(placements, st.sampled_from(NODES), st.data())
def test_renaming_an_unrelated_instance_changes_no_login(instances, store_node, data):
    stateless = sorted(n for n, (module, _) in instances.items() if module == "app")
    if not stateless:
        return
    old = data.draw(st.sampled_from(stateless))
    new = data.draw(st.from_regex(r"\A[a-z]{1,6}@[a-z]{1,3}\Z").filter(
        lambda name: name not in instances))
    renamed = {(new if n == old else n): v for n, v in instances.items()}
    before = _duties(resolve(_catalogue(), _mesh(instances, store_node), Ledger(pins=PINS)))
    after = _duties(resolve(_catalogue(), _mesh(renamed, store_node), Ledger(pins=PINS)))
    assert {n: (d.login, d.password, d.key, d.repository) for n, (_, d) in before.items()} == \
        {n: (d.login, d.password, d.key, d.repository) for n, (_, d) in after.items()}
