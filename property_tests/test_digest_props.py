"""The digest's bytes are the canonical form, whichever encoder wrote them.

The definition is the standard library's json.dumps(unstructure(body), sort_keys=True,
separators=(",", ":"), ensure_ascii=False) in UTF-8; declaration_digest hashes what orjson
writes from the shallow converter's parts, or the standard library's text where orjson refuses.
Here the declarations hold any text (control characters, quotes, non-ASCII, U+2028), integers
far past 64 bits, StrEnum members as values and as keys, PMaps where FrozenMaps are usual, and
attributes at and off their defaults, so the key order, the renames, the omissions, the escapes
and the fallback are all compared against the definition.
"""

import hashlib
import json

import attrs
from hypothesis import given
from hypothesis import strategies as st
from pyrsistent import pmap, pvector

from resolver import (ChosenBy, ContainerDecl, Declaration, FrozenMap, HeldDecl, ProblemCode,
                      PublishedPort, SecretRef, Severity, StateDirDecl)
from resolver.documents import unstructure
from resolver.rendering import declaration_digest

try:
    from .strategies_documents import documents, names, texts
except ImportError:  # property_tests/ is not a package
    from strategies_documents import documents, names, texts

WIDE_INTS = st.one_of(st.integers(-(2**40), 2**40), st.integers(), st.integers(2**63, 2**65),
                      st.integers(-(2**65), -(2**63)))
ENUM_TEXT = st.one_of(texts, st.sampled_from([*ProblemCode, *ChosenBy, *Severity]))

ENVS = st.dictionaries(st.one_of(names, st.sampled_from(list(ChosenBy))), ENUM_TEXT,
                       max_size=3)

OVERRIDES = {
    (PublishedPort, "host_port"): WIDE_INTS,
    (StateDirDecl, "uid"): WIDE_INTS,
    (SecretRef, "generation"): st.one_of(st.none(), WIDE_INTS),
    (HeldDecl, "line"): WIDE_INTS,
    (HeldDecl, "code"): ENUM_TEXT,
    (ContainerDecl, "env"): ENVS.map(FrozenMap),
}


@st.composite
def declarations(draw):
    """Any declaration, holding at least one container whose env is drawn (not left at its
    default), as a FrozenMap or, as a declaration built by hand may, a PMap of the entries."""
    declaration = draw(documents(Declaration, OVERRIDES))
    containers = draw(st.lists(documents(ContainerDecl, OVERRIDES, depth=1), min_size=1,
                               max_size=3))
    as_map = draw(st.sampled_from([FrozenMap, pmap]))
    containers = [attrs.evolve(c, env=as_map(draw(ENVS))) for c in containers]
    return attrs.evolve(declaration, containers=pvector(containers))


def definition(declaration: Declaration) -> bytes:
    """The canonical form as the documentation states it."""
    body = unstructure(attrs.evolve(declaration, serial=0, digest=""))
    return json.dumps(body, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False).encode("utf-8")


@given(declarations())
def test_digest_bytes_are_the_standard_library_canonical_text(declaration):
    canonical = definition(declaration)
    assert declaration_digest(declaration) == (
        "sha256:" + hashlib.sha256(canonical).hexdigest()), canonical.decode()


@given(declarations(), st.integers(), st.text())
def test_serial_and_digest_are_not_covered(declaration, serial, digest):
    assert declaration_digest(attrs.evolve(declaration, serial=serial, digest=digest)) == (
        declaration_digest(declaration))
