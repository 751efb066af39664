"""Reuse keys of resolver.incremental that random meshes seldom reach (issue 33).

property_tests/test_incremental_props.py checks resolve_from == resolve for random meshes and
edits; a few inputs a reuse key must hold change the outcome only in shapes those meshes rarely
take (two candidates of a provision on two nodes and no recorded binding; a recorded binding
moved to another candidate; a provider named by `bind:` moved away from its consumer; a provider
refused under a list that needs at least two). Each case
here is one such edit: resolved from the reuse of the run before it, it must equal resolve()."""

from __future__ import annotations

import attrs
import pytest
from pyrsistent import pmap, pvector

from resolver import (
    Artifact,
    Catalogue,
    Container,
    Credential,
    Floor,
    Generation,
    InputError,
    Instance,
    Ledger,
    Listen,
    Mesh,
    Module,
    Node,
    PortRange,
    Provide,
    Provision,
    Require,
    resolve,
)
from resolver.incremental import resolve_from


def _module(name: str, provides: tuple[str, ...] = (), requires: tuple[Require, ...] = ()
            ) -> Module:
    return Module(
        name=name,
        artifacts=pmap({"image": Artifact(repository=f"example.org/{name}", tag="1")}),
        listens=pmap({"main": Listen(port=5432 if provides else 8080)}),
        provides=pvector(Provide(p, "main") for p in provides),
        requires=pvector(requires),
        containers=pvector([Container(name="main", artifact="image",
                                      env=pmap({"DB_HOST": "${db.host}"} if name == "app"
                                               else {}))]),
    )


def _world() -> tuple[Catalogue, Mesh, Ledger]:
    """Two databases on two nodes, an application on the first, a monitor of every database
    (at least two) on the third."""
    modules = {
        "db": _module("db", ("postgres-database",)),
        "app": _module("app", requires=(Require(as_="db", provision="postgres-database"),)),
        "mon": _module("mon", requires=(Require(as_="dbs", provision="postgres-database",
                                                each=True, at_least=2),)),
    }
    provisions = {"postgres-database": Provision(
        grant="database+login", keys=pvector(["host", "port", "database", "user", "password"]))}
    nodes = {f"n{i}": Node(address=f"10.9.0.{i + 1}") for i in range(4)}  # n3: empty
    instances = {"db@n0": Instance("db", "n0"), "db@n1": Instance("db", "n1"),
                 "app": Instance("app", "n0"), "mon": Instance("mon", "n2")}
    mesh = Mesh(mesh="keys", nodes=pmap(nodes), instances=pmap(instances),
                host_ports=PortRange(20000, 20999))
    pins = {f"example.org/{m}:1": "sha256:" + f"{n + 1:064x}" for n, m in enumerate(modules)}
    return Catalogue(pmap(modules), pmap(provisions)), mesh, Ledger(pins=pmap(pins))


def _with_instance(mesh: Mesh, name: str, **changes: object) -> Mesh:
    return attrs.evolve(mesh, instances=mesh.instances.set(
        name, attrs.evolve(mesh.instances[name], **changes)))


