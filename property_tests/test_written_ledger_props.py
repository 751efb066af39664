"""What the control loop's ledger write keeps as read back (resolver.documents.written_ledger)
is what the document reader reads from the text it writes: for any ledger, the same data
(values, types and key order: json's reading of dump_ledger's text is the YAML reader's) and
the same positions and key order at every key path (its positions are laid out from
dump_ledger's layout, each entry's value read alone when a path descends into it); a text
past one of the reader's limits is refused with the reader's own fault.
executors/control/loading.write_ledger checks at run time that json's reading structures
back to the ledger it records; this property is the rest of "what is written reads back as
what it records".
"""

from __future__ import annotations

import copy
from typing import Any, Iterator

import attrs

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from pyrsistent import pmap

from resolver import InputError, Ledger, PortAssignment
from resolver.documents import (MESH_LIMITS, DocumentPositions, dump_ledger, parse_yaml,
                                written_ledger)

try:
    from .strategies_documents import documents, valid_ledgers
except ImportError:  # property_tests/ is not a package
    from strategies_documents import documents, valid_ledgers

LEDGERS = st.one_of(valid_ledgers(), documents(Ledger))


def key_paths(data: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path into `data`, and a few that leave it (a missing key, an index too far, an
    index into a mapping, a key into a list, an element that is no key at all)."""
    yield path
    if isinstance(data, dict):
        for key, value in data.items():
            yield from key_paths(value, path + (key,))
        yield path + ("not-a-key",)
        yield path + (0,)
    elif isinstance(data, list):
        for index, value in enumerate(data):
            yield from key_paths(value, path + (index,))
        yield path + (len(data),)
        yield path + ("0",)
    yield path + (["unhashable"], "after")


def same_positions(written: DocumentPositions, read: DocumentPositions, data: Any) -> None:
    """`written` answers position() (of the value and of its key) and key_order() as `read`
    does, for every path into `data` and some that leave it."""
    assert (written.file, written.skip) == (read.file, read.skip)
    for path in key_paths(data):
        for at_key in (False, True):
            assert written.position(path, at_key=at_key) == read.position(path, at_key=at_key), \
                (path, at_key)
        assert written.key_order(path) == read.key_order(path), path


@given(LEDGERS)
@example(Ledger(bindings=pmap({"c": pmap({"db": "\x85\u2028\ufeff\U0001F600é\t\"\\"})})))
@example(Ledger(pins=pmap({"sha256:" + "0" * 64: "[" + "1" * 40 + "," + "2" * 40})))
@example(Ledger(ports=pmap({"a@n": pmap({"http": PortAssignment(node="n", port=8080)})}),
                ca="-----BEGIN CERTIFICATE-----\nMII\n-----END CERTIFICATE-----\n"))
@example(Ledger(ports=pmap({'a"\\\x85é@n': pmap({"h\u2028\U0001F600": PortAssignment(
    node="é\x85", port=1)})}), bindings=pmap({"\U0001F600": pmap({"k": "v"})})))
def test_the_written_ledger_is_what_the_reader_reads_from_its_text(ledger):
    text, parsed = written_ledger(ledger, "ledger.yaml")
    assert text == dump_ledger(ledger)
    for pure in (False, True):  # the C parser's paths and the pure parser
        data, where = parse_yaml(text, "ledger.yaml", MESH_LIMITS, pure=pure)
        assert repr(parsed.data) == repr(data)  # types (1 is not True) and key order too
        same_positions(parsed.where, where, data)


@pytest.mark.parametrize("ledger", [
    Ledger(pins=pmap({"a": "x" * 70_000})),  # a string past MAX_STRING
    Ledger(ports=pmap({"a@n": pmap({"http": PortAssignment(node="n", port=-10**40)})})),
], ids=["long-string", "long-number"])
def test_a_ledger_past_a_limit_of_the_reader_is_refused_as_the_reader_refuses_it(ledger):
    text = dump_ledger(ledger)
    with pytest.raises(InputError) as reader:
        parse_yaml(text, "ledger.yaml", MESH_LIMITS)
    with pytest.raises(InputError) as writer:
        written_ledger(ledger, "ledger.yaml")
    assert [str(f) for f in writer.value.faults] == [str(f) for f in reader.value.faults]


def test_the_positions_it_keeps_are_plain_data_and_never_change():
    """Its source map is laid out down to each section's entries, an entry's collection held
    as its one line of text (a str): plain data (tests/test_source_map.py), nothing of the
    parser, and the very same after positions are asked for inside an entry (nothing read is
    kept: resolver modules write no state, tests/test_resolver_stages.py)."""
    plain = (tuple, dict, list, int, str, float, bool, type(None))
    ledger = Ledger(ports=pmap({"a@n": pmap({"http": PortAssignment(node="n", port=8080)}),
                                "b@n": pmap({"ssh": PortAssignment(node="n", port=22)})}))
    _, parsed = written_ledger(ledger, "ledger.yaml")
    where = parsed.where
    before = copy.deepcopy(where.tree)
    entry = where.tree[2]["ports"][4]["a@n"]
    assert entry[:4] == (3, 1, 3, 7) and entry[4] == '{"http":{"node":"n","port":8080}}'
    assert where.position(("ports", "a@n", "http", "port")) == (3, 34)
    assert where.position(("ports", "b@n", "ssh"), at_key=True) == (4, 8)
    assert where.key_order(("ports", "a@n", "http")) == ("node", "port")
    assert where.tree == before and entry is where.tree[2]["ports"][4]["a@n"]
    found, stack = [], [where.tree]
    while stack:
        value = stack.pop()
        found.append(type(value))
        stack.extend(value if isinstance(value, (tuple, list)) else
                     [x for kv in value.items() for x in kv] if isinstance(value, dict) else [])
    assert set(found) <= set(plain)


@given(LEDGERS, LEDGERS, st.data())
def test_a_ledger_written_after_another_is_the_text_written_whole(first, second, data):
    """dump_ledger(x, previous=(y, dump_ledger(y))) is dump_ledger(x): the lines kept from
    the last text are those of equal entries only, for any two ledgers and for a ledger
    edited from another (entries changed, added and removed in one section)."""
    edited = second
    for section in ("ports", "bindings", "logins", "pins"):
        mine, theirs = getattr(first, section), getattr(second, section)
        names = sorted(set(mine) | set(theirs), key=repr)
        chosen = data.draw(st.lists(st.sampled_from(names), unique=True), label=section) \
            if names else []
        edited = attrs.evolve(edited, **{section: pmap({
            **{n: v for n, v in mine.items() if n not in chosen},
            **{n: theirs[n] for n in chosen if n in theirs}})})
    for before, after in ((first, second), (first, edited), (edited, first)):
        text = dump_ledger(before)
        assert dump_ledger(after, (before, text)) == dump_ledger(after)
        assert written_ledger(after, "ledger.yaml", (before, text))[0] == dump_ledger(after)
    # a text not laid out for its ledger is not used
    assert dump_ledger(second, (first, dump_ledger(second))) == dump_ledger(second)
