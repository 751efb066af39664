"""An edited document parsed again in part is the document parsed whole
(resolver.documents.parse_again): after any series of line edits (a line replaced, added or
removed, anywhere: inside a section's entries, at their edges, across sections, breaking the
YAML), the spliced parse has exactly parse_document's data and position tree, or raises
exactly its faults; a mesh loaded again from the last load after edits of its instances and
nodes (resolver.documents.load_mesh_again) is the mesh loaded whole, faults and all. And the
splice does happen for an edit inside one section's entries (the
other entries are the previous parse's very objects), so the property is not passed by always
parsing whole.
"""

from __future__ import annotations

import copy

from hypothesis import example, given
from hypothesis import strategies as st

from resolver import InputError
from resolver.documents import (MESH_LIMITS, ParsedText, dump_yaml, load_mesh,
                                load_mesh_again, parse_again, parse_document, unstructure)

from .strategies_meshes import meshes

NAMES = st.sampled_from(["a", "b", "c", "x@n1", "y@n2", "1", "true", "null", "a b", "-x"])
SCALARS = st.sampled_from(["1", "n1", "\"q\"", "'s'", "2.5", "yes", "~", "[]", "{}", "x y"])
ENTRY = st.one_of(
    st.builds(lambda k, v: [f"  {k}: {v}"], NAMES, SCALARS),
    st.builds(lambda k, v: [f"  {k}: {{module: {v}, node: n1}}"], NAMES, SCALARS),
    st.builds(lambda k, v, w: [f"  {k}:", f"    module: {v}", f"    node: {w}"],
              NAMES, SCALARS, SCALARS),
    st.builds(lambda k, v: [f"  {k}:", f"    - {v}", "    - b"], NAMES, SCALARS),
    st.builds(lambda k, v: [f"  {k}: |", f"    {v}", "    # not a comment"], NAMES, SCALARS),
    st.builds(lambda k, v: [f"  {k}: {{a: {v},", "    b: 2}"], NAMES, SCALARS),
    st.builds(lambda k, v: [f"  {k}: plain", f"    {v}"], NAMES, SCALARS),
    st.just(["  # a comment"]), st.just([""]),
)
SECTION = st.builds(lambda key, entries: [f"{key}:"] + [line for e in entries for line in e],
                    st.sampled_from(["instances", "nodes", "other", "1"]),
                    st.lists(ENTRY, min_size=1, max_size=6))
TOP = st.sampled_from([["mesh: m"], ["catalogue: c"], ["flow: {a: 1,", "  b: 2}"],
                       ["seq:", "- 1", "- 2"], ["# top comment"], [""]])
DOCUMENT = st.lists(st.one_of(SECTION, TOP), min_size=1, max_size=5).map(
    lambda parts: [line for part in parts for line in part])
LINES = st.one_of(
    ENTRY, ENTRY, st.builds(lambda v: [f"    node: {v}"], SCALARS),
    st.lists(st.sampled_from([line for entry in [
        "  z: 1", "  z: {module: m, node: n2}", "  a: 1", "    bind: {db: x}", "    node: n3",
        "  z:", "    - c", "", "  # c", "# c", "top: 1", "   odd: 1", "    more", "  - x",
        "  z: |", "      | deep", "  z: {a: 1,", "  z: &x 1", "  w: *x", "%YAML 1.2",
        "  z: [1, 2", "\tz: 1", "  \"z\": 1", "  z: \u00e9", "  ? z", "  : 1", "...",
        "---", "... # end", " z: 1", "  z: 'a", "    b'", "  z: \"a", "  z: >", "    folded"]
        for line in [entry]]), max_size=3),
    st.lists(st.text("az: -{}[],#\n|'\".>?&*!%", max_size=12), max_size=2))
EDIT = st.tuples(st.integers(0, 60), st.integers(0, 2), LINES)


def apply(lines: list[str], edit: tuple[int, int, list[str]]) -> list[str]:
    at, removed, added = edit
    at = min(at, len(lines))
    return lines[:at] + added + lines[at + removed:]


def outcome(parse, text):
    try:
        parsed = parse(text)
    except InputError as error:
        return "faults", [str(fault) for fault in error.faults]
    return "parsed", parsed.data, parsed.where.tree


@given(DOCUMENT, st.lists(EDIT, min_size=1, max_size=4))
@example(["instances:", "  a: 1", "  b: 2", "nodes:", "  x: 1"], [(2, 0, ["    c: 1"])])
@example(["instances:", "  a:", "    m: 1", "  b: 2"], [(2, 0, ["    n: 2"])])
@example(["instances:", "  a: |", "    t", "  b: 2"], [(3, 1, ["    # c"])])
@example(["instances:", "  a: 1", "nodes:", "  x: 1"], [(1, 0, ["  z: 1"]), (3, 1, [])])
@example(["instances:", "  a: 1", "  b: 2"], [(1, 1, []), (1, 1, [])])
@example(["instances:", "  a: 1", "  b: 2", "nodes:", "  x: 1"], [(3, 0, ["..."])])
@example(["instances:", "  a: |+", "    t", "", "  b: 1", "nodes:", "  x: 1"],
         [(4, 0, [""]), (5, 1, []), (3, 1, []), (3, 0, ["# c"])])
