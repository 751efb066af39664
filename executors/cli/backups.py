"""`mesh backups DIR [INSTANCE]`: the snapshots in the backup target, with their ages and the
size each restores to, the bytes the repository holds, and every scheduled instance whose last
backup is older than its schedule (mesh.yaml `backups: every:`).

Exit codes: 0 listed (also when something is overdue: it is said, on its own line); 1 restic
failed; 2 bad input.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Optional, TextIO

from resolver import BackupError
from resolver.backups import overdue, schedule_refusals

from executors.cli._backup_args import add_common, age, loaded, repository, size
from executors.cli._verb import Subparsers
from executors.node.restic import ResticError


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "backups", help="list the snapshots in the backup target, with ages and sizes",
        description="List the mesh's snapshots in the backup target (mesh.yaml `backups: "
        "target:`), oldest first: ID, instance, age, the size it restores to; then what the "
        "repository holds on disk (deduplicated) and the instances whose last backup is "
        "older than their schedule (`backups: every:`).")
    add_common(parser)
    parser.add_argument("instance", nargs="?", metavar="INSTANCE",
                        help="only this instance's snapshots")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, out: Optional[TextIO] = None) -> int:
    stream = out or sys.stdout
    state = loaded(args)
    refusals = schedule_refusals(state.mesh)
    if refusals:
        raise BackupError("mesh.yaml: " + "; ".join(refusals))
    target = state.mesh.backups.target
    if target is None:
        raise BackupError("mesh.yaml has no `backups: target:`; expected the node and the "
                          "restic repository snapshots are written to")
    if args.instance is not None and args.instance not in state.mesh.instances:
        raise BackupError(f"mesh.yaml names no instance {args.instance!r}")
    repo = repository(args, target.repository)
    now = int(time.time())
    try:
        if not repo.exists():
            raise BackupError(f"there is no restic repository at {target.repository} (or "
                              "its password is not this one); `mesh backup` makes it")
        snapshots = repo.snapshots()
        stored = repo.stored_bytes()
    except ResticError as exc:
        print(f"mesh: {exc}", file=sys.stderr)
        return 1
    shown = [s for s in snapshots if args.instance in (None, s.instance)]
    print(f"{'SNAPSHOT':10}{'INSTANCE':28}{'AGE':>8}{'SIZE':>12}", file=stream)
    for snapshot in shown:
        print(f"{snapshot.id[:8]:10}{snapshot.instance:28}{age(now - snapshot.time):>8}"
              f"{size(snapshot.size):>12}", file=stream)
    print(f"{len(shown)} snapshot(s); the repository holds {size(stored)} on {target.node}",
          file=stream)
    for late in overdue(state.mesh, snapshots, now):
        if args.instance in (None, late.instance):
            when = "never backed up" if late.last is None else \
                f"last backup {age(now - late.last)} ago"
            print(f"overdue: {late.instance} ({when}; every {late.every})", file=stream)
    return 0
