"""A declaration's digest, defined once.

Invariants:
- The digest covers everything in a declaration except `serial` and `digest` themselves: sha256
  of its canonical JSON (keys sorted, no spaces, UTF-8), so it is byte-stable.
- The resolver stamps declarations with it; a node recomputes it over what it was handed and
  never trusts the `digest` field a file claims. No other code computes one.
"""

from __future__ import annotations

import hashlib
import json

import attrs

from ._convert import unstructure
from ._declaration import Declaration


# The canonical form is json.dumps(body, sort_keys=True, separators=(",", ":"),
# ensure_ascii=False), byte for byte. Unstructured data holds no cycle, so the encoder is
# spared keeping the set of containers it is inside (a declaration holds hundreds of thousands).
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                              check_circular=False)


def declaration_digest(declaration: Declaration) -> str:
    """"sha256:<hex>" of the declaration's contents (everything but `serial` and `digest`)."""
    body = unstructure(attrs.evolve(declaration, serial=0, digest=""))
    canonical = _CANONICAL.encode(body)
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()