def test_a_document_parsed_again_after_edits_is_the_document_parsed_whole(document, edits):
    lines = document
    text = "\n".join(lines) + "\n"
    previous: ParsedText | None = None
    try:
        previous = parse_again(text, "mesh.yaml", MESH_LIMITS)
    except InputError:
        pass
    for edit in edits:
        lines = apply(lines, edit)
        text = "\n".join(lines) + "\n"
        whole = outcome(lambda t: parse_document(t, "mesh.yaml", MESH_LIMITS), text)
        again = outcome(lambda t: parse_again(t, "mesh.yaml", MESH_LIMITS, previous).parsed,
                        text)
        assert again == whole, (text, again, whole)
        if whole[0] == "parsed":
            previous = parse_again(text, "mesh.yaml", MESH_LIMITS, previous)


@given(st.integers(3, 40), st.integers(0, 39), st.sampled_from(["move", "add", "remove"]))
def test_an_edit_inside_a_section_reads_only_the_entries_it_touched(size, which, kind):
    which %= size
    entries = [f"  app{i}@n{i % 3}:\n    module: app\n    node: n{i % 3}\n" for i in range(size)]
    head = "mesh: m\ninstances:\n"
    tail = "nodes:\n  n0: {address: 10.0.0.1}\n  n1: {address: 10.0.0.2}\n"
    previous = parse_again(head + "".join(entries) + tail, "mesh.yaml", MESH_LIMITS)
    if kind == "move":
        entries[which] = entries[which].replace("node: n", "node: m")
    elif kind == "add":
        entries[which] += "    bind: {db: db@n0}\n"
    else:
        del entries[which]
    text = head + "".join(entries) + tail
    again = parse_again(text, "mesh.yaml", MESH_LIMITS, previous)
    whole = parse_document(text, "mesh.yaml", MESH_LIMITS)
    assert (again.parsed.data, again.parsed.where.tree) == (whole.data, whole.where.tree)
    before, after = previous.parsed.data["instances"], again.parsed.data["instances"]
    kept = [name for name in after if name in before and after[name] == before[name]]
    assert kept and all(after[name] is before[name] for name in kept)
    assert again.parsed.data["nodes"] is previous.parsed.data["nodes"]


def loaded(text, previous=None):
    """(outcome, the parse and Mesh to load the next edit from): load_mesh_again after
    parse_again, from `previous` (ParsedText, Mesh) when given."""
    try:
        parsed = parse_again(text, "mesh.yaml", MESH_LIMITS,
                             None if previous is None else previous[0])
        mesh, _ = load_mesh_again(parsed.parsed, "mesh.yaml", None if previous is None
                                  else (previous[0].parsed, previous[1]))
    except InputError as error:
        return ("faults", [str(fault) for fault in error.faults]), None
    return ("loaded", mesh), (parsed, mesh)


def fresh(text):
    try:
        return "loaded", load_mesh(text, "mesh.yaml")[0]
    except InputError as error:
        return "faults", [str(fault) for fault in error.faults]


EDITS = ["move", "remove", "copy", "wrong type", "unknown key", "unknown node", "node address",
         "node removed", "bad address", "bad name", "second control"]


@given(meshes(bad=False, recorded=False), st.lists(
    st.tuples(st.sampled_from(EDITS), st.integers(0, 50)), min_size=1, max_size=4))
def test_a_mesh_loaded_again_after_edits_is_the_mesh_loaded_whole(world, edits):
    data = unstructure(world.mesh)
    text = dump_yaml(data)
    outcome, previous = loaded(text)
    assert outcome == fresh(text)
    for kind, number in edits:
        data = copy.deepcopy(data)
        instances, nodes = data.setdefault("instances", {}), data["nodes"]
        name = sorted(instances)[number % len(instances)] if instances else None
        node = sorted(nodes)[number % len(nodes)]
        if name is not None and kind == "move":
            instances[name]["node"] = sorted(nodes)[(number + 1) % len(nodes)]
        elif name is not None and kind == "remove":
            del instances[name]
        elif name is not None and kind == "copy":
            instances[f"copy{number}.{name}"] = copy.deepcopy(instances[name])
        elif name is not None and kind == "wrong type":
            instances[name]["node"] = [instances[name]["node"]]
        elif name is not None and kind == "unknown key":
            instances[name]["bogus"] = 1
        elif name is not None and kind == "unknown node":
            instances[name]["node"] = "nowhere"
        elif kind == "node address":
            nodes[node]["address"] = f"10.77.0.{number + 1}"
        elif kind == "node removed" and len(nodes) > 1:
            del nodes[node]
        elif kind == "bad address":  # faults of the whole Mesh's validation
            nodes[node]["address"] = f"10.77.0.{number + 300}"
        elif name is not None and kind == "bad name":
            instances[f"bad name {number}"] = copy.deepcopy(instances[name])
        elif kind == "second control":
            nodes[node]["control"] = True
        text = dump_yaml(data)
        outcome, kept = loaded(text, previous)
        assert outcome == fresh(text), (kind, name)
        previous = kept or previous
