"""The node agent (`mesh agent --config FILE`): takes its node's declarations off the broker,
verifies them, applies the newest, reports back.

Invariants:
- Only this node's queue is read, with this node's account; only reports and answers to logs
  and backup requests are published, in this node's name (the broker validates `user_id`).
- Scheduled backups (node/backup_schedule.py) start from the idle loop in a thread of their
  own, one at a time, also while the broker is away; each ending is reported (trigger
  `backup`), and every report carries each instance's last backup. Every apply (a
  declaration, a drift repair, an arrival tried again) waits for a backup under way and none
  starts while it runs (BackupSchedule.apart). A backup request (`mesh
  backup|restore DIR INSTANCE`) is verified like a declaration and run apart from them
  (agent/backup_answer.py); it never applies anything.
- A logs request (`mesh logs DIR INSTANCE`) is verified like a declaration and answered apart
  from them (agent/logs_answer.py, secret values replaced by their tokens); it never applies
  anything. A follow request (`--follow`) is streamed by a follower thread with a broker
  connection of its own (agent/logs_follow.py); the same request again renews its lease.
- A declaration whose apply failed in its arrival phase (a move's state not fetched: nothing
  changed) is kept and applied again every arrivals.RETRY_SECONDS by this loop (trigger
  `retry`) until it applies or a newer declaration replaces it; while an arrival copies, its
  latest progress line is published as a `progress` report from the broker thread
  (agent/arrivals.py).
- A declaration is applied only after its envelope verified against the pinned mesh CA
  (common/messages.py) and its body proved to be this node's of this mesh. Anything else (a bad
  signature, another key, another node, truncated, not JSON) is refused: its report says why
  (`result: rejected`), the log says why, and nothing of it touches the node.
- Every verified declaration waiting is handed, together, to executors/node/runner.apply_files
  (the one apply code path, the same as `mesh apply`): the newest serial is applied, every other
  is reported superseded naming the serial that superseded it, one older than the serial in
  force is superseded and never applied.
- A message is acknowledged only once its report was confirmed by the broker; a crash before
  that gets it delivered again, and applying the same declaration again is a no-op.
- The apply runs in a worker thread while this thread keeps the broker connection serviced
  (heartbeats), so a long apply never costs the connection; the agent stops only between
  applies.
- A signer on the mesh's revocation list is refused; the list is learnt from verified
  declarations and kept (agent/revoked.py).
- The last declaration applied successfully is kept (`<state root>/.mesh/agent/current/`) and
  re-applied every `drift-minutes` and at start (a reboot loses the firewall table), whether the
  broker is reachable or not, then verified again; a re-apply that changed something is
  reported as drift repaired, and a verify whose verdict changed (a provider elsewhere that
  came up since) is reported too.
- The broker unreachable is never fatal and never silent: capped exponential backoff, a line
  per attempt. One line per event on stderr; never a secret.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import shutil
import socket
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, Optional, TypedDict, TypeVar

import attrs

import resolver
from resolver import Declaration, MeshError

from executors.common import amqp, messages
from executors.common.amqp import BrokerError, FleetNames
from executors.common.atomic import write_atomic
from executors.common.keys import load_private_key, unseal
from executors.common.report import LivePrinter, Report
from executors.node.agent import arrivals, backup_answer, logs_answer, logs_follow
from executors.node.agent.config import AgentConfig, BrokerLogin
from executors.node.agent.revoked import KeptRevocations
from executors.node.apply.options import ApplyOptions
from executors.node.backup_schedule import BackupRecord, BackupRunner, BackupSchedule
from executors.node.apply.runner import apply_files, secret_source_from
from executors.node.verify.check import engine_client, engine_locator, verify_declaration
from executors.node.apply.outcome import ApplyOutcome, ApplyResult
from executors.node.node_paths import NodePaths
from executors.node.state_move.background import Departures

if TYPE_CHECKING:  # pika has no type information: these names are for the reader
    import pika
    from pika.adapters.blocking_connection import BlockingChannel

PREFETCH = 100
SETTLE_SECONDS = 2.0  # at most this long to let every waiting message arrive before applying
AGENT_VERSION = "1"


@attrs.define
class Delivery:
    tag: int
    message_id: Optional[str]
    body: bytes


@attrs.frozen
class Verified:
    delivery: Delivery
    body: messages.Document
    declaration: Declaration


class VerifyDocument(TypedDict, total=False):
    """What `mesh verify` found after an apply, as a report carries it."""

    ok: bool
    results: list[dict[str, object]]  # verify.result.Result.to_json() each
    error: str  # a verify that could not run: why


# A report's body as the broker carries it (common/message_schemas.py holds its schema).
ReportBody = dict[str, object]
Applier = Callable[[ApplyOptions, Callable[[str], None]], ApplyOutcome]
Verifier = Callable[[Declaration, Path], VerifyDocument]
_T = TypeVar("_T")


def now_iso() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def stderr_line(node: str) -> Callable[[str], None]:
    def say(message: str) -> None:
        print(f"agent {node}: {message}", file=sys.stderr, flush=True)
    return say


class AgentFiles:
    """The agent's own files, beside the executor's (`<state root>/.mesh/agent/`)."""

    def __init__(self, state_root: str):
        self.root = NodePaths(state_root).root / "agent"
        self.spool = self.root / "spool"
        self.current = self.root / "current"

    def current_files(self) -> Optional[tuple[Path, Path]]:
        declaration, secrets = self.current / "declaration.json", self.current / "secrets.yaml"
        return (declaration, secrets) if declaration.is_file() and secrets.is_file() else None


def check_body(body: messages.Document, config: AgentConfig) -> Declaration:
    """The declaration a verified body carries, proved to be this node's; MessageRefused."""
    if body.get("mesh") != config.mesh:
        raise messages.MessageRefused(f"for mesh {body.get('mesh')!r}, not {config.mesh!r}")
    if body.get("node") != config.node:
        raise messages.MessageRefused(f"for node {body.get('node')!r}, not this node "
                                      f"({config.node})")
    try:
        declaration = resolver.documents.structure(body.get("declaration"), resolver.Declaration)
        resolver.documents.structure(body.get("secrets") or {}, resolver.Ledger)
    except Exception as exc:  # noqa: BLE001 - cattrs' errors: one line is enough here
        raise messages.MessageRefused(f"the declaration does not read as one "
                                      f"({type(exc).__name__})") from None
    if (declaration.mesh, declaration.node) != (config.mesh, config.node) or \
            declaration.serial != body.get("serial") or declaration.digest != body.get("digest"):
        raise messages.MessageRefused("the declaration inside does not match its envelope "
                                      "(mesh, node, serial or digest)")
    return declaration


