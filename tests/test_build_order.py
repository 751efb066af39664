"""`mesh build`'s order: foundation first, whatever the graph (a property), and what it builds
with --stale is exactly what `mesh stale` lists."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from executors.control.building import build_order


@st.composite
def graphs(draw):
    """An acyclic build graph: artifact i builds FROM some artifacts before it."""
    count = draw(st.integers(1, 8))
    labels = draw(st.permutations(range(count)))  # names do not sort in build order
    names = [f"m{label}/a" for label in labels]
    return {name: sorted(draw(st.sets(st.sampled_from(names[:i]), max_size=3)) if i else [])
            for i, name in enumerate(names)}


def below(graph, name):
    found, todo = set(), list(graph[name])
    while todo:
        base = todo.pop()
        if base not in found:
            found.add(base)
            todo.extend(graph[base])
    return found


@settings(max_examples=300, deadline=None)
@given(graphs(), st.data())
def test_every_base_is_built_before_what_builds_from_it(graph, data):
    wanted = data.draw(st.sets(st.sampled_from(sorted(graph))))
    order = build_order(graph, wanted)
    assert sorted(order) == sorted(wanted)
    for index, name in enumerate(order):
        assert not (below(graph, name) & set(order[index + 1:])), (name, order)


def test_a_chain_in_order():
    graph = {"base/b": [], "mid/m": ["base/b"], "top/t": ["mid/m"], "other/o": []}
    assert build_order(graph, ["top/t", "base/b", "mid/m", "other/o"]) == [
        "base/b", "other/o", "mid/m", "top/t"]
