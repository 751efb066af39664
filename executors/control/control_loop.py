"""The control plane's loop (`mesh control DIR`), and its one-shot steps (`publish`, `collect`).

Invariants:
- One cycle: when the mesh's inputs changed (mesh.yaml, the catalogue, the ledger and the
  per-node records of what was declared beside it: by an operator, or by this loop recording
  a report), resolve, issue what can be issued, write,
  record and publish every node whose declaration changed (control/publish.py); take every
  report and enrolment request waiting (control/inbox.py), each acknowledged only once it is
  kept, and the requests of tokens made with --auto-accept accepted; then again. A rotation
  therefore completes by itself: the provider's report makes the new generation active,
  which changes the holders' declarations, which are published; their reports retire the
  old generation, which changes the provider's, which is published. A node removed since
  the broker was last reconciled (`mesh node remove`) loses its account and queue in that
  same cycle, as on a new connection.
- The self-hosting transition (control/self_hosting.py) runs before declarations are written:
  while the ledger holds local builds (`mesh build --local`) and the mesh's registry serves,
  they are pushed into it and recorded at its digest, so that publish names the registry.
  Kept local (the registry not up yet), they are retried every housekeeping round until
  pushed (the ledger then changes, so the next cycle publishes); the reason is said once per
  change, not at every retry.
- Everything it knows is on disk (the ledger, the state directory) and in the broker's durable
  queues, so a restarted loop picks up where the last one stopped: a digest written but not
  published is published, a report not acknowledged is delivered again (recording it twice
  changes nothing).
- The broker unreachable is never fatal: the loop says so and reconnects with capped backoff.
  Bad input (a typo in mesh.yaml) is said once per change, with its file:line faults, and
  nothing is published until it is fixed; what runs stays as it is.
- One line per event on stderr, never a secret.
- Between rounds the loop keeps, in memory, what the next round can reuse (publish.Memory: the
  documents parsed, the ledger loaded, each node's record and their join, the declarations
  written, the last resolution's reuse): a round after a one-line edit parses only the file
  that changed, re-reads only the declarations it wrote and writes only the records of the
  nodes that changed (ledger.yaml only when something was issued); what it publishes is what a fresh process would (nothing kept is trusted over the
  files: each is checked by its bytes or its stat).
"""

from __future__ import annotations

import datetime
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Optional, Sequence

import attrs
from nacl.public import PrivateKey

from resolver import InputError, Inputs, MeshError, Resolution

from executors.common import amqp, messages
from executors.common.amqp import BrokerError
from executors.common.keys import load_private_key
from executors.control import enrolment, inbox, publish, revocations, self_hosting
from executors.control.applied import resolve_current
from executors.control.broker_settings import BrokerSettings
from executors.control.control_state import ControlState
from executors.control.delivery_key import ensure_delivery_key
from executors.control.fleet import Fleet
from executors.control.fleet_broker import FleetError
from executors.control.loading import Fingerprint, inputs_fingerprint
from executors.control.publish import Memory, Prepared, Published

if TYPE_CHECKING:  # pika ships no types: its objects are named for the reader
    from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection
    from pika.spec import Basic, BasicProperties

#: A message taken from the inbox: (queue, its method frame, its properties, its body).
Delivery = tuple[str, "Basic.Deliver", "BasicProperties", bytes]
#: The mesh as loaded and resolved when its files had this fingerprint.
Loaded = tuple[Optional[Fingerprint], Optional[tuple[Inputs, Resolution]]]

HOUSEKEEPING_SECONDS = 10.0