def _edits() -> dict[str, tuple[Catalogue, Mesh, Ledger, Mesh, Ledger]]:
    """case → (catalogue, mesh and ledger before, mesh and ledger after)."""
    catalogue, mesh, ledger = _world()
    written = resolve(catalogue, mesh, ledger).ledger  # records app → db@n0 (co-located)
    # the application with a second database on its node, each named by `bind:`
    two = attrs.evolve(catalogue, modules=catalogue.modules.set("app", _module(
        "app", requires=(Require(as_="db", provision="postgres-database"),
                         Require(as_="replica", provision="postgres-database")))))
    pinned = _with_instance(attrs.evolve(mesh, instances=mesh.instances.set(
        "db2@n0", Instance("db", "n0"))), "app", bind=pmap({"db": "db@n0", "replica": "db2@n0"}))
    kept = resolve(two, pinned, ledger).ledger  # its port is kept where it moves
    rebound = attrs.evolve(written, bindings=written.bindings.set(
        "app", written.bindings["app"].set("db", "db@n1")))
    floored = attrs.evolve(mesh, floors=pvector([Floor(20600)]))
    refused = _with_instance(mesh, "db@n1", parts=pvector(["no-such-part"]))
    # the application with a secret of its own, told in its env
    app = catalogue.modules["app"]
    owning = attrs.evolve(catalogue, modules=catalogue.modules.set("app", attrs.evolve(
        app, secrets=pvector(["admin"]), containers=pvector([attrs.evolve(
            app.containers[0], env=app.containers[0].env.set(
                "ADMIN", "${self.admin.password}"))]))))
    return {
        # no binding recorded: the co-located database follows the consumer
        "consumer moved": (catalogue, mesh, ledger, _with_instance(mesh, "app", node="n1"),
                           ledger),
        # the ledger decides: another candidate recorded is the one bound
        "recorded binding changed": (catalogue, mesh, written, mesh, rebound),
        # the provider named by `bind:` moves away: its binding is the same, the consumer's
        # same-node opening goes
        "provider moved": (two, pinned, kept,
                           _with_instance(pinned, "db@n0", node="n3"), kept),
        # every MAC changes (derived from the mesh's name), and nothing the bindings are
        # made from: the same-node opening of the consumer must not keep its old MACs
        "mesh renamed": (catalogue, mesh, written, attrs.evolve(mesh, mesh="renamed"),
                         written),
        # a refused provider leaves the list with fewer than at-least: the list's own refusal
        "provider refused": (catalogue, mesh, ledger,
                             _with_instance(mesh, "db@n1", parts=pvector(["no-such-part"])),
                             ledger),
        # the ledger records another host port for the application, and nothing else changes
        # (nothing consumes it): only its own published port differs, which no part of the
        # bindings holds (render_instances_reusing finds it among the ports that differ)
        "own port recorded anew": (catalogue, mesh, written, mesh, _port_moved(written, "app")),
        # a mesh floor on port 20600; the ledger then records the application's port there:
        # the kept host ports of its node change (kept_ports_reusing works that node out
        # again), so the floor is refused there, naming the application
        "port kept on a floor": (catalogue, floored, written, floored,
                                 _port_moved(written, "app", 20600)),
        # a second application bound to the database on its node: that node's MACs are
        # worked out again with both consumers' containers (the first one's openings kept)
        "second consumer on a node": (catalogue, mesh, written, attrs.evolve(
            mesh, instances=mesh.instances.set("app2", Instance(
                "app", "n0", bind=pmap({"db": "db@n0"})))), written),
        # a refused database keeps its recorded port as the ledger has it: the ledger then
        # records another one for it (new_ports_reusing works its entry out again)
        "refused instance's port recorded anew": (
            catalogue, refused, written, refused, _port_moved(written, "db@n1", 20700)),
        # the application becomes a monitor (another module) under the same catalogue: its
        # module is looked up again (Context.of_reusing keeps the others' lookups)
        "instance's module changed": (catalogue, mesh, written,
                                      _with_instance(mesh, "app", module="mon"), written),
        # the application's own secret is issued (its first generation): only the reference
        # its env holds changes
        "own secret issued": (owning, mesh, written, mesh, attrs.evolve(written, credentials=(
            written.credentials.set("secret/app/admin", Credential(
                active=Generation(1, sealed=pmap({"n0": "c2VhbGVk"}))))))),
    }


def _port_moved(ledger: Ledger, name: str, to: int = 20500) -> Ledger:
    """`ledger` with `name`'s recorded host port moved to `to` (no other listen holds it)."""
    port = ledger.ports[name]["main"]
    return attrs.evolve(ledger, ports=ledger.ports.set(
        name, ledger.ports[name].set("main", attrs.evolve(port, port=to))))


@pytest.mark.parametrize("case", sorted(_edits()))
def test_an_edit_resolved_from_the_last_reuse_equals_resolve(case: str) -> None:
    catalogue, mesh, ledger, after_mesh, after_ledger = _edits()[case]
    first, reuse = resolve_from(None, catalogue, mesh, ledger)
    assert first == resolve(catalogue, mesh, ledger)
    # resolved once more from its own reuse, as a long-lived loop is between two edits: what
    # is reused then is what every part of a run compared equal with the run before
    # (render_instances_reusing takes those instances without making their keys)
    settled, reuse = resolve_from(reuse, catalogue, mesh, ledger)
    assert settled == first
    again, _ = resolve_from(reuse, catalogue, after_mesh, after_ledger)
    expected = resolve(catalogue, after_mesh, after_ledger)
    assert again.bindings == expected.bindings
    assert again.problems == expected.problems
    assert again == expected
    assert again != first  # (the edit changes the outcome: a stale reuse would show)


def test_a_provision_edit_resolved_from_the_last_reuse_equals_resolve() -> None:
    """The catalogue's provision changes its grant kind, and nothing else: the databases'
    Instances, modules, nodes and ports are the very ones the kept run read, and only what
    they provide (ProviderDecl.kind) differs (render_instances_reusing: _suspects finds them
    among the providers that differ, or keeps their old `providers`)."""
    catalogue, mesh, ledger = _world()
    written = resolve(catalogue, mesh, ledger).ledger
    provision = catalogue.provisions["postgres-database"]
    ungranted = attrs.evolve(catalogue, provisions=catalogue.provisions.set(
        "postgres-database", attrs.evolve(provision, grant="none")))
    _, reuse = resolve_from(None, catalogue, mesh, written)
    first, reuse = resolve_from(reuse, catalogue, mesh, written)  # its run read what it kept
    again, _ = resolve_from(reuse, ungranted, mesh, written)
    expected = resolve(ungranted, mesh, written)
    assert again.declarations["n1"].providers == expected.declarations["n1"].providers
    assert again == expected
    assert again != first


