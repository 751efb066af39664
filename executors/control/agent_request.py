"""One request from the control node to a node's agent over the mesh's broker, and its answers
(`mesh logs`, `mesh logs --follow`, `mesh backup`/`mesh restore` through the agent:
control/remote_logs.py, control/remote_backup.py).

Invariants:
- Each request has a random id and a queue of its own (exclusive, deleted with the
  connection, bound to the `logs` exchange by that id): only answers to it arrive there.
- What is sent is signed with the mesh's delivery key (the node verifies it as it verifies a
  declaration) and goes to the node's own queue; a node with no queue there is the caller's
  error class saying so (is it enrolled?).
- An answer is taken only from the node's own account (the broker validates `user_id`) and
  only when it is a plain message of the expected format naming this request: another node,
  or anything else on the queue, cannot answer for it.
- The connection is closed however the caller leaves (a KeyboardInterrupt included): the
  answer queue goes with it and the agent's next answer finds no one.
"""

from __future__ import annotations

import secrets
import time
from types import TracebackType
from typing import TYPE_CHECKING, Iterator, Optional

from resolver import MeshError

from executors.common import amqp, messages
from executors.common.amqp import BrokerError
from executors.control.delivery_key import DeliveryKey
from executors.control.fleet import Fleet

if TYPE_CHECKING:  # pika ships no types: its objects are named for the reader
    from pika.adapters.blocking_connection import BlockingChannel

QUIET = 0.5  # seconds of silence after which answers() yields None (the caller's clock)


class AgentRequest:
    """A request to `node`'s agent: `send` it (again, to renew it), read its `answers`."""

    def __init__(self, fleet: Fleet, key: DeliveryKey, node: str, *, kind: str,
                 answer_format: str, error: type[MeshError], connect_within: float):
        """`kind`: the signed envelope's kind; `answer_format`: the answers' plain format;
        `error`: what a broker refusal is raised as; `connect_within`: seconds to reach the
        broker."""
        self.fleet, self.key, self.node = fleet, key, node
        self.kind, self.answer_format, self.error = kind, answer_format, error
        self.id = secrets.token_hex(16)
        self.connection = fleet.connect(deadline=time.monotonic() + connect_within)
        try:
            channel: BlockingChannel = self.connection.channel()
            channel.confirm_delivery()
            channel.exchange_declare(amqp.LOGS, "direct", durable=True)
            self.queue = channel.queue_declare("", exclusive=True,
                                               auto_delete=True).method.queue
            channel.queue_bind(self.queue, amqp.LOGS, self.id)
        except BaseException:
            self.close()
            raise
        self.channel = channel

    def __enter__(self) -> AgentRequest:
        return self

    def __exit__(self, kind: Optional[type[BaseException]], value: Optional[BaseException],
                 trace: Optional[TracebackType]) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.connection.close()
        except Exception:  # noqa: BLE001 - closing a broken connection: nothing left to do
            pass

    def send(self, body: dict[str, object], message_id: str) -> None:
        """Sign `body` and put it on the node's queue (confirmed by the broker)."""
        envelope = messages.sign(self.kind, body, self.key.key, self.key.certificate_pem)
        try:
            amqp.publish(self.channel, amqp.DECLARATIONS, self.node, envelope,
                         amqp.properties(message_id=message_id, kind=self.kind))
        except BrokerError as error:
            raise self.error(f"node {self.node} has no queue on the mesh's broker (is it "
                             f"enrolled?): {error}") from None

    def answers(self) -> Iterator[Optional[messages.Document]]:
        """Each answer to this request as it comes, None after each QUIET seconds without
        one; ends (the caller's error class) when the broker closes the queue."""
        node_user = self.fleet.names.node_user(self.node)
        for method, props, body in self.channel.consume(self.queue, auto_ack=True,
                                                        inactivity_timeout=QUIET):
            answer: Optional[messages.Document] = None
            if method is not None and props.user_id == node_user:
                try:
                    opened = messages.open_plain(body, self.answer_format)
                except messages.MessageRefused:
                    opened = {}
                if opened.get("request") == self.id:
                    answer = opened
            yield answer
        raise self.error(f"the broker closed the answer queue of request {self.id}")


__all__ = ["AgentRequest", "QUIET"]
