"""`mesh publish DIR [--node N]`: one publishing step of the control plane, for scripts.

First pushes the local builds (`mesh build --local`) into the mesh's registry when it serves
(control/self_hosting.py, through $DOCKER_HOST's Engine; kept, with a line why, when it does
not). Resolves (issuing what can be issued), writes, records and publishes every node whose
declaration changed since it was last published; `--node N` (repeatable) publishes N's current
declaration even when unchanged (a republish) and no other. Exit 0 once the broker confirmed
every message, 1 if it did not, 2 for bad input.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Optional, TextIO

from executors.cli import _fleet_control, _fleet_options
from executors.cli._verb import Subparsers
from executors.common.amqp import BrokerError


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "publish",
        help="publish each changed declaration over the broker (one step of `mesh control`)",
        description="Push the local builds (mesh build --local) into the mesh's registry when it "
        "serves (the Engine at $DOCKER_HOST; --key opens the push account). "
        "Resolve the mesh in DIR, issue what can be issued, write and record the "
        "declarations that changed since last published and publish them, signed, each to its "
        "node's queue, confirmed by the broker. --node N publishes N's current declaration "
        "(changed or not) and nothing else.")
    _fleet_options.add_directory(parser)
    parser.add_argument("--node", action="append", metavar="N",
                        help="publish this node's declaration even if unchanged (repeatable)")
    parser.add_argument("--no-issue", action="store_true", help="do not issue anything")
    parser.add_argument("--wait-broker", type=float, default=30.0, metavar="SECONDS",
                        help="how long to keep trying to reach the broker (default 30)")
    _fleet_options.add_broker(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, out: Optional[TextIO] = None) -> int:
    out = out or sys.stdout
    nodes: Optional[list[str]] = args.node
    no_issue: bool = args.no_issue
    wait_broker: float = args.wait_broker
    control = _fleet_control.control(args, issue=not no_issue)
    connection, channel = control.connect(deadline=time.monotonic() + wait_broker)
    try:
        done = control.publish(channel, force=nodes or (), only=nodes)
    except BrokerError as error:
        print(f"mesh publish: not every declaration was confirmed: {error}", file=out)
        return 1
    finally:
        connection.close()
    for item in done:
        print(f"published {item.node} serial {item.serial} {item.digest}", file=out)
    if not done:
        print("nothing to publish: every node's declaration was published as it is", file=out)
    return 0
