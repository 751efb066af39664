"""The agent's answer to `mesh logs DIR INSTANCE`: what this node's containers of an instance
wrote, read from its Docker Engine, with every secret value this node holds taken out.

Invariants:
- A request is answered only after its envelope verified against the pinned mesh CA (kind
  `logs-request`, common/messages.py) and its body named this mesh and this node and had not
  expired; anything else is refused with one line, and nothing is read.
- The answer holds the lines of this mesh's containers of the instance (executors/node/logs.py,
  the same reading as `mesh logs` on the node), each value of a credential sealed to this node (opened from the
  declaration in force with the node key) replaced by its `${secret:<credential id>}` token,
  so no secret crosses the broker; it says how many lines were scrubbed.
- The answer is bounded: at most MAX_LINES lines and MAX_BYTES bytes (the newest kept), and it
  says when it was cut.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Callable, Mapping, Optional

import docker

from executors.common import messages
from executors.common.keys import load_private_key, unseal_for_node
from executors.node.agent import signed_requests
from executors.node.logs import LogsError, instance_containers, pick, recent
from resolver.documents import load_ledger

MAX_LINES = 10_000
MAX_BYTES = 4 * 1024 * 1024
SHORTEST_SECRET = 8  # shorter values are not issued by the mesh; never scrub common words


def is_logs_request(data: bytes) -> bool:
    """Whether a delivery's envelope says it is a logs request (read before any check: the
    kind then decides which checks apply; open_signed checks it again)."""
    return signed_requests.kind_of(data) == messages.LOGS_REQUEST


def check_request(body: Mapping[str, object], mesh: str, node: str,
                  now: datetime.datetime) -> str:
    """The request's id once its body is this node's, of this mesh, unexpired
    (signed_requests.check_request); otherwise MessageRefused naming why."""
    return signed_requests.check_request(body, mesh, node, now, "logs")


def secret_tokens(current: Optional[tuple[Path, Path]], key_file: str,
                  node: str) -> dict[str, str]:
    """Every value sealed to this node in the declaration in force → its token, longest
    first (so a value inside another is never half replaced); {} with none in force."""
    if current is None:
        return {}
    _declaration, secrets_file = current
    ledger, _ = load_ledger(secrets_file.read_text(encoding="utf-8"), str(secrets_file))
    values = unseal_for_node(ledger, node, load_private_key(key_file))
    tokens = {value: "${secret:" + credential + "}"
              for credential, generations in values.items()
              for value in generations.values() if len(value) >= SHORTEST_SECRET}
    return dict(sorted(tokens.items(), key=lambda item: -len(item[0])))


def scrub(lines: list[str], tokens: Mapping[str, str]) -> tuple[list[str], int]:
    """`lines` with every secret value replaced by its token, and how many lines held one."""
    scrubbed, touched = [], 0
    for line in lines:
        clean = line
        for value, token in tokens.items():
            if value in clean:
                clean = clean.replace(value, token)
        touched += clean != line
        scrubbed.append(clean)
    return scrubbed, touched


def bounded(lines: list[str]) -> tuple[list[str], bool]:
    """The newest lines within MAX_LINES and MAX_BYTES, and whether any were left out."""
    kept: list[str] = []
    size = 0
    for line in reversed(lines[-MAX_LINES:]):
        size += len(line.encode("utf-8")) + 1
        if size > MAX_BYTES:
            break
        kept.append(line)
    kept.reverse()
    return kept, len(kept) < len(lines)


def answer(body: Mapping[str, object], request: str, node: str,
           engine: Callable[[], docker.APIClient], tokens: Callable[[], Mapping[str, str]],
           ) -> messages.Document:
    """The answer document to a checked request: the lines, or why there are none."""
    instance = str(body["instance"])
    container = body.get("container")
    since = body.get("since")
    tail = body.get("tail")
    document: messages.Document = {"format": messages.LOGS_ANSWER_FORMAT, "node": node,
                                   "request": request, "instance": instance}
    try:
        api = engine()
        chosen = pick(instance_containers(api, instance, str(body["mesh"])),
                      container if isinstance(container, str) else None, instance)
        lines = recent(api, chosen, since=float(since) if isinstance(since, (int, float))
                       else None, tail=tail if isinstance(tail, int) else None,
                       timestamps=bool(body.get("timestamps")))
    except LogsError as error:
        document["error"] = str(error)
        return document
    lines, cut = bounded(lines)
    try:
        held = tokens()
    except Exception as error:  # noqa: BLE001 - unscrubbed lines are never sent instead
        document["error"] = (f"the secret values in force cannot be opened to take them out "
                             f"of the lines ({type(error).__name__}: {error}); nothing sent")
        return document
    lines, touched = scrub(lines, held)
    document.update({"lines": lines, "truncated": cut, "scrubbed": touched})
    return document
