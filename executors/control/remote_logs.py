"""`mesh logs DIR INSTANCE` on the control node: ask the agent of the instance's node, over the
mesh's broker, for what its containers wrote.

Invariants:
- The request is signed with the mesh's delivery key (kind `logs-request`, the node verifies it
  as it verifies a declaration) and goes to the node's own queue; it names the mesh, the node,
  the instance and when it expires (`timeout` from now), so a node that was away never answers
  a request nobody waits for any more.
- The answer comes back on a queue only this request has (exclusive, deleted with the
  connection, bound to the `logs` exchange by the request's random id), and is taken only
  from the node's own account (the broker validates `user_id`): another node cannot answer
  for it. No answer within `timeout` is a RemoteLogsError saying so, never an empty success.
- `--follow` (`follow`): the same request with `follow: true` and a short lease (`lease`
  seconds); the agent streams answers until the lease expires, and the asker renews it (the
  same request, signed again, a later `expires`) every third of it while it follows. Ctrl-C
  closes the connection: the answer queue goes with it and the agent stops at its next answer
  or keep-alive. An answer naming why the follow ended (`end`) ends it here too.
- Nothing is written: no ledger, no control state.
"""

from __future__ import annotations

import datetime
import secrets
import time
from typing import TYPE_CHECKING, Callable, Optional

import attrs

from resolver import MeshError

from executors.common import amqp, messages
from executors.common.amqp import BrokerError
from executors.control.delivery_key import DeliveryKey
from executors.control.fleet import Fleet

if TYPE_CHECKING:  # pika ships no types: its objects are named for the reader
    from pika.adapters.blocking_connection import BlockingChannel


class RemoteLogsError(MeshError):
    """The node's agent did not answer, or answered that it cannot read those logs."""


@attrs.frozen
class LogsQuery:
    """What `mesh logs` asks a node for."""

    node: str
    instance: str
    container: Optional[str] = None
    since: Optional[float] = None  # Unix time
    tail: Optional[int] = None
    timestamps: bool = False


@attrs.frozen
class RemoteLogs:
    """The node's answer: the lines (secret values already replaced by the agent), whether
    the agent cut them to its bound, and how many lines it scrubbed."""

    lines: tuple[str, ...]
    truncated: bool
    scrubbed: int


def request_body(mesh: str, query: LogsQuery, request: str,
                 expires: datetime.datetime, follow: bool = False) -> dict[str, object]:
    body: dict[str, object] = {
        "mesh": mesh, "node": query.node, "instance": query.instance,
        "container": query.container, "since": query.since, "tail": query.tail,
        "timestamps": query.timestamps, "request": request,
        "expires": expires.strftime("%Y-%m-%dT%H:%M:%SZ")}
    if follow:
        body["follow"] = True
    return body


LEASE = 60.0  # seconds a follow lasts unless renewed


