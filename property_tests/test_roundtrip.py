"""Every document survives the converter, and the ledger survives its own YAML text.

structure(unstructure(x)) == x is cattrs' headline property; here it also proves that the
yaml_key renames and the omission of defaults lose nothing. The ledger is the one document
the mesh writes, so its text round trip is a property too: what dump_ledger writes,
load_ledger reads back equal, and writing it again gives the same bytes.
"""

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from pyrsistent import pmap

from resolver import Ledger
from resolver.documents import dump_ledger, load_ledger, structure, unstructure

try:
    from .strategies_documents import DOCUMENT_TYPES, documents, valid_ledgers
except ImportError:  # property_tests/ is not a package
    from strategies_documents import DOCUMENT_TYPES, documents, valid_ledgers


@pytest.mark.parametrize("cls", DOCUMENT_TYPES, ids=lambda c: c.__name__)
@given(data=st.data())
def test_structure_unstructure_round_trip(cls, data):
    document = data.draw(documents(cls))
    plain = unstructure(document)
    assert structure(plain, cls) == document
    assert unstructure(structure(plain, cls)) == plain


@given(valid_ledgers())
@example(Ledger(bindings=pmap({"c": pmap({"db": "\x85"})})))  # NEL was written raw, read as a space
def test_ledger_text_round_trip(ledger):
    text = dump_ledger(ledger)
    reread, _ = load_ledger(text, "ledger.yaml")
    assert reread == ledger
    assert dump_ledger(reread) == text
