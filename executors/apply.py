"""`mesh apply` as a library call: render (apply_render) → observe → diff (pure, apply_diff) →
execute → report.

Invariants:
- Rendering is the only place secret values exist: they are substituted into env files
  (0600, written atomically) and into the container's environment, never into an Op, a cause,
  a label or the report. Labels carry one-way fingerprints so a cause can name the env key.
- Node-side state lives under the state root: env/ and bindings/ (files the mesh writes),
  steps/ (run-once completion markers: the step's config digest), dirs.json (directories the
  mesh created or adopted), applied.json (serial, digest, generations in force), lock, and
  noop.json (what apply_fast's no-op check compares: removed before a real apply acts,
  rewritten after it succeeds).
- Every write is atomic (temp, fsync, rename), so a SIGKILL at any point leaves either the old
  or the new file, and a re-run converges; the applied record is written only on success.
- A failed operation stops what follows (listed as skipped); the report says why.
- Extension points: `secret_source(SecretRef) -> str`, a `firewall(intent, report, dry_run)`
  callable, and `provisioners`, each `(declaration, secret_source, report, dry_run)`, run
  after the containers are up (providers must be running to make grants exist).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import stat
import tempfile
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

import attrs
from pyrsistent import pmap

from resolver import Declaration

from . import docker_engine as engine
from .apply_fast import held_facts
from .atomic import write_atomic as _write_atomic
from .apply_diff import (
    AccessFacts,
    Applied,
    Candidate,
    ContainerFacts,
    Desired,
    DesiredDir,
    DirFacts,
    FileFacts,
    Observed,
    Op,
    Plan,
    choose_latest,
    diff,
)
from .apply_render import (  # noqa: F401  (NodePaths, render: part of this module's API)
    NodePaths,
    Rendered,
    SecretSource,
    declaration_digest,
    render,
)
from .report import Report

Firewall = Callable[..., None]  # (intent, report, dry_run) → None; reports its own operations
Provisioner = Callable[..., None]  # (declaration, secret_source, report, dry_run) → None

DEFAULT_STATE_ROOT = "/var/lib/mesh"


# --------------------------------------------------------------------------- files


def write_atomic(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Replace `path` whole (executors.atomic); files here default to 0600: they may hold
    unsealed values."""
    _write_atomic(path, data, mode)


def _read_json(path: Path, default):
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return default
    except ValueError:  # unreadable record: treat as absent, the diff will rewrite it
        return default


def _write_json(path: Path, data) -> None:
    write_atomic(path, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode(), 0o600)


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
    containers = {}
    for row in engine.list_managed(api, desired.mesh):
        containers[row.name] = ContainerFacts(
            row.name, row.labels.get(engine.LABEL_DIGEST, ""), row.state == "running",
            row.state, row.labels.get(engine.LABEL_RUN_ONCE) == "true",
            pmap(engine.summary_of(row.labels)))
    markers = {}
    if paths.steps_dir.is_dir():
        for entry in os.scandir(paths.steps_dir):
            if entry.name.endswith(".digest") and not entry.name.startswith("."):
                markers[entry.name[: -len(".digest")]] = Path(entry.path).read_text().strip()
    record = _read_json(paths.applied, None)
    applied = None
    if isinstance(record, dict) and "serial" in record:
        applied = Applied(record["serial"], record.get("digest", ""),
                          pmap(record.get("generations", {})))
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
    def write_file(self, op: Op, _) -> str:
        write_atomic(Path(op.subject), self.rendered.contents[op.subject], 0o600)
        return "written (0600)"

    def remove_file(self, op: Op, _) -> str:
        try:
            os.unlink(op.subject)
        except FileNotFoundError:
            pass
        return "removed"

    # containers ----------------------------------------------------------
    def _stop_and_remove(self, name: str, operation) -> None:
        self.report.progress(operation, f"stopping (grace period up to {self.stop_timeout}s)")
        engine.remove(self.api, name, self.rendered.desired.mesh, self.stop_timeout)

    def remove_container(self, op: Op, operation) -> str:
        self._stop_and_remove(op.subject, operation)
        return "removed"

    def _create_and_start(self, op, operation) -> str:
        spec = self.rendered.specs[op.subject]
        engine.create(self.api, spec, self.rendered.desired.mesh,
                      lambda message: self.report.progress(operation, message))
        engine.start(self.api, op.subject)
        return self._await_health(op.subject, operation)

    def create_container(self, op: Op, operation) -> str:
        return self._create_and_start(op, operation)

    def recreate_container(self, op: Op, operation) -> str:
        self._stop_and_remove(op.subject, operation)
        return self._create_and_start(op, operation)

    def start_container(self, op: Op, operation) -> str:
        engine.start(self.api, op.subject)
        return self._await_health(op.subject, operation)

    def _await_health(self, name: str, operation) -> str:
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
        write_atomic(self.paths.marker(op.subject), (digest + "\n").encode(), 0o600)
        engine.remove(self.api, op.subject, mesh, 0)
        return "exit 0 (completed; marker recorded)"

    def forget_step(self, op: Op, _) -> str:
        try:
            os.unlink(self.paths.marker(op.subject))
        except FileNotFoundError:
            pass
        return "marker removed"

    def record_applied(self, op: Op, _) -> str:
        desired = self.rendered.desired
        _write_json(self.paths.applied, {"serial": desired.serial, "digest": desired.digest,
                                         "generations": dict(desired.generations)})
        return "recorded"