def follow(fleet: Fleet, key: DeliveryKey, query: LogsQuery, *, timeout: float,
           say: Callable[[str], None], line: Callable[[str], None],
           lease: float = LEASE) -> str:
    """Ask the node's agent to follow the instance's output, hand each line to `line` as it
    comes, renew the lease while following; why the agent ended it (KeyboardInterrupt goes
    through: the connection closes and the agent stops)."""
    request = secrets.token_hex(16)
    connection = fleet.connect(deadline=time.monotonic() + timeout)
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.exchange_declare(amqp.LOGS, "direct", durable=True)
        queue = channel.queue_declare("", exclusive=True, auto_delete=True).method.queue
        channel.queue_bind(queue, amqp.LOGS, request)

        def send() -> None:
            expires = (datetime.datetime.now(datetime.timezone.utc)
                       + datetime.timedelta(seconds=lease))
            envelope = messages.sign(messages.LOGS_REQUEST,
                                     request_body(fleet.names.mesh, query, request, expires,
                                                  follow=True),
                                     key.key, key.certificate_pem)
            try:
                amqp.publish(channel, amqp.DECLARATIONS, query.node, envelope,
                             amqp.properties(message_id=f"logs/{query.node}/{request}/"
                                                        f"{time.time_ns()}",
                                             kind=messages.LOGS_REQUEST))
            except BrokerError as error:
                raise RemoteLogsError(f"node {query.node} has no queue on the mesh's broker "
                                      f"(is it enrolled?): {error}") from None

        send()
        say(f"following the logs of {query.instance} through node {query.node}'s agent "
            f"(request {request}, renewed every {lease / 3:.0f}s; Ctrl-C stops)")
        renew_at = time.monotonic() + lease / 3
        heard = False
        deadline = time.monotonic() + timeout
        node_user = fleet.names.node_user(query.node)
        for method, props, body in channel.consume(queue, auto_ack=True,
                                                   inactivity_timeout=0.5):
            if method is not None and props.user_id == node_user:
                try:
                    answer = messages.open_plain(body, messages.LOGS_ANSWER_FORMAT)
                except messages.MessageRefused:
                    answer = {}
                if answer.get("request") == request:
                    heard = True
                    if answer.get("error"):
                        raise RemoteLogsError(f"node {query.node}: {answer['error']}")
                    lines = answer.get("lines")
                    for text in lines if isinstance(lines, list) else []:
                        line(str(text))
                    if answer.get("end"):
                        return str(answer["end"])
            if not heard and time.monotonic() >= deadline:
                raise RemoteLogsError(
                    f"no answer from node {query.node}'s agent within {timeout:.0f}s (is "
                    f"`mesh agent` running there and connected?)")
            if time.monotonic() >= renew_at:
                send()
                renew_at = time.monotonic() + lease / 3
        raise RemoteLogsError(f"the broker closed the answer queue of request {request}")
    finally:
        try:
            connection.close()
        except Exception:  # noqa: BLE001 - closing a broken connection: nothing left to do
            pass


def ask(fleet: Fleet, key: DeliveryKey, query: LogsQuery, *, timeout: float,
        say: Callable[[str], None]) -> RemoteLogs:
    """Send the signed request to the node's queue and wait for its agent's answer."""
    request = secrets.token_hex(16)
    expires = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=timeout)
    connection = fleet.connect(deadline=time.monotonic() + timeout)
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.exchange_declare(amqp.LOGS, "direct", durable=True)
        queue = channel.queue_declare("", exclusive=True, auto_delete=True).method.queue
        channel.queue_bind(queue, amqp.LOGS, request)
        envelope = messages.sign(messages.LOGS_REQUEST,
                                 request_body(fleet.names.mesh, query, request, expires),
                                 key.key, key.certificate_pem)
        try:
            amqp.publish(channel, amqp.DECLARATIONS, query.node, envelope,
                         amqp.properties(message_id=f"logs/{query.node}/{request}",
                                         kind=messages.LOGS_REQUEST))
        except BrokerError as error:
            raise RemoteLogsError(f"node {query.node} has no queue on the mesh's broker (is it "
                                  f"enrolled?): {error}") from None
        say(f"asked node {query.node}'s agent for the logs of {query.instance} "
            f"(request {request}); waiting up to {timeout:.0f}s")
        return _wait(channel, queue, fleet.names.node_user(query.node), request, query, timeout)
    finally:
        try:
            connection.close()
        except Exception:  # noqa: BLE001 - closing a broken connection: nothing left to do
            pass


def _wait(channel: BlockingChannel, queue: str, node_user: str, request: str,
          query: LogsQuery, timeout: float) -> RemoteLogs:
    deadline = time.monotonic() + timeout
    for method, props, body in channel.consume(queue, auto_ack=True, inactivity_timeout=0.5):
        if method is not None and props.user_id == node_user:
            try:
                answer = messages.open_plain(body, messages.LOGS_ANSWER_FORMAT)
            except messages.MessageRefused:
                answer = {}
            if answer.get("request") == request:
                channel.cancel()
                if answer.get("error"):
                    raise RemoteLogsError(f"node {query.node}: {answer['error']}")
                lines = answer.get("lines")
                scrubbed = answer.get("scrubbed")
                return RemoteLogs(
                    tuple(str(line) for line in lines) if isinstance(lines, list) else (),
                    bool(answer.get("truncated")), scrubbed if isinstance(scrubbed, int) else 0)
        if time.monotonic() >= deadline:
            channel.cancel()
            raise RemoteLogsError(
                f"no answer from node {query.node}'s agent within {timeout:.0f}s (is `mesh "
                f"agent` running there and connected?); the request expires unanswered")
    raise RemoteLogsError(f"the broker closed the answer queue of request {request}")