def test_the_registry_default_moved_to_an_instance_at_the_same_address() -> None:
    """Two registries on two nodes that share an address (mesh.yaml accepts it), each given
    the range's first host port: `defaults: {artifact-store: …}` moves from one to the other,
    so the mesh's registry address (part of every key's `run`) stays the same. The new store
    was kept with a key (no TLS, no htpasswd) and its Instance, module, node and port are
    the ones the kept run read: only its being the store (a TLS server: tls_servers) differs
    (render_instances_reusing: _suspects holds the store, and the TLS servers, which
    tls_servers makes the store one of: either alone finds it)."""
    registry = Module(
        name="registry",
        artifacts=pmap({"image": Artifact(repository="example.org/registry", tag="1",
                                          mirror=False)}),
        listens=pmap({"main": Listen(port=5000)}),
        provides=pvector([Provide("artifact-store", "main")]),
        containers=pvector([Container(name="main", artifact="image")]))
    catalogue = Catalogue(pmap({"registry": registry}), pmap({"artifact-store": Provision(
        scope="node", grant="none", keys=pvector(["host", "port", "url"]),
        url="http://{host}:{port}")}))
    mesh = Mesh(mesh="keys", nodes=pmap({"n0": Node(address="10.9.0.1"),
                                         "n1": Node(address="10.9.0.1")}),
                instances=pmap({"r0": Instance("registry", "n0"),
                                "r1": Instance("registry", "n1")}),
                host_ports=PortRange(20000, 20999), defaults=pmap({"artifact-store": "r0"}))
    ledger = resolve(catalogue, mesh, Ledger(
        pins=pmap({"example.org/registry:1": "sha256:" + "1" * 64}))).ledger
    assert ledger.ports["r0"]["main"].port == ledger.ports["r1"]["main"].port  # one address
    moved = attrs.evolve(mesh, defaults=pmap({"artifact-store": "r1"}))
    _, reuse = resolve_from(None, catalogue, mesh, ledger)
    first, reuse = resolve_from(reuse, catalogue, mesh, ledger)  # its run read what it kept
    again, _ = resolve_from(reuse, catalogue, moved, ledger)
    expected = resolve(catalogue, moved, ledger)
    assert again.declarations["n1"] == expected.declarations["n1"]
    assert again == expected
    assert again != first


def _same_objects_edits() -> dict[str, tuple[Catalogue, Mesh, Ledger, Catalogue, Mesh, Ledger]]:
    """case → (inputs before, inputs after) where the edit keeps some input objects and
    changes another: what an earlier run made from the kept objects is shared
    (Context.of_reusing); what it made from the changed one must not be."""
    catalogue, mesh, ledger = _world()
    written = resolve(catalogue, mesh, ledger).ledger
    rebound = attrs.evolve(written, bindings=written.bindings.set(
        "app", written.bindings["app"].set("db", "db@n1")))
    # the same instances object under a catalogue whose monitor needs three databases
    bare = attrs.evolve(catalogue, modules=catalogue.modules.set("mon", _module(
        "mon", requires=(Require(as_="dbs", provision="postgres-database", each=True,
                                 at_least=3),))))
    # the same instances object, node n1 (where db@n1 is) gone from the nodes
    fewer = attrs.evolve(mesh, nodes=mesh.nodes.remove("n1"))
    return {
        # the same mesh and catalogue objects, another ledger
        "ledger changed": (catalogue, mesh, written, catalogue, mesh, rebound),
        # the same mesh object, another catalogue
        "catalogue changed": (catalogue, mesh, written, bare, mesh, written),
        # the same instances object, other nodes
        "nodes changed": (catalogue, mesh, written, catalogue, fewer, written),
    }


@pytest.mark.parametrize("case", sorted(_same_objects_edits()))
def test_inputs_kept_by_object_share_only_what_they_make(case: str) -> None:
    catalogue, mesh, ledger, after_catalogue, after_mesh, after_ledger = \
        _same_objects_edits()[case]
    first, reuse = resolve_from(None, catalogue, mesh, ledger)
    again, _ = resolve_from(reuse, after_catalogue, after_mesh, after_ledger)
    expected = resolve(after_catalogue, after_mesh, after_ledger)
    assert again == expected
    assert again != first  # (the edit changes the outcome: a stale lookup would show)


def test_a_fault_after_a_clean_run_is_found() -> None:
    """An earlier run's inputs were clean; a ledger, or a catalogue, with a fault handed to the
    next run is refused as resolve() refuses it (only the very same objects skip their
    rules: resolver/_check.py validate_reusing)."""
    catalogue, mesh, ledger = _world()
    written = resolve(catalogue, mesh, ledger).ledger
    _, reuse = resolve_from(None, catalogue, mesh, written)
    port = written.ports["app"]["main"]
    bad_ledger = attrs.evolve(written, ports=written.ports.set(
        "app", written.ports["app"].set("main", attrs.evolve(port, port=70000))))
    bad_catalogue = attrs.evolve(catalogue, modules=catalogue.modules.set(
        "app", attrs.evolve(catalogue.modules["app"], name="other")))
    for after_catalogue, after_ledger in ((catalogue, bad_ledger), (bad_catalogue, written)):
        with pytest.raises(InputError) as expected:
            resolve(after_catalogue, mesh, after_ledger)
        with pytest.raises(InputError) as raised:
            resolve_from(reuse, after_catalogue, mesh, after_ledger)
        assert str(raised.value) == str(expected.value)