def now_iso() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@attrs.define
class Control:
    """One control plane for the mesh in `mesh_dir`."""

    mesh_dir: Path
    settings: BrokerSettings
    state: ControlState
    say: Callable[[str], None]
    key_file: Optional[str] = None
    issue: bool = True
    interval: float = 5.0
    docker_host: Optional[str] = None  # the Engine local builds are pushed from (self_hosting)
    fleet: Fleet = attrs.field(init=False)
    mesh: str = attrs.field(init=False)
    _control_key: Optional[PrivateKey] = attrs.field(init=False, default=None)
    _resolved: Loaded = attrs.field(init=False, default=(None, None))  # fingerprint, loaded
    # what one round keeps for the next (publish.Memory)
    memory: Memory = attrs.field(init=False, factory=Memory)
    # node queues declared on this channel
    _queues: set[str] = attrs.field(init=False, factory=set)
    # queues of removed nodes this process deleted (said once)
    _deleted: set[str] = attrs.field(init=False, factory=set)
    # the removed nodes whose accounts and queues the broker was last made to drop
    _removed: frozenset[str] = attrs.field(init=False, factory=frozenset)
    # whether the ledger holds local builds not pushed yet (None: not looked at yet)
    _local_builds: Optional[bool] = attrs.field(init=False, default=None)
    # why they were last kept, and which (said once while it stays so)
    _kept_said: Optional[tuple[self_hosting.Why, tuple[str, ...]]] = attrs.field(
        init=False, default=None)

    def __attrs_post_init__(self) -> None:
        inputs = self.memory.loader.load(self.mesh_dir)
        self.mesh = inputs.mesh.mesh
        self.fleet = Fleet(self.mesh, self.settings, self.state.ensure(), self.say)
        if self.key_file:
            self._control_key = load_private_key(self.key_file)

    # -- connecting

    def connect(self, *, deadline: Optional[float] = None,
                stop: Callable[[], bool] = lambda: False
                ) -> tuple[BlockingConnection, BlockingChannel]:
        """Accounts made as wanted, then the control account's connection and its channel
        (publisher confirms on), the exchanges and queues declared."""
        removed = revocations.removed_nodes(self.state)
        self.fleet.ensure_accounts()
        self._removed = removed
        connection = self.fleet.connect(deadline=deadline, stop=stop)
        channel = connection.channel()
        channel.confirm_delivery()
        nodes = self.memory.loader.load(self.mesh_dir).mesh.nodes
        self.fleet.declare(channel, nodes)
        self._queues = set(nodes)
        self._delete_removed_queues(channel, nodes)
        return connection, channel

    def _delete_removed_queues(self, channel: BlockingChannel, nodes: Iterable[str]) -> None:
        """The queues of nodes that left the mesh (`mesh node remove`), with the declarations
        waiting in them: deleted (a queue already gone is no error)."""
        for node in sorted(revocations.removed_nodes(self.state) - set(nodes)):
            queue = self.fleet.names.node_queue(node)
            ok = channel.queue_delete(queue)
            dropped = getattr(getattr(ok, "method", None), "message_count", 0) or 0
            if queue not in self._deleted:
                self.say(f"deleted the queue {queue} of node {node}, removed from the mesh"
                         + (f" ({dropped} declaration(s) dropped)" if dropped else ""))
                self._deleted.add(queue)

    def follow_removals(self, channel: BlockingChannel) -> None:
        """A node removed since the broker was last reconciled (`mesh node remove` while the
        loop runs): its account deleted and its queue too, as a new connection would."""
        removed = revocations.removed_nodes(self.state)
        if removed == self._removed:
            return
        try:
            nodes = self.memory.loader.load(self.mesh_dir).mesh.nodes
        except MeshError:
            return  # the mesh does not load (said): once it is fixed, this runs again
        self.fleet.ensure_accounts()
        self._removed = removed
        self._delete_removed_queues(channel, nodes)

    # -- publishing

    def publish(self, channel: BlockingChannel, *, force: Iterable[str] = (),
                only: Optional[Iterable[str]] = None) -> list[Published]:
        """Resolve, write, record and publish what changed (or `force`); what was confirmed."""
        return self.send(channel, self.prepare(force=force, only=only))

    def prepare(self, *, force: Iterable[str] = (),
                only: Optional[Iterable[str]] = None) -> Prepared:
        if self._local_builds is not False:  # before declarations are written
            self.self_host()
        notes: list[str] = []
        prepared = publish.prepare(self.mesh_dir, self.state, now=now_iso(), issue=self.issue,
                                   control_key=self._control_key, force=force, only=only,
                                   notes=notes, memory=self.memory)
        self._resolved = (prepared.fingerprint, (prepared.inputs, prepared.resolution))
        self._local_builds = any(record.local for record in prepared.ledger.builds.values())
        for note in notes:
            self.say(note)
        for problem in prepared.problems:
            self.say(f"refusal (its instances are held or not declared): {problem}")
        return prepared

    def self_host(self) -> Optional[self_hosting.SelfHosting]:
        """Push the local builds into the mesh's registry when it serves (self_hosting); why
        they are kept is said once, not again while it stays the same (the registry still not
        answering, however its error reads). None when the mesh does not load (the publish
        says why) or the step failed (said)."""
        lines: list[str] = []
        try:
            done = self_hosting.push_when_served(self.mesh_dir, self.key_file,
                                                 docker_host=self.docker_host, say=lines.append)
        except InputError:
            return None
        except MeshError as error:
            self.say(f"self-hosting: {error}; tried again at the next publish")
            return None
        said = None if done.why is None else (done.why, done.kept)
        if said is None or said != self._kept_said:
            for line in lines:
                self.say(line)
        self._kept_said = said
        self._local_builds = bool(done.kept)
        return done

    def send(self, channel: BlockingChannel,
             prepared: Prepared) -> list[Published]:
        if not prepared.declarations:
            return []
        key = ensure_delivery_key(self.mesh_dir, prepared.inputs.mesh)
        done: list[Published] = []
        try:
            done = publish.send(channel, key, prepared, say=self.say, declared=self._queues,
                                revoked=revocations.load(self.state))
        finally:
            publish.record_published(self.mesh_dir, self.state, done)
        return done

    # -- the mesh as it is

    def current(self) -> tuple[Inputs, Resolution]:
        """(inputs, resolution) of the mesh as its files are now: loaded and resolved again
        only when a file changed (call it under the ledger lock, as the inbox does)."""
        fingerprint = inputs_fingerprint(self.mesh_dir)
        seen, loaded = self._resolved
        if seen != fingerprint or loaded is None:
            inputs = self.memory.loader.load(self.mesh_dir)
            loaded = (inputs, resolve_current(inputs))
            self._resolved = (fingerprint, loaded)
        return loaded

    # -- the inbox

    def handle_batch(self, channel: BlockingChannel,
                     deliveries: Sequence[Delivery]) -> list[inbox.Outcome]:
        """Handle (queue, method, props, body) deliveries: the reports as one batch, each
        enrolment request alone; each acknowledged once kept. A mesh that does not load
        leaves them unacknowledged, for later."""
        reports = [d for d in deliveries if d[0] == amqp.REPORT_QUEUE]
        outcomes: list[inbox.Outcome] = []
        try:
            if reports:
                outcomes += inbox.handle_reports(
                    self.mesh_dir, self.state, self.fleet.names,
                    [(getattr(props, "user_id", None), body) for _, _, props, body in reports],
                    current=self.current)
            for queue, method, props, body in deliveries:
                if queue != amqp.REPORT_QUEUE:
                    try:
                        outcomes.append(inbox.handle_enrolment(
                            self.mesh_dir, self.state, self.fleet.names,
                            getattr(props, "user_id", None), body))
                    except MeshError as error:
                        if isinstance(error, InputError):
                            raise
                        outcomes.append(inbox.Outcome(f"enrolment: {error}", refused=True))
        except InputError as error:
            for _, method, _, _ in deliveries:
                channel.basic_nack(method.delivery_tag, requeue=True)
            self.say(f"{len(deliveries)} message(s) kept for later: the mesh does not load "
                     f"({error.faults[0] if error.faults else error})")
            time.sleep(1.0)
            return []
        _ack_all(channel, [method.delivery_tag for _, method, _, _ in deliveries])
        for outcome in outcomes:
            self.say(outcome.line)
        return outcomes

    def accept_automatic(self, channel: BlockingChannel) -> list[str]:
        """Accept the waiting requests of tokens made with --auto-accept; the nodes accepted
        (their keys and addresses now in mesh.yaml: the next cycle publishes to them)."""
        try:
            inputs, _ = self.current()
            key = ensure_delivery_key(self.mesh_dir, inputs.mesh)
            return enrolment.accept_automatic(self.mesh_dir, self.fleet, channel, key,
                                              say=self.say)
        except MeshError as error:
            if isinstance(error, BrokerError):
                raise
            self.say(f"automatic acceptance: {error}")
            return []

    def drain(self, channel: BlockingChannel,
              queues: Sequence[str] = (amqp.REPORT_QUEUE, amqp.ENROLMENT_QUEUE)
              ) -> list[inbox.Outcome]:
        """Take every message waiting in `queues` and handle them as one batch."""
        deliveries: list[Delivery] = []
        tags = []
        for queue in queues:
            tags.append(channel.basic_consume(
                queue, lambda ch, method, props, body, q=queue: deliveries.append(
                    (q, method, props, body))))
        connection = channel.connection
        while True:
            before = len(deliveries)
            connection.process_data_events(time_limit=0.2)
            waiting = sum(channel.queue_declare(q, passive=True).method.message_count
                          for q in queues)
            if not waiting and len(deliveries) == before:
                break
        for tag in tags:
            channel.basic_cancel(tag)
        connection.process_data_events(time_limit=0)
        return self.handle_batch(channel, deliveries) if deliveries else []

    # -- the loop

    def run(self, stop: Callable[[], bool] = lambda: False) -> None:
        amqp.serve_reconnecting(
            lambda: self.connect(stop=stop), lambda opened: self._serve(*opened, stop),
            close=lambda opened: opened[0].close(), stopping=stop, say=self.say,
            retried=(BrokerError, FleetError),
            unreachable=lambda _attempt, error, delay: (
                f"broker: {error}; retrying in {delay:.0f}s"),
            connected=lambda _attempt: (f"serving mesh {self.mesh} on {self.settings.amqp} "
                                        f"(vhost {self.fleet.names.vhost})"))

    def _serve(self, connection: BlockingConnection, channel: BlockingChannel,
               stop: Callable[[], bool]) -> None:
        inbox_channel = connection.channel()
        inbox_channel.basic_qos(prefetch_count=200)
        waiting: list[Delivery] = []
        for queue in (amqp.REPORT_QUEUE, amqp.ENROLMENT_QUEUE):
            inbox_channel.basic_consume(
                queue, lambda ch, method, props, body, q=queue: waiting.append(
                    (q, method, props, body)))
        seen = None
        last_housekeeping = 0.0
        while not stop():
            fingerprint = inputs_fingerprint(self.mesh_dir)
            if fingerprint != seen:
                try:
                    self.publish(channel)
                    seen = inputs_fingerprint(self.mesh_dir)  # what this publish wrote included
                except InputError as error:
                    seen = fingerprint
                    self.say(f"the mesh does not load; nothing published until it is fixed "
                             f"({len(error.faults)} fault(s)):")
                    for fault in error.faults:
                        self.say(f"  {fault}")
                except (MeshError, messages.MessageRefused) as error:
                    if isinstance(error, BrokerError):
                        raise
                    seen = fingerprint
                    self.say(f"not published: {error}")
                self.follow_removals(channel)
            connection.process_data_events(time_limit=0 if waiting else min(self.interval, 1.0))
            if waiting:
                batch, waiting[:] = list(waiting), []
                self.handle_batch(inbox_channel, batch)
                if any(queue != amqp.REPORT_QUEUE for queue, _, _, _ in batch):
                    self.accept_automatic(channel)
            if time.monotonic() - last_housekeeping >= HOUSEKEEPING_SECONDS:
                last_housekeeping = time.monotonic()
                try:
                    enrolment.close_answered(self.mesh_dir, self.fleet, channel, say=self.say)
                except FleetError as error:
                    self.say(f"enrolment housekeeping: {error}")
                self.accept_automatic(channel)  # a request taken before a restart, too
                if self._local_builds:  # kept local last time: the registry may serve now
                    self.self_host()  # pushed: the ledger changed, the next cycle publishes


