"""The pure core of `mesh apply`: the node's desired and observed state, the diff of them
(executors/node/apply/compare.py, re-exported here), the model `after`, config digests and
latest-wins.

Invariants:
- Pure: values in, values out; no I/O, clock or environment.
- One comparison: `diff` is compare.py's (standard library only, so the no-op check of
  apply/fast.py asks the very same one); this module adds what only the full path needs.
- Convergence: diff(d, after(o, diff(d, o).ops)) is empty for every d, o (property-tested);
  `after` is the model of what the executor does, kept next to the diff it must agree with.
- Refusals, kept directories, health checks and the order of operations: compare.py's
  invariants.
"""

from __future__ import annotations

import hashlib
import json
from typing import Iterable, Mapping, Optional, Sequence

import attrs
from pyrsistent import pmap

from executors.node.apply.compare import (  # the shapes and the diff: this module's API too
    AccessFacts,
    Applied,
    ContainerFacts,
    Desired,
    DesiredAccess,
    DesiredContainer,
    DesiredDir,
    DesiredFile,
    DirFacts,
    FileFacts,
    Observed,
    Op,
    Plan,
    Refusal,
    changed_keys,
    diff,
    in_force_once_applied,
)

__all__ = [
    "AccessFacts", "Applied", "Candidate", "Choice", "ContainerFacts", "Desired",
    "DesiredAccess", "DesiredContainer", "DesiredDir", "DesiredFile", "DirFacts", "FileFacts",
    "Observed", "Op", "Plan", "Refusal", "after", "changed_keys", "choose_latest",
    "config_digest", "diff", "fingerprint", "in_force_once_applied",
]

# --------------------------------------------------------------------------- config digests


def fingerprint(*parts: str) -> str:
    """A short one-way fingerprint: lets a summary say *which* env value changed, not what."""
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def config_digest(summary: Mapping[str, str]) -> str:
    canonical = json.dumps(sorted(summary.items()), separators=(",", ":"))
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


# --------------------------------------------------------------------------- the model


def after(desired: Desired, observed: Observed, ops: Iterable[Op]) -> Observed:
    """What the node looks like once `ops` all succeeded: the executor's contract, as data."""
    dirs, files = dict(observed.dirs), dict(observed.files)
    containers, markers = dict(observed.containers), dict(observed.markers)
    applied = observed.applied
    want_dirs = {d.path: d for d in desired.dirs}
    want_files = {f.path: f for f in desired.files}
    want_containers = {c.name: c for c in desired.containers}
    for op in ops:
        kind, subject = op.op, op.subject
        if kind in ("create-dir", "fix-dir", "adopt-dir"):
            want_dir = want_dirs[subject]
            before = dirs.get(subject, DirFacts(subject, "absent"))
            empty = True if before.kind == "absent" else before.empty  # a new directory is empty
            dirs[subject] = DirFacts(subject, "dir", want_dir.uid, want_dir.gid, want_dir.mode,
                                     empty, True)
        elif kind == "write-file":
            want_file = want_files[subject]
            files[subject] = FileFacts(subject, want_file.sha256, want_file.mode,
                                       want_file.owner or (0, 0))
        elif kind == "remove-file":
            files.pop(subject, None)
        elif kind == "remove-container":
            containers.pop(subject, None)
        elif kind == "forget-step":
            markers.pop(subject, None)
        elif kind == "run-step":
            containers.pop(subject, None)  # a completed step's container is removed
            markers[subject] = want_containers[subject].digest
        elif kind in ("create-container", "recreate-container", "start-container",
                      "await-health"):
            container = want_containers[subject]
            containers[subject] = ContainerFacts(subject, container.digest, True, "running",
                                                 False, container.summary)
        elif kind == "record-applied":
            applied = in_force_once_applied(desired)
        else:
            raise ValueError(f"unknown operation {kind!r}")
    return Observed(pmap(dirs), observed.accesses, pmap(files), pmap(containers), pmap(markers),
                    applied)


# --------------------------------------------------------------------------- latest wins


@attrs.frozen
class Candidate:
    label: str  # where it came from (a file name)
    node: str
    serial: int
    digest: str


@attrs.frozen
class Choice:
    chosen: Optional[Candidate]
    # each with the serial that superseded it (None: only when nothing was given at all)
    superseded: tuple[tuple[Candidate, Optional[int]], ...]
    conflicts: tuple[str, ...] = ()  # two different declarations with one serial: refused


def choose_latest(candidates: Sequence[Candidate], applied_serial: Optional[int] = None) -> Choice:
    """The newest declaration by serial; every other is superseded, naming the serial that
    superseded it. A declaration older than the serial already applied on the node is
    superseded by that serial; one equal to it is re-applied (convergence)."""
    if not candidates:
        return Choice(None, ())
    newest = max(c.serial for c in candidates)
    conflicts = sorted({f"serial {c.serial}: {a.label} and {c.label} differ"
                        for a in candidates for c in candidates
                        if a.serial == c.serial and a.digest != c.digest and a.label < c.label})
    top = sorted((c for c in candidates if c.serial == newest), key=lambda c: c.label)
    chosen: Optional[Candidate] = top[0]
    if applied_serial is not None and applied_serial > newest:
        chosen = None
    by = newest if chosen is not None else applied_serial
    superseded = tuple((c, by) for c in sorted(candidates, key=lambda c: (c.serial, c.label))
                       if c is not chosen)
    return Choice(chosen, superseded, tuple(conflicts))
