"""The backups part of `mesh status`: each instance scheduled in mesh.yaml (`backups: every:`)
whose newest snapshot in the backup target is older than its schedule, read from the target
itself (restic, no sizes) when the repository's password file is given; otherwise the
schedule is listed as not checked, never as fine."""

from __future__ import annotations

import time
from typing import Optional

from resolver import Mesh
from resolver.backups import overdue

from executors.node.restic import Repository, ResticError


def backup_status(mesh: Mesh, password_file: Optional[str]) -> dict[str, object]:
    """{"checked": bool, "overdue": [{instance, every, last}], "error": str | None}."""
    target = mesh.backups.target
    if not mesh.backups.every:
        return {"checked": False, "overdue": [], "error": None}
    if target is None or not password_file:
        why = ("mesh.yaml has no backups target" if target is None else
               "no --backup-password-file (or $MESH_BACKUP_PASSWORD_FILE) to open the target")
        return {"checked": False, "overdue": [], "error": why}
    try:
        snapshots = Repository(target.repository, password_file).snapshots(sizes=False)
    except ResticError as exc:
        return {"checked": False, "overdue": [], "error": str(exc)}
    late = overdue(mesh, snapshots, int(time.time()))
    return {"checked": True, "error": None,
            "overdue": [{"instance": o.instance, "every": o.every, "last": o.last}
                        for o in late]}


def status_lines(found: dict[str, object], now: int) -> list[str]:
    lines = []
    if found["error"] is not None:
        lines.append(f"backups not checked: {found['error']}")
    late = found["overdue"]
    assert isinstance(late, list)
    for entry in late:
        last = entry["last"]
        when = "never backed up" if last is None else f"last backup {now - last}s ago"
        lines.append(f"backup overdue: {entry['instance']} ({when}; every {entry['every']})")
    if found["checked"] and not late:
        lines.append("backups: every scheduled instance is within its schedule")
    return lines
