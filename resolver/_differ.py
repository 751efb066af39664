"""Which keys of two versions of a map differ: what the incremental stages work out again.

Invariants:
- A key is in the answer when `now` holds another value for it than `before` (by identity, or
  by equality for maps of plain values), or only one of the two holds it.
- The same map object twice differs nowhere (nothing is walked).
- Pure, as the rest of the resolver.
"""

from __future__ import annotations

from typing import Mapping, TypeVar

_K = TypeVar("_K")

_ABSENT = object()


def differing(before: Mapping[_K, object], now: Mapping[_K, object], same: bool = False
              ) -> set[_K]:
    """The keys whose value in `now` is not `before`'s (`same`: not the very object; else
    not equal), those only one of them holds included."""
    if before is now:
        return set()
    if same:
        found = {k for k, v in now.items() if before.get(k, _ABSENT) is not v}
    else:
        found = {k for k, v in now.items() if before.get(k, _ABSENT) != v}
    found.update(before.keys() - now.keys())
    return found


def differing_plain(before: Mapping[_K, object], now: Mapping[_K, object]) -> set[_K]:
    """differing(before, now) of maps whose values are plain strings or numbers (hashed and
    compared in C: the entries either holds and the other does not)."""
    if before is now:
        return set()
    return {k for k, _ in now.items() ^ before.items()}
