"""Properties of the sealed extracts a publish sends (executors/control/publish.py).

- `sealed_extracts(ledger, nodes)` (one pass over the ledger, as `send` makes them for every
  node it publishes to) gives each node exactly what filtering the whole ledger for that node
  alone gives: the credentials with a box for it, each generation holding its box alone,
  nothing sealed to another node, never the escrow; a node with no box gets an empty ledger.

Seen to fail on deliberate breaks of publish.sealed_extracts (a holder of a `pending`
generation only left out; the boxes of every holder kept): see the report of issue 33.
"""

from __future__ import annotations

from typing import Optional

from hypothesis import given
from hypothesis import strategies as st
from pyrsistent import pmap

from resolver import Credential, Generation, Ledger

from executors.control.publish import sealed_extracts

NODES = ("n1", "n2", "n3", "n4")


@st.composite
def generations(draw: st.DrawFn) -> Optional[Generation]:
    if draw(st.booleans()):
        return None
    holders = draw(st.sets(st.sampled_from(NODES)))
    return Generation(generation=draw(st.integers(1, 5)),
                      slot=draw(st.sampled_from([None, "a", "b"])),
                      sealed=pmap({h: f"box-{h}-{draw(st.integers(0, 9))}" for h in holders}),
                      escrow=pmap({"ctl": "escrow-box"}) if draw(st.booleans()) else pmap())


@st.composite
def ledgers(draw: st.DrawFn) -> Ledger:
    ids = draw(st.sets(st.sampled_from([f"db/p{i}/a" for i in range(6)]
                                       + [f"secret/x/{i}" for i in range(4)]), max_size=8))
    return Ledger(credentials=pmap({
        i: Credential(active=draw(generations()), retiring=draw(generations()),
                      pending=draw(generations())) for i in ids}))


def filtered(ledger: Ledger, node: str) -> Ledger:
    """The oracle: the whole ledger filtered for `node` alone, credential by credential."""

    def only(generation: Optional[Generation]) -> Optional[Generation]:
        if generation is None or node not in generation.sealed:
            return None
        return Generation(generation=generation.generation, slot=generation.slot,
                          sealed=pmap({node: generation.sealed[node]}))

    kept = {}
    for credential_id, credential in ledger.credentials.items():
        extract = Credential(active=only(credential.active),
                             retiring=only(credential.retiring),
                             pending=only(credential.pending))
        if (extract.active, extract.retiring, extract.pending) != (None, None, None):
            kept[credential_id] = extract
    return Ledger(credentials=pmap(kept))


@given(ledgers(), st.sets(st.sampled_from(NODES + ("n5",))))
def test_every_nodes_extract_is_the_ledger_filtered_for_it_alone(ledger, nodes):
    extracts = sealed_extracts(ledger, nodes)
    assert set(extracts) == nodes
    for node in nodes:
        assert extracts[node] == filtered(ledger, node)
        for credential in extracts[node].credentials.values():
            for generation in (credential.active, credential.retiring, credential.pending):
                if generation is not None:
                    assert set(generation.sealed) == {node} and not generation.escrow
