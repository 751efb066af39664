"""`mesh apply` as a library call: render (apply_render) → observe → diff (pure, apply_diff) →
checks → firewall → execute (apply_exec) → provision → record → report.

Invariants:
- Rendering is the only place secret values exist: they are substituted into env files
  (0600, written atomically) and into the container's environment, never into an Op, a cause,
  a label or the report. Labels carry one-way fingerprints so a cause can name the env key.
- Node-side state: the executor's own files live in `<state root>/.mesh/` (node_paths): env/
  and bindings/ (files the mesh writes), steps/ (run-once completion markers), dirs.json,
  applied.json (applied_record), lock, and noop.json (what apply_fast's no-op check compares:
  removed before a real apply acts, rewritten after it succeeds). Instances' state lives beside
  it, never inside it. An earlier layout's files are moved in first (migrate_legacy_layout).
- Phases in order, each only if the one before succeeded: checks (observations that must hold
  before anything changes, e.g. that each provider's running server accepts its admin
  credential), firewall, containers (directories, files, containers, run-once steps),
  provisioning (grants need their providers up). The applied record is written last: it names
  the new serial only when every phase succeeded; otherwise it keeps the last good one in force
  and states what was attempted and what failed. A refused plan and a dry run change nothing,
  the record included.
- Every write is atomic (temp, fsync, rename), so a SIGKILL at any point leaves either the old
  or the new file, and a re-run converges.
- A failed operation stops what follows (listed as skipped); the report says why.
- Extension points (extensions.py): `secret_source(SecretRef) -> str`, a
  `firewall(intent, report, dry_run)` callable, `checks` (extensions.Check) and `provisioners`
  (extensions.ProvisionHook), run after the containers are up.
- The apply returns an `ApplyOutcome` (outcome.py), built here stage by stage as a value; the
  Report it is given is only the event log. The Docker Engine or the filesystem breaking off
  the apply (DockerException, RequestException, OSError) is a failed outcome naming the error,
  never a traceback, and nothing is recorded as applied.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Optional, Sequence, Union

from docker.errors import DockerException
from requests.exceptions import RequestException

from resolver import Declaration
from resolver.rendering import declaration_digest

from executors.common import applied_record
from executors.common.report import Report
from executors.node.apply.compare import Plan, diff
from executors.node.apply.diff import Candidate, choose_latest
from executors.node.apply.execute import (  # noqa: F401  (observe: part of this module's API)
    RECORD_OP,
    _execute,
    _Executor,
    _sweep_temporaries,
    _write_json,
    observe,
    write_record,
)
from executors.node.apply.fast import NoopInputs, noop_record
from executors.node.apply.reads import read_record
from executors.node.apply.outcome import (
    ApplyError,
    ApplyOutcome,
    ApplyResult,
    Provisioned,
    RecordKept,
    Superseded,
    held_of,
)
from executors.node.apply.render import Rendered, render  # noqa: F401  (render: part of this module's API)
from executors.node.extensions import Check, Firewall, ProvisionHook, SecretSource
from executors.node.firewall.executor import read_recorded_digest
from executors.node.node_paths import DEFAULT_FILE_ROOT, DEFAULT_STATE_ROOT, NodePaths, migrate_legacy_layout

if TYPE_CHECKING:
    from docker import APIClient

    from executors.node.provisioners.base import ProvisionResult

ENGINE_FAULTS = (DockerException, RequestException)  # the Engine broke off: a failed outcome
StateRoot = Union[str, "os.PathLike[str]"]


# --------------------------------------------------------------------------- the call


class _Lock:
    """One apply per node at a time (flock on <state root>/.mesh/lock); waiting is announced."""

    def __init__(self, paths: NodePaths, report: Report):
        self.paths, self.report, self.fd = paths, report, -1

    def __enter__(self) -> _Lock:
        self.paths.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.fd = os.open(self.paths.lock, os.O_RDWR | os.O_CREAT, 0o600)
        announced = False
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return self
            except BlockingIOError:
                if not announced:
                    self.report.say(f"waiting for another apply to finish ({self.paths.lock})")
                    announced = True
                time.sleep(0.5)

    def __exit__(self, kind: Optional[type[BaseException]], error: Optional[BaseException],
                 traceback: Optional[TracebackType]) -> None:
        os.close(self.fd)


def _write_noop_record(paths: NodePaths, declaration: Declaration, rendered: Rendered,
                       inputs: NoopInputs, firewall_applied: bool) -> None:
    firewall_digest = None
    if declaration.firewall is not None and firewall_applied:
        firewall_digest = read_recorded_digest(str(paths.root))  # what the table carries
    _write_json(paths.noop_record, noop_record(declaration, rendered.desired, inputs,
                                               firewall_digest))


def _forget_noop_record(paths: NodePaths) -> None:
    try:
        os.unlink(paths.noop_record)
    except FileNotFoundError:
        pass


def applied_serial(state_root: StateRoot) -> Optional[int]:
    """The newest serial the node applied or attempted: an older declaration is superseded."""
    return applied_record.newest_serial(read_record(NodePaths(Path(state_root))))


def _granted(results: Sequence[ProvisionResult]) -> tuple[dict[str, int], list[dict[str, str]]]:
    """What the provisioners reported in force on this node's providers, and the grants of a
    kind none of them provisions."""
    granted: dict[str, int] = {}
    not_provisioned: list[dict[str, str]] = []
    for result in results:
        for outcome in result.outcomes:
            if outcome.status == "in-force" and outcome.generation is not None:
                granted[outcome.credential] = outcome.generation
            elif outcome.status == "not-provisioned":
                not_provisioned.append({"credential": outcome.credential, "kind": outcome.kind,
                                        "provider": outcome.provider,
                                        "consumer": outcome.consumer})
        granted.update(result.admins)
    return granted, not_provisioned


def _provisioned(results: Sequence[ProvisionResult]) -> Optional[Provisioned]:
    """What every provisioner that ran reported, in the order they ran (None: none ran)."""
    if not results:
        return None
    return Provisioned(tuple(o.to_json() for r in results for o in r.outcomes),
                       sum(r.statements for r in results),
                       tuple(o for r in results for o in r.orphaned))


def _provision(provisioners: Sequence[ProvisionHook], declaration: Declaration,
               secret_source: Optional[SecretSource], report: Report) -> list[ProvisionResult]:
    results = []
    for provisioner in provisioners:
        try:
            results.append(provisioner(declaration, secret_source, report, False))
        except Exception as error:  # noqa: BLE001 - a provisioner's fault fails this phase
            report.record("provision", declaration.node, "provisioners",
                          f"failed: {type(error).__name__}: {error}", ok=False)
    return results


def _attempt(declaration: Declaration, rendered: Rendered, report: Report,
             phase: Optional[str] = None,
             results: Sequence[ProvisionResult] = ()) -> applied_record.Attempt:
    granted, not_provisioned = _granted(results)
    return applied_record.Attempt(
        mesh=declaration.mesh, node=declaration.node, serial=declaration.serial,
        digest=rendered.desired.digest, generations=dict(rendered.desired.generations),
        granted=granted, not_provisioned=not_provisioned, phase=phase,
        failures=[{"op": o.op, "subject": o.subject, "result": o.result}
                  for o in report.failures()])


def _finish(paths: NodePaths, report: Report, plan: Plan,
            previous: Optional[dict[str, object]],
            attempt: applied_record.Attempt) -> Optional[RecordKept]:
    """Write the applied record once every phase has ended: on success as the operation
    `record-applied`; on failure as bookkeeping (said, not an operation), the planned
    `record-applied` listed as skipped. What the record keeps in force after a failure."""
    record = applied_record.record_after(previous, attempt)
    planned = next((op for op in plan.ops if op.op == RECORD_OP), None)
    subject = f"serial {attempt.serial}"
    if attempt.succeeded:
        if record == previous:
            return None
        cause = planned.cause if planned is not None else "provider generations in force changed"
        operation = report.begin(RECORD_OP, subject, cause)
        write_record(paths, record)
        report.end(operation, "recorded")
        return None
    kept = record["serial"]
    if record != previous:
        write_record(paths, record)
    if planned is not None:
        report.record(RECORD_OP, subject, planned.cause,
                      f"skipped: the {attempt.phase} phase failed")
    report.say(f"recorded in {paths.applied}: serial {attempt.serial} failed in the "
               f"{attempt.phase} phase; serial {kept if kept is not None else '(none)'} stays "
               f"in force, and `mesh applied` refuses this report until an apply succeeds")
    return RecordKept(str(record["result"]), kept if isinstance(kept, int) else None,
                      str(attempt.phase))


def _ended(outcome: ApplyOutcome, report: Report) -> ApplyOutcome:
    """The outcome with the event log as it ended."""
    return outcome._replace(ops=list(report.ops), checks=list(report.checks),
                   notices=[dict(n) for n in report.notices])


def apply_declaration(declaration: Declaration, *, api: APIClient,
                      state_root: StateRoot = DEFAULT_STATE_ROOT,
                      secret_source: Optional[SecretSource] = None, dry_run: bool = False,
                      report: Optional[Report] = None, firewall: Optional[Firewall] = None,
                      checks: Sequence[Check] = (), provisioners: Sequence[ProvisionHook] = (),
                      stop_timeout: int = 10, noop_inputs: Optional[NoopInputs] = None,
                      file_root: str = DEFAULT_FILE_ROOT) -> ApplyOutcome:
    """Make this node match `declaration`; how it ended (its `result`: applied, dry-run,
    refused or failed). The steps are said through `report` as they happen.
    With `noop_inputs` (apply_fast.noop_inputs), a success leaves the no-op check's record.
    `file_root`: where the declaration's files (absolute paths) are written, `/` on a node."""
    report = report if report is not None else Report()
    paths = NodePaths(Path(state_root), file_root)
    held = held_of(declaration.held)
    outcome = ApplyOutcome(ApplyResult.FAILED, mesh=declaration.mesh, node=declaration.node,
                           serial=declaration.serial, held=held)
    for h in held:
        report.say(f"held: {h.instance} keeps its last good declaration "
                   f"([{h.code}] {h.where})")
    try:
        with _Lock(paths, report):
            if not dry_run:
                for moved in migrate_legacy_layout(paths):
                    report.say(f"moved into the executor's own directory: {moved}")
            report.say(f"rendering declaration serial {declaration.serial} for node "
                       f"{declaration.node}")
            rendered = render(declaration, paths, secret_source)
            outcome = outcome._replace(digest=rendered.desired.digest)
            report.say("observing the node (files, directories, one container list call)")
            observed = observe(api, paths, rendered.desired)
            previous_record = read_record(paths)
            plan = diff(rendered.desired, observed)
            previous = observed.applied
            for notice in plan.notices:
                report.notice(notice.subject, notice.message)
            outcome = outcome._replace(in_force_read=True,
                              serial_applied=previous.serial if previous else None,
                              generations=dict(previous.generations) if previous else {})
            if plan.refused:
                for refusal in plan.refusals:
                    report.notice(refusal.subject, "refused: " + refusal.message)
                # nothing changed, the record included
                return _ended(outcome._replace(result=ApplyResult.REFUSED,
                                      refusals=plan.refusals), report)
            for check in checks:  # observations that must hold before anything changes
                check(declaration, secret_source, report)
            if dry_run:
                for op in plan.ops:
                    report.record(op.op, op.subject, op.cause, "planned")
                report.say(f"dry run: {len(plan.ops)} operation(s) planned, nothing changed"
                           + ("; grants are provisioned only by a real apply, once their "
                              "providers run" if provisioners else ""))
                if firewall is not None and declaration.firewall is not None:
                    firewall(declaration.firewall, report, True)
                return _ended(outcome._replace(result=ApplyResult.DRY_RUN), report)
            if report.failed:  # a check failed: nothing is changed
                for op in plan.ops:
                    report.record(op.op, op.subject, op.cause, "skipped: a check failed")
                kept = _finish(paths, report, plan, previous_record,
                               _attempt(declaration, rendered, report, "checks"))
                report.say("stopped before changing anything: a check failed; result: failed")
                return _ended(outcome._replace(result=ApplyResult.FAILED, record=kept), report)
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

            phase = _execute(plan, executor, before_containers)
            results: list[ProvisionResult] = []
            if phase is None:  # grants need their providers up: after the containers
                results = _provision(provisioners, declaration, secret_source, report)
                if report.failed or any(r.failed for r in results):
                    phase = "provisioning"
                outcome = outcome._replace(provisioned=_provisioned(results))
            ok = phase is None
            kept = _finish(paths, report, plan, previous_record,
                           _attempt(declaration, rendered, report, phase, results))
            outcome = outcome._replace(record=kept)
            if ok:
                outcome = outcome._replace(serial_applied=declaration.serial,
                                  generations=dict(rendered.desired.generations))
            else:
                outcome = outcome._replace(failed_phase=phase)
            if ok and noop_inputs is not None and not report.notices and not provisioners \
                    and not checks:
                _write_noop_record(paths, declaration, rendered, noop_inputs,
                                   firewall is not None)
            outcome = outcome._replace(health=dict(sorted(executor.health.items())),
                              result=ApplyResult.APPLIED if ok else ApplyResult.FAILED)
            report.say(f"serial {outcome.serial_applied} in force; "
                       f"{len(report.ops)} operation(s); result: {outcome.result.value}")
            return _ended(outcome, report)
    except ENGINE_FAULTS as exc:  # unreachable, or broke off mid-way: nothing recorded applied
        return _ended(outcome._replace(result=ApplyResult.FAILED,
                              error=ApplyError.of(exc, engine=True)), report)
    except OSError as exc:
        return _ended(outcome._replace(result=ApplyResult.FAILED,
                              error=ApplyError.of(exc, engine=False)), report)


