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

from typing import Optional

import attrs

from ._artifacts import validate_artifact_store_modules, validate_build_graph
from ._errors import Fault
from ._frozen import EMPTY_FROZEN, FrozenMap
from ._inputs import NO_SOURCES, Catalogue, Sources
from ._ledger import EMPTY_LEDGER, Ledger
from ._load import DocumentPositions, positionless
from ._model import EMPTY_MAP, Mesh, Provisions
from ._validate import (
    logins_may_fault,
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
    return validate_reusing(catalogue, mesh, ledger, sources, None)[0]


@attrs.frozen(eq=False)
class Clean:
    """Inputs an earlier validate_reusing found without a fault (None: not known clean): the
    Ledger, and the Catalogue (its own rules and the artifact rules all passed)."""

    ledger: Optional[Ledger] = None
    catalogue: Optional[Catalogue] = None


def validate_reusing(catalogue: Catalogue, mesh: Mesh, ledger: Ledger, sources: Sources,
                     clean: Optional[Clean]) -> tuple[list[Fault], Clean]:
    """(validate(catalogue, mesh, ledger, sources), what of them is clean), skipping the rules
    of the ledger when `clean` holds the very same Ledger object (of another ledger, what it
    holds of that one by identity: _unchecked), and those of the catalogue (its documents'
    and the artifact rules) when it holds the very same Catalogue, or an equal one (the
    inputs are frozen values: the same object, or an equal one, has the same faults, none;
    `sources` only locates a fault, so a clean input is clean wherever it was read from)."""
    faults = list(validate_mesh(mesh, _where(sources, "mesh")))
    ledger_clean = clean is not None and clean.ledger is ledger
    if not ledger_clean:
        ledger_faults = validate_ledger(
            ledger if clean is None or clean.ledger is None else _unchecked(ledger, clean.ledger),
            _where(sources, "ledger"))
        faults += ledger_faults
        ledger_clean = not ledger_faults
    # (a catalogue loaded again holds the very same modules: equal at once)
    catalogue_clean = clean is not None and clean.catalogue is not None and (
        clean.catalogue is catalogue or clean.catalogue == catalogue)
    if not catalogue_clean:
        own = _catalogue_faults(catalogue, sources)
        if not own and not faults:  # the artifact rules need references that already hold
            own += validate_artifact_store_modules(catalogue, sources)
            own += validate_build_graph(catalogue, sources)
            catalogue_clean = not own  # (clean only once the artifact rules have passed too)
        faults += own
    return sorted(set(faults)), Clean(ledger if ledger_clean else None,
                                      catalogue if catalogue_clean else None)


def _unchecked(ledger: Ledger, clean: Ledger) -> Ledger:
    """`ledger` without what it holds of `clean` (a ledger found without a fault) by identity:
    each map validate_ledger reads that is clean's, and each host port entry that is one of
    clean's; and `logins` when validate_ledger says no rule of it can fault them
    (logins_may_fault). Its faults are `ledger`'s: each ledger rule reads one map (the port
    rule one entry at a time; the logins' rule the whole map), so a map, or a port entry,
    found clean is clean wherever it is."""
    ports = ledger.ports
    if ports is clean.ports:
        ports = EMPTY_FROZEN
    else:
        was = clean.ports
        ports = FrozenMap({k: v for k, v in ports.items() if was.get(k) is not v})
    return attrs.evolve(
        ledger, ports=ports,
        credentials=EMPTY_MAP if ledger.credentials is clean.credentials else ledger.credentials,
        certificates=EMPTY_MAP if ledger.certificates is clean.certificates
        else ledger.certificates,
        pins=EMPTY_MAP if ledger.pins is clean.pins else ledger.pins,
        # (whether a rule of validate_ledger can find a fault in `logins`: its own word)
        logins=EMPTY_FROZEN if ledger.logins is clean.logins
        or not logins_may_fault(ledger.logins) else ledger.logins)


def _catalogue_faults(catalogue: Catalogue, sources: Sources) -> list[Fault]:
    """The faults of the catalogue's documents (provisions, each module, between them)."""
    faults = list(validate_provisions(Provisions(catalogue.provisions),
                                      _where(sources, "provisions", skip=1)))
    for name, module in catalogue.modules.items():
        where = _where(sources, f"module:{name}")
        faults += validate_module(module, where)
        if module.name != name:
            faults.append(where.fault(("name",), f"module name {module.name!r} differs from "
                                      "the name it is catalogued under", repr(name)))
    faults += validate_catalogue(catalogue.modules, catalogue.provisions, sources)
    return faults


# What the package's root takes from this module (resolver/__init__.py joins these lists).
__all__ = ["validate"]
