"""`mesh backup` and `mesh restore` from the control node: when the instance's node is enrolled
in this mesh directory's control state (its agent answers over the broker), the verb asks that
agent to run it (executors/control/remote_backup.py) instead of running it here; `--local`
runs it here whatever the control state says."""

from __future__ import annotations

import argparse
import sys

from executors.cli._fleet_control import settings
from executors.cli._fleet_options import add_broker, say
from executors.control.control_state import ControlState
from executors.control.delivery_key import ensure_delivery_key
from executors.control.fleet import Fleet
from executors.control.loading import load_mesh_dir
from executors.control.remote_backup import BackupQuery, RemoteBackup, RemoteBackupError, ask

DEFAULT_TIMEOUT = 3600.0


def add_remote(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--local", action="store_true",
                        help="run it on this machine even when DIR is the control node's and "
                        "the instance's node is enrolled (by default its agent runs it)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                        help="through the agent: how long to wait for the node's answer "
                        f"(default {DEFAULT_TIMEOUT:.0f})")
    add_broker(parser, with_key=False)  # --key (add_common): on the control node, its key


def through_agent(args: argparse.Namespace, node: str) -> bool:
    """Whether the instance's node is enrolled here (so its agent runs the verb)."""
    if args.local:
        return False
    inputs_dir = load_mesh_dir(args.directory).mesh_dir
    return node in ControlState(inputs_dir, args.state_dir).accounts()


def ask_agent(args: argparse.Namespace, query: BackupQuery) -> RemoteBackup:
    """The agent's answer; RemoteBackupError (said by the caller: exit 1) or BackupError."""
    inputs = load_mesh_dir(args.directory)
    fleet = Fleet(inputs.mesh.mesh, settings(args, inputs),
                  ControlState(inputs.mesh_dir, args.state_dir), say)
    return ask(fleet, ensure_delivery_key(inputs.mesh_dir, inputs.mesh), query,
               timeout=args.timeout, say=say)


def failed(error: RemoteBackupError) -> int:
    print(f"mesh: {error}", file=sys.stderr)
    return 1


__all__ = ["add_remote", "through_agent", "ask_agent", "failed", "BackupQuery",
           "RemoteBackupError"]
