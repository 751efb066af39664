"""Guarded upgrades on the node: before an apply recreates a stateful instance on another image,
snapshot it (node/backup.py, into the backup target's restic repository) and keep a record of
the snapshot and the images before; after an apply that put a rolled-back image back, restore
that snapshot (`mesh rollback`, cli/rollback.py, marks the record).

Invariants:
- A guard (resolver UpgradeGuard in the declaration) acts only while a container of its
  instance runs another image than declared; a second apply does nothing.
- No container is recreated on a new image before its snapshot is written: a snapshot that
  fails (or no --backup-password-file for an outside repository) fails the apply before
  anything changes.
- An instance with a backup duty on the mesh's backup store is snapshotted (and restored)
  through that duty's repository, opened as `mesh backup` opens it (node/backup_target.py,
  with the apply's sealed values): the same login and repository password.
- `fresh` sets the state directories aside (renamed `<dir>.before-<version>`, never removed),
  once per version: the record says which version the state is at.
- A rollback's restore that fails fails the apply and removes the no-op record, so the next
  apply retries it; once restored, the record says so and no apply restores it again.
- The record `<state root>/.mesh/upgrades/<instance>.json` (0600, written atomically) names
  the snapshot, the images before and after, and the version; nothing secret is in it. A
  rollback's own pre-rollback snapshot never replaces the snapshot the rollback restores.
"""

from __future__ import annotations

import json
import os
import time
import contextlib
from typing import Any, Callable, Iterator, Optional

import docker

from resolver import BackupMethod, Declaration, MeshError, UpgradeGuard
from resolver.backups import BackupDuty, BackupJob

from executors.common.atomic import write_atomic
from executors.common.marks import LABEL_CONTAINER, LABEL_INSTANCE, LABEL_MESH
from executors.common.report import Report
from executors.node.backup import CommandFailed, backup, restore, state_paths
from executors.node.backup_target import open_repository
from executors.node.extensions import SecretSource
from executors.node.node_paths import NodePaths
from executors.node.restic import Repository, ResticError

UPGRADES_DIR = "upgrades"
Say = Callable[[str], None]


class UpgradeRefused(MeshError):
    """An upgrade the node will not start: no snapshot can be taken first."""


def record_path(paths: NodePaths, instance: str) -> str:
    return str(paths.root / UPGRADES_DIR / f"{instance}.json")


def read_upgrade_record(paths: NodePaths, instance: str) -> Optional[dict[str, Any]]:
    try:
        with open(record_path(paths, instance), encoding="utf-8") as handle:
            found: dict[str, Any] = json.load(handle)
            return found
    except FileNotFoundError:
        return None


def write_upgrade_record(paths: NodePaths, instance: str, record: dict[str, Any]) -> None:
    os.makedirs(paths.root / UPGRADES_DIR, mode=0o700, exist_ok=True)
    write_atomic(record_path(paths, instance),
                 json.dumps(record, indent=2, sort_keys=True) + "\n", mode=0o600)


def job_of(guard: UpgradeGuard, mesh: str, node: str, method_ok: bool) -> BackupJob:
    """The backup job a guard describes (`method_ok` False: stop-copy, the dump's container
    is not running)."""
    method = BackupMethod(container=guard.container, dump=guard.dump, restore=guard.restore) \
        if guard.container is not None and method_ok else None
    return BackupJob(instance=guard.instance, module=guard.module, node=node,
                     repository=guard.repository, mesh=mesh, target_node=guard.target_node,
                     method=method, state=tuple(guard.state))


def _running_images(api: docker.APIClient, mesh: str, instance: str) -> dict[str, tuple[str, bool]]:
    """container (its module name) → (the image it was created with, running?)."""
    found = {}
    for row in api.containers(all=True, filters={"label": [f"{LABEL_MESH}={mesh}",
                                                           f"{LABEL_INSTANCE}={instance}"]}):
        inspected = api.inspect_container(row["Id"])
        name = inspected["Config"]["Labels"].get(LABEL_CONTAINER)
        if name:
            found[name] = (str(inspected["Config"]["Image"]),
                           bool(inspected["State"].get("Running")))
    return found


