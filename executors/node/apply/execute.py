"""Observing a node and executing a plan's operations: the imperative half of `mesh apply`.

Invariants:
- observe reads exactly what the pure diff compares: declared directories, accessed paths, the
  files the mesh writes (env/ and bindings/ under the executor's own directory), the managed
  containers (one label-filtered list call), run-once markers, the applied record and
  answered.json (which containers an apply saw answer their health check).
- Rendering is the only place secret values exist; an operation writes them only into files
  of mode 0600 and containers' environments, never into a cause, a label or the report.
- Every write is atomic (temp, fsync, rename), so a SIGKILL at any point leaves either the old
  or the new file, and a re-run converges.
- A failed operation stops what follows (listed as skipped); the report says why. The applied
  record is not an operation run here: the call writes it once every phase has ended.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Callable, Optional, Sequence

import attrs
from pyrsistent import pmap

from resolver import MeshError

from executors.common import applied_record
from executors.node import docker_engine as engine
from executors.node.apply.neighbours import HostNeighbours
from executors.node.apply.diff import (
    AccessFacts,
    Applied,
    ContainerFacts,
    Desired,
    DesiredDir,
    DirFacts,
    FileFacts,
    Observed,
    Op,
    Plan,
)
from executors.node.apply.render import Rendered
from executors.node.node_paths import NodePaths
from executors.common.atomic import write_atomic, write_exclusive
from executors.common.report import Report

# Every file written here is 0600: env files and binding files hold unsealed values, and the
# records and markers are the executor's own.
PRIVATE = 0o600

# --------------------------------------------------------------------------- files


def _read_json(path: Path, default):
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return default
    except ValueError:  # unreadable record: treat as absent, the diff will rewrite it
        return default


def _write_json(path: Path, data) -> None:
    write_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n", PRIVATE)


def _read_answered(paths: NodePaths) -> dict:
    """container name → the container ID an apply saw answer its health check."""
    record = _read_json(paths.answered_record, {})
    return record if isinstance(record, dict) else {}


def read_record(paths: NodePaths) -> Optional[dict]:
    """The node's applied record (applied_record's format), None when absent or unreadable."""
    record = _read_json(paths.applied, None)
    return record if isinstance(record, dict) else None


def write_record(paths: NodePaths, record: dict) -> None:
    _write_json(paths.applied, record)


# --------------------------------------------------------------------------- observe


def _dir_facts(path: str, recorded: bool) -> DirFacts:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return DirFacts(path, "absent", recorded=recorded)
    if not stat.S_ISDIR(st.st_mode):
        return DirFacts(path, "other", st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode), False,
                        recorded)
    with os.scandir(path) as entries:
        empty = next(entries, None) is None
    return DirFacts(path, "dir", st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode), empty, recorded)


def _file_facts(directory: Path) -> dict[str, FileFacts]:
    facts = {}
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return facts
    for entry in entries:
        if entry.name.startswith(".") or not entry.name.endswith(".env") or not entry.is_file():
            continue  # temp files of an interrupted write are not the mesh's files
        data = Path(entry.path).read_bytes()
        facts[entry.path] = FileFacts(entry.path, hashlib.sha256(data).hexdigest(),
                                      stat.S_IMODE(entry.stat().st_mode))
    return facts


def observe(api, paths: NodePaths, desired: Desired) -> Observed:
    recorded = set(_read_json(paths.dirs_record, []))
    dirs = {d.path: _dir_facts(d.path, d.path in recorded) for d in desired.dirs}
    accesses = {a.path: AccessFacts(a.path, os.path.exists(a.path),
                                    os.access(a.path, os.R_OK), os.access(a.path, os.W_OK))
                for a in desired.accesses}
    files = {**_file_facts(paths.env_dir), **_file_facts(paths.bindings_dir)}
    # declared files elsewhere: those declared now, and those written before (to remove them)
    written = set(_read_json(paths.files_record, []))
    for path in written | {f.path for f in desired.files if not paths.owns(f.path)}:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        if stat.S_ISREG(st.st_mode):
            files[path] = FileFacts(path, hashlib.sha256(Path(path).read_bytes()).hexdigest(),
                                    stat.S_IMODE(st.st_mode))
    containers = {}
    answered = _read_answered(paths)
    for row in engine.list_managed(api, desired.mesh):
        containers[row.name] = ContainerFacts(
            row.name, row.labels.get(engine.LABEL_DIGEST, ""), row.state == "running",
            row.state, row.labels.get(engine.LABEL_RUN_ONCE) == "true",
            pmap(engine.summary_of(row.labels)), answered.get(row.name) == row.id)
    markers = {}
    if paths.steps_dir.is_dir():
        for entry in os.scandir(paths.steps_dir):
            if entry.name.endswith(".digest") and not entry.name.startswith("."):
                markers[entry.name[: -len(".digest")]] = Path(entry.path).read_text().strip()
    record = read_record(paths)
    good = applied_record.in_force(record)
    applied = None
    if good is not None:
        result = (record.get("result", "unrecorded")
                  if record.get("version") == applied_record.RECORD_VERSION else "unrecorded")
        applied = Applied(good["serial"], good["digest"], pmap(good["generations"]), result)
    return Observed(pmap(dirs), pmap(accesses), pmap(files), pmap(containers), pmap(markers),
                    applied)


# --------------------------------------------------------------------------- execute


@attrs.define
class _Executor:
    api: object
    paths: NodePaths
    rendered: Rendered
    report: Report
    stop_timeout: int
    health: dict = attrs.field(factory=dict)  # container → running | answering | not answering
    neighbours: HostNeighbours = attrs.field()  # the host's neighbour entries (neighbours.py)

    @neighbours.default
    def _host_neighbours(self) -> HostNeighbours:
        return HostNeighbours(
            self.api, self.report, any(spec.mac for spec in self.rendered.specs.values()))

    # directories ---------------------------------------------------------
    def _record_dir(self, path: str) -> None:
        recorded = set(_read_json(self.paths.dirs_record, [])) | {path}
        _write_json(self.paths.dirs_record, sorted(recorded))

    def _want_dir(self, path: str) -> DesiredDir:
        return next(d for d in self.rendered.desired.dirs if d.path == path)

    def create_dir(self, op: Op, _) -> str:
        want = self._want_dir(op.subject)
        target = Path(op.subject)
        target.parent.mkdir(parents=True, exist_ok=True)
        temp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
        os.chown(temp, want.uid, want.gid)
        os.chmod(temp, want.mode)
        os.rename(temp, target)  # appears whole: owner and mode are right from the start
        self._record_dir(op.subject)
        return "done"

    def fix_dir(self, op: Op, _) -> str:
        want = self._want_dir(op.subject)
        os.chown(op.subject, want.uid, want.gid)
        os.chmod(op.subject, want.mode)
        self._record_dir(op.subject)
        return "done"

    def adopt_dir(self, op: Op, _) -> str:
        self._record_dir(op.subject)
        return "recorded"

    # files ---------------------------------------------------------------
    def _record_file(self, path: str, present: bool) -> None:
        recorded = set(_read_json(self.paths.files_record, []))
        changed = recorded | {path} if present else recorded - {path}
        if changed != recorded:
            _write_json(self.paths.files_record, sorted(changed))

    def write_file(self, op: Op, _) -> str:
        if self.paths.owns(op.subject):  # env and binding files: the executor's own, 0600
            write_atomic(op.subject, self.rendered.contents[op.subject], PRIVATE)
            return "written (0600)"
        want = next(f for f in self.rendered.desired.files if f.path == op.subject)
        self._record_file(op.subject, True)  # recorded first: a crash leaves it removable
        Path(op.subject).parent.mkdir(parents=True, exist_ok=True)
        write_atomic(op.subject, self.rendered.contents[op.subject], want.mode)
        return f"written ({want.mode:04o})"

    def remove_file(self, op: Op, _) -> str:
        try:
            os.unlink(op.subject)
        except FileNotFoundError:
            pass
        if not self.paths.owns(op.subject):
            self._record_file(op.subject, False)
            try:  # a directory left empty by it (certs.d/<registry>/): it was made for it
                os.rmdir(os.path.dirname(op.subject))
            except OSError:
                pass
        return "removed"

    # containers ----------------------------------------------------------
    # answered.json names, per container, the container ID an apply saw answer its health
    # check. The entry is dropped before a container is (re)created or started and written
    # only once its check answered, so an apply killed in between leaves it unconfirmed and
    # the next apply awaits it (await-health) rather than taking "running" for done.
    def _set_answered(self, name: str, container_id: Optional[str]) -> None:
        record = _read_answered(self.paths)
        changed = dict(record)
        if container_id is None:
            changed.pop(name, None)
        else:
            changed[name] = container_id
        if changed != record:
            _write_json(self.paths.answered_record, changed)

    def _stop_and_remove(self, name: str, operation) -> str:
        """Returns what to add to the operation's result (the host neighbour entries deleted
        that still named the removed container's MAC: neighbours.py)."""
        leaving = self.neighbours.before_removal(name, operation)
        self.report.progress(operation, f"stopping (grace period up to {self.stop_timeout}s)")
        engine.remove(self.api, name, self.rendered.desired.mesh, self.stop_timeout)
        return self.neighbours.after_removal(leaving, operation)

    def remove_container(self, op: Op, operation) -> str:
        forgotten = self._stop_and_remove(op.subject, operation)
        self._set_answered(op.subject, None)
        return "removed" + forgotten

    def _create_and_start(self, op, operation) -> str:
        self._set_answered(op.subject, None)
        spec = self.rendered.specs[op.subject]
        for path in spec.placeholders:  # empty until its provisioner fills it; never replaced
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            try:
                write_exclusive(path, b"", 0o600)
                self.report.progress(operation, f"created {path} empty (its provisioner fills it)")
            except FileExistsError:
                pass
        container_id = engine.create(self.api, spec, self.rendered.desired.mesh,
                                     lambda message: self.report.progress(operation, message))
        engine.start(self.api, op.subject)
        aligned = self.neighbours.after_start(op.subject, operation)
        return self._await_health(op.subject, operation, container_id) + aligned

    def create_container(self, op: Op, operation) -> str:
        return self._create_and_start(op, operation)

    def recreate_container(self, op: Op, operation) -> str:
        forgotten = self._stop_and_remove(op.subject, operation)
        return self._create_and_start(op, operation) + forgotten

    def start_container(self, op: Op, operation) -> str:
        self._set_answered(op.subject, None)
        engine.start(self.api, op.subject)
        aligned = self.neighbours.after_start(op.subject, operation)
        return self._await_health(op.subject, operation,
                                  engine.container_id(self.api, op.subject)) + aligned

    def await_health(self, op: Op, operation) -> str:
        """A running container no apply has seen answer (the one that started it was killed
        while waiting): wait for its check now, bounded as after a start."""
        return self._await_health(op.subject, operation, engine.container_id(self.api, op.subject))

    def _await_health(self, name: str, operation, container_id: Optional[str]) -> str:
        if name not in self.rendered.health:
            self.health[name] = "running"
            return "running"
        check, address = self.rendered.health[name]
        host, port = address, check.host_port
        if check.kind in ("tcp", "http") and port is None:  # not published: ask the bridge
            host, port = engine.container_ip(self.api, name), check.port

        def attempt() -> bool:
            return engine.probe(self.api, name, check.kind, command=check.command, host=host,
                                port=port, path=check.path)

        def tick(seconds: float) -> None:
            self.report.progress(operation, f"running; waiting for its {check.kind} check to "
                                 f"answer ({seconds:.0f}s of {check.timeout}s)")

        took = engine.wait_answering(attempt, check.timeout, tick)
        if took is None:
            self.health[name] = "running, not answering"
            raise engine.EngineError(f"running, but its {check.kind} check did not answer "
                                     f"within {check.timeout}s")
        self.health[name] = "answering"
        if container_id is not None:
            self._set_answered(name, container_id)
        return f"running, answering ({check.kind} check, {took:.1f}s)"

    def run_step(self, op: Op, operation) -> str:
        mesh = self.rendered.desired.mesh
        engine.remove(self.api, op.subject, mesh, 0)  # a leftover of an earlier run
        engine.create(self.api, self.rendered.specs[op.subject], mesh,
                      lambda message: self.report.progress(operation, message))
        code, last_lines = engine.run_to_completion(
            self.api, op.subject,
            lambda seconds: self.report.progress(operation, f"still running ({seconds:.0f}s)"))
        if code != 0:
            raise _StepFailed(f"exit {code}", last_lines)
        digest = next(c.digest for c in self.rendered.desired.containers if c.name == op.subject)
        write_atomic(self.paths.marker(op.subject), digest + "\n", PRIVATE)
        engine.remove(self.api, op.subject, mesh, 0)
        return "exit 0 (completed; marker recorded)"

    def forget_step(self, op: Op, _) -> str:
        try:
            os.unlink(self.paths.marker(op.subject))
        except FileNotFoundError:
            pass
        return "marker removed"