class _StepFailed(Exception):
    def __init__(self, message: str, last_lines: list[str]):
        super().__init__(message)
        self.last_lines = last_lines


CONTAINER_OPS = {"remove-container", "run-step", "create-container", "recreate-container",
                 "start-container", "record-applied"}


def _execute(plan: Plan, executor: _Executor, before_containers: Callable[[], None]) -> bool:
    """Run the plan's operations in order; a failure stops what follows. True on success."""
    report = executor.report
    firewall_done = False
    for index, op in enumerate(plan.ops):
        if not firewall_done and op.op in CONTAINER_OPS:
            before_containers()
            firewall_done = True
            if report.failed:
                _skip(report, plan.ops[index:])
                return False
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
        _skip(report, plan.ops[index + 1:])
        return False
    if not firewall_done:
        before_containers()
    return not report.failed


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


# --------------------------------------------------------------------------- the call


class _Lock:
    """One apply per node at a time (flock on <state root>/lock); waiting is announced."""

    def __init__(self, paths: NodePaths, report: Report):
        self.paths, self.report, self.fd = paths, report, None

    def __enter__(self):
        self.paths.root.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(self.paths.root / "lock", os.O_RDWR | os.O_CREAT, 0o600)
        announced = False
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return self
            except BlockingIOError:
                if not announced:
                    self.report.say(f"waiting for another apply to finish ({self.paths.root}/lock)")
                    announced = True
                time.sleep(0.5)

    def __exit__(self, *exc_info):
        os.close(self.fd)


def _write_noop_record(paths: NodePaths, declaration: Declaration, rendered: Rendered,
                       inputs: dict, firewall_applied: bool) -> None:
    from .apply_fast import noop_record

    firewall_digest = None
    if declaration.firewall is not None and firewall_applied:
        from .firewall_render import render as render_firewall  # what the firewall executor
        firewall_digest = render_firewall(declaration.firewall).digest  # made the table carry
    _write_json(paths.noop_record, noop_record(declaration, rendered.desired, inputs,
                                               firewall_digest))


def _forget_noop_record(paths: NodePaths) -> None:
    try:
        os.unlink(paths.noop_record)
    except FileNotFoundError:
        pass


def applied_serial(state_root) -> Optional[int]:
    record = _read_json(NodePaths(Path(state_root)).applied, None)
    return record.get("serial") if isinstance(record, dict) else None