def _changing(declaration: Declaration, guard: UpgradeGuard,
              running: dict[str, tuple[str, bool]]) -> dict[str, tuple[str, str]]:
    """container → (image it runs, image declared), for each that changes image."""
    declared = {c.container: c.image for c in declaration.containers
                if c.instance == guard.instance}
    return {name: (image, declared[name]) for name, (image, _) in sorted(running.items())
            if name in declared and image != declared[name]}


def _store_duty(declaration: Declaration, guard: UpgradeGuard) -> Optional[BackupDuty]:
    """The backup duty of the guard's instance on the mesh's backup store (None: the guard
    snapshots into an outside repository, opened with the password file)."""
    return next((d for d in declaration.backups
                 if d.instance == guard.instance and d.login is not None), None)


@contextlib.contextmanager
def guard_repository(declaration: Declaration, guard: UpgradeGuard, paths: NodePaths,
                     password_file: Optional[str], secrets: Optional[SecretSource]
                     ) -> Iterator[Repository]:
    """The repository a guard snapshots into: its instance's backup duty's on the mesh's
    backup store (the same login and repository password as `mesh backup`), else the outside
    repository opened with `password_file`."""
    duty = _store_duty(declaration, guard)
    if duty is None:
        yield Repository(location=guard.repository, password_file=password_file or "")
        return
    with open_repository(duty, declaration, paths, secrets) as repository:
        yield repository


def before_upgrades(declaration: Declaration, paths: NodePaths, api: docker.APIClient,
                    password_file: Optional[str], report: Report, dry_run: bool,
                    secrets: Optional[SecretSource] = None) -> bool:
    """Snapshot each guarded instance about to change image; False (said) when one cannot be
    snapshotted, and then nothing may change."""
    for guard in declaration.upgrades:
        running = _running_images(api, declaration.mesh, guard.instance)
        changing = _changing(declaration, guard, running)
        if not changing:
            continue
        what = ", ".join(f"{name} {old.rsplit('@', 1)[-1][7:19]} → {new.rsplit('@', 1)[-1][7:19]}"
                         for name, (old, new) in changing.items())
        if dry_run:
            report.say(f"upgrade: {guard.instance} changes image ({what}): a real apply "
                       f"snapshots it into {guard.repository} first")
            continue
        try:
            _snapshot_first(declaration, guard, paths, api, password_file, running, changing,
                            what, report, secrets)
        except (UpgradeRefused, ResticError, CommandFailed, MeshError, OSError) as exc:
            report.record("snapshot-before-upgrade", guard.instance, f"image changes ({what})",
                          f"failed: {exc}", ok=False)
            report.say(f"stopped before changing anything: {guard.instance} could not be "
                       f"snapshotted before its new image: {exc}; result: failed")
            return False
    return True


def _snapshot_first(declaration: Declaration, guard: UpgradeGuard, paths: NodePaths,
                    api: docker.APIClient, password_file: Optional[str],
                    running: dict[str, tuple[str, bool]],
                    changing: dict[str, tuple[str, str]], what: str, report: Report,
                    secrets: Optional[SecretSource] = None) -> None:
    record = read_upgrade_record(paths, guard.instance) or {}
    before = {name: old for name, (old, _) in changing.items()}
    after = {name: new for name, (_, new) in changing.items()}
    fresh_now = guard.fresh and record.get("version") != guard.version
    same_step = record.get("from") == before and record.get("to") == after
    if same_step and record.get("fresh_done"):
        report.say(f"upgrade: {guard.instance}: its state was set aside by an earlier attempt "
                   f"of this upgrade; snapshot {str(record.get('snapshot'))[:8]} stays the one "
                   "taken before it")
        return
    if not password_file and _store_duty(declaration, guard) is None:
        raise UpgradeRefused(f"{guard.instance} changes image and is snapshotted first: give "
                             "--backup-password-file (or $MESH_BACKUP_PASSWORD_FILE), the "
                             "backup repository's password file")
    dump_running = guard.container is not None and running.get(guard.container, ("", False))[1]
    job = job_of(guard, declaration.mesh, declaration.node, dump_running)
    operation = report.begin("snapshot-before-upgrade", guard.instance,
                             f"image changes ({what})")
    with guard_repository(declaration, guard, paths, password_file, secrets) as repository:
        written = backup(api, job, repository, state_paths(job, str(paths.state_root)),
                         report.say)
    report.end(operation, f"snapshot {written.snapshot[:8]} ({written.read} bytes read) in "
               f"{guard.repository}")
    rolling_back = record.get("rollback") is not None and record.get("to") == before
    if rolling_back:
        record["before_rollback"] = written.snapshot  # kept beside, never the one restored
    else:
        record = {"instance": guard.instance, "module": guard.module,
                  "snapshot": written.snapshot, "repository": guard.repository,
                  "from": before, "to": after, "version": record.get("version"),
                  "time": int(time.time())}
    if fresh_now:
        _set_aside(api, declaration.mesh, guard, job, str(paths.state_root), report)
        record["fresh_done"] = True
    if guard.version is not None:
        record["version"] = guard.version
    write_upgrade_record(paths, guard.instance, record)


