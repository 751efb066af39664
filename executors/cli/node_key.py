"""`mesh node-key NODE --path FILE`: create a node's private key and print its public key.

Run on the node itself: the private key never leaves it. The file is created with mode 0600
and never overwritten; the printed `public-key:` line goes under the node in mesh.yaml, and
from then on the issuer seals that node's secrets to it.
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional, TextIO

from executors.cli._verb import Subparsers
from executors.common.keys import create_node_key


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "node-key",
        help="create a node's private key file (0600) and print its public key for mesh.yaml",
        description="Create NODE's X25519 private key at --path (mode 0600; an existing file is "
        "never overwritten) and print the public key to add under the node in mesh.yaml.",
    )
    parser.add_argument("node", metavar="NODE", help="the node's name in mesh.yaml")
    parser.add_argument("--path", required=True, metavar="FILE",
                        help="where to create the private key, e.g. /etc/mesh/node.key")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, out: Optional[TextIO] = None) -> int:
    out = out or sys.stdout
    path: str = args.path
    node: str = args.node
    public = create_node_key(path)
    print(f"created {path} (mode 0600): keep it on {node} only", file=sys.stderr)
    print(f"add under `nodes: {node}:` in mesh.yaml:", file=sys.stderr)
    print(f"    public-key: {public}", file=out)
    return 0
