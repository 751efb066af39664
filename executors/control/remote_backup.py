"""`mesh backup DIR INSTANCE` and `mesh restore DIR INSTANCE --snapshot ID` on the control node:
ask the agent of the instance's node, over the mesh's broker, to run it there.

Invariants:
- The request is signed with the mesh's delivery key (kind `backup-request`; the node verifies
  it as it verifies a declaration) and goes to the node's own queue; it names the mesh, the
  node, the instance, the action and when it expires (`timeout` from now), so a node that was
  away never runs a request nobody waits for any more.
- The answer comes back on a queue only this request has (exclusive, deleted with the
  connection, bound to the `logs` exchange by the request's random id), and is taken only
  from the node's own account (the broker validates `user_id`): another node cannot answer
  for it. No answer within `timeout` is a RemoteBackupError saying so, never a success.
- Nothing is written here: no ledger, no control state. The answer holds no secret (the
  agent replaced every value sealed to it by its token).
"""

from __future__ import annotations

import datetime
import time
from typing import Callable, Optional

import attrs

from resolver import BackupError, MeshError

from executors.common import messages
from executors.control.agent_request import AgentRequest
from executors.control.delivery_key import DeliveryKey
from executors.control.fleet import Fleet


class RemoteBackupError(MeshError):
    """The node's agent did not answer, or answered that the backup or restore failed."""


@attrs.frozen
class BackupQuery:
    """What the control node asks a node's agent to do."""

    node: str
    instance: str
    action: str  # backup | restore
    snapshot: Optional[str] = None  # restore: the snapshot's ID or a prefix


@attrs.frozen
class RemoteBackup:
    """The node's answer: the snapshot written or restored, and its bytes."""

    snapshot: str
    of: Optional[str]  # restore: the instance the snapshot was taken of
    read: int
    added: int
    seconds: float
    repository: Optional[str]
    target_node: Optional[str]


def request_body(mesh: str, query: BackupQuery, request: str,
                 expires: datetime.datetime) -> dict[str, object]:
    return {"mesh": mesh, "node": query.node, "instance": query.instance,
            "action": query.action, "snapshot": query.snapshot, "request": request,
            "expires": expires.strftime("%Y-%m-%dT%H:%M:%SZ")}


def ask(fleet: Fleet, key: DeliveryKey, query: BackupQuery, *, timeout: float,
        say: Callable[[str], None]) -> RemoteBackup:
    """Send the signed request to the node's queue and wait for its agent's answer: the
    result, a BackupError when the node refused the request (nothing changed), a
    RemoteBackupError when it failed or did not answer."""
    expires = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=timeout)
    with AgentRequest(fleet, key, query.node, kind=messages.BACKUP_REQUEST,
                      answer_format=messages.BACKUP_ANSWER_FORMAT, error=RemoteBackupError,
                      connect_within=min(timeout, 60)) as asked:
        asked.send(request_body(fleet.names.mesh, query, asked.id, expires),
                   f"backup/{query.node}/{asked.id}")
        say(f"asked node {query.node}'s agent to {query.action} {query.instance} "
            f"(request {asked.id}); waiting up to {timeout:.0f}s")
        deadline = time.monotonic() + timeout
        for answer in asked.answers():
            if answer is not None:
                return _result(query, answer)
            if time.monotonic() >= deadline:
                raise RemoteBackupError(
                    f"no answer from node {query.node}'s agent within {timeout:.0f}s (is "
                    "`mesh agent` running there and connected?); the request expires "
                    "unanswered")
    raise AssertionError("answers() ends by raising")  # pragma: no cover


def _result(query: BackupQuery, answer: messages.Document) -> RemoteBackup:
    if answer.get("error"):
        if answer.get("refused"):
            raise BackupError(f"node {query.node}: {answer['error']}")
        raise RemoteBackupError(f"node {query.node}: {answer['error']}")

    def number(name: str) -> int:
        value = answer.get(name)
        return value if isinstance(value, int) else 0

    seconds = answer.get("seconds")
    return RemoteBackup(snapshot=str(answer.get("snapshot") or ""),
                        of=str(answer["of"]) if answer.get("of") else None,
                        read=number("bytes"), added=number("added"),
                        seconds=float(seconds) if isinstance(seconds, (int, float)) else 0.0,
                        repository=str(answer.get("repository") or "") or None,
                        target_node=str(answer.get("target_node") or "") or None)


__all__ = ["ask", "request_body", "BackupQuery", "RemoteBackup", "RemoteBackupError"]
