"""FrozenMap, the mapping the resolution's outputs hold: a value like the PMap it replaced there.

Each property is named for the bug it finds: a map that can be changed in place, one that is
not equal to (or hashes apart from) the dict and PMap of its entries, a `set`, `discard` or
`remove` that changes the original or answers otherwise than PMap's, a copy or a pickle that
breaks it, a declaration or a ledger read back with another map type.
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
def test_discard_and_remove_return_a_new_map_as_pmaps_do(d, key):
    frozen = FrozenMap(d)
    if d:  # half the time, a key the map holds
        key = sorted(d)[len(key) % len(d)] if len(key) % 2 else key
    dropped = frozen.discard(key)
    assert type(dropped) is FrozenMap
    assert dropped == pmap(d).discard(key)
    if key in d:
        assert frozen.remove(key) == pmap(d).remove(key)
    else:
        assert dropped is frozen
        with pytest.raises(KeyError):
            frozen.remove(key)
    assert frozen == d


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
    from resolver.documents import structure, unstructure
    container = ContainerDecl(name="c", instance="i@n", container="c", image="img",
                              env=FrozenMap(env), labels=FrozenMap(labels))
    again = structure(unstructure(container), ContainerDecl)
    assert again == container
    assert type(again.env) is FrozenMap and type(again.labels) is FrozenMap


@given(st.dictionaries(st.text(min_size=1, max_size=8),
                       st.dictionaries(st.text(min_size=1, max_size=8),
                                       st.integers(1, 65535), min_size=1, max_size=3),
                       max_size=5),
       st.sets(st.text(min_size=1, max_size=8), max_size=5))
def test_a_ledger_read_back_from_its_document_holds_frozen_maps(ports, credentials):
    from resolver import Ledger, PortAssignment
    from resolver.documents import dump_ledger, load_ledger
    ledger = Ledger(ports=FrozenMap({i: FrozenMap({n: PortAssignment("node", p)
                                                    for n, p in listens.items()})
                                     for i, listens in ports.items()}),
                    logins=FrozenMap({c: f"login-{c}" for c in credentials}))  # one each
    again, _ = load_ledger(dump_ledger(ledger), "ledger.yaml")
    assert again == ledger
    assert type(again.ports) is FrozenMap and type(again.logins) is FrozenMap
    assert all(type(listens) is FrozenMap for listens in again.ports.values())
