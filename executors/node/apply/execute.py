"""Observing a node and executing a plan's operations: the imperative half of `mesh apply`.

Invariants:
- observe reads exactly what the pure diff (compare.py) compares, through reads.py (the one
  owner of observing, shared with the no-op check): declared directories, accessed paths, the
  files the mesh writes, run-once markers, the applied record and answered.json; the managed
  containers come from one label-filtered list call through the docker SDK.
- Rendering is the only place secret values exist; an operation writes them only into files
  of mode 0600 (a container's secret files: 0400, owned by its user) and containers'
  environments, never into a cause, a label or the report.
- Every write is atomic (temp, fsync, rename), so a SIGKILL at any point leaves either the old
  or the new file, and a re-run converges.
- A failed operation stops what follows (listed as skipped); the report says why. The applied
  record is not an operation run here: the call writes it once every phase has ended.
"""

from __future__ import annotations

import errno
import json
import os
import tempfile
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

import attrs
import docker

from resolver import MeshError
from resolver.rendering import BINDING_FILES_DIR

from executors.common.report import Operation
from executors.node import docker_engine as engine
from executors.node.apply.neighbours import HostNeighbours
from executors.node.apply.compare import Desired, DesiredDir, Observed, Op, Plan
from executors.node.apply.reads import (  # noqa: F401  (read_record: part of this module's API)
    container_facts,
    observe_files,
    read_answered,
    read_list,
    read_record,
)
from executors.node.apply.render import Rendered
from executors.node.apply.secret_files import SECRET_DIR_MODE
from executors.node.node_paths import NodePaths
from executors.common.atomic import write_atomic, write_exclusive
from executors.common.report import Report

# Every file written here is 0600: env files and binding files hold unsealed values, and the
# records and markers are the executor's own.
PRIVATE = 0o600
BINDING_DIR_MODE = 0o700  # the binding files' directories: root's alone (see write_file)

# --------------------------------------------------------------------------- files


def _write_json(path: Path, data: object) -> None:
    write_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n", PRIVATE)


def write_record(paths: NodePaths, record: Mapping[str, object]) -> None:
    _write_json(paths.applied, record)


# --------------------------------------------------------------------------- observe


def observe(api: docker.APIClient, paths: NodePaths, desired: Desired) -> Observed:
    """What `diff` compares: the node's files as reads.py reads them (the no-op check reads
    them there too), and the managed containers from one label-filtered list call."""
    files = observe_files(paths, desired)
    rows = engine.managed_rows(api, desired.mesh)
    return files._replace(containers=container_facts(rows, read_answered(paths)))


# --------------------------------------------------------------------------- execute


