"""`mesh forget-state INSTANCE@NODE DECLARATION... [--state-root DIR]`: let the old copy of a
moved instance's state go, on the node it moved away from (run there).

A move with `state-from:` copies the state and leaves the old copy where it was; this removes
it, once the operator is sure the new copy serves. Refused (nothing removed) while this node's
newest declaration still declares INSTANCE or still carries its state (remove `state-from`,
publish, apply here first), and on another node than NODE.
Exit codes: 0 removed; 2 bad input or refused (the message says why; nothing removed).
"""

from __future__ import annotations

import argparse
import sys

from resolver import MeshError

from executors.cli._verb import Subparsers
from executors.node.apply.runner import load_declarations
from executors.node.node_paths import (DEFAULT_STATE_ROOT, NodePaths, STATE_ROOT_ENV,
                                        default_state_root)
from executors.node.state_move.forget import forget


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "forget-state",
        help="remove the old copy of a moved instance's state (on the node it left)",
        description="Remove INSTANCE's state directories on NODE, the node it moved away "
        "from with `state-from:`, once its new copy serves. Refused while NODE's newest "
        "declaration still declares INSTANCE or still carries its state.")
    parser.add_argument("target", metavar="INSTANCE@NODE",
                        help="the instance and the node it left, e.g. postgres@main@n1")
    parser.add_argument("declarations", nargs="+", metavar="DECLARATION",
                        help="this node's declaration files (the newest decides)")
    parser.add_argument("--state-root", default=default_state_root(),
                        help=f"node-side state root (default: ${STATE_ROOT_ENV} or "
                        f"{DEFAULT_STATE_ROOT})")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    instance, at, node = str(args.target).rpartition("@")
    if not at or not instance or not node:
        print(f"mesh: {args.target!r}: expected INSTANCE@NODE (the node it left)",
              file=sys.stderr)
        return 2
    try:
        declaration = max(load_declarations(args.declarations), key=lambda d: d[1].serial)[1]
        if declaration.node != node:
            print(f"mesh: the declaration given is {declaration.node}'s, not {node}'s: run "
                  f"this on {node} with its declaration", file=sys.stderr)
            return 2
        removed = forget(declaration, instance, NodePaths(args.state_root))
    except (MeshError, OSError) as exc:
        print(f"mesh: {exc}", file=sys.stderr)
        return 2
    for path in removed:
        print(f"removed {path} ({instance}'s old copy on {node})")
    return 0
