"""`mesh collect DIR [--wait SECONDS]`: take the nodes' reports, for scripts.

Takes every report (and enrolment request) waiting on the broker, keeps it, and records each
applied report in the ledger as `mesh applied` does. With --wait, keeps taking them until every
enrolled node reported on the serial last published to it, or SECONDS passed. Exit 0 when every
enrolled node applied what was published to it, 1 otherwise (naming each node and why).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Optional, TextIO

from executors.cli import _fleet_control, _fleet_options
from executors.cli._verb import Subparsers
from executors.control.control_loop import settle


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "collect",
        help="take the nodes' reports and record them (one step of `mesh control`)",
        description="Take every report waiting on the broker and record what the nodes applied "
        "in the ledger (as `mesh applied`). --wait SECONDS keeps taking reports until every "
        "enrolled node reported on the serial last published to it. Exit 0 when each applied "
        "it, 1 otherwise.")
    _fleet_options.add_directory(parser)
    parser.add_argument("--wait", type=float, default=0.0, metavar="SECONDS",
                        help="wait up to SECONDS for every enrolled node to report")
    _fleet_options.add_broker(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, out: Optional[TextIO] = None) -> int:
    out = out or sys.stdout
    wait: float = args.wait
    control = _fleet_control.control(args)
    connection, channel = control.connect(deadline=time.monotonic() + max(wait, 30.0))
    try:
        outcomes, standing = settle(control, connection, channel, wait)
    finally:
        connection.close()
    print(f"{len(outcomes)} message(s) taken", file=out)
    bad = 0
    for node, (ok, line) in sorted(standing.items()):
        bad += not ok
        print(f"  {node}: {line}", file=out)
    return 1 if bad else 0
