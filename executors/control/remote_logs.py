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
import time
from typing import Callable, Optional

import attrs

from resolver import MeshError

from executors.common import messages
from executors.control.agent_request import AgentRequest
from executors.control.delivery_key import DeliveryKey
from executors.control.fleet import Fleet


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
    with AgentRequest(fleet, key, query.node, kind=messages.LOGS_REQUEST,
                      answer_format=messages.LOGS_ANSWER_FORMAT, error=RemoteLogsError,
                      connect_within=timeout) as asked:

        def send() -> None:
            expires = (datetime.datetime.now(datetime.timezone.utc)
                       + datetime.timedelta(seconds=lease))
            asked.send(request_body(fleet.names.mesh, query, asked.id, expires, follow=True),
                       f"logs/{query.node}/{asked.id}/{time.time_ns()}")

        send()
        say(f"following the logs of {query.instance} through node {query.node}'s agent "
            f"(request {asked.id}, renewed every {lease / 3:.0f}s; Ctrl-C stops)")
        renew_at = time.monotonic() + lease / 3
        heard = False
        deadline = time.monotonic() + timeout
        for answer in asked.answers():
            if answer is not None:
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
    raise AssertionError("answers() ends by raising")  # pragma: no cover


def ask(fleet: Fleet, key: DeliveryKey, query: LogsQuery, *, timeout: float,
        say: Callable[[str], None]) -> RemoteLogs:
    """Send the signed request to the node's queue and wait for its agent's answer."""
    expires = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=timeout)
    with AgentRequest(fleet, key, query.node, kind=messages.LOGS_REQUEST,
                      answer_format=messages.LOGS_ANSWER_FORMAT, error=RemoteLogsError,
                      connect_within=timeout) as asked:
        asked.send(request_body(fleet.names.mesh, query, asked.id, expires),
                   f"logs/{query.node}/{asked.id}")
        say(f"asked node {query.node}'s agent for the logs of {query.instance} "
            f"(request {asked.id}); waiting up to {timeout:.0f}s")
        deadline = time.monotonic() + timeout
        for answer in asked.answers():
            if answer is not None:
                if answer.get("error"):
                    raise RemoteLogsError(f"node {query.node}: {answer['error']}")
                lines = answer.get("lines")
                scrubbed = answer.get("scrubbed")
                return RemoteLogs(
                    tuple(str(line) for line in lines) if isinstance(lines, list) else (),
                    bool(answer.get("truncated")), scrubbed if isinstance(scrubbed, int) else 0)
            if time.monotonic() >= deadline:
                raise RemoteLogsError(
                    f"no answer from node {query.node}'s agent within {timeout:.0f}s (is `mesh "
                    f"agent` running there and connected?); the request expires unanswered")
    raise AssertionError("answers() ends by raising")  # pragma: no cover
