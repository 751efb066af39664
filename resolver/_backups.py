"""Backups of stateful instances as pure rules: the job for one instance, which snapshot may be
restored into it, and whether its schedule is overdue.

Invariants:
- Pure: the clock is an argument (`now`, epoch seconds); snapshots are values the shell read
  from the repository. Same inputs, same answer.
- A target held by the instance's own node is refused: a backup that dies with its machine is
  no backup.
- A snapshot is restored only into an instance of the module it was taken of, and only a
  snapshot the repository holds (named by its whole ID or a prefix of one snapshot only).
- An instance is overdue when it has a schedule (`backups.every`) and its newest snapshot is
  older than it, or it has none; an instance without a schedule is never overdue.
- Every refusal is a BackupError naming the instance and what was expected.
"""

from __future__ import annotations

import re
from typing import Mapping, Optional

import attrs

from ._backup_schedule import is_overdue
from ._errors import MeshError
from ._model import BackupMethod, Mesh, Module
from ._render import state_host_path

_DURATION = re.compile(r"^([1-9][0-9]*)([smhdw])$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


class BackupError(MeshError):
    """A backup or restore the mesh refuses; nothing was changed."""


@attrs.frozen
class BackupJob:
    """What a backup of one instance needs: where it runs, where it writes, how it reads the
    state (`method` None: stop the instance's containers and copy its state directories)."""

    instance: str
    module: str
    node: str
    repository: str
    mesh: str  # the mesh's name: its containers carry it (a node may run several meshes)
    target_node: str
    method: Optional[BackupMethod]
    state: tuple[str, ...]  # the node's paths of its state directories, by their names


@attrs.frozen
class Snapshot:
    """One snapshot in the repository, as the shell read it (restic's own ID)."""

    id: str
    time: int  # epoch seconds
    instance: str
    module: str
    size: int = 0  # bytes the snapshot restores to (0: unknown)


@attrs.frozen
class Overdue:
    """An instance whose last backup is older than its schedule (`last` None: never)."""

    instance: str
    every: str
    last: Optional[int]


def duration_seconds(text: str) -> int:
    """`6h`, `1d`, `90m`, `2w`, `30s` in seconds; a BackupError for anything else."""
    found = _DURATION.match(text)
    if found is None:
        raise BackupError(f"{text!r} is not a duration; expected a whole number with s, m, h, "
                          "d or w (6h, 1d)")
    return int(found.group(1)) * _UNIT_SECONDS[found.group(2)]


def backup_job(mesh: Mesh, modules: dict[str, Module], instance: str) -> BackupJob:
    """The job backing `instance` up, or a BackupError saying why there is none."""
    declared = mesh.instances.get(instance)
    if declared is None:
        raise BackupError(f"mesh.yaml names no instance {instance!r}; instances: "
                          + (", ".join(sorted(mesh.instances)) or "none"))
    module = modules.get(declared.module)
    if module is None:
        raise BackupError(f"instance {instance}: the catalogue has no module "
                          f"{declared.module!r}")
    if not module.state:
        raise BackupError(f"instance {instance}: module {module.name} owns no state "
                          "directory; there is nothing to back up")
    target = mesh.backups.target
    if target is None:
        raise BackupError("mesh.yaml has no `backups: target:`; expected the backup store "
                          "instance, or the node and the restic repository snapshots are "
                          "written to")
    node = target_node(mesh)
    if node is None:
        raise BackupError(f"mesh.yaml backups.target {target.instance!r} is not an instance "
                          "of the mesh")
    if node not in mesh.nodes:
        raise BackupError(f"mesh.yaml backups.target.node {target.node!r} is not a node of "
                          "the mesh; nodes: " + ", ".join(sorted(mesh.nodes)))
    if node == declared.node:
        raise BackupError(f"the backup target is on node {node}, the node of "
                          f"{instance}: a backup must be kept on another node")
    method = module.backup
    if method is not None and method.container not in {c.name for c in module.containers}:
        raise BackupError(f"module {module.name}: backup.container {method.container!r} is "
                          "not one of its containers")
    return BackupJob(instance=instance, module=module.name, node=declared.node,
                     repository=target.repository, mesh=mesh.mesh, target_node=node,
                     method=method,
                     state=tuple(state_host_path(instance, module.state[name].path)
                                 for name in sorted(module.state)))


def target_node(mesh: Mesh) -> Optional[str]:
    """The node of the backup target: the store instance's (`target: INSTANCE`), or the
    outside repository's `node`; None without a target or for an instance not declared."""
    target = mesh.backups.target
    if target is None:
        return None
    if target.instance is None:
        return target.node
    store = mesh.instances.get(target.instance)
    return store.node if store is not None else None


def snapshot_to_restore(job: BackupJob, snapshots: tuple[Snapshot, ...],
                        wanted: str) -> Snapshot:
    """The snapshot `wanted` names (its ID or a unique prefix), if it may be restored into the
    job's instance; a BackupError otherwise."""
    if not wanted:
        raise BackupError("an empty snapshot ID; expected one `mesh backups` lists")
    found = [s for s in snapshots if s.id.startswith(wanted)]
    if not found:
        raise BackupError(f"no snapshot {wanted!r} in the repository; `mesh backups` lists "
                          "the snapshots there are")
    if len(found) > 1:
        raise BackupError(f"snapshot ID {wanted!r} names {len(found)} snapshots; give more "
                          "of it")
    snapshot = found[0]
    if snapshot.module != job.module:
        raise BackupError(f"snapshot {snapshot.id[:8]} holds {snapshot.instance} (module "
                          f"{snapshot.module}); {job.instance} is module {job.module}: a "
                          "snapshot restores only into an instance of its own module")
    return snapshot


def overdue(mesh: Mesh, snapshots: tuple[Snapshot, ...], now: int) -> tuple[Overdue, ...]:
    """Every scheduled instance whose newest snapshot is older than its schedule, by name."""
    newest: dict[str, int] = {}
    for snapshot in snapshots:
        newest[snapshot.instance] = max(newest.get(snapshot.instance, snapshot.time),
                                        snapshot.time)
    return overdue_since(mesh, newest, now)


def overdue_since(mesh: Mesh, newest: Mapping[str, int], now: int) -> tuple[Overdue, ...]:
    """Every scheduled instance whose newest good backup (`newest`: instance → epoch seconds,
    as a repository lists them or as the nodes reported them) is older than its schedule, or
    that has none, by name (the one rule: _backup_schedule.is_overdue)."""
    late = []
    for instance, every in sorted(mesh.backups.every.items()):
        last = newest.get(instance)
        if is_overdue(last, duration_seconds(every), now):
            late.append(Overdue(instance=instance, every=every, last=last))
    return tuple(late)


def schedule_refusals(mesh: Mesh) -> tuple[str, ...]:
    """What is wrong with mesh.yaml's `backups:` (each one line), empty when nothing is."""
    found = []
    target = mesh.backups.target
    node = target_node(mesh)
    if target is not None and target.instance is not None and node is None:
        found.append(f"backups.target {target.instance!r} is not an instance")
    elif target is not None and node not in mesh.nodes:
        found.append(f"backups.target.node {target.node!r} is not a node of the mesh")
    for instance, every in sorted(mesh.backups.every.items()):
        if instance not in mesh.instances:
            found.append(f"backups.every names {instance!r}, which is not an instance")
        elif node is not None and mesh.instances[instance].node == node:
            found.append(f"backups.every: {instance} runs on {node}, the backup "
                         "target's own node; a backup must be kept on another node")
        try:
            duration_seconds(every)
        except BackupError as exc:
            found.append(f"backups.every.{instance}: {exc}")
    return tuple(found)


__all__ = ["BackupError"]
