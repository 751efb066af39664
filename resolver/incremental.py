"""Incremental resolution: resolve again after a change, reusing what did not change.

    resolve_from(previous: Optional[Reuse], catalogue: Catalogue, mesh: Mesh, ledger: Ledger,
                 *, sources: Sources = NO_SOURCES, now: Optional[str] = None
                 ) -> tuple[Resolution, Reuse]

returns exactly what resolve(catalogue, mesh, ledger, sources=sources, now=now) returns (every
field; the declarations byte for byte), with a `Reuse`: an opaque frozen value holding what the
next call may reuse (each instance's rendering keyed by everything it is made from, each node's
declaration digest keyed by the declaration's contents). Hand it to the next call; nothing is
cached anywhere else (docs/embedding.md).
"""

from ._incremental import Reuse, resolve_from

__all__ = ["Reuse", "resolve_from"]