class _StepFailed(MeshError):
    """A run-once step that exited non-zero: the operation fails with its last log lines."""

    def __init__(self, message: str, last_lines: list[str]):
        super().__init__(message)
        self.last_lines = last_lines


CONTAINER_OPS = {"remove-container", "run-step", "create-container", "recreate-container",
                 "start-container", "await-health"}
RECORD_OP = "record-applied"  # written by the call once every phase has ended, not here


def _execute(plan: Plan, executor: _Executor,
             before_containers: Callable[[], None]) -> Optional[str]:
    """Run the plan's operations in order (the applied record aside); a failure stops what
    follows. The phase that failed (firewall | containers), or None on success."""
    report = executor.report
    ops = [op for op in plan.ops if op.op != RECORD_OP]
    firewall_done = False
    for index, op in enumerate(ops):
        if not firewall_done and op.op in CONTAINER_OPS:
            before_containers()
            firewall_done = True
            if report.failed:
                _skip(report, ops[index:])
                return "firewall"
        operation = report.begin(op.op, op.subject, op.cause)
        handler = getattr(executor, op.op.replace("-", "_"))
        try:
            result = handler(op, operation)
        except _StepFailed as failed:
            report.end(operation, f"failed: {failed}", ok=False, detail=failed.last_lines)
        except (engine.EngineError, OSError, engine.docker.errors.DockerException) as exc:
            report.end(operation, f"failed: {_explain(exc)}", ok=False)
        else:
            report.end(operation, result)
            continue
        _skip(report, ops[index + 1:])
        return "containers"
    if not firewall_done:
        before_containers()
        if report.failed:
            return "firewall"
    return "containers" if report.failed else None


