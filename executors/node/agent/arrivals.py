"""The agent's side of a move that carries data, on the arriving node: the copy's progress
said to the control node while it runs, and an arrival that failed tried again by itself.

Invariants:
- Progress: every progress line of an `arrive` operation (bytes so far, of how many, percent,
  rate: state_move/payload.progress_line, at most one a second) is kept as the latest, and the
  agent's broker thread publishes it as a `progress` report at most every PROGRESS_EVERY
  seconds while the apply runs (the control plane keeps it apart from the last report:
  control/inbox.py); a line is never a secret (names and sizes only). The apply itself prints
  every line as before.
- Retry: a declaration whose apply failed in its arrival phase (the source was not serving, the
  copy broke off: nothing on this node changed, the instance runs nowhere) is kept
  (`<state root>/.mesh/agent/arriving/`, 0600, written atomically) and applied again every
  RETRY_SECONDS, through the same apply path, until it applies, fails in another phase, or a
  newer declaration is handled (which replaces it, or clears it). Every attempt starts the copy
  from the beginning (state_move/arrive.py); an attempt is reported like a delivered one
  (trigger `retry`).
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path
from typing import Callable, Optional

from executors.common.atomic import write_atomic
from executors.common.report import LivePrinter, Operation, Report
from executors.node.apply.options import ApplyOptions
from executors.node.apply.outcome import ApplyOutcome, ApplyResult
from executors.node.apply.runner import apply_files

PROGRESS_EVERY = 2.0  # seconds between progress reports of a copy under way
RETRY_SECONDS = 15.0  # seconds between attempts of an arrival that failed
ARRIVAL_PHASE = "arrival"  # runner.apply_files' failed_phase when an arrival failed


class MoveProgress:
    """The latest progress line of the arrival under way, handed from the apply thread to
    the broker thread."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.lock = threading.Lock()
        self.clock = clock
        self.latest: Optional[dict[str, object]] = None
        self.sent_at = float("-inf")

    def note(self, instance: str, line: str) -> None:
        with self.lock:
            self.latest = {"instance": instance, "line": line}

    def take(self) -> Optional[dict[str, object]]:
        """The latest line not yet taken, once PROGRESS_EVERY passed since the last taken."""
        with self.lock:
            if self.latest is None or self.clock() - self.sent_at < PROGRESS_EVERY:
                return None
            taken, self.latest, self.sent_at = self.latest, None, self.clock()
            return taken


class _ProgressPrinter(LivePrinter):
    """The live printer, handing each arrival's progress line to a MoveProgress too."""

    def __init__(self, progress: MoveProgress) -> None:
        super().__init__()
        self.moving = progress

    def progress(self, op: Operation, message: str) -> None:
        super().progress(op, message)
        if op.op == "arrive":
            self.moving.note(op.subject, message)


def applier_with_progress(progress: MoveProgress) -> Callable[[ApplyOptions, Callable[[str], None]],
                                                              ApplyOutcome]:
    """The one apply code path (runner.apply_files), printing every step, its arrivals'
    progress handed to `progress`."""
    def apply(options: ApplyOptions, say: Callable[[str], None]) -> ApplyOutcome:
        return apply_files(options, Report(printer=_ProgressPrinter(progress)))
    return apply


def arrival_failed(outcome: ApplyOutcome) -> bool:
    return outcome.result == ApplyResult.FAILED and outcome.failed_phase == ARRIVAL_PHASE


class ArrivalRetry:
    """A declaration whose arrival failed, kept to be applied again."""

    def __init__(self, root: Path, say: Callable[[str], None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.dir, self.say, self.clock = root / "arriving", say, clock
        self.next_at: Optional[float] = self.clock() if self.files() is not None else None

    def files(self) -> Optional[tuple[Path, Path]]:
        declaration, secrets = self.dir / "declaration.json", self.dir / "secrets.yaml"
        return (declaration, secrets) if declaration.is_file() and secrets.is_file() else None

    def keep(self, declaration_file: str, secrets_file: Path, serial: Optional[int]) -> None:
        write_atomic(self.dir / "secrets.yaml", secrets_file.read_bytes(), mode=0o600)
        write_atomic(self.dir / "declaration.json", Path(declaration_file).read_bytes(),
                     mode=0o600)
        self.next_at = self.clock() + RETRY_SECONDS
        self.say(f"the arrival of serial {serial} failed: trying it again in "
                 f"{RETRY_SECONDS:.0f}s (from the beginning)")

    def clear(self) -> None:
        if self.dir.exists():
            shutil.rmtree(self.dir, ignore_errors=True)
        self.next_at = None

    def due(self) -> bool:
        return self.next_at is not None and self.clock() >= self.next_at

    def postpone(self) -> None:
        self.next_at = self.clock() + RETRY_SECONDS

    def serial(self) -> Optional[int]:
        found = self.files()
        if found is None:
            return None
        try:
            serial = json.loads(found[0].read_text()).get("serial")
        except (OSError, ValueError, AttributeError):
            return None
        return serial if isinstance(serial, int) else None
