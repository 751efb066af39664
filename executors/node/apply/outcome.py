"""How an apply ended, as one value: what `mesh apply` prints (text or `--json`) and what the
node agent reports to the control node.

Invariants:
- Built, never filled in: the apply (pipeline.py, runner.py) and the no-op check (fast.py)
  each return one frozen `ApplyOutcome`; nothing writes into it afterwards. The Report is only
  the event log (operations, checks, notices, said as they happen); the outcome carries its
  final state (`ops`, `checks`, `notices`).
- The result is an `ApplyResult`; its values are the strings the JSON document, applied
  reports and the control node read (applied, dry-run, superseded, refused, failed).
- `to_json` is the `--json` document: a key is present exactly when the apply got as far as
  knowing it (e.g. `digest` once rendered, `generations` once the node was observed,
  `refusals` only when refused, `record` and `failed_phase` only when a phase failed,
  `error` only when the engine or the filesystem broke off the apply). `print_summary` is
  the text; the no-op check prints both through these same functions, so its answer is the
  full path's byte for byte.
- Standard library only: the no-op check builds and prints an outcome without attrs. The
  outcome and its parts are NamedTuples (immutable; a fifth of a frozen dataclass's cost to
  define, which the check pays on every run); the apply rebuilds it stage by stage with
  `_replace`.
- Never a secret: names, digests, generations and causes only.
"""

# No `from __future__ import annotations` (as in compare.py): NamedTuple and TypedDict compile
# each string annotation of a field when the class is made, on every run of the no-op check.
import enum
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple, Protocol, TextIO, TypedDict

from executors.node.apply.compare import Refusal

if TYPE_CHECKING:  # the event log's operations (attrs); only their type is named here
    from executors.common.report import Operation


class ApplyResult(enum.StrEnum):
    APPLIED = "applied"
    DRY_RUN = "dry-run"
    SUPERSEDED = "superseded"
    REFUSED = "refused"
    FAILED = "failed"

    @property
    def succeeded(self) -> bool:
        """Whether it counts as success (exit 0 of `mesh apply`)."""
        return self in (ApplyResult.APPLIED, ApplyResult.DRY_RUN, ApplyResult.SUPERSEDED)


class HeldJson(TypedDict):
    instance: str
    code: str
    message: str
    where: str


class HeldDeclaration(Protocol):
    """What the report takes of a held instance (resolver.HeldDecl)."""

    @property
    def instance(self) -> str: ...
    @property
    def code(self) -> str: ...
    @property
    def message(self) -> str: ...
    @property
    def file(self) -> str: ...
    @property
    def line(self) -> int: ...
    @property
    def col(self) -> int: ...


class Held(NamedTuple):
    """An instance the declaration holds (refused in mesh.yaml, kept as last declared)."""

    instance: str
    code: str
    message: str
    where: str

    @classmethod
    def of(cls, held: HeldDeclaration) -> "Held":
        return cls(held.instance, held.code, held.message,
                   f"{held.file}:{held.line}:{held.col}" if held.line else held.file)

    def to_json(self) -> HeldJson:
        return {"instance": self.instance, "code": self.code, "message": self.message,
                "where": self.where}


def held_of(held: Iterable[HeldDeclaration]) -> tuple[Held, ...]:
    return tuple(Held.of(h) for h in held)


class Superseded(NamedTuple):
    """A declaration not applied: an older serial than another given, or than the node's."""

    file: str
    serial: int
    superseded_by: int | None

    def to_json(self) -> dict[str, object]:
        return {"file": self.file, "serial": self.serial, "superseded_by": self.superseded_by}


class RecordKept(NamedTuple):
    """The applied record after a failed phase: the last good serial stays in force."""

    result: str  # applied_record's: failed
    serial_in_force: int | None
    failed_phase: str

    def to_json(self) -> dict[str, object]:
        return {"result": self.result, "serial_in_force": self.serial_in_force,
                "failed_phase": self.failed_phase}


class Provisioned(NamedTuple):
    """What the provisioners of this apply reported, merged in the order they ran."""

    # each grant's GrantOutcome as provisioners/base.py reports it (credential, provider,
    # consumer, status, generation, message, kind)
    outcomes: tuple[Mapping[str, object], ...] = ()
    statements: int = 0  # changing statements / requests issued (0 on an idempotent re-run)
    orphaned: tuple[str, ...] = ()  # resources kept after their grant went

    def to_json(self) -> dict[str, object]:
        return {"outcomes": [dict(o) for o in self.outcomes], "statements": self.statements,
                "orphaned": list(self.orphaned)}


class ApplyError(NamedTuple):
    """The Docker Engine or the filesystem broke off the apply: nothing recorded as applied."""

    message: str  # the error as it was raised (the document's `error`)
    engine: bool  # the Engine did not answer as expected (else: a file could not be used)
    filename: str | None = None  # the file that could not be used, when it says
    reason: str = ""  # why, in the system's words (strerror)

    @classmethod
    def of(cls, exc: BaseException, *, engine: bool) -> "ApplyError":
        if isinstance(exc, OSError) and not engine:
            return cls(str(exc), False, str(exc.filename) if exc.filename else None,
                       exc.strerror or str(exc))
        return cls(str(exc), engine)


