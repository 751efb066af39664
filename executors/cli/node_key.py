"""`mesh node-key NODE --path FILE`: create a node's private key and print its public key;
`mesh node-key --show --path FILE`: print an existing key's public key and fingerprint.

Run on the node itself: the private key never leaves it. The file is created with mode 0600
and never overwritten; the printed `public-key:` line goes under the node in mesh.yaml, and
from then on the issuer seals that node's secrets to it. The fingerprint (common/keys.py
key_fingerprint) is what `mesh enrol list` shows on the control node, to be compared by eye.
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional, TextIO

from resolver import MeshError

from executors.cli._verb import Subparsers
from executors.common.keys import create_node_key, key_fingerprint, public_key_of_file


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "node-key",
        help="create a node's private key file (0600) and print its public key for mesh.yaml; "
        "--show prints an existing key's public key and fingerprint",
        description="Create NODE's X25519 private key at --path (mode 0600; an existing file is "
        "never overwritten) and print the public key to add under the node in mesh.yaml. "
        "With --show, create nothing: print the public key and the fingerprint "
        "(SHA256:<base64 of the SHA-256 of the raw 32-byte public key>, as `mesh enrol list` "
        "shows it) of the key already at --path.",
    )
    parser.add_argument("node", metavar="NODE", nargs="?",
                        help="the node's name in mesh.yaml (not needed with --show)")
    parser.add_argument("--path", required=True, metavar="FILE",
                        help="the private key file, e.g. /etc/mesh/node.key")
    parser.add_argument("--show", action="store_true",
                        help="print the existing key's public key and fingerprint; create "
                        "nothing")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, out: Optional[TextIO] = None) -> int:
    out = out or sys.stdout
    path: str = args.path
    node: Optional[str] = args.node
    if args.show:
        public = public_key_of_file(path)
        print(f"public-key: {public}", file=out)
        print(f"fingerprint: {key_fingerprint(public)}", file=out)
        return 0
    if node is None:
        raise MeshError("mesh node-key: NODE is needed to create a key (`mesh node-key NODE "
                        "--path FILE`); `--show --path FILE` prints an existing one")
    public = create_node_key(path)
    print(f"created {path} (mode 0600): keep it on {node} only", file=sys.stderr)
    print(f"its fingerprint: {key_fingerprint(public)}", file=sys.stderr)
    print(f"add under `nodes: {node}:` in mesh.yaml:", file=sys.stderr)
    print(f"    public-key: {public}", file=out)
    return 0
