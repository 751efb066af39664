"""validate(): the faults of inputs held in memory, by the same rules loading applies.

Invariants:
- One owner per rule: this runs the very validators the loader runs on each document
  (validate_mesh, validate_ledger, validate_module, validate_provisions, validate_catalogue and
  the artifact rules), so a model built in code is held to what a file is held to.
- A fault in a document read from text is located at file:line:col (its positions are in
  `sources`); in a document built in code it is named by document key and key path
  (`mesh: nodes.anchor.address: …`).
- resolve() runs it on entry: inputs with faults raise InputError (every fault at once), never
  a KeyError from deep inside or a value rendered from nothing.
"""

from __future__ import annotations

from ._artifacts import validate_artifact_store_modules, validate_build_graph
from ._errors import Fault
from ._inputs import NO_SOURCES, Catalogue, Sources
from ._ledger import EMPTY_LEDGER, Ledger
from ._load import DocumentPositions, positionless
from ._model import Mesh, Provisions
from ._validate import (
    validate_catalogue,
    validate_ledger,
    validate_mesh,
    validate_module,
    validate_provisions,
)


def _where(sources: Sources, document: str, skip: int = 0) -> DocumentPositions:
    found: DocumentPositions | None = sources.documents.get(document)
    return found if found is not None else positionless(document, skip)


def validate(catalogue: Catalogue, mesh: Mesh, ledger: Ledger = EMPTY_LEDGER,
             sources: Sources = NO_SOURCES) -> list[Fault]:
    """Every fault of the inputs, sorted, each once: addresses and ports, names, placeholders
    naming requirements and keys that exist, containers naming artifacts their module has,
    ledger values, the artifact rules. Empty when resolve() can take them."""
    faults = list(validate_mesh(mesh, _where(sources, "mesh")))
    faults += validate_ledger(ledger, _where(sources, "ledger"))
    faults += validate_provisions(Provisions(catalogue.provisions),
                                  _where(sources, "provisions", skip=1))
    for name, module in catalogue.modules.items():
        where = _where(sources, f"module:{name}")
        faults += validate_module(module, where)
        if module.name != name:
            faults.append(where.fault(("name",), f"module name {module.name!r} differs from "
                                      "the name it is catalogued under", repr(name)))
    faults += validate_catalogue(catalogue.modules, catalogue.provisions, sources)
    if not faults:  # the artifact rules need a catalogue whose references already hold
        faults += validate_artifact_store_modules(catalogue, sources)
        faults += validate_build_graph(catalogue, sources)
    return sorted(set(faults))


# What the package's root takes from this module (resolver/__init__.py joins these lists).
__all__ = ["validate"]