def _set_aside(api: docker.APIClient, mesh: str, guard: UpgradeGuard, job: BackupJob,
               state_root: str, report: Report) -> None:
    """`fresh`: stop the instance and rename each state directory aside (kept)."""
    rows = api.containers(filters={"label": [f"{LABEL_MESH}={mesh}",
                                             f"{LABEL_INSTANCE}={guard.instance}"]})
    for row in rows:
        api.stop(row["Id"], timeout=30)
    for path in state_paths(job, state_root):
        if os.path.lexists(path):
            aside = f"{path}.before-{guard.version}"
            if os.path.lexists(aside):
                aside = f"{aside}-{int(time.time())}"
            os.rename(path, aside)
            report.say(f"upgrade: {guard.instance} starts version {guard.version} fresh; its "
                       f"state before is kept at {aside}")


def after_rollbacks(declaration: Declaration, paths: NodePaths, api: docker.APIClient,
                    password_file: Optional[str], report: Report,
                    wait: float = 120.0, secrets: Optional[SecretSource] = None) -> bool:
    """Restore the pre-upgrade snapshot into each instance a rollback marked, once it runs the
    image it ran before that upgrade again; False (said) when a restore failed."""
    ok = True
    for guard in declaration.upgrades:
        record = read_upgrade_record(paths, guard.instance)
        if record is None or record.get("rollback") is None:
            continue
        running = _running_images(api, declaration.mesh, guard.instance)
        if {name: image for name, (image, _) in running.items()
                if name in record["from"]} != record["from"]:
            report.say(f"rollback: {guard.instance} does not run the images it ran before its "
                       "upgrade yet; its snapshot is restored by the apply that puts them back")
            continue
        if not password_file and _store_duty(declaration, guard) is None:
            report.record("restore-after-rollback", guard.instance, "mesh rollback",
                          "failed: give --backup-password-file", ok=False)
            report.say(f"rollback: {guard.instance} runs its image before again; restoring "
                       "its snapshot needs --backup-password-file; result: failed")
            return False
        job = job_of(guard, declaration.mesh, declaration.node, True)
        operation = report.begin("restore-after-rollback", guard.instance,
                                 f"mesh rollback: snapshot {str(record['snapshot'])[:8]}")
        deadline = time.monotonic() + wait
        try:
            with guard_repository(declaration, guard, paths, password_file,
                                  secrets) as repository:
                while True:
                    try:
                        restore(api, job, repository, str(record["snapshot"]),
                                state_paths(job, str(paths.state_root)), report.say)
                        break
                    except (CommandFailed, MeshError) as exc:
                        if time.monotonic() > deadline or isinstance(exc, ResticError):
                            report.end(operation, f"failed: {exc}", ok=False)
                            ok = False
                            break
                        time.sleep(1.0)  # the server just started: it accepts its dump soon
        except MeshError as exc:  # the backup store's repository did not open
            report.end(operation, f"failed: {exc}", ok=False)
            ok = False
        if not ok:
            try:  # the next apply must not be answered as a no-op: it retries the restore
                os.unlink(paths.noop_record)
            except FileNotFoundError:
                pass
            break
        report.end(operation, f"restored snapshot {str(record['snapshot'])[:8]}")
        record["rollback"] = None
        record["rolled_back"] = int(time.time())
        write_upgrade_record(paths, guard.instance, record)
    return ok


__all__ = ["before_upgrades", "after_rollbacks", "read_upgrade_record", "write_upgrade_record",
           "record_path", "UpgradeRefused"]
