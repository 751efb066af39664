"""`mesh backup DIR INSTANCE`: one versioned, encrypted, deduplicated snapshot of a stateful
instance, taken on the node that runs it and written to the backup target (mesh.yaml
`backups: target:`, a restic repository on another node).

A module that declares `backup:` is dumped consistently from its running container (postgres:
`pg_dumpall`), streamed into restic; any other is stopped, its state directories copied, and
started again. Prints the snapshot, the bytes read and the bytes the repository grew by (a
second backup of unchanged data adds almost nothing). Exit codes: 0 written; 1 restic or the
dump failed (nothing is listed as a good snapshot); 2 bad input (an instance mesh.yaml does
not name, no target, a target on the instance's own node, no password file).
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional, TextIO

from executors.cli._backup_args import (ENGINE_ERRORS, add_common, api_of, job_of, loaded,
                                        paths_of, repository, size)
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
        "deduplicated). Prints the snapshot ID and how much the repository grew.")
    add_common(parser)
    parser.add_argument("instance", metavar="INSTANCE", help="the instance (postgres@anchor)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, out: Optional[TextIO] = None) -> int:
    stream = out or sys.stdout
    state = loaded(args)
    job = job_of(state, args.instance)
    repo = repository(args, job.repository)

    def say(line: str) -> None:
        print(f"backup: {line}", file=sys.stderr, flush=True)

    try:
        written = backup(api_of(args), job, repo, paths_of(args, job), say)
    except (ResticError, CommandFailed) as exc:
        print(f"mesh: {exc}", file=sys.stderr)
        return 1
    except ENGINE_ERRORS as exc:
        print(f"mesh: the Docker Engine failed: {str(exc).splitlines()[0]}",
              file=sys.stderr)
        return 1
    rate = written.read / written.seconds if written.seconds > 0 else 0.0
    print(f"snapshot {written.snapshot[:8]} of {job.instance}: read {size(written.read)}, "
          f"added {size(written.added)} to {job.repository} on {job.target_node} "
          f"({written.seconds:.1f}s, {size(int(rate))}/s)", file=stream)
    return 0
