"""What an executor did, said as it happens and summed up at the end.

Invariants:
- Every operation is announced (`begin`) before it runs and closed (`end`) with its result, so
  nothing long is silent; a long wait calls `progress` at least every few seconds.
- An operation is {op, subject, cause, result}: the cause says why ("config digest changed:
  env DB_HOST"), the result what happened ("done", "failed: …", "skipped", "planned").
- An observation (a readiness wait, an admin login check) is not an operation: it changes
  nothing, so it is kept apart in `checks` (`begin(..., check=True)`), printed as it happens
  like any step, and a failed one fails the run. "No operation" means `ops` is empty.
- The live printer writes to stderr only; stdout stays free for `--json`'s final report.
- A Report never holds a secret value: callers pass names, digests and generations only.

Usage (any executor: apply, firewall, provisioners):
    report = Report(printer=LivePrinter())
    op = report.begin("create-container", "web", "not present")
    ...; report.progress(op, "waiting for web to answer (5s/60s)")
    report.end(op, "done")            # or report.end(op, "failed: exit 3", ok=False)
    report.notice("/srv/data", "kept: holds data the mesh did not put there")
    json.dumps(report.to_json())
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable, Optional, TextIO

import attrs


@attrs.define
class Operation:
    op: str
    subject: str
    cause: str
    result: str = "pending"
    ok: bool = True
    detail: list[str] = attrs.field(factory=list)  # e.g. the last lines of a failed step's log
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"op": self.op, "subject": self.subject, "cause": self.cause,
                                "result": self.result}
        if self.detail:
            data["detail"] = list(self.detail)
        if self.seconds:
            data["seconds"] = round(self.seconds, 3)
        return data


class LivePrinter:
    """Prints each step as it happens: `[  1.2s] → op subject: cause`, then `✓`/`✗` lines."""

    def __init__(self, stream: Optional[TextIO] = None, clock: Callable[[], float] = time.monotonic):
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock
        self.start = clock()

    def line(self, mark: str, text: str) -> None:
        print(f"[{self.clock() - self.start:6.1f}s] {mark} {text}", file=self.stream, flush=True)

    def begin(self, op: Operation) -> None:
        self.line("→", f"{op.op} {op.subject}: {op.cause}")

    def progress(self, op: Operation, message: str) -> None:
        self.line("…", f"{op.op} {op.subject}: {message}")

    def end(self, op: Operation) -> None:
        self.line("✓" if op.ok else "✗", f"{op.op} {op.subject}: {op.result}")
        for line in op.detail:
            print(f"          | {line}", file=self.stream, flush=True)

    def notice(self, subject: str, message: str) -> None:
        self.line("!", f"{subject}: {message}")

    def say(self, message: str) -> None:
        self.line("·", message)


class SilentPrinter(LivePrinter):
    """A printer that prints nothing (library use, tests)."""

    def __init__(self) -> None:
        super().__init__(stream=None)

    def line(self, mark: str, text: str) -> None:
        pass

    def end(self, op: Operation) -> None:
        pass


@attrs.define
class Report:
    """The event log of one run: its operations and checks in order, and its notices. What the
    run decided is its own value (e.g. `mesh apply`'s ApplyOutcome), never kept here."""

    printer: LivePrinter = attrs.field(factory=SilentPrinter)
    ops: list[Operation] = attrs.field(factory=list)
    checks: list[Operation] = attrs.field(factory=list)  # observations: nothing changed by them
    notices: list[dict[str, str]] = attrs.field(factory=list)

    def begin(self, op: str, subject: str, cause: str, *, check: bool = False) -> Operation:
        """Announce an operation (or, with check=True, an observation) and return it."""
        operation = Operation(op, subject, cause)
        operation.seconds = time.monotonic()
        (self.checks if check else self.ops).append(operation)
        self.printer.begin(operation)
        return operation

    def progress(self, operation: Operation, message: str) -> None:
        self.printer.progress(operation, message)

    def end(self, operation: Operation, result: str = "done", *, ok: bool = True,
            detail: Optional[list[str]] = None) -> None:
        operation.result, operation.ok = result, ok
        operation.detail = list(detail or [])
        operation.seconds = time.monotonic() - operation.seconds
        self.printer.end(operation)

    def record(self, op: str, subject: str, cause: str, result: str, ok: bool = True) -> Operation:
        """An operation that is only listed, never run (a plan entry, a skipped step)."""
        operation = Operation(op, subject, cause, result, ok)
        self.ops.append(operation)
        return operation

    def notice(self, subject: str, message: str) -> None:
        self.notices.append({"subject": subject, "message": message})
        self.printer.notice(subject, message)

    def say(self, message: str) -> None:
        self.printer.say(message)

    @property
    def failed(self) -> bool:
        return any(not op.ok for op in self.ops) or any(not c.ok for c in self.checks)

    def failures(self) -> list[Operation]:
        """Every failed observation, then every failed operation."""
        return [o for o in self.checks + self.ops if not o.ok]

    def to_json(self) -> dict[str, Any]:
        return {"ops": [op.to_json() for op in self.ops],
                "checks": [c.to_json() for c in self.checks], "notices": list(self.notices)}
