"""`mesh restore DIR INSTANCE --snapshot ID`: put one snapshot back into a stateful instance,
on the node that runs it.

A dumped module is restored by its `backup: restore:` command in its running container (for
postgres, `psql` reading the `pg_dumpall --clean` dump: every database as it was); any other
is stopped, its state directories put back, and started again. Refused before anything
changes: a snapshot the repository does not hold, one taken of another module, an instance
mesh.yaml does not name, a target on the instance's own node (exit 2); restic or the restore
command failing is exit 1. On the control node (the instance's node enrolled in DIR's control
state), the node's agent is asked to restore it, over the broker (cli/_backup_remote.py);
`--local` restores it here; no answer in time is exit 1.
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional, TextIO

from executors.cli._backup_args import (ENGINE_ERRORS, add_common, api_of, job_of, loaded,
                                        opened, paths_of)
from executors.cli._backup_remote import (BackupQuery, RemoteBackupError, add_remote, ask_agent,
                                          failed, through_agent)
from executors.cli._verb import Subparsers
from executors.node.backup import CommandFailed, restore
from executors.node.restic import ResticError


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "restore", help="put a snapshot (mesh backups lists them) back into an instance",
        description="Put snapshot ID back into INSTANCE on the node that runs it. The "
        "snapshot must be of INSTANCE's module; nothing is changed when it is not, or when "
        "the repository does not hold it. On the control node, when the instance's node is "
        "enrolled, its agent restores it (asked over the mesh's broker).")
    add_common(parser)
    add_remote(parser)
    parser.add_argument("instance", metavar="INSTANCE", help="the instance (postgres@anchor)")
    parser.add_argument("--snapshot", required=True, metavar="ID",
                        help="the snapshot's ID or a prefix naming one (mesh backups)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, out: Optional[TextIO] = None) -> int:
    stream = out or sys.stdout
    state = loaded(args)
    job = job_of(state, args.instance)
    if through_agent(args, job.node):
        try:
            done = ask_agent(args, BackupQuery(job.node, job.instance, "restore", args.snapshot))
        except RemoteBackupError as exc:
            return failed(exc)
        print(f"restored snapshot {done.snapshot[:8]} ({done.of or job.instance}) into "
              f"{job.instance} by {job.node}'s agent", file=stream)
        return 0

    def say(line: str) -> None:
        print(f"restore: {line}", file=sys.stderr, flush=True)

    try:
        with opened(args, state, job) as repo:
            snapshot = restore(api_of(args), job, repo, args.snapshot, paths_of(args, job),
                               say)
    except (ResticError, CommandFailed) as exc:
        print(f"mesh: {exc}", file=sys.stderr)
        return 1
    except ENGINE_ERRORS as exc:
        print(f"mesh: the Docker Engine failed: {str(exc).splitlines()[0]}",
              file=sys.stderr)
        return 1
    print(f"restored snapshot {snapshot.id[:8]} ({snapshot.instance}) into {job.instance}",
          file=stream)
    return 0
