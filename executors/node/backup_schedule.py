"""Scheduled backups by the node agent, and the backups and restores it runs when asked.

The agent follows its declaration in force: each backup duty (resolver.backups.BackupDuty)
with `every` is backed up when the pure rule says it is due (resolver.backups.due, the same
"too old" rule `mesh status` and `mesh backups` call overdue), into the duty's repository
(node/backup_target.open_repository for a store the mesh runs; an outside repository with
the agent's $MESH_BACKUP_PASSWORD_FILE), exactly as `mesh backup` takes one (node/backup.py).

Invariants:
- One backup or restore at a time on a node (one lock): a scheduled one runs in a daemon
  thread, so the agent's loop is never blocked; a requested one waits for the lock, and so
  do the agent's applies and drift repairs (`apart`): a backup never sees its containers
  recreated or started under it.
- The last result per instance is kept in `<state root>/.mesh/backups/<instance>.json`
  (0600, written atomically): the time of the attempt, the newest good snapshot (ID, time,
  bytes read and added), and for a failure since then its one-line error and how many
  failed in a row. A failed attempt is retried after the rule's back-off (retry_after).
- Nothing secret is kept or said: every value sealed to this node is replaced by its
  `${secret:…}` token in an error line before it is kept, reported or answered.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from pathlib import Path
from typing import Callable, Iterator, Optional, TypeVar

import attrs

import resolver
from resolver import BackupError, BackupMethod, Declaration, MeshError
from resolver.backups import BackupDuty, BackupJob, LastBackup, Snapshot, due

from executors.common.atomic import write_atomic
from executors.node import docker_engine
from executors.node.agent import logs_answer
from executors.node.backup import backup, restore, state_paths
from executors.node.backup_target import duty_of, open_repository
from executors.node.node_paths import NodePaths, default_file_root
from executors.node.restic import Repository, Written

RECORDS_DIR = "backups"
PASSWORD_ENV = "MESH_BACKUP_PASSWORD_FILE"  # an outside repository's password (as `mesh apply`)
ERROR_CHARS = 400
Say = Callable[[str], None]
_T = TypeVar("_T")


@attrs.frozen
class BackupRecord:
    """The last word on one instance's backups, as `<state root>/.mesh/backups/<i>.json`."""

    instance: str
    at: int  # when the last attempt ended (epoch seconds)
    trigger: str  # schedule | request
    snapshot: Optional[str] = None  # the newest good snapshot
    good: Optional[int] = None  # when it was taken
    bytes: int = 0  # bytes it read
    added: int = 0  # bytes the repository grew by
    error: Optional[str] = None  # the last attempt's failure (None: it wrote `snapshot`)
    failures: int = 0  # failed attempts in a row since `snapshot`
    every: Optional[int] = None  # the schedule in force, seconds

    def to_json(self) -> dict[str, object]:
        return attrs.asdict(self)

    @classmethod
    def from_json(cls, found: dict[str, object]) -> "BackupRecord":
        names = {a.name for a in attrs.fields(cls)}
        return cls(**{k: v for k, v in found.items() if k in names})  # type: ignore[arg-type]

    def last(self) -> LastBackup:
        return LastBackup(good=self.good, failed=self.at if self.error else None,
                          failures=self.failures)


def record_path(paths: NodePaths, instance: str) -> str:
    return str(paths.root / RECORDS_DIR / f"{instance}.json")


def read_record(paths: NodePaths, instance: str) -> Optional[BackupRecord]:
    try:
        with open(record_path(paths, instance), encoding="utf-8") as handle:
            return BackupRecord.from_json(json.load(handle))
    except (OSError, ValueError, TypeError):
        return None


def write_record(paths: NodePaths, record: BackupRecord) -> None:
    os.makedirs(paths.root / RECORDS_DIR, mode=0o700, exist_ok=True)
    write_atomic(record_path(paths, record.instance),
                 json.dumps(record.to_json(), indent=2, sort_keys=True) + "\n", mode=0o600)


def job_of(duty: BackupDuty, declaration: Declaration) -> BackupJob:
    """The backup job a duty describes (node/backup.py runs it)."""
    method = BackupMethod(container=duty.container, dump=duty.dump, restore=duty.restore) \
        if duty.container is not None else None
    return BackupJob(instance=duty.instance, module=duty.module, node=declaration.node,
                     repository=duty.repository, mesh=declaration.mesh,
                     target_node=duty.target_node, method=method, state=tuple(duty.state))


