"""`mesh backup DIR INSTANCE`: one versioned, encrypted, deduplicated snapshot of a stateful
instance, taken on the node that runs it and written to the backup target (mesh.yaml
`backups: target:`, a restic repository on another node): the mesh's backup store, opened
with the instance's duty from the node's declaration in force and the values sealed to the
node (executors/node/backup_target.py), or an outside repository with --password-file.

A module that declares `backup:` is dumped consistently from its running container (postgres:
`pg_dumpall`), streamed into restic; any other is stopped, its state directories copied, and
started again. Prints the snapshot, the bytes read and the bytes the repository grew by (a
second backup of unchanged data adds almost nothing). On the control node (the instance's
node enrolled in DIR's control state), the node's agent is asked to take it, over the broker
(cli/_backup_remote.py); `--local` takes it here. Exit codes: 0 written; 1 restic or the
dump failed (nothing is listed as a good snapshot), or the agent did not answer in time; 2
bad input (an instance mesh.yaml does not name, no target, a target on the instance's own
node, no password file for an outside repository, no duty for it in force).
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional, TextIO

from executors.cli._backup_args import (ENGINE_ERRORS, add_common, api_of, job_of, loaded,
                                        opened, paths_of, size)
from executors.cli._backup_remote import (BackupQuery, RemoteBackupError, add_remote, ask_agent,
                                          failed, through_agent)
from executors.cli._verb import Subparsers
from executors.node.backup import CommandFailed, backup
from executors.node.restic import ResticError


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "backup", help="snapshot a stateful instance into the backup target (restic)",
        description="Take one snapshot of INSTANCE on the node that runs it: its module's "
        "consistent dump (module.yaml `backup:`) streamed from the running container, or "
        "its state directories copied while its containers are stopped; written to the "
        "restic repository mesh.yaml's `backups: target:` names (versioned, encrypted, "
        "deduplicated). Prints the snapshot ID and how much the repository grew. On the "
        "control node, when the instance's node is enrolled, its agent takes the snapshot "
        "(asked over the mesh's broker; no password file is needed here).")
    add_common(parser)
    add_remote(parser)
    parser.add_argument("instance", metavar="INSTANCE", help="the instance (postgres@anchor)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, out: Optional[TextIO] = None) -> int:
    stream = out or sys.stdout
    state = loaded(args)
    job = job_of(state, args.instance)
    if through_agent(args, job.node):
        try:
            done = ask_agent(args, BackupQuery(job.node, job.instance, "backup"))
        except RemoteBackupError as exc:
            return failed(exc)
        _print(stream, job.instance, done.snapshot, done.read, done.added, done.seconds,
               done.repository or job.repository, done.target_node or job.target_node,
               f" by {job.node}'s agent")
        return 0

    def say(line: str) -> None:
        print(f"backup: {line}", file=sys.stderr, flush=True)

    try:
        with opened(args, state, job) as repo:
            written = backup(api_of(args), job, repo, paths_of(args, job), say)
            location = repo.location  # a store's repository: the duty's, without its login
    except (ResticError, CommandFailed) as exc:
        print(f"mesh: {exc}", file=sys.stderr)
        return 1
    except ENGINE_ERRORS as exc:
        print(f"mesh: the Docker Engine failed: {str(exc).splitlines()[0]}",
              file=sys.stderr)
        return 1
    _print(stream, job.instance, written.snapshot, written.read, written.added, written.seconds,
           location, job.target_node, "")
    return 0


def _print(stream: TextIO, instance: str, snapshot: str, read: int, added: int,
           seconds: float, repository: str, target_node: str, by: str) -> None:
    rate = read / seconds if seconds > 0 else 0.0
    print(f"snapshot {snapshot[:8]} of {instance}: read {size(read)}, added {size(added)} to "
          f"{repository} on {target_node}{by} ({seconds:.1f}s, {size(int(rate))}/s)",
          file=stream)
