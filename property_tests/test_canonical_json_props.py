"""The ledger's and the per-node records' text is canonical JSON that YAML reads as the same
value (resolver.documents.canonical_json, dump_ledger, dump_record): for any plain data of
any text, the document reader (the C parser's fast path, its builder, or the pure parser)
and json read back exactly what was written. And the C parser's path reads any document as
the pure parser does: the same data and positions, or the same faults.
"""

from __future__ import annotations

import json

from hypothesis import example, given
from hypothesis import strategies as st

from resolver import InputError
from resolver.documents import MESH_LIMITS, canonical_json, parse_yaml

TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12), TEXT)
DATA = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(TEXT, inner, max_size=4)), max_leaves=20)


@given(st.dictionaries(TEXT, DATA, max_size=5))
@example({"a": "line\u2028break\x85next\x7f\ufeff\u00e9\U0001F600\t\n\"\\"})
@example({"yes": "no", "1": "0x10", "on": "2024-01-01", "~": None, "": ""})
def test_canonical_json_reads_back_the_same_as_yaml_and_as_json(data):
    text = canonical_json(data)
    assert json.loads(text) == data
    read, _ = parse_yaml(text, "ledger.yaml", MESH_LIMITS)
    assert read == data


YAMLISH = st.lists(st.sampled_from(list("ab1 :-[]{},'\"#&*!|>%@\n\t?.~") + ["  ", "- ", ": "]),
                   max_size=40).map("".join)


@given(YAMLISH)
@example("a: &x 1\nb: *x\n")
@example("a: 1\na: 2\n")
@example("%YAML 1.1\n---\na: 1\n")
@example("a: !!str 3\n")
@example("<<: {a: 1}\nb: 2\n")
@example("a: [1, 2\n")
def test_the_c_parsers_paths_read_every_document_as_the_pure_parser(text):
    """The C parser's paths (resolver/_yaml.py: a one-loop reader for the common document, the
    builder for the rest, the pure parser for anything they refuse) against the pure parser."""
    def outcome(pure):
        try:
            data, where = parse_yaml(text, "f.yaml", MESH_LIMITS, pure=pure)
            return "read", data, where.tree
        except InputError as error:
            return "faults", [str(f) for f in error.faults]

    assert outcome(pure=False) == outcome(pure=True)