def _ack_all(channel: BlockingChannel, tags: Sequence[int]) -> None:
    """Acknowledge every one of `tags`: one `multiple` acknowledgement when they are a run
    with no gap (the consumers hand every delivery of the channel over, in order, so nothing
    below the run is unacknowledged and not handled), one by one otherwise."""
    ordered = sorted(tags)
    if ordered and ordered[-1] - ordered[0] + 1 == len(ordered) == len(set(ordered)):
        channel.basic_ack(ordered[-1], multiple=True)
        return
    for tag in ordered:
        channel.basic_ack(tag)



def standing(control: Control) -> dict[str, tuple[bool, str]]:
    """Per enrolled node with something published: (applied what was published?, one line)."""
    published, accounts = control.state.published(), control.state.accounts()
    reports = control.state.reports()
    result = {}
    for node, sent in sorted(published.items()):
        if node not in accounts:
            continue
        kept = reports.get(node) or {}
        last, applied = kept.get("last") or {}, kept.get("last_applied") or {}
        serial = sent.get("serial")
        in_force = last.get("serial_applied")
        if in_force is None:
            in_force = applied.get("serial")
        if in_force is not None and serial is not None and in_force >= serial:
            result[node] = (True, f"serial {in_force} in force (published {serial})")
        elif last.get("serial") == serial and last.get("result") not in (None, "applied"):
            why = f": {last.get('reason')}" if last.get("reason") else ""
            result[node] = (False, f"serial {serial} {last.get('result')}{why}")
        else:
            result[node] = (False, f"serial {serial} published, not reported applied yet"
                            + (f" (in force: {in_force})" if in_force is not None else ""))
    return result


def settle(control: Control, connection: BlockingConnection, channel: BlockingChannel,
           wait: float) -> tuple[list[inbox.Outcome], dict[str, tuple[bool, str]]]:
    """Take what is waiting; with `wait`, keep taking until every enrolled node applied what
    was published to it or `wait` seconds passed."""
    outcomes = control.drain(channel)
    deadline = time.monotonic() + wait
    while wait and time.monotonic() < deadline:
        if all(ok for ok, _ in standing(control).values()):
            break
        connection.process_data_events(time_limit=0.5)
        outcomes += control.drain(channel)
    return outcomes, standing(control)
