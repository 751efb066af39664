"""small_map (resolver/_model.py): a PMap of few entries in one bucket is the same value as the
PMap of those entries laid out by default: equal, hashing the same, and changed the same way."""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st
from pyrsistent import pmap

from resolver._model import small_map

KEYS = st.text(max_size=6)
MAPS = st.dictionaries(KEYS, st.text(max_size=6), max_size=40)


@given(MAPS)
@example({f"K{i}": str(i) for i in range(40)})  # past the one-bucket bound too
@example({f"K{i}": str(i) for i in range(32)})
def test_a_small_map_is_the_same_value_as_a_pmap(values: dict[str, str]) -> None:
    small = small_map(values)
    assert small == pmap(values) and small == values
    assert hash(small) == hash(pmap(values))
    assert sorted(small.items()) == sorted(values.items())
    for key, value in values.items():
        assert small[key] == value and key in small
    assert small.get("\x00missing") is None


@given(MAPS, st.lists(st.tuples(KEYS, st.one_of(st.none(), st.text(max_size=3))), max_size=20))
def test_a_small_map_changes_as_a_dict_does(values: dict[str, str],
                                            edits: list[tuple[str, str | None]]) -> None:
    small, model = small_map(values), dict(values)
    for key, value in edits:  # None: discard the key
        if value is None:
            small, _ = small.discard(key), model.pop(key, None)
        else:
            small, model[key] = small.set(key, value), value
    assert small == model and hash(small) == hash(pmap(model))