def apply_with_runner(options: ApplyOptions, say: Callable[[str], None]) -> ApplyOutcome:
    """The one apply code path (executors/node/runner.apply_files), printing every step."""
    return apply_files(options, Report(printer=LivePrinter()))


class Agent:
    def __init__(self, config: AgentConfig, *, say: Optional[Callable[[str], None]] = None,
                 applier: Optional[Applier] = None, verifier: Optional[Verifier] = None,
                 clock: Callable[[], float] = time.monotonic):
        login, certificate = config.login, config.ca_certificate
        if not config.enrolled or login is None or certificate is None:
            raise BrokerError(f"{config.path}: this node is not enrolled yet (`mesh agent enrol "
                              f"TOKEN --config {config.path}` first)")
        self.config = config
        self.login: BrokerLogin = login
        self.say = say or stderr_line(config.node)
        # an arrival's progress, published while it copies (agent/arrivals.py)
        self.moving = arrivals.MoveProgress()
        self.applier = applier or arrivals.applier_with_progress(self.moving)
        self.progress_channel: Optional[BlockingChannel] = None
        # `mesh logs DIR INSTANCE --follow`: a thread and a connection each (logs_follow.py)
        self.followers = logs_follow.Followers(
            config.node, logs_follow.publisher(self._parameters, login.user, config.node),
            self.say)
        self.verifier = verifier if verifier is not None else (
            self._verify if config.verify else None)
        self.clock = clock
        self.files = AgentFiles(config.state_root)
        self.revoked = KeptRevocations(self.files.root / "revoked.json", self.say)
        self.applied_file = NodePaths(config.state_root).applied  # what apply records
        self.names = FleetNames(config.mesh)
        self.ca = messages.load_certificate(certificate, "pinned CA certificate")
        if messages.certificate_fingerprint(self.ca) != config.ca_fingerprint:
            raise messages.MessageRefused(f"{config.path}: ca-certificate does not have the "
                                          f"pinned fingerprint {config.ca_fingerprint}")
        self.waiting: list[Delivery] = []
        self.unsent: list[ReportBody] = []  # reports made while the broker was away (drift)
        self.verdict: Optional[bool] = None  # verify's last reported verdict (all ok?)
        self.stopping = False
        interval = config.drift_minutes * 60
        self.drift_interval = interval if interval > 0 else None
        self.next_drift: Optional[float] = self.clock()  # at start: repair what a reboot lost
        # the state of instances that moved away, served while the move is declared
        self.departures = Departures(config.state_root, config.docker_host, self.say)
        # scheduled backups of the declaration in force, in a thread (node/backup_schedule.py)
        self.backups = BackupSchedule(BackupRunner(config.state_root, config.docker_host,
                                                   config.key, config.node, self.say), self.say)
        # a declaration whose arrival failed, applied again by itself (agent/arrivals.py)
        self.arrival = arrivals.ArrivalRetry(self.files.root, self.say, clock)

    # -- broker

    def _password(self) -> str:
        return unseal(load_private_key(self.config.key), self.login.password_sealed)

    def _parameters(self) -> pika.ConnectionParameters:
        address = amqp.BrokerAddress(self.login.host, self.login.port)
        return amqp.parameters(address, self.login.vhost, self.login.user, self._password(),
                               tls=self.config.tls(), heartbeat=30)

    def stop(self, *_args: object) -> None:
        if not self.stopping:
            self.say("stopping (after the apply under way, if any)")
        self.stopping = True

    def run(self) -> None:
        """Serve until stopped: connect (backoff), consume, apply, report; repair drift."""
        self.say(f"mesh {self.config.mesh}, node {self.config.node}, broker "
                 f"{self.login.host}:{self.login.port}, queue "
                 f"{self.names.node_queue(self.config.node)}")
        self._follow_departures_in_force()
        amqp.serve_reconnecting(
            lambda: amqp.connect(self._parameters()), self._serve,
            close=lambda connection: connection.close(), stopping=lambda: self.stopping,
            say=self.say, before_attempt=self._drift_if_due, sleep=self._sleep,
            cap=self.config.backoff_cap,
            unreachable=lambda attempt, error, delay: (
                f"broker not reachable (attempt {attempt}): {error}; retrying in {delay:.0f}s"),
            connected=lambda attempt: f"connected to the broker (attempt {attempt})")
        self.departures.close()
        self.backups.close()
        self.followers.close()
        self.say("stopped")

    def _follow_departures_in_force(self) -> None:
        """A restarted agent serves again what its declaration in force says leaves."""
        current = self.files.current_files()
        if current is None:
            return
        try:
            declaration = resolver.documents.structure(
                json.loads(current[0].read_text()), Declaration)
        except (OSError, ValueError, MeshError) as exc:
            self.say(f"the declaration in force cannot be read ({exc}): no state served")
            return
        self.departures.follow(declaration)

    def _sleep(self, seconds: float) -> None:
        end = self.clock() + seconds
        while not self.stopping and self.clock() < end:
            time.sleep(min(0.2, max(0.0, end - self.clock())))

    def _serve(self, connection: pika.BlockingConnection) -> None:
        consume = connection.channel()
        consume.basic_qos(prefetch_count=PREFETCH)
        reports = connection.channel()
        reports.confirm_delivery()
        queue = self.names.node_queue(self.config.node)
        self.waiting = []  # unacknowledged deliveries of a lost connection come again
        consume.basic_consume(queue, lambda ch, method, props, body: self.waiting.append(
            Delivery(method.delivery_tag, props.message_id, body)))
        self._send_unsent(reports)
        self.progress_channel = reports
        while not self.stopping:
            if self.waiting:
                batch = self._settle(connection, consume, queue)
                wanted = [d for d in batch if backup_answer.is_backup_request(d.body)]
                if wanted:  # run apart: a backup request never applies anything
                    batch = [d for d in batch if d not in wanted]
                    done = self._run_serviced(connection, lambda: self.answer_backups(wanted))
                    for delivery, (routing, document) in zip(wanted, done):
                        self._publish_answer(reports, routing, document)
                        consume.basic_ack(delivery.tag)
                asked = [d for d in batch if logs_answer.is_logs_request(d.body)]
                if asked:  # answered apart: a logs request never applies anything
                    batch = [d for d in batch if not logs_answer.is_logs_request(d.body)]
                    answers = self._run_serviced(connection, lambda: self.answer_logs(asked))
                    for delivery, (routing, document) in zip(asked, answers):
                        self._publish_logs(reports, routing, document)
                        consume.basic_ack(delivery.tag)
                # never while a backup stops or dumps the containers the apply changes
                outcomes = self._run_serviced(
                    connection, lambda: self.backups.apart(lambda: self.handle(batch)))
                for delivery, report in outcomes:
                    self._publish_report(reports, report)
                    consume.basic_ack(delivery.tag)
                continue
            if self._drift_due():
                drift_report = self._run_serviced(
                    connection, lambda: self.backups.apart(self._drift))
                if drift_report is not None:
                    self._publish_report(reports, drift_report)
                continue
            if self.arrival.due():
                self._publish_report(reports, self._run_serviced(
                    connection, lambda: self.backups.apart(self._retry_arrival)))
                continue
            self.backups.tick()  # a due backup starts in its own thread
            for record in self.backups.finished():
                self._publish_report(reports, self._backup_report(record))
            connection.process_data_events(time_limit=1.0)

    def _settle(self, connection: pika.BlockingConnection, consume: BlockingChannel,
                queue: str) -> list[Delivery]:
        """Every message waiting in the queue, delivered to us, before deciding which wins."""
        deadline = self.clock() + SETTLE_SECONDS
        while self.clock() < deadline and len(self.waiting) < PREFETCH:
            connection.process_data_events(time_limit=0)
            ready = consume.queue_declare(queue, passive=True).method.message_count
            if not ready:
                break
            connection.process_data_events(time_limit=0.05)
        batch, self.waiting = self.waiting, []
        return batch

    def _run_serviced(self, connection: pika.BlockingConnection, work: Callable[[], _T]) -> _T:
        """Run `work` in a worker thread while this thread services the connection."""
        values: list[_T] = []
        errors: list[BaseException] = []

        def target() -> None:
            try:
                values.append(work())
            except BaseException as error:  # noqa: BLE001 - re-raised below
                errors.append(error)
            finally:  # wake the servicing thread now, not at the end of its time slice
                with contextlib.suppress(Exception):
                    connection.add_callback_threadsafe(lambda: None)

        worker = threading.Thread(target=target, name="mesh-agent-apply", daemon=True)
        worker.start()
        lost: Optional[Exception] = None
        while worker.is_alive():
            if lost is None:
                try:
                    connection.process_data_events(time_limit=0.5)
                    self._send_progress()
                except Exception as error:  # noqa: BLE001 - kept until the apply is done
                    lost = error
            worker.join(0.05 if lost is None else 0.5)
        if errors:
            raise errors[0]
        if lost is not None:  # the apply finished; its messages come again: a no-op then
            raise lost
        return values[0]

    def _publish_report(self, channel: BlockingChannel, report: ReportBody) -> None:
        verify = report.get("verify")
        if isinstance(verify, dict):
            self.verdict = bool(verify.get("ok"))
        amqp.publish(channel, amqp.REPORTS, amqp.REPORTS, messages.plain(report),
                     amqp.properties(message_id=f"report/{self.config.node}/{report['at']}/"
                                     f"{report.get('message_id') or report['trigger']}",
                                     kind="report", user_id=self.login.user))
        self.say(f"reported {report['result']} for "
                 + (f"serial {report['serial']}" if report.get("serial") is not None
                    else f"{report['trigger']}"))

    def _answered(self, channel: BlockingChannel, routing: Optional[str],
                  document: ReportBody, kind: str, undelivered: str) -> bool:
        """An answer to its asker's queue (`routing`: the request's id; message kind `kind`),
        True once the broker took it; a refused request's report instead (routing None), or
        `undelivered` said when the asker's queue is gone: False."""
        if routing is None:
            self._publish_report(channel, document)
            return False
        try:
            amqp.publish(channel, amqp.LOGS, routing, messages.plain(document),
                         amqp.properties(message_id=f"{kind}/{self.config.node}/{routing}",
                                         kind=kind, user_id=self.login.user))
        except BrokerError as error:  # the asker gave up waiting: its queue is gone
            self.say(f"{undelivered}: {error}")
            return False
        return True

    def _publish_logs(self, channel: BlockingChannel, routing: Optional[str],
                      document: ReportBody) -> None:
        """The answer to a logs request to its asker's queue (`routing`: its id), or, for a
        refused request, a report saying why."""
        if not self._answered(channel, routing, document, "logs",
                              f"logs of {document.get('instance')} for request {routing} not "
                              "delivered"):
            return
        lines = document.get("lines")
        self.say(f"answered logs request {routing} ({document.get('instance')}: "
                 + (str(document["error"]) if document.get("error") else
                    f"{len(lines) if isinstance(lines, list) else 0} lines") + ")")

    def _opened(self, delivery: Delivery, kind: str, what: str,
                check: Callable[[Mapping[str, object], str, str, datetime.datetime], str],
                answers: list[tuple[Optional[str], ReportBody]]
                ) -> Optional[tuple[Mapping[str, object], str]]:
        """A signed request's body and id once its envelope verified against the pinned CA
        (`kind`) and `check` accepted its body; else None, its refusal said and reported in
        `answers`."""
        try:
            body = messages.open_signed(delivery.body, kind=kind, ca=self.ca,
                                        mesh=self.config.mesh, revoked=self.revoked.serials())
            return body, check(body, self.config.mesh, self.config.node,
                               datetime.datetime.now(datetime.timezone.utc))
        except messages.MessageRefused as refusal:
            self.say(f"refused {what} request {delivery.message_id or '(no id)'}: "
                     f"{refusal.reason}")
            answers.append((None, self._report("message", result="rejected",
                                               message_id=delivery.message_id,
                                               reason=refusal.reason)))
            return None

    def answer_logs(self, asked: list[Delivery]) -> list[tuple[Optional[str], ReportBody]]:
        """Each logs request verified and answered (logs_answer.py): (its id, the answer), or
        (None, a report of its refusal)."""
        answers: list[tuple[Optional[str], ReportBody]] = []
        for delivery in asked:
            opened = self._opened(delivery, messages.LOGS_REQUEST, "logs",
                                  logs_answer.check_request, answers)
            if opened is None:
                continue
            body, request = opened
            if body.get("follow") is True:  # streamed by a follower; renewed by the asker
                answers.append((request, self.followers.follow(
                    body, request, engine=engine_client(self.config.docker_host),
                    tokens=lambda: logs_answer.secret_tokens(self.files.current_files(),
                                                             self.config.key,
                                                             self.config.node))))
                continue
            answers.append((request, logs_answer.answer(
                body, request, self.config.node,
                engine=engine_client(self.config.docker_host),
                tokens=lambda: logs_answer.secret_tokens(self.files.current_files(),
                                                         self.config.key, self.config.node))))
        return answers

    def answer_backups(self, wanted: list[Delivery]
                       ) -> list[tuple[Optional[str], ReportBody]]:
        """Each backup request verified and run (agent/backup_answer.py): (its id, the
        answer), or (None, a report of its refusal)."""
        answers: list[tuple[Optional[str], ReportBody]] = []
        for delivery in wanted:
            opened = self._opened(delivery, messages.BACKUP_REQUEST, "backup",
                                  backup_answer.check_request, answers)
            if opened is None:
                continue
            body, request = opened
            self.say(f"backup request {request}: {body.get('action')} {body.get('instance')}")
            answers.append((request, backup_answer.answer(body, request, self.config.node,
                                                          self.backups)))
        return answers

    def _publish_answer(self, channel: BlockingChannel, routing: Optional[str],
                        document: ReportBody) -> None:
        """A backup request's answer to its asker's queue, or a refusal's report."""
        if not self._answered(channel, routing, document, "backup",
                              f"answer to backup request {routing} not delivered"):
            return
        self.say(f"answered backup request {routing} ({document.get('action')} "
                 f"{document.get('instance')}: " + (str(document["error"]) if
                 document.get("error") else f"snapshot {str(document.get('snapshot'))[:8]}")
                 + ")")

    def _backup_report(self, record: BackupRecord) -> ReportBody:
        return self._report("backup", result="failed" if record.error else "backed-up",
                            reason=record.error, backup=record.to_json())

    def _send_unsent(self, channel: BlockingChannel) -> None:
        while self.unsent:
            self._publish_report(channel, self.unsent[0])
            self.unsent.pop(0)

    # -- one batch of deliveries

    def handle(self, batch: list[Delivery]) -> list[tuple[Delivery, ReportBody]]:
        """Verify each delivery, apply the newest verified one (runner.apply_files), and make
        one report per delivery."""
        outcomes: list[tuple[Delivery, ReportBody]] = []
        verified: list[Verified] = []
        for delivery in batch:
            try:
                body = messages.open_signed(delivery.body, kind=messages.DECLARATION,
                                            ca=self.ca, mesh=self.config.mesh,
                                            revoked=self.revoked.serials())
                verified.append(Verified(delivery, body, check_body(body, self.config)))
                self.revoked.learn(body.get("revoked"), f"message {delivery.message_id}")
            except messages.MessageRefused as refusal:
                self.say(f"refused message {delivery.message_id or '(no id)'}: {refusal.reason}"
                         f"; nothing applied")
                outcomes.append((delivery, self._report("message", result="rejected",
                                                        message_id=delivery.message_id,
                                                        reason=refusal.reason)))
        if not verified:
            return outcomes
        if len(verified) > 1:
            self.say(f"{len(verified)} declarations waiting (serials "
                     f"{', '.join(str(v.declaration.serial) for v in verified)}): the newest "
                     f"wins")
        spool = self.files.spool / f"batch-{time.time_ns()}"
        labels: dict[str, Verified] = {}
        for index, item in enumerate(verified):
            path = spool / f"{item.declaration.serial:012d}-{index:03d}.declaration.json"
            write_atomic(path, _declaration_json(item.declaration), mode=0o600)
            labels[str(path)] = item
        newest = max(verified, key=lambda v: v.declaration.serial)
        secrets_file = spool / "secrets.yaml"
        write_atomic(secrets_file, _secrets_yaml(newest.body), mode=0o600)
        try:
            try:
                report = self.applier(self._options(list(labels), secrets_file), self.say)
            except MeshError as error:  # bad input to the apply (a key that opens nothing…)
                self.say(f"apply not possible: {error}")
                return outcomes + [(item.delivery, self._report(
                    "message", result="failed", message_id=item.delivery.message_id,
                    serial=item.declaration.serial, digest=item.declaration.digest,
                    reason=str(error))) for item in verified]
            superseded = {entry.file: entry.superseded_by
                          for entry in report.superseded or ()}
            winner = labels.get(report.file) if report.file is not None else None
            if winner is not None and report.file is not None:
                if arrivals.arrival_failed(report):
                    self.arrival.keep(report.file, secrets_file, winner.declaration.serial)
                else:
                    self.arrival.clear()
            verify = None
            if winner is not None and report.file is not None \
                    and report.result == ApplyResult.APPLIED:
                self._keep_current(report.file, secrets_file)
                self.departures.follow(winner.declaration)
                verify = self._run_verify(winner.declaration, secrets_file)
            for label, item in labels.items():
                if label in superseded:
                    self.say(f"serial {item.declaration.serial} superseded by serial "
                             f"{superseded[label]}: not applied")
                    outcomes.append((item.delivery, self._report(
                        "message", result="superseded", message_id=item.delivery.message_id,
                        serial=item.declaration.serial, digest=item.declaration.digest,
                        superseded_by=superseded[label],
                        serial_applied=report.serial_applied)))
                elif item is winner:
                    outcomes.append((item.delivery, self._apply_report(
                        "message", report, item, verify)))
                else:  # not named by the apply (it failed before choosing): say so
                    outcomes.append((item.delivery, self._apply_report(
                        "message", report, item, None)))
        finally:
            shutil.rmtree(spool, ignore_errors=True)
        return outcomes

    def _send_progress(self) -> None:
        """The latest progress of an arrival under way, as a `progress` report (broker thread)."""
        moving = self.moving.take()
        if moving is not None and self.progress_channel is not None:
            amqp.publish(self.progress_channel, amqp.REPORTS, amqp.REPORTS,
                         messages.plain(self._report("progress", result="copying",
                                                     moving=moving)),
                         amqp.properties(message_id=f"progress/{self.config.node}/{now_iso()}",
                                         kind="report", user_id=self.login.user))

    def _retry_arrival(self) -> ReportBody:
        """Apply again the declaration whose arrival failed (from the beginning); its report."""
        kept = self.arrival.files()
        if kept is None:
            self.arrival.clear()
            return self._report("retry", result="failed", reason="nothing kept to try again")
        declaration_file, secrets_file = kept
        self.say(f"trying again the arrival of serial {self.arrival.serial()}")
        try:
            report = self.applier(self._options([str(declaration_file)], secrets_file),
                                  self.say)
        except MeshError as error:
            self.arrival.clear()
            return self._report("retry", result="failed", reason=str(error))
        verify = None
        if arrivals.arrival_failed(report):
            self.arrival.postpone()
            self.say(f"the arrival failed again: next attempt in "
                     f"{arrivals.RETRY_SECONDS:.0f}s")
        elif report.result == ApplyResult.APPLIED:
            self._keep_current(str(declaration_file), secrets_file)
            self.arrival.clear()
            declaration = resolver.documents.structure(
                json.loads(Path(self.files.current / "declaration.json").read_text()),
                resolver.Declaration)
            self.departures.follow(declaration)
            verify = self._run_verify(declaration, self.files.current / "secrets.yaml")
        else:
            self.arrival.clear()
        return self._apply_report("retry", report, None, verify)

    def _options(self, declarations: list[str], secrets_file: Path) -> ApplyOptions:
        return ApplyOptions(declarations=declarations, state_root=self.config.state_root,
                            secrets=str(secrets_file), key=self.config.key,
                            docker_host=self.config.docker_host,
                            stop_timeout=self.config.stop_timeout,
                            no_firewall=not self.config.firewall,
                            # a guarded upgrade's snapshot (node/upgrade.py), as `mesh apply`
                            backup_password_file=os.environ.get("MESH_BACKUP_PASSWORD_FILE"))

    def _keep_current(self, declaration_file: str, secrets_file: Path) -> None:
        current = self.files.current
        write_atomic(current / "secrets.yaml", secrets_file.read_bytes(), mode=0o600)
        write_atomic(current / "declaration.json", Path(declaration_file).read_bytes(),
                     mode=0o600)
        if self.drift_interval is not None:
            self.next_drift = self.clock() + self.drift_interval

    def _verify(self, declaration: Declaration, secrets_file: Path) -> VerifyDocument:
        source = secret_source_from(str(secrets_file), self.config.key, self.config.node)
        engine = engine_client(self.config.docker_host)
        results = verify_declaration(declaration, source, timeout=self.config.verify_timeout,
                                     locate=engine_locator(self.config.docker_host, engine),
                                     engine=engine)
        return {"ok": all(r.ok for r in results), "results": [r.to_json() for r in results]}

    def _run_verify(self, declaration: Declaration,
                    secrets_file: Path) -> Optional[VerifyDocument]:
        if self.verifier is None:
            return None
        try:
            verify = self.verifier(declaration, secrets_file)
        except Exception as error:  # noqa: BLE001 - a verify that could not run is said
            verify = {"ok": False, "error": f"{type(error).__name__}: {error}", "results": []}
        bad = [r for r in verify.get("results", []) if r.get("status") not in
               ("ok", "requires-nothing", "not-provisioned")]
        self.say(f"verify: {len(verify.get('results', [])) - len(bad)} ok, {len(bad)} not ok"
                 + ("".join(f"; {r.get('consumer')} {r.get('requirement') or ''}: "
                            f"{r.get('status')}" for r in bad[:3])))
        return verify

    # -- drift

    def _drift_due(self) -> bool:
        return self.next_drift is not None and self.clock() >= self.next_drift

    def _drift_if_due(self) -> None:
        """Drift repair while no broker connection serves us (its report waits to be sent)."""
        if self._drift_due():
            report = self.backups.apart(self._drift)
            if report is not None:
                self.unsent.append(report)
        self.backups.tick()  # scheduled backups go on without the broker; reported once back

    def _drift(self) -> Optional[ReportBody]:
        """Re-apply the last good declaration and verify again; a report when the re-apply
        changed something or failed, or when verify's verdict changed since last reported."""
        self.next_drift = (self.clock() + self.drift_interval) if self.drift_interval else None
        current = self.files.current_files()
        if current is None:
            return None
        declaration_file, secrets_file = current
        try:
            report = self.applier(self._options([str(declaration_file)], secrets_file),
                                  self.say)
        except MeshError as error:
            self.say(f"drift check not possible: {error}")
            return self._report("drift", result="failed", reason=str(error))
        changed = [op.to_json() for op in report.ops if op.op != "record-applied"]
        verify = None
        if report.result == ApplyResult.APPLIED:
            declaration = resolver.documents.structure(json.loads(declaration_file.read_text()),
                                                       resolver.Declaration)
            verify = self._run_verify(declaration, secrets_file)
        verdict = None if verify is None else bool(verify.get("ok"))
        if report.result == ApplyResult.APPLIED and not changed and verdict == self.verdict:
            self.say("drift check: nothing to repair")
            return None
        self.say(f"drift check: {len(changed)} operation(s) to restore the declaration in force;"
                 f" result {report.result.value}")
        document = self._apply_report("drift", report, None, verify)
        document["drift"] = changed
        return document

    # -- reports

    def _report(self, trigger: str, **fields: object) -> ReportBody:
        document: ReportBody = {"format": messages.REPORT_FORMAT, "mesh": self.config.mesh,
                    "node": self.config.node, "at": now_iso(), "trigger": trigger,
                    "message_id": None, "serial": None, "digest": None, "result": None,
                    "superseded_by": None, "reason": None, "serial_applied": None,
                    "operations": [], "checks": [], "notices": [], "held": [],
                    "generations": {}, "record": self._record(), "verify": None, "drift": None,
                    "agent": {"version": AGENT_VERSION, "host": socket.gethostname()},
                    "backups": self.backups.results()}
        document.update(fields)
        return document

    def _record(self) -> Optional[dict[str, object]]:
        try:
            record: object = json.loads(self.applied_file.read_text())
        except (OSError, ValueError):
            return None
        return record if isinstance(record, dict) else None

    def _apply_report(self, trigger: str, report: ApplyOutcome, item: Optional[Verified],
                      verify: Optional[VerifyDocument]) -> ReportBody:
        fields = {"serial": report.serial, "digest": report.digest,
                  "result": report.result.value,
                  "serial_applied": report.serial_applied,
                  "operations": [op.to_json() for op in report.ops],
                  "checks": [c.to_json() for c in report.checks],
                  "notices": [dict(n) for n in report.notices],
                  "held": [h.to_json() for h in report.held or ()],
                  "generations": dict(report.generations or {}), "verify": verify,
                  "reason": (report.error.message if report.error else None)
                  or report.failed_phase}
        if report.refusals:
            fields["reason"] = "; ".join(f"{r.subject}: {r.message}" for r in report.refusals)
        if arrivals.arrival_failed(report):  # what the failed arrival said, not only its phase
            fields["reason"] = "; ".join(f"arrival of {op.subject} {op.result}"
                                         for op in report.ops if op.op == "arrive" and not op.ok) \
                or report.failed_phase
        if item is not None:
            fields.update(message_id=item.delivery.message_id,
                          serial=item.declaration.serial, digest=item.declaration.digest)
        return self._report(trigger, **fields)


def _declaration_json(declaration: Declaration) -> str:
    return json.dumps(resolver.documents.unstructure(declaration), indent=2, sort_keys=True) + "\n"


def _secrets_yaml(body: messages.Document) -> str:
    return resolver.documents.dump_ledger(
        resolver.documents.structure(body.get("secrets") or {}, resolver.Ledger))

