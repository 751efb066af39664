"""A requirement that takes every provider (`each: true`): the rule, held by properties.

Each property resolves whole meshes built here (a consumer taking every `tools` provider, the
providers, and instances that provide nothing, on a few nodes) and compares the consumer's
list with an oracle written apart from the resolver: every instance of a module providing
`tools`, other than the consumer, on the consumer's node when `within: node`, in name order.

- exactly once, none outside scope: the list is the oracle, with no provider repeated;
- adding a provider changes no other entry: resolved again with the ledger the first
  resolution produced, one provider more, every other entry is equal value for value (its
  host, port, login and credential), and the new one is the only entry added;
- the order is stable under renaming unrelated instances: renaming instances that provide
  nothing leaves the list (names and order) as it was;
- each provider has its own credential and its own firewall opening to this consumer only;
- fewer providers in scope than `at-least` refuses the consumer (`too-few-providers`), and
  so does a `bind:` naming the requirement (`bind-on-each`), each by name; nothing else is.
"""

from __future__ import annotations

import attrs
from hypothesis import given
from hypothesis import strategies as st
from pyrsistent import pmap, pvector

import resolver
from resolver.documents import structure, unstructure
from resolver import (Catalogue, Instance, Ledger, Listen, Mesh, Module, Node, Provide,
                      Provision, Require)

TOOLS = "tools"
PROVISIONS = pmap({TOOLS: Provision(grant="client+secret",
                                    keys=pvector(["host", "port", "client", "password", "url"]),
                                    url="http://{host}:{port}/mcp")})
SERVER = Module(name="toolsrv", listens=pmap({"http": Listen(port=8000)}),
                provides=pvector([Provide(provision=TOOLS, listen="http")]))
OTHER = Module(name="other", listens=pmap({"web": Listen(port=80)}))
NODES = ("n1", "n2", "n3")
CONSUMER = "assistant@n1"

names = st.text(alphabet="abcdefgh", min_size=1, max_size=4)


def run(catalogue: Catalogue, mesh: Mesh, ledger: Ledger) -> resolver.Resolution:
    """Every resolution of this module (test_strategies_reach records them: the codes of a
    requirement taking every provider are reached here, not by `meshes()`)."""
    return resolver.resolve(catalogue, mesh, ledger)


def consumer_module(within: str | None, at_least: int = 0) -> Module:
    return Module(name="assistant", requires=pvector([
        Require(as_=TOOLS, provision=TOOLS, each=True, within=within, at_least=at_least)]))


@st.composite
def fan_in_meshes(draw):
    """(mesh, catalogue): the consumer on n1, some providers and some unrelated instances on
    random nodes, every name distinct."""
    within = draw(st.sampled_from([None, "mesh", "node"]))
    taken = {CONSUMER}
    instances = {CONSUMER: Instance(module="assistant", node="n1")}
    for module in ("toolsrv", "other"):
        for _ in range(draw(st.integers(0, 5))):
            name = f"{draw(names)}@{draw(st.sampled_from(NODES))}"
            if name in taken:
                continue
            taken.add(name)
            instances[name] = Instance(module=module, node=name.split("@")[1])
    mesh = Mesh(mesh="fan", nodes=pmap({n: Node(address=f"10.0.0.{i + 1}")
                                        for i, n in enumerate(NODES)}),
                instances=pmap(instances))
    catalogue = Catalogue(modules=pmap({"toolsrv": SERVER, "other": OTHER,
                                        "assistant": consumer_module(within)}),
                          provisions=PROVISIONS)
    return mesh, catalogue


def the_list(resolution: resolver.Resolution) -> resolver.BindingDecl:
    (listed,) = [b for b in resolution.declarations["n1"].bindings
                 if b.consumer == CONSUMER and b.requirement == TOOLS]
    assert listed.each
    return listed


def oracle(mesh: Mesh, catalogue: Catalogue) -> list[str]:
    """The documented rule, written apart: instances of a module providing `tools`, not the
    consumer, on its node when the requirement says `within: node`, sorted by name."""
    within = catalogue.modules["assistant"].requires[0].within
    found = []
    for name, inst in mesh.instances.items():
        provides = [p.provision for p in catalogue.modules[inst.module].provides]
        if TOOLS in provides and name != CONSUMER \
                and (within != "node" or inst.node == mesh.instances[CONSUMER].node):
            found.append(name)
    return sorted(found)


