"""`mesh plan`'s computation: the mesh resolved in one ledger transaction, compared with the
declarations each node was last given, and (when asked) written and recorded.

Invariants:
- One transaction (control/ledger_transaction.transact): with `--out`, `--write-ledger` or
  `--issue` the ledger lock is held around the whole load → resolve → write; without them
  nothing is locked or written (a dry run).
- The declarations are resolved and written by the path the control loop takes too
  (control/declarations: resolve_for_writing → write_and_record), so serials never go
  backwards: those of the declarations already in `--out` count.
- A node named that the mesh does not have is an InputError raised before anything is written.
- What is kept: with `out`, the ledger recording the declarations written; with
  `write_ledger` or `issue` alone, the resolution's ledger; otherwise nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Optional

import attrs

from resolver import (
    ContainerChange,
    DeclarationChange,
    Fault,
    Inputs,
    InputError,
    Ledger,
    Resolution,
    container_changes,
    declaration_changes,
)

from executors.control.declarations import (
    previous_declarations,
    read_declarations,
    resolve_for_writing,
    write_and_record,
)
from executors.control.ledger_transaction import Transacted, transact
from executors.control.loading import PathLike

if TYPE_CHECKING:  # the control extra (PyNaCl): `mesh plan` without --issue runs without it
    from nacl.public import PrivateKey


@attrs.frozen
class Plan:
    """What `mesh plan` shows: the resolution, the nodes shown and every change against the
    declarations compared with."""

    resolution: Resolution
    nodes: tuple[str, ...]  # the nodes shown, sorted
    diff: tuple[DeclarationChange, ...]  # changes of the nodes shown, against `against`
    against: str  # what was compared with, said for people
    compared: bool  # False: there was nothing to compare with
    # with `out`: the container changes against the declarations already there
    changes: Optional[tuple[ContainerChange, ...]]
    notes: tuple[str, ...]  # what the issuer did (names and generations, never a value)


def plan(mesh_dir: PathLike, *, now: str, out: Optional[PathLike] = None,
         against: Optional[PathLike] = None, nodes: Optional[Iterable[str]] = None,
         write_ledger: bool = False, issue: bool = False,
         control_key: Optional[PrivateKey] = None) -> Transacted[Plan]:
    """Resolve the mesh in `mesh_dir` (issuing its requests with `issue`), compare it with the
    declarations last given, write `out`'s declarations and keep the ledger when asked."""
    writes = bool(out or write_ledger or issue)

    def compute(inputs: Inputs) -> tuple[Ledger, Plan]:
        previous = read_declarations(Path(out)) if out else {}
        compared, said = previous_declarations(mesh_dir, out, against,
                                               in_out=previous if out else None)
        notes: list[str] = []
        resolution = resolve_for_writing(inputs, previous, now=now, issue=issue,
                                         control_key=control_key, notes=notes)
        changes = tuple(container_changes(previous, resolution.declarations)) if out else None
        shown = sorted(nodes) if nodes else sorted(resolution.declarations)
        unknown = [n for n in shown if n not in resolution.declarations]
        if unknown:
            raise InputError([Fault("--node", 0, 0, f"no node named {n!r} in the mesh",
                                    "one of " + ", ".join(sorted(resolution.declarations)))
                              for n in unknown])
        showing = set(shown)
        diff = tuple(c for c in declaration_changes(compared or {}, resolution.declarations)
                     if c.node in showing)
        if out:
            kept = write_and_record(resolution, Path(out), shown)
        elif write_ledger or issue:
            kept = resolution.ledger
        else:
            kept = inputs.ledger
        return kept, Plan(resolution, tuple(shown), diff, said, compared is not None, changes,
                          tuple(notes))

    return transact(mesh_dir, compute, write=writes)
