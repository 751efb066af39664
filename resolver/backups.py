"""Backups: the pure rules of `mesh backup`, `mesh restore` and `mesh backups`.

`backup_job` says where one instance's backup runs and is written, and how its state is read
(its module's `backup:` dump, or stop-copy of its state directories); `snapshot_to_restore`
picks the snapshot a restore may put back; `overdue` lists the instances whose last backup is
older than their schedule (mesh.yaml `backups: every:`); `schedule_refusals` checks that
section. Every refusal is a `resolver.BackupError`; the node's executors are the callers.

Scheduled backups (resolver/_backup_schedule.py): `due` says which of a node's instances
to back up now (`LastBackup`: what the node recorded; a failure is retried after
`retry_after`); `is_overdue` is the one "too old" rule `overdue` and `overdue_since` (from the
nodes' reports) use too.

Guarded upgrades (resolver/_upgrades.py): `needs_snapshot` is the rule that an instance owning
state whose image digest changes is snapshotted first; `version_of` reads a module's
`upgrades: version:` from a tag, `crossing` says whether a change crosses it; `rollback_pins`
says which pins `mesh rollback` sets back (or which tag the catalogue must name again).
"""

from ._declaration import BackupDuty
from ._backup_schedule import LastBackup, due, is_overdue, retry_after
from ._backups import (BackupJob, Overdue, Snapshot, backup_job, duration_seconds, overdue,
                       overdue_since, schedule_refusals, snapshot_to_restore, target_node)
from ._upgrades import (FRESH, Rollback, crossing, digest_of, needs_snapshot, rollback_pins,
                        tags_pinned_to, version_of, versions_at)

__all__ = [
    "BackupJob", "BackupDuty", "Snapshot", "Overdue",
    "backup_job", "snapshot_to_restore", "overdue", "schedule_refusals", "duration_seconds",
    "target_node",
    "LastBackup", "due", "is_overdue", "retry_after", "overdue_since",
    "Rollback", "FRESH", "needs_snapshot", "version_of", "versions_at", "crossing",
    "digest_of", "tags_pinned_to", "rollback_pins",
]
