"""The pure core of `mesh apply`: desired node state vs observed node state → operations.

Invariants:
- Pure: values in, values out; no I/O, clock or environment. `diff` is deterministic and
  every Op carries its cause; an Op names its subject only (never a secret or file content).
- Convergence: diff(d, after(o, diff(d, o).ops)) is empty for every d, o (property-tested);
  `after` is the model of what the executor does, kept next to the diff it must agree with.
- Refusals (an accessed path absent, a state path that is not a directory, a bad port) stop
  the whole plan: a refused plan has no operations, so nothing is half-applied.
- Nothing the mesh does not manage is touched: containers are only those carrying our labels,
  and a state directory that holds data the mesh did not put there is kept and reported.
- A container that declares a health check is done only once an apply has seen it answer:
  one left running by an apply killed before that (same digest, so nothing else would touch
  it) is awaited again (`await-health`) instead of being taken as converged.
- Order: directories, files, removals, then containers and run-once steps in declaration
  order (a step runs before the containers declared after it), then the applied record, which
  the executor writes only once every phase (provisioning included) has succeeded.
"""

from __future__ import annotations

import hashlib
import json
from typing import Iterable, Mapping, Optional, Sequence

import attrs
from pyrsistent import pmap
from pyrsistent.typing import PMap

# --------------------------------------------------------------------------- desired


@attrs.frozen(order=True)
class DesiredDir:
    path: str
    uid: int
    gid: int
    mode: int  # permission bits, e.g. 0o750


@attrs.frozen(order=True)
class DesiredAccess:
    path: str
    mode: str  # ro | rw


@attrs.frozen(order=True)
class DesiredFile:
    path: str
    sha256: str
    mode: int = 0o600


@attrs.frozen
class DesiredContainer:
    name: str
    run_once: bool
    digest: str  # config digest (a run-once step's digest is its completion marker)
    summary: PMap[str, str]  # key → fingerprint; explains which part of the config changed
    health: bool = False  # it declares a health check: running alone does not make it done


@attrs.frozen
class Refusal:
    subject: str
    message: str


@attrs.frozen
class Desired:
    mesh: str
    node: str
    serial: int
    digest: str
    dirs: tuple[DesiredDir, ...] = ()
    accesses: tuple[DesiredAccess, ...] = ()
    files: tuple[DesiredFile, ...] = ()
    containers: tuple[DesiredContainer, ...] = ()  # declaration order
    generations: PMap[str, int] = pmap()  # credential id → generation in force once applied
    refusals: tuple[Refusal, ...] = ()  # found while rendering (pending secret, 0.0.0.0 port…)


# --------------------------------------------------------------------------- observed


@attrs.frozen
class DirFacts:
    path: str
    kind: str  # absent | dir | other
    uid: int = 0
    gid: int = 0
    mode: int = 0
    empty: bool = True
    recorded: bool = False  # the mesh created or adopted it (kept in the node's record)


@attrs.frozen
class AccessFacts:
    path: str
    exists: bool
    readable: bool = False
    writable: bool = False


@attrs.frozen
class FileFacts:
    path: str
    sha256: str
    mode: int


@attrs.frozen
class ContainerFacts:
    name: str
    digest: str
    running: bool
    status: str = "running"
    run_once: bool = False
    summary: PMap[str, str] = pmap()  # from the container's label; empty when unreadable
    # an apply saw its health check answer since it was last started (the node's record of it,
    # answered.json, names this very container); False after an apply killed before that
    answered: bool = True


@attrs.frozen
class Applied:
    """The declaration the node's record says is in force, and how its last apply ended
    (applied | failed | unrecorded: a record of an earlier version)."""

    serial: int
    digest: str
    generations: PMap[str, int] = pmap()
    result: str = "applied"


@attrs.frozen
class Observed:
    dirs: PMap[str, DirFacts] = pmap()  # declared paths
    accesses: PMap[str, AccessFacts] = pmap()
    files: PMap[str, FileFacts] = pmap()  # every file in the mesh's managed file directories
    containers: PMap[str, ContainerFacts] = pmap()  # managed containers of this mesh, by name
    markers: PMap[str, str] = pmap()  # run-once step name → digest it completed with
    applied: Optional[Applied] = None