@attrs.define
class _Executor:
    api: docker.APIClient
    paths: NodePaths
    rendered: Rendered
    report: Report
    stop_timeout: int
    health: dict[str, str] = attrs.field(factory=dict)  # container → running | answering | not answering
    neighbours: HostNeighbours = attrs.field()  # the host's neighbour entries (neighbours.py)

    @neighbours.default
    def _host_neighbours(self) -> HostNeighbours:
        return HostNeighbours(
            self.api, self.report, any(spec.mac for spec in self.rendered.specs.values()))

    # directories ---------------------------------------------------------
    def _record_dir(self, path: str) -> None:
        recorded = set(read_list(self.paths.dirs_record)) | {path}
        _write_json(self.paths.dirs_record, sorted(recorded))

    def _want_dir(self, path: str) -> DesiredDir:
        return next(d for d in self.rendered.desired.dirs if d.path == path)

    def create_dir(self, op: Op, operation: Operation) -> str:
        want = self._want_dir(op.subject)
        target = Path(op.subject)
        target.parent.mkdir(parents=True, exist_ok=True)
        temp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
        os.chown(temp, want.uid, want.gid)
        os.chmod(temp, want.mode)
        os.rename(temp, target)  # appears whole: owner and mode are right from the start
        self._record_dir(op.subject)
        return "done"

    def fix_dir(self, op: Op, operation: Operation) -> str:
        want = self._want_dir(op.subject)
        os.chown(op.subject, want.uid, want.gid)
        os.chmod(op.subject, want.mode)
        self._record_dir(op.subject)
        return "done"

    def adopt_dir(self, op: Op, operation: Operation) -> str:
        self._record_dir(op.subject)
        return "recorded"

    # files ---------------------------------------------------------------
    def _record_file(self, path: str, present: bool) -> None:
        recorded = set(read_list(self.paths.files_record))
        changed = recorded | {path} if present else recorded - {path}
        if changed != recorded:
            _write_json(self.paths.files_record, sorted(changed))

    def write_file(self, op: Op, operation: Operation) -> str:
        if self._is_secret_file(op.subject):  # a container's secret file: 0400, its user's
            want = next(f for f in self.rendered.desired.files if f.path == op.subject)
            self.paths.secrets_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            directory = os.path.dirname(op.subject)
            os.makedirs(directory, mode=SECRET_DIR_MODE, exist_ok=True)
            os.chmod(directory, SECRET_DIR_MODE)  # traverse only, whatever umask made it
            write_atomic(op.subject, self.rendered.contents[op.subject], want.mode, want.owner)
            owner = want.owner or (0, 0)
            return f"written ({want.mode:04o}, owner {owner[0]}:{owner[1]})"
        if self.paths.owns(op.subject):  # env and binding files: the executor's own, 0600
            write_atomic(op.subject, self.rendered.contents[op.subject], PRIVATE)
            return "written (0600)"
        want = next(f for f in self.rendered.desired.files if f.path == op.subject)
        self._record_file(op.subject, True)  # recorded first: a crash leaves it removable
        Path(op.subject).parent.mkdir(parents=True, exist_ok=True)
        self._keep_bindings_private(op.subject)
        write_atomic(op.subject, self.rendered.contents[op.subject], want.mode)
        if want.owner is not None:  # a TLS key its server reads as its own user (0600)
            os.chown(op.subject, *want.owner)
            return f"written ({want.mode:04o}, owner {want.owner[0]}:{want.owner[1]})"
        return f"written ({want.mode:04o})"

    def _keep_bindings_private(self, path: str) -> None:
        """A binding file's directories (BINDING_FILES_DIR and its instance's) are 0700 root,
        made so before the file is written: the file is readable by the container's user
        (0444, or 0400 its own), and by no user of the node."""
        root = self.paths.on_node(BINDING_FILES_DIR)
        directory = os.path.dirname(path)
        if os.path.dirname(directory) == root:
            for each in (root, directory):
                os.chmod(each, BINDING_DIR_MODE)

    def _is_secret_file(self, path: str) -> bool:
        return os.path.dirname(os.path.dirname(path)) == str(self.paths.secrets_dir)

    def remove_file(self, op: Op, operation: Operation) -> str:
        try:
            os.unlink(op.subject)
        except FileNotFoundError:
            pass
        if self._is_secret_file(op.subject):
            try:  # the container's secret directory, once its last file went
                os.rmdir(os.path.dirname(op.subject))
            except OSError:
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
        record = read_answered(self.paths)
        changed = dict(record)
        if container_id is None:
            changed.pop(name, None)
        else:
            changed[name] = container_id
        if changed != record:
            _write_json(self.paths.answered_record, changed)

    def _stop_and_remove(self, name: str, operation: Operation) -> str:
        """Returns what to add to the operation's result (the host neighbour entries deleted
        that still named the removed container's MAC: neighbours.py)."""
        leaving = self.neighbours.before_removal(name, operation)
        self.report.progress(operation, f"stopping (grace period up to {self.stop_timeout}s)")
        engine.remove(self.api, name, self.rendered.desired.mesh, self.stop_timeout)
        return self.neighbours.after_removal(leaving, operation)

    def remove_container(self, op: Op, operation: Operation) -> str:
        forgotten = self._stop_and_remove(op.subject, operation)
        self._set_answered(op.subject, None)
        return "removed" + forgotten

    def _create_and_start(self, op: Op, operation: Operation) -> str:
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

    def create_container(self, op: Op, operation: Operation) -> str:
        return self._create_and_start(op, operation)

    def recreate_container(self, op: Op, operation: Operation) -> str:
        forgotten = self._stop_and_remove(op.subject, operation)
        return self._create_and_start(op, operation) + forgotten

    def start_container(self, op: Op, operation: Operation) -> str:
        self._set_answered(op.subject, None)
        engine.start(self.api, op.subject)
        aligned = self.neighbours.after_start(op.subject, operation)
        return self._await_health(op.subject, operation,
                                  engine.container_id(self.api, op.subject)) + aligned

    def await_health(self, op: Op, operation: Operation) -> str:
        """A running container no apply has seen answer (the one that started it was killed
        while waiting): wait for its check now, bounded as after a start."""
        return self._await_health(op.subject, operation, engine.container_id(self.api, op.subject))

    def _await_health(self, name: str, operation: Operation,
                      container_id: Optional[str]) -> str:
        if name not in self.rendered.health:
            self.health[name] = "running"
            return "running"
        check, address = self.rendered.health[name]
        host: Optional[str] = address
        port = check.host_port
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

    def run_step(self, op: Op, operation: Operation) -> str:
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

    def forget_step(self, op: Op, operation: Operation) -> str:
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
        except (engine.EngineError, OSError, docker.errors.DockerException) as exc:
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
    if isinstance(exc, docker.errors.APIError):
        return str(exc.explanation or exc)
    return str(exc)


def _skip(report: Report, ops: Sequence[Op]) -> None:
    for op in ops:
        report.record(op.op, op.subject, op.cause, "skipped: an earlier operation failed")


def _sweep_temporaries(paths: NodePaths, desired: Desired) -> int:
    """Remove what an interrupted write left behind (temp files may hold secrets)."""
    removed = 0
    secret_dirs: list[Path] = []
    try:  # one directory per container holding secret files
        secret_dirs = [Path(e.path) for e in os.scandir(paths.secrets_dir) if e.is_dir()]
    except FileNotFoundError:
        pass
    for directory in (paths.env_dir, paths.bindings_dir, paths.steps_dir, paths.root,
                      *secret_dirs):
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
