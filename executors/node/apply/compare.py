"""What differs on this node: the desired and observed node state as plain values, and the one
pure comparison of them (`diff`) that every apply asks, the full path and the no-op check alike.

Invariants:
- Pure: values in, values out; no I/O, clock or environment. `diff` is deterministic and
  every Op carries its cause; an Op names its subject only (never a secret or file content).
- Standard library only (NamedTuples: immutable, compared by value, and a fifth of a frozen
  dataclass's cost to define, which the no-op check pays on every run): the no-op check of
  `mesh apply` (apply/fast.py) feeds its cheap reads to this very `diff` without loading attrs,
  pyrsistent or the resolver. The full path (apply/diff.py re-exports all of this, and adds
  the model `after`) compares with it too: one owner of "what differs".
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
- Mappings are compared by content: a field may hold a dict or a persistent map (the model
  `after` builds those) alike. Only the types here are compared with each other (a NamedTuple
  equals any tuple of the same values).
"""

# No `from __future__ import annotations` here: typing.NamedTuple compiles every string
# annotation of every field (a ForwardRef each) when the class is made, which the no-op check
# pays on each run; evaluated annotations (builtin generics, `X | None`) cost far less.
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

EMPTY: Mapping[str, Any] = MappingProxyType({})  # the default of every mapping field

# --------------------------------------------------------------------------- desired


class DesiredDir(NamedTuple):
    path: str
    uid: int
    gid: int
    mode: int  # permission bits, e.g. 0o750


class DesiredAccess(NamedTuple):
    path: str
    mode: str  # ro | rw


class DesiredFile(NamedTuple):
    path: str
    sha256: str
    mode: int = 0o600
    owner: tuple[int, int] | None = None  # (uid, gid) it must have; None: as written (root)


class DesiredContainer(NamedTuple):
    name: str
    run_once: bool
    digest: str  # config digest (a run-once step's digest is its completion marker)
    summary: Mapping[str, str]  # key → fingerprint: which part changed
    health: bool = False  # it declares a health check: running alone does not make it done


class Refusal(NamedTuple):
    subject: str
    message: str


class Desired(NamedTuple):
    mesh: str
    node: str
    serial: int
    digest: str
    dirs: tuple[DesiredDir, ...] = ()
    accesses: tuple[DesiredAccess, ...] = ()
    files: tuple[DesiredFile, ...] = ()
    containers: tuple[DesiredContainer, ...] = ()  # declaration order
    # credential id → generation in force once applied
    generations: Mapping[str, int] = EMPTY
    refusals: tuple[Refusal, ...] = ()  # found while rendering (pending secret, 0.0.0.0 port…)


# --------------------------------------------------------------------------- observed


class DirFacts(NamedTuple):
    path: str
    kind: str  # absent | dir | other
    uid: int = 0
    gid: int = 0
    mode: int = 0
    empty: bool = True
    recorded: bool = False  # the mesh created or adopted it (kept in the node's record)


class AccessFacts(NamedTuple):
    path: str
    exists: bool
    readable: bool = False
    writable: bool = False


class FileFacts(NamedTuple):
    path: str
    sha256: str
    mode: int
    owner: tuple[int, int] = (0, 0)


class ContainerFacts(NamedTuple):
    name: str
    digest: str
    running: bool
    status: str = "running"
    run_once: bool = False
    # from the container's label; empty when unreadable (or not read: the no-op check)
    summary: Mapping[str, str] = EMPTY
    # an apply saw its health check answer since it was last started (the node's record of it,
    # answered.json, names this very container); False after an apply killed before that
    answered: bool = True


class Applied(NamedTuple):
    """The declaration the node's record says is in force, and how its last apply ended
    (applied | failed | unrecorded: a record of an earlier version)."""

    serial: int
    digest: str
    generations: Mapping[str, int] = EMPTY
    result: str = "applied"