# --------------------------------------------------------------------------- plan


@attrs.frozen
class Op:
    op: str  # create-dir fix-dir adopt-dir write-file remove-file remove-container
    #          run-step forget-step create-container recreate-container start-container
    #          await-health record-applied
    subject: str
    cause: str


@attrs.frozen
class Plan:
    ops: tuple[Op, ...] = ()
    refusals: tuple[Refusal, ...] = ()
    notices: tuple[Refusal, ...] = ()  # reported, nothing done (kept directories)

    @property
    def refused(self) -> bool:
        return bool(self.refusals)


# --------------------------------------------------------------------------- config digests


def fingerprint(*parts: str) -> str:
    """A short one-way fingerprint: lets a summary say *which* env value changed, not what."""
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def config_digest(summary: Mapping[str, str]) -> str:
    canonical = json.dumps(sorted(summary.items()), separators=(",", ":"))
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def changed_keys(old: Mapping[str, str], new: Mapping[str, str]) -> list[str]:
    return sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))


def _digest_cause(old: ContainerFacts, new: DesiredContainer) -> str:
    keys = changed_keys(old.summary, new.summary) if old.summary else []
    if not keys:
        return "config digest changed"
    shown = ", ".join(keys[:6]) + (f" and {len(keys) - 6} more" if len(keys) > 6 else "")
    return f"config digest changed: {shown}"


# --------------------------------------------------------------------------- diff


def _mode(bits: int) -> str:
    return f"{bits:04o}"


def _dir_ops(desired: Desired, observed: Observed, ops: list, refusals: list, notices: list):
    # A directory no longer declared is left alone, data and all: the mesh never deletes data.
    # It stays in the record of directories the mesh made, so declaring it again can fix it.
    for want in sorted(desired.dirs):
        have = observed.dirs.get(want.path, DirFacts(want.path, "absent"))
        if have.kind == "absent":
            ops.append(Op("create-dir", want.path,
                          f"not present (owner {want.uid}:{want.gid}, mode {_mode(want.mode)})"))
            continue
        if have.kind != "dir":
            refusals.append(Refusal(want.path, "exists and is not a directory; the mesh will "
                                    "not replace it (move it away, then apply again)"))
            continue
        differences = []
        if (have.uid, have.gid) != (want.uid, want.gid):
            differences.append(f"owner {have.uid}:{have.gid} → {want.uid}:{want.gid}")
        if have.mode != want.mode:
            differences.append(f"mode {_mode(have.mode)} → {_mode(want.mode)}")
        if have.recorded:
            if differences:
                ops.append(Op("fix-dir", want.path, "; ".join(differences)
                              + " (the directory itself; its contents are left as they are)"))
        elif have.empty:
            if differences:
                ops.append(Op("fix-dir", want.path, "empty directory the mesh did not create: "
                              + "; ".join(differences)))
            else:
                ops.append(Op("adopt-dir", want.path, "empty directory already as declared"))
        elif differences:
            notices.append(Refusal(want.path, "kept: holds data the mesh did not put there; "
                                   "not chowned or changed (" + "; ".join(differences) + ")"))


def _access_refusals(desired: Desired, observed: Observed, refusals: list):
    for want in sorted(desired.accesses):
        have = observed.accesses.get(want.path, AccessFacts(want.path, False))
        if not have.exists:
            refusals.append(Refusal(want.path, f"accessed path ({want.mode}) is absent; the mesh "
                                    "never creates it: create it, then apply again"))
        elif not have.readable or (want.mode == "rw" and not have.writable):
            refusals.append(Refusal(want.path, f"accessed path is not usable {want.mode}"))


