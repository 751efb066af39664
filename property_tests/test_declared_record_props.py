"""The join of the per-node records into the ledger, changed where they changed
(resolver.documents.rejoined, the control loop's loader), equals the whole join
(with_records) of the records now: for random records before and after, each instance in one
record, some records kept as the very same objects, some read again equal, some gone, some new.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from pyrsistent import pmap, pvector

from resolver import InstanceRendering, Ledger
from resolver.documents import NodeRecord, rejoined, with_records

NODES = ("n1", "n2", "n3", "n4")
INSTANCES = tuple(f"app{i}" for i in range(8))


@st.composite
def records(draw: st.DrawFn) -> dict[str, NodeRecord]:
    """Records of some of NODES, each instance in at most one of them."""
    placed = draw(st.dictionaries(st.sampled_from(INSTANCES), st.sampled_from(NODES)))
    found: dict[str, NodeRecord] = {}
    for node in draw(st.sets(st.sampled_from(NODES))) | set(placed.values()):
        written = draw(st.booleans())
        found[node] = NodeRecord(
            node=node, epoch=draw(st.integers(0, 3)),
            serial=draw(st.integers(1, 3)) if written else None,
            digest=draw(st.sampled_from(("d1", "d2"))) if written else None,
            declared=pmap({name: InstanceRendering(node=node, claims=pvector(draw(
                st.sampled_from(((), ("one",))))))
                for name, on in placed.items() if on == node}))
    return found


def _join(found: dict[str, NodeRecord]) -> Ledger:
    return with_records(Ledger(), found.values())


@given(records(), records(), st.data())
def test_a_join_changed_where_records_changed_equals_the_whole_join(before, after, data):
    # a record the reader did not read again is the very object it had: keep some of them
    for node in data.draw(st.sets(st.sampled_from(sorted(before)))) if before else ():
        if node in after and not set(before[node].declared).intersection(
                name for other, record in after.items() if other != node
                for name in record.declared):
            after[node] = before[node]
    assert rejoined(_join(before), before, after) == _join(after)


@given(records())
def test_nothing_changed_is_the_same_join(found):
    joined = _join(found)
    assert rejoined(joined, found, dict(found)) is joined