def apply_latest(declarations: Sequence[tuple[str, Declaration]], *, api: APIClient,
                 state_root: StateRoot = DEFAULT_STATE_ROOT,
                 secret_source: Optional[SecretSource] = None, dry_run: bool = False,
                 report: Optional[Report] = None, firewall: Optional[Firewall] = None,
                 checks: Sequence[Check] = (), provisioners: Sequence[ProvisionHook] = (),
                 stop_timeout: int = 10, noop_inputs: Optional[NoopInputs] = None,
                 file_root: str = DEFAULT_FILE_ROOT) -> ApplyOutcome:
    """Latest wins: apply only the newest by serial; report each other as superseded."""
    report = report if report is not None else Report()
    try:
        in_force = applied_serial(state_root)
    except OSError as exc:
        return _ended(ApplyOutcome(ApplyResult.FAILED, error=ApplyError.of(exc, engine=False)),
                      report)
    candidates = [Candidate(label, d.node, d.serial, declaration_digest(d))
                  for label, d in declarations]
    choice = choose_latest(candidates, in_force)
    superseded = tuple(Superseded(c.label, c.serial, by) for c, by in choice.superseded)
    for candidate, by in choice.superseded:
        report.notice(candidate.label, f"serial {candidate.serial} superseded by serial {by}; "
                      "not applied")
    if choice.chosen is None:
        first = declarations[0][1]
        return _ended(ApplyOutcome(ApplyResult.SUPERSEDED, mesh=first.mesh, node=first.node,
                                   serial=None, superseded=superseded, in_force_read=True,
                                   serial_applied=in_force), report)
    chosen = next(d for (label, d), c in zip(declarations, candidates) if c is choice.chosen)
    outcome = apply_declaration(
        chosen, api=api, state_root=state_root, secret_source=secret_source, dry_run=dry_run,
        report=report, firewall=firewall, checks=checks, provisioners=provisioners,
        stop_timeout=stop_timeout, noop_inputs=noop_inputs, file_root=file_root)
    return outcome._replace(file=choice.chosen.label, superseded=superseded)
