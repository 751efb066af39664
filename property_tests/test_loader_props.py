"""Any YAML either loads or is refused with located faults; nothing else escapes the loader.

Inputs are random YAML trees, random text, and one-place mutations of valid documents (the
catalogue's own manifests and a mesh written here). Whatever the loader does with them, it
returns a model or raises InputError whose every fault names a file and a line >= 1.
"""

from __future__ import annotations

from pathlib import Path

import copy

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from resolver import (
    InputError,
    load_inputs,
)
from resolver.documents import (
    dump_yaml,
    load_ledger,
    load_mesh,
    load_module,
    load_provisions,
    parse_yaml,
)

try:
    from .strategies_documents import mutations, paths, scalars, yaml_trees
except ImportError:  # property_tests/ is not a package
    from strategies_documents import mutations, paths, scalars, yaml_trees

REPO = Path(__file__).resolve().parent.parent
CATALOGUE = REPO / "catalogue"

LOADERS = {
    "module.yaml": load_module,
    "provisions.yaml": load_provisions,
    "mesh.yaml": load_mesh,
    "ledger.yaml": load_ledger,
}

MESH = """\
mesh: home
nodes:
  anchor: {address: 10.0.0.1, facilities: [docker-socket], control: true}
  lab: {address: "fd00::2", ssh-port: 2222}
instances:
  postgres@anchor: {module: postgres, node: anchor}
  app@lab: {module: app, node: lab, bind: {db: postgres@anchor}}
defaults: {postgres-database: postgres@anchor}
host-ports: {first: 20000, last: 20100}
floors:
  - {port: 5672, sources: mesh, reason: enrolment}
"""

LEDGER = """\
version: 1
ports:
  postgres@anchor: {pg: {node: anchor, port: 20000}}
bindings:
  app@lab: {db: postgres@anchor}
credentials:
  c1: {active: {generation: 1, slot: a, sealed: {lab: c2VhbGVk}}, retired: [0]}
pins:
  postgres:16: sha256:0000000000000000000000000000000000000000000000000000000000000000
"""

APP = """\
name: app
artifacts:
  app: {repository: example/app, tag: "2"}
listens:
  http: {port: 3000}
secrets: [admin]
requires:
  - {as: db, provision: postgres-database}
state:
  data: {path: data, owner: "1000:1000"}
containers:
  - name: app
    artifact: app
    env: {DB: "${db.host}:${db.port}", PW: "${self.admin.password}", URL: "${self.http.port}"}
    mounts: [{target: /data, state: data}]
    health: {tcp: http}
"""


def seed_documents() -> list[tuple[str, str]]:
    """(loader key, text) of valid documents to mutate."""
    seeds = [("mesh.yaml", MESH), ("ledger.yaml", LEDGER), ("module.yaml", APP)]
    for path in sorted(CATALOGUE.glob("*/module.yaml")):
        seeds.append(("module.yaml", path.read_text()))
    if (CATALOGUE / "provisions.yaml").exists():
        seeds.append(("provisions.yaml", (CATALOGUE / "provisions.yaml").read_text()))
    return seeds


SEEDS = seed_documents()


def assert_loads_or_locates(loader, text: str, file: str) -> None:
    try:
        loader(text, file)
    except InputError as error:
        assert error.faults, "an InputError with no fault"
        for fault in error.faults:
            assert fault.file == file
            assert fault.line >= 1 and fault.col >= 1, str(fault)
            assert fault.message


@given(tree=yaml_trees(), which=st.sampled_from(sorted(LOADERS)))
@example(tree={"version": 1, "ports": {"a": {"b": {"node": "n", "port": 99999}}}}, which="ledger.yaml")
def test_random_trees_load_or_locate(tree, which):
    assert_loads_or_locates(LOADERS[which], dump_yaml(tree), which)


@given(text=st.text(max_size=80), which=st.sampled_from(sorted(LOADERS)))
@example(text="? [a, b]\n: c\n", which="mesh.yaml")  # a list as a mapping key
@example(text="a: &x [*x]\n", which="mesh.yaml")
@example(text="\x00", which="ledger.yaml")
def test_random_text_loads_or_locates(text, which):
    assert_loads_or_locates(LOADERS[which], text, which)