class Observed(NamedTuple):
    dirs: Mapping[str, DirFacts] = EMPTY  # declared paths
    accesses: Mapping[str, AccessFacts] = EMPTY
    # every file in the mesh's managed file directories, and the declared files elsewhere
    files: Mapping[str, FileFacts] = EMPTY
    # managed containers of this mesh, by name
    containers: Mapping[str, ContainerFacts] = EMPTY
    # run-once step name → digest it completed with
    markers: Mapping[str, str] = EMPTY
    applied: Applied | None = None


# --------------------------------------------------------------------------- plan


class Op(NamedTuple):
    op: str  # create-dir fix-dir adopt-dir write-file remove-file remove-container
    #          run-step forget-step create-container recreate-container start-container
    #          await-health record-applied
    subject: str
    cause: str


class Plan(NamedTuple):
    ops: tuple[Op, ...] = ()
    refusals: tuple[Refusal, ...] = ()
    notices: tuple[Refusal, ...] = ()  # reported, nothing done (kept directories)

    @property
    def refused(self) -> bool:
        return bool(self.refusals)

    @property
    def nothing(self) -> bool:
        """Nothing to do, refuse or report: the node is as declared (a no-op)."""
        return not (self.ops or self.refusals or self.notices)


# --------------------------------------------------------------------------- causes


def changed_keys(old: Mapping[str, str], new: Mapping[str, str]) -> list[str]:
    return sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))


def _digest_cause(old: ContainerFacts, new: DesiredContainer) -> str:
    keys = changed_keys(old.summary, new.summary) if old.summary else []
    if not keys:
        return "config digest changed"
    shown = ", ".join(keys[:6]) + (f" and {len(keys) - 6} more" if len(keys) > 6 else "")
    return f"config digest changed: {shown}"


def _mode(bits: int) -> str:
    return f"{bits:04o}"


# --------------------------------------------------------------------------- diff


def _dir_ops(desired: Desired, observed: Observed, ops: list[Op], refusals: list[Refusal],
             notices: list[Refusal]) -> None:
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


def _access_refusals(desired: Desired, observed: Observed, refusals: list[Refusal]) -> None:
    for want in sorted(desired.accesses):
        have = observed.accesses.get(want.path, AccessFacts(want.path, False))
        if not have.exists:
            refusals.append(Refusal(want.path, f"accessed path ({want.mode}) is absent; the mesh "
                                    "never creates it: create it, then apply again"))
        elif not have.readable or (want.mode == "rw" and not have.writable):
            refusals.append(Refusal(want.path, f"accessed path is not usable {want.mode}"))


def _file_ops(desired: Desired, observed: Observed, ops: list[Op]) -> None:
    declared = {f.path: f for f in desired.files}
    for path in sorted(declared):
        want, have = declared[path], observed.files.get(path)
        if have is None:
            ops.append(Op("write-file", path, "not present"))
        elif have.sha256 != want.sha256:
            ops.append(Op("write-file", path, "contents changed"))
        elif have.mode != want.mode:
            ops.append(Op("write-file", path, f"mode {_mode(have.mode)} → {_mode(want.mode)}"))
        elif want.owner is not None and have.owner != want.owner:
            ops.append(Op("write-file", path, "owner {}:{} → {}:{}".format(*have.owner,
                                                                          *want.owner)))
    for path in sorted(set(observed.files) - set(declared)):
        ops.append(Op("remove-file", path, "no longer declared"))


def _container_ops(desired: Desired, observed: Observed, ops: list[Op]) -> None:
    declared = {c.name: c for c in desired.containers}
    for name in sorted(observed.containers):
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


def in_force_once_applied(desired: Desired) -> Applied:
    """What the node's record says once `desired` is applied in every phase."""
    return Applied(desired.serial, desired.digest, desired.generations)


def _record_op(desired: Desired, observed: Observed, ops: list[Op]) -> None:
    if observed.applied == in_force_once_applied(desired):
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
    if ops or observed.applied != in_force_once_applied(desired):
        _record_op(desired, observed, ops)
    return Plan(tuple(ops), (), tuple(notices))