def _file_ops(desired: Desired, observed: Observed, ops: list):
    declared = {f.path: f for f in desired.files}
    for path in sorted(declared):
        want, have = declared[path], observed.files.get(path)
        if have is None:
            ops.append(Op("write-file", path, "not present"))
        elif have.sha256 != want.sha256:
            ops.append(Op("write-file", path, "contents changed"))
        elif have.mode != want.mode:
            ops.append(Op("write-file", path, f"mode {_mode(have.mode)} → {_mode(want.mode)}"))
    for path in sorted(set(observed.files) - set(declared)):
        ops.append(Op("remove-file", path, "no longer declared"))


def _container_ops(desired: Desired, observed: Observed, ops: list):
    declared = {c.name: c for c in desired.containers}
    for name in sorted(observed.containers):
        have = observed.containers[name]
        want = declared.get(name)
        if want is None:
            ops.append(Op("remove-container", name, "no longer declared"))
        elif want.run_once and observed.markers.get(name) == want.digest:
            ops.append(Op("remove-container", name, "leftover of a completed run-once step"))
    for name in sorted(set(observed.markers) - {c.name for c in desired.containers if c.run_once}):
        ops.append(Op("forget-step", name, "run-once step no longer declared"))
    for want in desired.containers:
        have = observed.containers.get(want.name)
        if want.run_once:
            marker = observed.markers.get(want.name)
            if marker != want.digest:
                cause = ("not run on this node yet" if marker is None
                         else f"step declaration changed (completed {marker[:19]}…)")
                ops.append(Op("run-step", want.name, cause))
        elif have is None:
            ops.append(Op("create-container", want.name, "not present"))
        elif have.digest != want.digest:
            ops.append(Op("recreate-container", want.name, _digest_cause(have, want)))
        elif not have.running:
            ops.append(Op("start-container", want.name, f"not running ({have.status})"))
        elif want.health and not have.answered:
            ops.append(Op("await-health", want.name, "running, but no apply has seen its "
                          "health check answer since it started (an interrupted apply)"))


def _record_op(desired: Desired, observed: Observed, ops: list):
    record = Applied(desired.serial, desired.digest, desired.generations)
    if observed.applied == record:
        return
    if observed.applied is None:
        cause = "first apply on this node"
    elif observed.applied.serial != desired.serial:
        cause = f"serial {observed.applied.serial} → {desired.serial}"
    elif observed.applied.digest != desired.digest:
        cause = "declaration digest changed at the same serial"
    elif observed.applied.result == "unrecorded":
        cause = "the record does not say whether every phase succeeded (an earlier version)"
    elif observed.applied.result != "applied":
        cause = f"the last apply was {observed.applied.result}"
    else:
        cause = "credential generations in force changed"
    ops.append(Op("record-applied", f"serial {desired.serial}", cause))


def diff(desired: Desired, observed: Observed) -> Plan:
    """The operations that make `observed` match `desired`, each with its cause."""
    ops: list[Op] = []
    refusals: list[Refusal] = list(desired.refusals)
    notices: list[Refusal] = []
    _access_refusals(desired, observed, refusals)
    _dir_ops(desired, observed, ops, refusals, notices)
    if refusals:
        return Plan((), tuple(refusals), tuple(notices))
    _file_ops(desired, observed, ops)
    _container_ops(desired, observed, ops)
    if ops or observed.applied != Applied(desired.serial, desired.digest, desired.generations):
        _record_op(desired, observed, ops)
    return Plan(tuple(ops), (), tuple(notices))


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
            want = want_dirs[subject]
            before = dirs.get(subject, DirFacts(subject, "absent"))
            empty = True if before.kind == "absent" else before.empty  # a new directory is empty
            dirs[subject] = DirFacts(subject, "dir", want.uid, want.gid, want.mode, empty, True)
        elif kind == "write-file":
            want = want_files[subject]
            files[subject] = FileFacts(subject, want.sha256, want.mode)
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
            want = want_containers[subject]
            containers[subject] = ContainerFacts(subject, want.digest, True, "running",
                                                 False, want.summary)
        elif kind == "record-applied":
            applied = Applied(desired.serial, desired.digest, desired.generations)
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
    superseded: tuple[tuple[Candidate, int], ...]  # each with the serial that superseded it
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
