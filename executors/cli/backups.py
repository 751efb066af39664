"""`mesh backups DIR [INSTANCE]`: the snapshots in the backup target, with their ages and the
size each restores to, the bytes the repository holds, and every scheduled instance whose last
backup is older than its schedule (mesh.yaml `backups: every:`).

On the control node, where the repository is not read (no --password-file, or restic cannot
reach it), each instance's last backup as its node's agent reported it is listed instead,
with `overdue` by the same rule.

Exit codes: 0 listed (also when something is overdue: it is said, on its own line); 1 restic
failed; 2 bad input.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Optional, TextIO

from resolver import BackupError
from resolver.backups import Snapshot, overdue, schedule_refusals, target_node

from executors.cli._backup_args import (Loaded, add_common, age, loaded, node_declaration,
                                        node_paths, repository, size, store_target)
from executors.node.backup_target import duty_of, open_repository
from executors.node.restic import Repository
from executors.cli._backup_status import reported, reported_lines
from executors.cli._verb import Subparsers
from executors.control.control_state import ControlState
from executors.node.restic import ResticError


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "backups", help="list the snapshots in the backup target, with ages and sizes",
        description="List the mesh's snapshots in the backup target (mesh.yaml `backups: "
        "target:`), oldest first: ID, instance, age, the size it restores to; then what the "
        "repository holds on disk (deduplicated) and the instances whose last backup is "
        "older than their schedule (`backups: every:`). On the control node, where the "
        "repository is not read (no --password-file, or restic cannot reach it), each "
        "instance's last backup as its node's agent reported it, overdue by the same rule.")
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
    now = int(time.time())
    if not store_target(state) and not args.password_file \
            and _as_reported(args, state, "no --password-file here", now, stream):
        return 0
    try:
        snapshots, stored = _store_listing(args, state) if store_target(state) \
            else _listing(repository(args, target.repository), target.repository)
    except (ResticError, BackupError) as exc:
        if _as_reported(args, state, str(exc), now, stream):
            return 0
        if isinstance(exc, BackupError):
            raise
        print(f"mesh: {exc}", file=sys.stderr)
        return 1
    shown = [s for s in snapshots if args.instance in (None, s.instance)]
    print(f"{'SNAPSHOT':10}{'INSTANCE':28}{'AGE':>8}{'SIZE':>12}", file=stream)
    for snapshot in shown:
        print(f"{snapshot.id[:8]:10}{snapshot.instance:28}{age(now - snapshot.time):>8}"
              f"{size(snapshot.size):>12}", file=stream)
    print(f"{len(shown)} snapshot(s); the repository holds {size(stored)} on "
          f"{target_node(state.mesh)}", file=stream)
    for late in overdue(state.mesh, snapshots, now):
        if args.instance in (None, late.instance):
            when = "never backed up" if late.last is None else \
                f"last backup {age(now - late.last)} ago"
            print(f"overdue: {late.instance} ({when}; every {late.every})", file=stream)
    return 0


def _as_reported(args: argparse.Namespace, state: Loaded, why: str, now: int,
                 stream: TextIO) -> bool:
    """On the control node, where the repository is not reachable: each instance's last
    backup as its node's agent reported it (and overdue by the same rule); False when no
    node reported any."""
    kept = ControlState(args.directory, args.state_dir).reports()
    nodes = [{"node": node, "backups": found.get("backups") or []}
             for node, found in sorted(kept.items())]
    if not any(n["backups"] for n in nodes):
        return False
    entries = [e for e in reported(state.mesh, nodes, now)
               if args.instance in (None, e["instance"])]
    print(f"the repository is not read from here ({why}); as the nodes' agents last "
          "reported:", file=stream)
    for line in reported_lines(entries, now):
        print(line, file=stream)
    return True


def _listing(repo: Repository, location: str) -> tuple[tuple[Snapshot, ...], int]:
    if not repo.exists():
        raise BackupError(f"there is no restic repository at {location} (or its password is "
                          "not this one); `mesh backup` makes it")
    return repo.snapshots(), repo.stored_bytes()


def _store_listing(args: argparse.Namespace, state: Loaded
                   ) -> tuple[tuple[Snapshot, ...], int]:
    """The snapshots of every instance this node backs up into the mesh's backup store (each
    its own repository there, opened with its own login), and the bytes they hold."""
    declaration = node_declaration(args)
    duties = [d for d in declaration.backups if args.instance in (None, d.instance)]
    if args.instance is not None and not duties:
        duty_of(declaration, args.instance)  # says which instances are backed up here
    found: list[Snapshot] = []
    stored = 0
    for duty in duties:
        with open_repository(duty, declaration, node_paths(args), key_file=args.key,
                             secrets_path=args.secrets) as repo:
            if not repo.exists():
                continue  # never backed up yet: `overdue` says so when it is scheduled
            found.extend(repo.snapshots())
            stored += repo.stored_bytes()
    return tuple(sorted(found, key=lambda s: (s.time, s.id))), stored
