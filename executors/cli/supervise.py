"""`mesh supervise --name NAME [--run-dir DIR] -- ARGS…`: run `mesh ARGS…` and restart it
whenever it exits, until SIGTERM/SIGINT.

The fallback service manager where systemd does not run (a container, a test namespace):
`mesh join` and `mesh init` start it detached for the agent and the control loop. The work is
executors/common/service.py.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional, TextIO

from resolver import MeshError

from executors.cli._verb import Subparsers
from executors.common.service import RUN_DIR, supervise

#: how a service runs `mesh` here: this interpreter, this project's command line
MESH = (sys.executable, "-m", "executors.cli")


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "supervise", help="run a mesh command and restart it whenever it exits (no systemd)",
        description="Run `mesh ARGS…` in the foreground and restart it whenever it exits "
        "(after 1 s, doubling up to 30 s while it keeps failing); SIGTERM or SIGINT is passed "
        "to it and ends both. Its pid, its child's pid and its log are NAME.pid, "
        "NAME.child.pid and NAME.log under --run-dir. Where systemd runs, `mesh join` and "
        "`mesh init` write a unit instead.")
    parser.add_argument("--name", required=True, help="the service's name, e.g. agent")
    parser.add_argument("--run-dir", default=str(RUN_DIR), metavar="DIR",
                        help=f"where its pid files and log go (default {RUN_DIR})")
    parser.add_argument("args", nargs=argparse.REMAINDER, metavar="-- ARGS",
                        help="the mesh command to run, after --")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, out: Optional[TextIO] = None) -> int:
    command: list[str] = list(args.args)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        raise MeshError("mesh supervise needs the mesh command to run after `--`")
    return supervise(args.name, [*MESH, *command], run_dir=Path(args.run_dir))