class BackupRunner:
    """Backs up and restores this node's instances by their duties, one at a time."""

    def __init__(self, state_root: str, docker_host: Optional[str], key_file: str, node: str,
                 say: Say, clock: Callable[[], float] = time.time,
                 file_root: Optional[str] = None):
        self.paths = NodePaths(state_root, file_root or default_file_root())
        self.docker_host, self.key_file, self.node, self.say = docker_host, key_file, node, say
        self.clock = clock
        self.lock = threading.Lock()

    def _open(self, duty: BackupDuty,
              declaration: Declaration) -> contextlib.AbstractContextManager[Repository]:
        return opened(duty, declaration, self.paths, self.key_file)

    def scrubbed(self, text: str) -> str:
        """One line, every value sealed to this node replaced by its token; bounded."""
        line = " / ".join(part.strip() for part in text.strip().splitlines() if part.strip())
        try:
            tokens = logs_answer.secret_tokens(self._current(), self.key_file, self.node)
        except Exception:  # noqa: BLE001 - unopened values were not used, so not in the line
            tokens = {}
        clean, _ = logs_answer.scrub([line], tokens)
        return clean[0][:ERROR_CHARS]

    def _current(self) -> Optional[tuple[Path, Path]]:
        current = self.paths.root / "agent" / "current"
        declaration, secrets = current / "declaration.json", current / "secrets.yaml"
        return (declaration, secrets) if declaration.is_file() and secrets.is_file() else None

    def back_up(self, duty: BackupDuty, declaration: Declaration,
                trigger: str) -> BackupRecord:
        """One snapshot of the duty's instance, recorded (also when it failed)."""
        with self.lock:
            before = read_record(self.paths, duty.instance)
            written: Optional[Written] = None
            error: Optional[str] = None
            try:
                with self._open(duty, declaration) as repository:
                    job = job_of(duty, declaration)
                    written = backup(docker_engine.connect(self.docker_host, timeout=600), job,
                                     repository, state_paths(job, str(self.paths.state_root)),
                                     self.say)
            except Exception as exc:  # noqa: BLE001 - restic, the Engine, the store: one line
                error = self.scrubbed(f"{type(exc).__name__}: {exc}"
                                      if not isinstance(exc, MeshError) else str(exc))
            now = int(self.clock())
            if written is not None:
                record = BackupRecord(instance=duty.instance, at=now, trigger=trigger,
                                      snapshot=written.snapshot, good=now, bytes=written.read,
                                      added=written.added, every=duty.every)
            else:
                record = BackupRecord(
                    instance=duty.instance, at=now, trigger=trigger,
                    snapshot=before.snapshot if before else None,
                    good=before.good if before else None,
                    bytes=before.bytes if before else 0, added=before.added if before else 0,
                    error=error, failures=(before.failures if before else 0) + 1,
                    every=duty.every)
            write_record(self.paths, record)
            return record

    def restore(self, duty: BackupDuty, declaration: Declaration, wanted: str) -> Snapshot:
        """Put snapshot `wanted` back into the duty's instance (node/backup.py's restore)."""
        with self.lock, self._open(duty, declaration) as repository:
            job = job_of(duty, declaration)
            return restore(docker_engine.connect(self.docker_host, timeout=600), job,
                           repository, wanted, state_paths(job, str(self.paths.state_root)),
                           self.say)


@contextlib.contextmanager
def opened(duty: BackupDuty, declaration: Declaration, paths: NodePaths,
           key_file: str) -> Iterator[Repository]:
    """The duty's repository: a store the mesh runs through open_repository, an outside one
    with the agent's $MESH_BACKUP_PASSWORD_FILE."""
    if duty.login is not None:
        with open_repository(duty, declaration, paths, key_file=key_file) as repository:
            yield repository
        return
    password_file = os.environ.get(PASSWORD_ENV)
    if not password_file:
        raise MeshError(f"{duty.instance} is backed up to an outside repository "
                        f"({duty.repository}): the agent's environment names no "
                        f"${PASSWORD_ENV}")
    yield Repository(location=duty.repository, password_file=password_file)