@given(fan_in_meshes())
def test_every_provider_in_scope_exactly_once_and_none_outside(case):
    mesh, catalogue = case
    resolution = run(catalogue, mesh, Ledger())
    listed = the_list(resolution)
    providers = [e.provider for e in listed.entries]
    assert providers == oracle(mesh, catalogue)
    assert len(set(providers)) == len(providers)
    assert listed.values["count"] == str(len(providers))
    declaration = resolution.declarations["n1"]  # a list is a document like any other
    assert structure(unstructure(declaration), resolver.Declaration) == declaration
    # each its own credential, and its port opened to this consumer's node only
    credentials = [e.secret.credential for e in listed.entries if e.secret is not None]
    assert len(credentials) == len(providers) == len(set(credentials))
    consumer_address = mesh.nodes["n1"].address
    for entry in listed.entries:
        node = mesh.instances[entry.provider].node
        if node == "n1":
            continue
        intent = resolution.declarations[node].firewall
        assert intent is not None
        opened = [a for a in intent.allow if a.port == int(entry.values["port"])]
        assert opened and all(list(a.sources) == [consumer_address] for a in opened)


@given(fan_in_meshes(), names, st.sampled_from(NODES))
def test_adding_a_provider_changes_no_other_entry(case, name, node):
    mesh, catalogue = case
    added = f"{name}@{node}"
    if added in mesh.instances:
        return
    first = run(catalogue, mesh, Ledger())
    grown = attrs.evolve(mesh, instances=mesh.instances.set(
        added, Instance(module="toolsrv", node=node)))
    second = run(catalogue, grown, first.ledger)
    before = {e.provider: e for e in the_list(first).entries}
    after = {e.provider: e for e in the_list(second).entries}
    new = set(after) - set(before)
    in_scope = added in oracle(grown, catalogue)
    assert new == ({added} if in_scope else set())
    assert set(before) <= set(after)
    for provider, entry in before.items():
        assert after[provider] == entry, provider


@given(fan_in_meshes(), st.data())
def test_order_is_stable_under_renaming_unrelated_instances(case, data):
    mesh, catalogue = case
    unrelated = sorted(n for n, inst in mesh.instances.items() if inst.module == "other")
    renamed = dict(mesh.instances)
    for name in unrelated:
        # another name, sorting anywhere among the others (before or after any of them)
        new = data.draw(st.text(alphabet="0az", min_size=1, max_size=3)) + "-" + name
        if new not in renamed:
            renamed[new] = renamed.pop(name)
    before = [e.provider for e in the_list(run(catalogue, mesh, Ledger())).entries]
    after = [e.provider for e in the_list(run(
        catalogue, attrs.evolve(mesh, instances=pmap(renamed)), Ledger())).entries]
    assert after == before


@given(fan_in_meshes(), st.integers(0, 4))
def test_fewer_than_at_least_refuses_the_consumer_and_nothing_else(case, at_least):
    mesh, catalogue = case
    within = catalogue.modules["assistant"].requires[0].within
    catalogue = attrs.evolve(catalogue, modules=catalogue.modules.set(
        "assistant", consumer_module(within, at_least)))
    resolution = run(catalogue, mesh, Ledger())
    errors = [p for p in resolution.problems if p.severity == "error"]
    if len(oracle(mesh, catalogue)) < at_least:
        assert [(p.code, list(p.blocks)) for p in errors] == \
            [("too-few-providers", [CONSUMER])]
        assert CONSUMER not in resolution.declarations["n1"].instances
    else:
        assert not errors
        assert [e.provider for e in the_list(resolution).entries] == oracle(mesh, catalogue)


@given(fan_in_meshes())
def test_a_bind_of_a_list_refuses_its_consumer_by_name(case):
    mesh, catalogue = case
    consumer = attrs.evolve(mesh.instances[CONSUMER], bind=pmap({TOOLS: "x@n1"}))
    resolution = run(catalogue, attrs.evolve(mesh, instances=mesh.instances.set(
        CONSUMER, consumer)), Ledger())
    errors = [p for p in resolution.problems if p.severity == "error"]
    assert [(p.code, list(p.blocks)) for p in errors] == [("bind-on-each", [CONSUMER])]
