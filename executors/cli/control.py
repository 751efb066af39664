"""`mesh control DIR`: the control plane, long-running on the control node.

Resolves the mesh whenever its inputs change, issues what can be issued, writes, records and
publishes each node's declaration whose digest changed (signed, with that node's sealed values
only), takes the nodes' reports and records what they applied in the ledger (as `mesh applied`
does), and so completes a rotation's fan-out by itself. Keeps enrolment requests for `mesh
enrol`. One line per event on stderr; stops on SIGTERM or SIGINT. The loop itself is
executors/control/control_loop.py.
"""

from __future__ import annotations

import argparse
from typing import Optional, TextIO

from executors.cli import _fleet_control, _fleet_options
from executors.cli._verb import Subparsers


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "control",
        help="run the control plane: publish declarations over the broker, record reports",
        description="Run the control plane of the mesh in DIR until stopped (SIGTERM/SIGINT): "
        "publish every node's changed declaration over the mesh's broker, signed by the "
        "CA-certified delivery key, with that node's sealed values only; record what the "
        "nodes report applied in the ledger (under the ledger lock), which moves rotations "
        "along with no manual step; keep enrolment requests. Restarted, it picks up from the "
        "ledger and the broker's durable queues. `mesh control backup DIR --out FILE` and "
        "`mesh control restore FILE --dir DIR` save and bring back the control node.")
    _fleet_options.add_directory(parser)
    parser.add_argument("--interval", type=float, default=5.0, metavar="SECONDS",
                        help="how often to look for changed inputs (default 5)")
    parser.add_argument("--no-issue", action="store_true",
                        help="do not issue credentials and certificates (only publish)")
    _fleet_options.add_broker(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, out: Optional[TextIO] = None) -> int:
    no_issue: bool = args.no_issue
    interval: float = args.interval
    control = _fleet_control.control(args, issue=not no_issue, interval=interval)
    stopping: list[bool] = []
    _fleet_options.stop_on_signals(lambda: stopping.append(True))
    control.say(f"control plane of mesh {control.mesh} starting (state {control.state.root})")
    control.run(stop=lambda: bool(stopping))
    control.say("stopped")
    return 0