def apply_declaration(declaration: Declaration, *, api, state_root=DEFAULT_STATE_ROOT,
                      secret_source: Optional[SecretSource] = None, dry_run: bool = False,
                      report: Optional[Report] = None, firewall: Optional[Firewall] = None,
                      provisioners: Sequence[Provisioner] = (), stop_timeout: int = 10,
                      noop_inputs: Optional[dict] = None) -> Report:
    """Make this node match `declaration`; returns the report (report.facts["result"]).
    With `noop_inputs` (apply_fast.noop_inputs), a success leaves the no-op check's record."""
    report = report if report is not None else Report()
    paths = NodePaths(Path(state_root))
    report.facts.update(mesh=declaration.mesh, node=declaration.node, serial=declaration.serial,
                        held=held_facts(declaration))
    for held in report.facts["held"]:
        report.say(f"held: {held['instance']} keeps its last good declaration "
                   f"([{held['code']}] {held['where']})")
    with _Lock(paths, report):
        report.say(f"rendering declaration serial {declaration.serial} for node {declaration.node}")
        rendered = render(declaration, paths, secret_source)
        report.facts["digest"] = rendered.desired.digest
        report.say("observing the node (files, directories, one container list call)")
        observed = observe(api, paths, rendered.desired)
        plan = diff(rendered.desired, observed)
        previous = observed.applied
        for notice in plan.notices:
            report.notice(notice.subject, notice.message)
        in_force = dict(previous.generations) if previous else {}
        report.facts.update(serial_applied=previous.serial if previous else None,
                            generations=in_force)
        if plan.refused:
            report.facts["refusals"] = [attrs.asdict(r) for r in plan.refusals]
            for refusal in plan.refusals:
                report.notice(refusal.subject, "refused: " + refusal.message)
            report.facts["result"] = "refused"
            return report
        if dry_run:
            for op in plan.ops:
                report.record(op.op, op.subject, op.cause, "planned")
            report.say(f"dry run: {len(plan.ops)} operation(s) planned, nothing changed"
                       + ("; grants are provisioned only by a real apply, once their providers "
                          "run" if provisioners else ""))
            if firewall is not None and declaration.firewall is not None:
                firewall(declaration.firewall, report, True)
            report.facts["result"] = "dry-run"
            return report
        report.say(f"{len(plan.ops)} operation(s) to apply" if plan.ops
                   else "nothing to change in files, directories or containers")
        if plan.ops:  # until this apply succeeds, no-op checks decline
            _forget_noop_record(paths)
        swept = _sweep_temporaries(paths, rendered.desired)
        if swept:
            report.say(f"removed {swept} temporary file(s) left by an interrupted apply")
        executor = _Executor(api, paths, rendered, report, stop_timeout)

        def before_containers() -> None:
            if firewall is not None and declaration.firewall is not None:
                firewall(declaration.firewall, report, False)

        ok = _execute(plan, executor, before_containers)
        if ok:
            for provisioner in provisioners:  # grants need their providers up: after containers
                result = provisioner(declaration, secret_source, report, False)
                ok = ok and not getattr(result, "failed", False)
            ok = ok and not report.failed
        if ok:
            report.facts.update(serial_applied=declaration.serial,
                                generations=dict(rendered.desired.generations))
        if ok and noop_inputs is not None and not report.notices and not declaration.grants:
            _write_noop_record(paths, declaration, rendered, noop_inputs, firewall is not None)
        report.facts["health"] = dict(sorted(executor.health.items()))
        report.facts["result"] = "applied" if ok else "failed"
        report.say(f"serial {report.facts['serial_applied']} in force; "
                   f"{len(report.ops)} operation(s); result: {report.facts['result']}")
        return report


def apply_latest(declarations: Sequence[tuple[str, Declaration]], **kwargs) -> Report:
    """Latest wins: apply only the newest by serial; report each other as superseded."""
    report = kwargs.pop("report", None) or Report()
    state_root = kwargs.get("state_root", DEFAULT_STATE_ROOT)
    candidates = [Candidate(label, d.node, d.serial, declaration_digest(d))
                  for label, d in declarations]
    choice = choose_latest(candidates, applied_serial(state_root))
    report.facts["superseded"] = [
        {"file": c.label, "serial": c.serial, "superseded_by": by} for c, by in choice.superseded]
    for candidate, by in choice.superseded:
        report.notice(candidate.label, f"serial {candidate.serial} superseded by serial {by}; "
                      "not applied")
    if choice.chosen is None:
        first = declarations[0][1]
        report.facts.update(mesh=first.mesh, node=first.node, serial=None,
                            serial_applied=applied_serial(state_root), result="superseded")
        return report
    chosen = next(d for (label, d), c in zip(declarations, candidates) if c is choice.chosen)
    report.facts["file"] = choice.chosen.label
    return apply_declaration(chosen, report=report, **kwargs)