def seed_id(seed: tuple[str, str]) -> str:
    first = seed[1].split("\n", 1)[0]
    return f"{seed[0]}:{first[:24]}"


@pytest.mark.parametrize("seed", SEEDS, ids=seed_id)
@given(data=st.data())
def test_mutated_documents_load_or_locate(data, seed):
    which, text = seed
    plain, _ = parse_yaml(text, which)
    mutated = data.draw(mutations(plain))
    assert_loads_or_locates(LOADERS[which], dump_yaml(mutated), which)


@given(data=st.data(), seed=st.sampled_from(SEEDS))
def test_text_edits_load_or_locate(data, seed):
    """Line-level damage: a line dropped, duplicated, or re-indented."""
    which, text = seed
    lines = text.splitlines(keepends=True)
    index = data.draw(st.integers(0, max(len(lines) - 1, 0)))
    edit = data.draw(st.sampled_from(["drop", "duplicate", "indent", "dedent", "truncate"]))
    if lines:
        if edit == "drop":
            del lines[index]
        elif edit == "duplicate":
            lines.insert(index, lines[index])
        elif edit == "indent":
            lines[index] = "  " + lines[index]
        elif edit == "dedent":
            lines[index] = lines[index].lstrip()
        else:
            lines[index] = lines[index][: data.draw(st.integers(0, len(lines[index])))]
    assert_loads_or_locates(LOADERS[which], "".join(lines), which)


@pytest.mark.parametrize("which, text", [("mesh.yaml", MESH), ("ledger.yaml", LEDGER),
                                         ("module.yaml", APP)], ids=["mesh", "ledger", "module"])
@settings(max_examples=min(settings.default.max_examples, 100))  # each replaces every leaf
@given(data=st.data())
def test_every_leaf_replaced_loads_or_locates(data, which, text):
    """Each scalar of a valid document, replaced in turn by an arbitrary scalar."""
    plain, _ = parse_yaml(text, which)
    for path in paths(plain):
        parent = plain
        for key in path[:-1]:
            parent = parent[key]
        if not path or isinstance(parent[path[-1]], (dict, list)):
            continue
        mutated = copy.deepcopy(plain)
        target = mutated
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = data.draw(scalars, label=".".join(map(str, path)))
        assert_loads_or_locates(LOADERS[which], dump_yaml(mutated), which)


def test_seeds_are_valid():
    for which, text in SEEDS:
        LOADERS[which](text, which)


@given(data=st.data())
def test_mutated_mesh_inputs_load_or_locate(data):
    """The whole-mesh loader, with one document of a valid mesh mutated at a time."""
    documents = {
        "mesh": (MESH, "mesh.yaml"),
        "ledger": (LEDGER, "ledger.yaml"),
        "module:app": (APP, "catalogue/app/module.yaml"),
    }
    if (CATALOGUE / "provisions.yaml").exists():
        documents["provisions"] = ((CATALOGUE / "provisions.yaml").read_text(), "provisions.yaml")
    if (CATALOGUE / "postgres" / "module.yaml").exists():
        documents["module:postgres"] = ((CATALOGUE / "postgres" / "module.yaml").read_text(),
                                        "catalogue/postgres/module.yaml")
    key = data.draw(st.sampled_from(sorted(documents)))
    text, file = documents[key]
    plain, _ = parse_yaml(text, file)
    documents[key] = (dump_yaml(data.draw(mutations(plain))), file)
    try:
        load_inputs(documents)
    except InputError as error:
        files = {file for _, file in documents.values()}
        for fault in error.faults:
            assert fault.file in files and fault.line >= 1, str(fault)


NESTED = st.recursive(st.integers(0, 9), lambda inner: st.dictionaries(
    st.sampled_from("abcde"), inner, min_size=1, max_size=4), max_leaves=12).filter(
    lambda d: isinstance(d, dict))