class BackupSchedule:
    """The agent's scheduled backups: follows the declaration in force, starts a due backup
    in a daemon thread when none runs, and hands each finished result to the loop."""

    def __init__(self, runner: BackupRunner, say: Say):
        self.runner, self.say = runner, say
        self.declaration: Optional[Declaration] = None
        self.stamp: Optional[int] = None  # the mtime of the declaration in force read
        self.thread: Optional[threading.Thread] = None
        self.done: list[BackupRecord] = []
        self.done_lock = threading.Lock()

    def follow(self, declaration: Declaration) -> None:
        self.declaration = declaration

    def refresh(self) -> None:
        """Follow the declaration in force (the agent's `current/declaration.json`), read again
        only when it changed."""
        current = self.runner.paths.root / "agent" / "current" / "declaration.json"
        try:
            stamp = current.stat().st_mtime_ns
            if stamp == self.stamp:
                return
            self.declaration = resolver.documents.structure(
                json.loads(current.read_text(encoding="utf-8")), Declaration)
            self.stamp = stamp
        except FileNotFoundError:
            return
        except Exception as exc:  # noqa: BLE001 - said once; the loop goes on without it
            if self.stamp != -1:
                self.say(f"backups: the declaration in force cannot be read ({exc})")
            self.stamp = -1

    def duties(self) -> tuple[BackupDuty, ...]:
        return tuple(self.declaration.backups) if self.declaration is not None else ()

    def duty(self, instance: str) -> BackupDuty:
        if self.declaration is None:
            raise BackupError(f"no declaration in force on {self.runner.node}: nothing is "
                              "backed up here yet")
        return duty_of(self.declaration, instance)

    def tick(self) -> None:
        """Start the first due backup, unless one runs (never waits)."""
        self.refresh()
        declaration = self.declaration
        if declaration is None or (self.thread is not None and self.thread.is_alive()):
            return
        scheduled = {d.instance: d for d in declaration.backups if d.every}
        if not scheduled:
            return
        last = {}
        for instance in scheduled:
            record = read_record(self.runner.paths, instance)
            if record is not None:
                last[instance] = record.last()
        now = int(self.runner.clock())
        ready = due({i: int(d.every or 0) for i, d in scheduled.items()}, last, now)
        if not ready:
            return
        duty = scheduled[ready[0]]
        self.say(f"backup of {duty.instance} is due (every {duty.every}s): starting")
        self.thread = threading.Thread(target=self._run, args=(duty, declaration),
                                       name="mesh-agent-backup", daemon=True)
        self.thread.start()

    def _run(self, duty: BackupDuty, declaration: Declaration) -> None:
        record = self.runner.back_up(duty, declaration, "schedule")
        self.say(line(record))
        with self.done_lock:
            self.done.append(record)

    def apart(self, work: Callable[[], _T]) -> _T:
        """`work` (an apply, a drift repair) once no backup or restore runs, none starting
        while it does: a stop-copy never has its stopped containers started under it."""
        with self.runner.lock:
            return work()

    def finished(self) -> list[BackupRecord]:
        """The scheduled backups that ended since last asked."""
        with self.done_lock:
            found, self.done = self.done, []
        return found

    def results(self) -> list[dict[str, object]]:
        """The last result of each duty's instance, as reports carry them."""
        found = []
        for duty in self.duties():
            record = read_record(self.runner.paths, duty.instance)
            if record is not None:
                found.append(attrs.evolve(record, every=duty.every).to_json())
            else:
                found.append({"instance": duty.instance, "every": duty.every,
                              "snapshot": None, "good": None, "error": None, "failures": 0})
        return found

    def close(self) -> None:
        if self.thread is not None:
            self.thread.join(30)  # a backup under way ends before the agent stops, if soon


def line(record: BackupRecord) -> str:
    """What the agent says of one result (no secret: the error was scrubbed)."""
    if record.error is None:
        return (f"backed up {record.instance}: snapshot {str(record.snapshot)[:8]}, read "
                f"{record.bytes} bytes, added {record.added}")
    return (f"backup of {record.instance} failed ({record.failures} in a row): "
            f"{record.error}")


__all__ = ["BackupRecord", "BackupRunner", "BackupSchedule", "read_record", "write_record",
           "record_path", "job_of", "line"]
