"""The agent's answer to `mesh backup DIR INSTANCE` and `mesh restore DIR INSTANCE --snapshot ID`
asked from the control node: the backup or restore run here, by the instance's backup duty in
the declaration in force (node/backup_schedule.py, the same runner as the scheduled backups).

Invariants:
- A request is run only after its envelope verified against the pinned mesh CA (kind
  `backup-request`, common/messages.py) and its body named this mesh and this node, an action
  (`backup` or `restore`, with a snapshot) and had not expired; anything else is refused with
  one line, and nothing runs.
- The answer says the snapshot written or restored and the bytes, or the error in one line;
  `refused` when the request itself was wrong (no duty for that instance, a snapshot the
  repository does not hold or of another module): nothing changed then. Every value sealed
  to this node is replaced by its token in an error; nothing else in it could be secret.
- A requested backup is recorded like a scheduled one (`trigger: request`).
"""

from __future__ import annotations

import datetime
import time
from typing import Mapping

from resolver import BackupError, MeshError

from executors.common import messages
from executors.node.agent import signed_requests
from executors.node.backup_schedule import BackupSchedule

ACTIONS = ("backup", "restore")


def is_backup_request(data: bytes) -> bool:
    """Whether a delivery's envelope says it is a backup request (open_signed checks again)."""
    return signed_requests.kind_of(data) == messages.BACKUP_REQUEST


def check_request(body: Mapping[str, object], mesh: str, node: str,
                  now: datetime.datetime) -> str:
    """The request's id once its body is this node's, of this mesh, unexpired and whole
    (signed_requests.check_request, and an action it can run); otherwise MessageRefused
    naming why."""
    request = signed_requests.check_request(body, mesh, node, now, "backup")
    if body.get("action") not in ACTIONS:
        raise messages.MessageRefused(f"the backup request asks for {body.get('action')!r}; "
                                      "expected backup or restore")
    if body.get("action") == "restore" and not isinstance(body.get("snapshot"), str):
        raise messages.MessageRefused("the restore request names no snapshot")
    return request


def answer(body: Mapping[str, object], request: str, node: str,
           schedule: BackupSchedule) -> messages.Document:
    """Run the checked request; the answer document."""
    instance, action = str(body["instance"]), str(body["action"])
    document: messages.Document = {"format": messages.BACKUP_ANSWER_FORMAT, "node": node,
                                   "request": request, "instance": instance, "action": action}
    runner = schedule.runner
    started = time.monotonic()
    try:
        schedule.refresh()
        duty = schedule.duty(instance)
        declaration = schedule.declaration
        assert declaration is not None  # duty() refuses without one
        document.update(repository=duty.repository, target_node=duty.target_node)
        if action == "backup":
            record = runner.back_up(duty, declaration, "request")
            if record.error is not None:
                document["error"] = record.error
                return document
            document.update(snapshot=record.snapshot, bytes=record.bytes, added=record.added)
        else:
            restored = runner.restore(duty, declaration, str(body["snapshot"]))
            document.update(snapshot=restored.id, of=restored.instance, bytes=restored.size)
    except BackupError as error:
        document.update(error=runner.scrubbed(str(error)), refused=True)
        return document
    except Exception as error:  # noqa: BLE001 - restic, the Engine, the store: one line
        document["error"] = runner.scrubbed(
            str(error) if isinstance(error, MeshError) else f"{type(error).__name__}: {error}")
        return document
    document["seconds"] = round(time.monotonic() - started, 3)
    return document


__all__ = ["is_backup_request", "check_request", "answer"]
