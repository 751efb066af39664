"""The resolver's inputs gathered: a catalogue, and where every document came from.

Invariants:
- A Catalogue is modules by name plus provision definitions; it is data, not a directory.
- Sources maps each document to its positions so problems can name file:line:col; it never
  takes part in equality, so the same documents from other paths resolve identically.
- Document keys: "mesh", "provisions", "ledger", "module:<name>".
"""

from __future__ import annotations

from typing import Any, Optional

import attrs
from pyrsistent import pmap
from pyrsistent.typing import PMap

from ._load import DocumentPositions
from ._model import EMPTY_MAP, Module, Provision


@attrs.frozen
class Catalogue:
    """The modules by name and the provision definitions: data, not a directory."""

    modules: PMap[str, Module] = EMPTY_MAP
    provisions: PMap[str, Provision] = EMPTY_MAP


@attrs.frozen(eq=False)
class Sources:
    """Where each input document came from, to locate problems as file:line:col; it takes
    no part in equality."""

    documents: PMap[str, DocumentPositions] = attrs.field(default=pmap())

    def where(self, document: str, *path: Any, at_key: bool = False) -> tuple[str, int, int]:
        """(file, line, col) of the value at `path` in `document` (of its key with
        `at_key`); the deepest place along `path` the document has, (document, 0, 0) when its
        positions are not known."""
        doc: Optional[DocumentPositions] = self.documents.get(document)
        if doc is None:
            return (document, 0, 0)
        line, col = doc.position(tuple(path), at_key=at_key)
        return (doc.file, line, col)

    def key_order(self, document: str, *path: Any) -> tuple[str, ...]:
        """The keys of the mapping at `path` in `document`, in the order written; empty when
        the document's positions are not known (a mesh built in code has no written order)."""
        doc: Optional[DocumentPositions] = self.documents.get(document)
        return doc.key_order(tuple(path)) if doc is not None else ()

    def file(self, document: str) -> str:
        """The file `document` was read from (the document's key when not known)."""
        doc = self.documents.get(document)
        return doc.file if doc is not None else document


#: The sources of documents built in code: no positions, so faults name key paths.
NO_SOURCES = Sources()


# What the package's root takes from this module (resolver/__init__.py joins these lists).
__all__ = ["Catalogue", "Sources"]
