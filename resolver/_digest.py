"""A declaration's digest, defined once.

Invariants:
- The digest covers everything in a declaration except `serial` and `digest` themselves: sha256
  of its canonical JSON, which is json.dumps(unstructure(body), sort_keys=True,
  separators=(",", ":"), ensure_ascii=False) encoded as UTF-8, byte for byte.
- orjson writes that text (keys sorted, no spaces, UTF-8, the standard library's escapes) from
  the shallow converter's parts, without first copying the declaration into dicts and lists;
  what orjson refuses (an integer beyond 64 bits, a key that is not exactly a str, a string
  UTF-8 cannot hold) goes to the standard library's encoder, so those fail or pass as before.
  Declarations hold no floats (every number is an int, and the strict converter refuses a float
  for one), the one type the two encoders write differently without refusing.
- The resolver stamps declarations with it; a node recomputes it over what it was handed and
  never trusts the `digest` field a file claims. No other code computes one.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import attrs
import orjson

from ._convert import NOT_TEXT, is_text, shallow_part, unstructure
from ._declaration import Declaration
from ._errors import Fault, InputError
from ._load import positionless

# The canonical form, as the standard library writes it: the definition, and the encoder for
# what orjson refuses. Unstructured data holds no cycle, so the encoder is spared keeping the
# set of containers it is inside (a declaration holds hundreds of thousands).
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                              check_circular=False)


def canonical_bytes(declaration: Declaration) -> bytes:
    """The canonical JSON of the declaration's contents (everything but `serial` and
    `digest`), UTF-8: what its digest is the sha256 of."""
    body = attrs.evolve(declaration, serial=0, digest="")
    try:
        return orjson.dumps(body, default=shallow_part, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:
        data = unstructure(body)
    try:
        return _CANONICAL.encode(data).encode()
    except UnicodeEncodeError:  # a string no UTF-8 can hold: said where, not a traceback
        raise InputError([_not_text(declaration.node, data)]) from None


def _not_text(node: str, data: Any) -> Fault:
    """The fault of the first string in a declaration's data that UTF-8 cannot hold (a lone
    surrogate: documents read from files are refused on reading, so a model built in code
    carried it here), named by its key path in the declaration."""
    where = positionless(f"declaration of node {node}")
    pending: list[tuple[tuple[Any, ...], Any]] = [((), data)]
    while pending:
        path, value = pending.pop(0)
        if isinstance(value, str) and not is_text(value):
            return where.fault(path, f"holds {value!r}, {NOT_TEXT}", "text")
        if isinstance(value, dict):
            for key, item in value.items():
                if isinstance(key, str) and not is_text(key):
                    return where.fault(path, f"has the key {key!r}, {NOT_TEXT}", "text")
                pending.append((path + (key,), item))
        elif isinstance(value, list):
            pending.extend((path + (index,), item) for index, item in enumerate(value))
    return where.fault((), "cannot be encoded as UTF-8", "text")


def declaration_digest(declaration: Declaration) -> str:
    """"sha256:<hex>" of the declaration's contents (everything but `serial` and `digest`)."""
    return "sha256:" + hashlib.sha256(canonical_bytes(declaration)).hexdigest()
