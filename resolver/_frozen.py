"""FrozenMap: the immutable mapping the resolution's outputs hold (envs, labels, binding values,
a rendering's grants, allows and local openings by node; the ledger's ports, bindings and logins,
which every resolve issues afresh for every instance).

Invariants:
- A FrozenMap never changes after it is built: every method that would change it in place
  raises TypeError; `set`, `discard` and `remove` return a new map, as PMap's do (each copies
  the map: a program that changes one entry after another in a large map should build a dict
  and make one FrozenMap of it).
- It is equal to, and hashes as, the dict and the PMap of the same entries, so a declaration
  read back from JSON (or built by hand with pmaps) compares equal to the one resolved.
- It is one object for the garbage collector to walk, where a PMap is three or more (the map,
  its bucket vector and each bucket): a resolution of 10,000 instances holds tens of thousands
  of these, and with CPython's default collector the number of objects kept is what each full
  collection costs.

Why not a library: `frozendict` patches the standard library's json module when imported (a
pure library must not change the interpreter it is embedded in), and `immutables.Map` does not
compare equal to a dict, which every reader of a declaration compares with.
"""

from __future__ import annotations

from typing import Any, Mapping, NoReturn, Optional, TypeVar

_K = TypeVar("_K")
_V = TypeVar("_V")


class FrozenMap(dict[_K, _V]):
    """An immutable dict: read it as any mapping, derive a changed one with `set`."""

    __slots__ = ()

    def __hash__(self) -> int:  # type: ignore[override]  # (a dict is unhashable)
        # as a PMap of the same entries hashes: the hash of the frozenset of its items
        return hash(frozenset(self.items()))

    def set(self, key: _K, value: _V) -> "FrozenMap[_K, _V]":
        """A new map with `key` bound to `value` (this one unchanged)."""
        changed = dict(self)
        changed[key] = value
        return FrozenMap(changed)

    def discard(self, key: _K) -> "FrozenMap[_K, _V]":
        """A new map without `key` (this one itself when it has no such key)."""
        if key not in self:
            return self
        changed = dict(self)
        del changed[key]
        return FrozenMap(changed)

    def remove(self, key: _K) -> "FrozenMap[_K, _V]":
        """A new map without `key`; KeyError when it has no such key (as PMap.remove)."""
        if key not in self:
            raise KeyError(key)
        return self.discard(key)

    def __reduce__(self) -> tuple[Any, ...]:
        # copy and pickle rebuild it from its entries (a dict subclass's default fills the new
        # object item by item, which this class refuses)
        return (FrozenMap, (dict(self),))

    def __repr__(self) -> str:
        return f"FrozenMap({dict.__repr__(self)})"

    def _refuse(self, *_args: Any, **_kwargs: Any) -> NoReturn:
        """Refused: a FrozenMap is never changed in place (TypeError)."""
        raise TypeError("a FrozenMap cannot be changed: build a new one (`set`)")

    __setitem__ = _refuse
    __delitem__ = _refuse
    __ior__ = _refuse
    clear = _refuse
    pop = _refuse
    popitem = _refuse
    setdefault = _refuse
    update = _refuse


#: The empty FrozenMap, shared (a default costs nothing).
EMPTY_FROZEN: FrozenMap[Any, Any] = FrozenMap()


def kept_or_new(entries: Mapping[_K, _V], recorded: Optional[Mapping[_K, _V]]
                ) -> FrozenMap[_K, _V]:
    """`entries` as a FrozenMap: `recorded` itself when it is a FrozenMap holding equal
    entries (a ledger at its fixed point keeps its objects: fewer made, and the next run,
    handed them back, finds them unchanged by identity: resolver/_context.py
    Context.of_reusing, resolver/_check.py validate_reusing)."""
    if isinstance(recorded, FrozenMap) and recorded == entries:  # (by identity, mostly)
        return recorded
    return entries if isinstance(entries, FrozenMap) else FrozenMap(entries)


# What the package's root takes from this module (resolver/__init__.py joins these lists).
__all__ = ["FrozenMap"]