class ApplyOutcome(NamedTuple):
    """How one apply ended. None: the apply did not get as far as knowing it."""

    result: ApplyResult
    mesh: str | None = None  # with node and serial: known once a declaration was chosen
    node: str | None = None
    serial: int | None = None  # the serial applied (None: every one given was superseded)
    file: str | None = None  # where the declaration applied came from
    superseded: tuple[Superseded, ...] | None = None
    held: tuple[Held, ...] | None = None
    digest: str | None = None  # of the declaration applied (once rendered)
    # whether the apply read what the node has in force (then serial_applied is said, None
    # included: nothing in force yet)
    in_force_read: bool = False
    serial_applied: int | None = None  # the serial in force on the node now
    generations: Mapping[str, int] | None = None  # in force now
    refusals: tuple[Refusal, ...] | None = None
    health: Mapping[str, str] | None = None  # container → state
    record: RecordKept | None = None
    failed_phase: str | None = None  # firewall | containers | provisioning
    provisioned: Provisioned | None = None
    error: ApplyError | None = None
    # the event log as it ended (the apply gives copies of the Report's lists; none: no event)
    ops: Sequence["Operation"] = ()
    checks: Sequence["Operation"] = ()
    notices: Sequence[Mapping[str, str]] = ()

    @property
    def succeeded(self) -> bool:
        return self.result.succeeded

    def to_json(self) -> dict[str, object]:
        """The `--json` document (the keys the apply got as far as knowing)."""
        document: dict[str, object] = {}
        if self.superseded is not None:
            document["superseded"] = [s.to_json() for s in self.superseded]
        if self.mesh is not None:
            document.update(mesh=self.mesh, node=self.node, serial=self.serial)
        if self.file is not None:
            document["file"] = self.file
        if self.held is not None:
            document["held"] = [h.to_json() for h in self.held]
        if self.digest is not None:
            document["digest"] = self.digest
        if self.in_force_read:
            document["serial_applied"] = self.serial_applied
        if self.generations is not None:
            document["generations"] = dict(self.generations)
        if self.refusals is not None:
            document["refusals"] = [{"subject": r.subject, "message": r.message}
                                    for r in self.refusals]
        if self.record is not None:
            document["record"] = self.record.to_json()
        if self.failed_phase is not None:
            document["failed_phase"] = self.failed_phase
        if self.health is not None:
            document["health"] = dict(self.health)
        if self.provisioned is not None:
            document["provisioned"] = self.provisioned.to_json()
        if self.error is not None:
            document["error"] = self.error.message
        document["result"] = self.result.value
        document.update(ops=[op.to_json() for op in self.ops],
                        checks=[c.to_json() for c in self.checks],
                        notices=[dict(n) for n in self.notices])
        return document


def print_held(held: Iterable[Held], out: TextIO) -> None:
    """The instances the declaration holds (refused in mesh.yaml, kept as last declared)."""
    for h in held:
        print(f"  held: {h.instance} keeps its last good declaration: "
              f"[{h.code}] {h.where}: {h.message}", file=out)


def print_summary(outcome: ApplyOutcome, out: TextIO) -> None:
    """The text `mesh apply` prints on stdout once the apply ended."""
    print(f"node {outcome.node} (mesh {outcome.mesh}): {outcome.result.value}; "
          f"serial in force {outcome.serial_applied}", file=out)
    print_held(outcome.held or (), out)
    for entry in outcome.superseded or ():
        print(f"  superseded: {entry.file} (serial {entry.serial}) by serial "
              f"{entry.superseded_by}", file=out)
    for check in outcome.checks:  # observations, not operations
        print(f"  checked {check.op} {check.subject}: {check.result}", file=out)
    for op in outcome.ops:
        print(f"  {op.op} {op.subject}: {op.cause} → {op.result}", file=out)
    for refusal in outcome.refusals or ():
        print(f"  refused: {refusal.subject}: {refusal.message}", file=out)
    for grant in (outcome.provisioned.outcomes if outcome.provisioned else ()):
        if grant["status"] == "not-provisioned":
            print(f"  not provisioned (warning): {grant['kind']} grant of "
                  f"{grant['consumer']} on {grant['provider']}, credential "
                  f"{grant['credential']}: no provisioner for this kind; create it by hand",
                  file=out)
    if outcome.failed_phase:
        print(f"  failed in the {outcome.failed_phase} phase: serial "
              f"{outcome.serial_applied} stays in force (applied.json says so)", file=out)
    if outcome.generations:
        print("  credential generations in force: "
              + ", ".join(f"{c} {g}" for c, g in sorted(outcome.generations.items())), file=out)
    if not outcome.ops and outcome.result is ApplyResult.APPLIED:
        print("  nothing to change", file=out)


def write_outcome(outcome: ApplyOutcome, as_json: bool, out: TextIO) -> None:
    """What `mesh apply` prints on stdout: the `--json` document, or the summary."""
    if as_json:  # one write (json.dump writes each token: each through cli/terminal's filter)
        out.write(json.dumps(outcome.to_json(), indent=2, sort_keys=True) + "\n")
    else:
        print_summary(outcome, out)
