"""What every request the control node signs for this agent must say before the agent acts on
it (`mesh logs` through the agent: agent/logs_answer.py; `mesh backup`/`mesh restore`:
agent/backup_answer.py): read once its envelope verified (common/messages.open_signed).

Invariants:
- A request is acted on only when its body has an id, names this mesh and this node, has
  not expired and names an instance; anything else is MessageRefused naming why, with what
  kind of request it was (`what`), and nothing is read or run.
- `kind_of` reads only the envelope's `kind` (to route a delivery before any check);
  open_signed checks it again.
"""

from __future__ import annotations

import datetime
import json
from typing import Mapping

from executors.common import messages


def kind_of(data: bytes) -> object:
    """The `kind` a delivery's envelope says (None when it is not a JSON object)."""
    try:
        envelope = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    return envelope.get("kind") if isinstance(envelope, dict) else None


def check_request(body: Mapping[str, object], mesh: str, node: str, now: datetime.datetime,
                  what: str) -> str:
    """The request's id once its body is this node's, of this mesh, unexpired and names an
    instance; otherwise MessageRefused naming why (`what`: "logs", "backup")."""
    request = body.get("request")
    if not isinstance(request, str) or not request:
        raise messages.MessageRefused(f"the {what} request has no id")
    if body.get("mesh") != mesh or body.get("node") != node:
        raise messages.MessageRefused(f"a {what} request for node {body.get('node')!r} of mesh "
                                      f"{body.get('mesh')!r}, not this node's")
    try:
        expires = datetime.datetime.fromisoformat(str(body.get("expires")).replace("Z", "+00:00"))
    except ValueError:
        raise messages.MessageRefused(f"the {what} request has no expiry time") from None
    if now >= expires:
        raise messages.MessageRefused(f"the {what} request {request} expired at "
                                      f"{body.get('expires')} (nobody waits for it any more)")
    if not isinstance(body.get("instance"), str):
        raise messages.MessageRefused(f"the {what} request names no instance")
    return request


__all__ = ["kind_of", "check_request"]
