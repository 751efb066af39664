"""FrozenMap, the mapping the resolution's outputs hold: a value like the PMap it replaced there.

Each property is named for the bug it finds: a map that can be changed in place, one that is
not equal to (or hashes apart from) the dict and PMap of its entries, a `set` that changes the
original, a copy or a pickle that breaks it, a declaration read back with another map type.
"""

from __future__ import annotations

import copy
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyrsistent import pmap

from resolver import ContainerDecl, FrozenMap

entries = st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=12)


@given(entries)
def test_equal_to_and_hashing_as_the_dict_and_the_pmap_of_its_entries(d):
    frozen = FrozenMap(d)
    assert frozen == d and d == frozen
    assert frozen == pmap(d) and pmap(d) == frozen
    assert hash(frozen) == hash(pmap(d))
    assert len({frozen, pmap(d)}) == 1  # one value in a set, whichever was built


@given(entries, st.text(max_size=8), st.text(max_size=8))
def test_set_returns_a_new_map_and_leaves_the_original(d, key, value):
    frozen = FrozenMap(d)
    changed = frozen.set(key, value)
    assert type(changed) is FrozenMap
    assert changed == {**d, key: value}
    assert frozen == d
    assert changed == pmap(d).set(key, value)


@given(entries, st.text(max_size=8))
def test_nothing_changes_it_in_place(d, key):
    frozen = FrozenMap(d)
    attempts = [
        lambda: frozen.__setitem__(key, "x"),
        lambda: frozen.__delitem__(key),
        lambda: frozen.clear(),
        lambda: frozen.pop(key, None),
        lambda: frozen.popitem(),
        lambda: frozen.setdefault(key, "x"),
        lambda: frozen.update({key: "x"}),
    ]
    for attempt in attempts:
        with pytest.raises(TypeError):
            attempt()
    merged = frozen
    with pytest.raises(TypeError):
        merged |= {key: "x"}
    assert frozen == d


@given(entries)
def test_copies_and_pickles_are_equal_frozen_maps(d):
    frozen = FrozenMap(d)
    for again in (copy.copy(frozen), copy.deepcopy(frozen),
                  pickle.loads(pickle.dumps(frozen))):
        assert type(again) is FrozenMap and again == d


@given(entries, entries)
def test_a_container_read_back_from_its_document_holds_frozen_maps(env, labels):
    from resolver import structure, unstructure
    container = ContainerDecl(name="c", instance="i@n", container="c", image="img",
                              env=FrozenMap(env), labels=FrozenMap(labels))
    again = structure(unstructure(container), ContainerDecl)
    assert again == container
    assert type(again.env) is FrozenMap and type(again.labels) is FrozenMap