@given(NESTED, st.data())
def test_a_path_that_leaves_the_document_is_placed_at_the_deepest_key_it_reaches(doc, data):
    """A fault's path may go on past what the document writes (a default, a missing key): it
    is placed at the deepest place along the path the document has, never at a key further
    on that happens to share a later path element's name."""
    _, where = parse_yaml(dump_yaml(doc), "x.yaml")
    prefix, node = (), doc
    while isinstance(node, dict) and data.draw(st.booleans()):
        key = data.draw(st.sampled_from(sorted(node)))
        prefix, node = prefix + (key,), node[key]
    rest = tuple(data.draw(st.lists(st.sampled_from("abcde"), min_size=1, max_size=3)))
    gone = prefix + ("zz",) + rest
    assert where.position(gone) == where.position(prefix)
    if prefix:
        assert where.position(gone, at_key=True) == where.position(prefix, at_key=True)


@given(st.integers(-(2**28) + 1, 2**28 - 1),  # at most 32 characters, the loader's bound
       st.sampled_from([bin, oct, hex, str]))
def test_an_integer_in_any_base_yaml_knows_reads_back_as_itself(number, spell):
    """YAML 1.2 core ints: decimal, 0b binary, 0o octal and 0x hex, signed, read as written."""
    data, _ = parse_yaml(f"v: {spell(number)}\n", "x.yaml")
    assert data == {"v": number} and type(data["v"]) is int


@given(st.integers(1, 34), st.integers(0, 34), st.sampled_from(["[", "{k: "]))
def test_an_alias_is_read_within_the_limits_of_the_node_it_names(anchored, around, opener):
    """An alias nested `around` levels deep, naming a node `anchored` levels deep, loads as the
    same document written out in full, or is refused by the same depth limit (32 levels, the
    document's own mapping counted), located at the alias when the alias is what passes it;
    the limit cannot be passed by reaching a deep node through an alias."""
    closer = "]" if opener == "[" else "}"

    def nest(levels: int, inner: str) -> str:
        return opener * levels + inner + closer * levels

    deep = nest(anchored, "1")
    aliased = f"x: &a {deep}\ny: {nest(around, '*a')}\n"
    written = f"x: {deep}\ny: {nest(around, deep)}\n"
    too_deep = 1 + around + anchored > 32
    try:
        data = parse_yaml(aliased, "f.yaml")[0]
    except InputError as refused:
        (fault,) = refused.faults
        assert too_deep, f"refused, though within the limit: {fault}"
        if 1 + anchored > 32 or 1 + around > 32:  # refused where the nesting itself passes it
            assert fault.message == "nesting deeper than 32 levels", fault
        else:
            assert fault.message == "alias *a nests deeper than 32 levels", fault
            assert (fault.line, fault.col) == (2, 4 + len(opener) * around), fault
        with pytest.raises(InputError, match="nesting deeper than 32 levels"):
            parse_yaml(written, "f.yaml")
        return
    assert not too_deep, "an alias reached past the depth limit"
    assert data == parse_yaml(written, "f.yaml")[0], "an alias read as another node"


@given(st.one_of(st.integers(0, 200), st.integers(4990, 5010), st.integers(9990, 10010)),
       st.integers(1, 120))
def test_aliases_produce_at_most_ten_thousand_nodes_and_the_one_passing_it_is_named(
        size, aliases):
    """A list of `size` values (size + 1 nodes) named by `aliases` aliases: the document loads
    as that list repeated while the aliases produce at most 10,000 nodes in all; else it is
    refused at the first alias that passes the bound, which says how many nodes they reach."""
    text = (f"x: &a [{', '.join(['1'] * size)}]\ny:\n" + "  - *a\n" * aliases)
    nodes = size + 1
    try:
        data = parse_yaml(text, "f.yaml")[0]
    except InputError as refused:
        (fault,) = refused.faults
        assert aliases * nodes > 10_000, f"refused within the bound: {fault}"
        passing = 10_000 // nodes + 1  # the first alias whose nodes pass the bound
        assert (fault.line, fault.col) == (2 + passing, 5), fault
        assert fault.message == (f"alias *a brings the nodes aliases produce to "
                                 f"{passing * nodes:,}"), fault
        return
    assert aliases * nodes <= 10_000, "aliases produced more than the bound allows"
    assert data == {"x": [1] * size, "y": [[1] * size] * aliases}
