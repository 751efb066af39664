"""What the control loop's ledger write keeps as read back (resolver.documents.written_ledger)
is what the document reader reads from the text it writes: for any ledger, the same data
(values, types and key order: json's reading of dump_ledger's text is the YAML reader's) and
the same positions and key order at every key path (its positions are laid out from
dump_ledger's layout, each entry's value read alone when a path descends into it); a text
past one of the reader's limits is refused with the reader's own fault. written_ledger
checks at run time that what it lays out loads back as the ledger it records (after the
ledger's last text: each changed entry's line); these properties are the rest of "what is
written reads back as what it records": a ledger written after the text of another is the
ledger written whole.
"""

from __future__ import annotations

import copy
from typing import Any, Iterator

import attrs

import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st
from pyrsistent import pmap

from resolver import InputError, Ledger, PortAssignment
from resolver.documents import (MESH_LIMITS, DocumentPositions, dump_ledger, load_ledger,
                                parse_yaml, written_ledger)

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
    text = dump_ledger(ledger)
    try:
        read, _ = load_ledger(text, "ledger.yaml")
    except InputError as error:  # the writer refuses it with the reader's faults
        assert written_or_fault(ledger) == [str(f) for f in error.faults]
        return
    written = written_ledger(ledger, "ledger.yaml")
    assert read == ledger and written.text == text and written.ledger is ledger
    for pure in (False, True):  # the C parser's paths and the pure parser
        data, where = parse_yaml(text, "ledger.yaml", MESH_LIMITS, pure=pure)
        assert repr(written.parsed.data) == repr(data)  # types (1 is not True), key order too
        same_positions(written.parsed.where, where, data)


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
    where = written_ledger(ledger, "ledger.yaml").parsed.where
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


EDITED = ("ports", "bindings", "logins", "pins", "credentials", "certificates")


def edited(first: Ledger, second: Ledger, data: Any, *, shape: bool = False) -> Ledger:
    """`first` with entries of `second` drawn into each section: changed, added and removed;
    with `shape`, no section begun or emptied."""
    result = first
    for section in EDITED:
        mine, theirs = getattr(first, section), getattr(second, section)
        names = sorted(set(mine) | set(theirs), key=repr)
        chosen = data.draw(st.lists(st.sampled_from(names), unique=True), label=section) \
            if names and not (shape and not mine) else []
        kept = {n: v for n, v in mine.items() if n not in chosen}
        kept.update({n: theirs[n] for n in chosen if n in theirs})
        if shape and mine and not kept:
            kept = dict([next(iter(mine.items()))])
        result = attrs.evolve(result, **{section: type(getattr(Ledger(), section))(kept)
                                         if isinstance(mine, dict) else pmap(kept)})
    return result


def same_written(again, whole) -> None:
    """Two WrittenLedgers of one ledger are the same: text, data (types and order), every
    position and key order."""
    assert again.text == whole.text and again.ledger is whole.ledger
    assert repr(again.parsed.data) == repr(whole.parsed.data)
    assert again.parsed.where.tree == whole.parsed.where.tree
    same_positions(again.parsed.where, whole.parsed.where, whole.parsed.data)


def written_or_fault(ledger: Ledger, previous=None):
    try:
        return written_ledger(ledger, "ledger.yaml", previous)
    except InputError as error:
        return [str(f) for f in error.faults]


@given(LEDGERS, LEDGERS, st.data())
def test_a_ledger_written_after_another_is_the_ledger_written_whole(first, second, data):
    """written_ledger(x, previous=written_ledger(y)) is written_ledger(x): the text (the
    lines kept from the last text are those of equal entries only), the data read, every
    position, and the same fault where x does not load, for any two ledgers and for a ledger
    edited from another (entries changed, added and removed, sections begun and emptied)."""
    middle = edited(first, second, data)
    for before, after in ((first, second), (first, middle), (middle, first), (middle, second)):
        previous = written_or_fault(before)
        if isinstance(previous, list):
            continue  # a ledger that does not load is never a previous text
        again, whole = written_or_fault(after, previous), written_or_fault(after)
        if isinstance(whole, list):
            assert again == whole
        else:
            same_written(again, whole)
            assert same_written(written_ledger(after, "ledger.yaml", again), whole) is None


def merged(first: Ledger, second: Ledger) -> Ledger:
    """`first` with `second`'s entries added to each edited section."""
    return attrs.evolve(first, **{
        s: type(getattr(first, s))({**getattr(first, s), **getattr(second, s)})
        if isinstance(getattr(first, s), dict) else getattr(first, s).update(getattr(second, s))
        for s in EDITED})


@given(valid_ledgers(), valid_ledgers(), st.data())
def test_an_edited_ledger_written_after_its_last_text_is_the_ledger_written_whole(
        first, other, data):
    """The control loop's case: a valid ledger (no `declared`: the records are files of
    their own) edited in its entries, no section begun or emptied, written after the text
    of the ledger before the edit: the result is the ledger written whole (or its faults),
    and so is writing back the first again."""
    first = merged(merged(attrs.evolve(first, declared=pmap()), other), first)
    second = edited(first, other, data, shape=True)
    previous = written_or_fault(first)
    assume(not isinstance(previous, list))  # two credentials given one login by the merge
    again, whole = written_or_fault(second, previous), written_or_fault(second)
    if isinstance(whole, list):
        assert again == whole
    else:
        same_written(again, whole)
        same_written(written_ledger(first, "ledger.yaml", again), previous)


def test_an_edit_of_one_entry_is_laid_out_from_the_last_text():
    """A changed entry moves the lines after it; an added one shifts every later section;
    the result is the ledger written whole (the positions of the entries after it too)."""
    ports = {f"a{i}@n": pmap({"http": PortAssignment(node="n", port=8000 + i)}) for i in range(5)}
    first = Ledger(ports=pmap(ports), pins=pmap({"r:t": "sha256:" + "0" * 64}),
                   bindings=pmap({"c": pmap({"db": "p"})}))
    second = attrs.evolve(first, ports=first.ports.set(
        "a22@n", pmap({"http": PortAssignment(node="n", port=9000)})),
        bindings=first.bindings.set("b", pmap({"db": "q"})))
    previous = written_ledger(first, "ledger.yaml")
    again = written_ledger(second, "ledger.yaml", previous)
    same_written(again, written_ledger(second, "ledger.yaml"))
    path = ("ports", "a3@n", "http", "port")
    assert previous.parsed.where.position(path, at_key=True) == (12, 28)
    assert again.parsed.where.position(path, at_key=True) == (14, 28)  # two lines down