def _explain(exc: Exception) -> str:
    if isinstance(exc, OSError) and exc.errno is not None:
        return f"{exc.strerror or errno.errorcode.get(exc.errno, exc.errno)}: {exc.filename or ''}".rstrip(": ")
    if isinstance(exc, engine.docker.errors.APIError):
        return str(exc.explanation or exc)
    return str(exc)


def _skip(report: Report, ops: Sequence[Op]) -> None:
    for op in ops:
        report.record(op.op, op.subject, op.cause, "skipped: an earlier operation failed")


def _sweep_temporaries(paths: NodePaths, desired: Desired) -> int:
    """Remove what an interrupted write left behind (temp files may hold secrets)."""
    removed = 0
    for directory in (paths.env_dir, paths.bindings_dir, paths.steps_dir, paths.root):
        try:
            entries = list(os.scandir(directory))
        except FileNotFoundError:
            continue
        for entry in entries:
            if entry.name.startswith(".") and entry.name.endswith(".tmp") and entry.is_file():
                os.unlink(entry.path)
                removed += 1
    for want in desired.dirs:  # half-made state directories (mkdtemp beside the target)
        parent, name = os.path.split(want.path)
        try:
            entries = list(os.scandir(parent))
        except FileNotFoundError:
            continue
        for entry in entries:
            if entry.name.startswith(f".{name}.") and entry.name.endswith(".tmp") \
                    and entry.is_dir(follow_symlinks=False):
                try:
                    os.rmdir(entry.path)  # only ever empty: it is renamed before anything goes in
                    removed += 1
                except OSError:
                    pass
    return removed
