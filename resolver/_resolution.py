"""The whole result of one resolve(): declarations, renderings, bindings, problems, requests,
notable changes and the new ledger.

Invariants:
- Everything the resolver decides is here; nothing it decides is anywhere else.
- `renderings` holds the rendering of every instance declared live in this resolution (not
  the held ones: theirs is the ledger's, unchanged). What was written out is recorded in the
  ledger only by resolver.rendering.record_declared, called by whatever writes declarations.
- `ledger` is the input ledger with what this resolution issued (ports, logins, bindings) and
  released; it never advances the record of what was declared (serials, renderings).
"""

from __future__ import annotations

from typing import Optional

import attrs
from pyrsistent.typing import PMap, PVector

from ._declaration import Binding, Change, Declaration, InstanceRendering, Problem, Request
from ._ledger import Ledger
from ._frozen import EMPTY_FROZEN, FrozenMap


@attrs.frozen
class Resolution:
    """The whole mesh state resolve() computes: declarations per node, bindings,
    problems, requests for the issuer, changes, the ledger to keep, and the artifact store."""

    declarations: PMap[str, Declaration]
    bindings: PVector[Binding]
    problems: PVector[Problem]
    requests: PVector[Request]
    changes: PVector[Change]
    ledger: Ledger
    artifacts: str = "external"  # external | self-hosting
    registry: Optional[str] = None  # "host:port" of the mesh's own registry (choose_artifact_store)
    registry_instance: Optional[str] = None  # the instance that is that registry
    renderings: FrozenMap[str, InstanceRendering] = EMPTY_FROZEN  # live instance → its rendering

    @property
    def refused(self) -> bool:
        """Whether any problem is an error (the mesh fails the check)."""
        return any(p.severity == "error" for p in self.problems)

    @property
    def held(self) -> list[str]:
        """Instances refused now and declared at their last good rendering."""
        return sorted({h.instance for d in self.declarations.values() for h in d.held})


# What the package's root takes from this module (resolver/__init__.py joins these lists).
__all__ = ["Resolution"]
