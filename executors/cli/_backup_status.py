"""The backups part of `mesh status`: each instance scheduled in mesh.yaml (`backups: every:`)
whose newest snapshot in the backup target is older than its schedule, read from the target
itself (restic, no sizes) when the repository's password file is given; otherwise the
schedule is listed as not checked, never as fine. And, from the nodes' reports (their agents
back up on schedule, node/backup_schedule.py), each backed-up instance's last backup, `overdue`
by the same rule (resolver.backups.overdue_since)."""

from __future__ import annotations

import time
from typing import Any, Optional

from resolver import Mesh
from resolver.backups import overdue, overdue_since

from executors.cli._sizes import age, size
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


def reported(mesh: Mesh, nodes: list[dict[str, Any]], now: int) -> list[dict[str, object]]:
    """Each instance a node's agent reported backing up (its last backup: snapshot, when,
    bytes, the last failure; none yet: never backed up), with `overdue` by mesh.yaml's
    schedule. A node that reported nothing of its backups (no agent) adds nothing: only the
    repository can say then."""
    found: dict[str, dict[str, object]] = {}
    for node in nodes:
        for record in node.get("backups") or []:
            if isinstance(record, dict) and isinstance(record.get("instance"), str):
                found[record["instance"]] = dict(record, node=node.get("node"))
    newest = {i: int(str(r["good"])) for i, r in found.items() if r.get("good") is not None}
    late = {o.instance: o for o in overdue_since(mesh, newest, now)}
    return [dict(found[i], overdue=i in late, schedule=mesh.backups.every.get(i))
            for i in sorted(found)]


def reported_lines(entries: list[dict[str, object]], now: int) -> list[str]:
    """One line per instance: `backup I: snapshot S, 3m ago (every 1h; reported by N)`."""
    lines = []
    for entry in entries:
        good = entry.get("good")
        last = (f"snapshot {str(entry['snapshot'])[:8]}, {age(now - int(str(good)))} ago, "
                f"{size(int(str(entry.get('bytes') or 0)))}" if good is not None
                else "never backed up")
        failed = (f"; last attempt failed ({entry.get('failures')} in a row): {entry['error']}"
                  if entry.get("error") else "")
        every = f"every {entry['schedule']}; " if entry.get("schedule") else ""
        lines.append(f"backup {entry['instance']}: {'overdue, ' if entry['overdue'] else ''}"
                     f"{last} ({every}reported by {entry.get('node') or '-'}){failed}")
    return lines
