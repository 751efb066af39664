"""`mesh serve-state DECLARATION... [--file-root DIR] [--forever]`: serve the state of the
instances that leave this node, to the nodes they move to (a move with `state-from:`).

The declaration (the newest given) says which instances leave this node and for which node
(its `transfers`); the instance must not run here any more (`mesh apply` of that declaration
stops it, and writes this node's transfer certificate and key, which this command serves
with). The arriving node's `mesh apply` fetches the state over mutual TLS, both nodes
authenticated by their transfer certificates from the mesh CA, verifies it and only then
starts the instance there; a transfer whose certificates are not issued yet is not served
(`mesh plan --issue` issues them). This
command returns once every departure was copied and verified (with `--forever`, it keeps
serving, for an agent-less node that serves several moves); the state stays here until
`mesh forget-state INSTANCE@NODE`. Progress (bytes, percent, rate) is printed as it goes.
Exit codes: 0 every departure copied and verified (or none declared); 1 serving failed (the
port could not be opened, the Engine did not answer, the transfer certificate is not issued
or not written yet); 2 bad input (a declaration that cannot be read).
"""

from __future__ import annotations

import argparse
import os
import sys

from resolver import MeshError

from executors.cli._verb import Subparsers
from executors.node import docker_engine
from executors.node.apply.runner import load_declarations
from executors.node.node_paths import (DEFAULT_STATE_ROOT, FILE_ROOT_ENV, NodePaths,
                                        STATE_ROOT_ENV, default_file_root, default_state_root)
from executors.node.state_move.serve import Server, departures


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "serve-state",
        help="serve the state of instances that move away from this node (state-from)",
        description="Serve, on this node's transfer port, the state directories of every "
        "instance its declaration says leaves it, to the node it moves to only (mutual TLS "
        "on both nodes' transfer certificates from the mesh CA, which `mesh apply` of this "
        "declaration wrote; the firewall opens the port to that node alone while the move "
        "is declared). Returns once each copy was verified by the "
        "arriving node. The state stays here until `mesh forget-state INSTANCE@NODE`.")
    parser.add_argument("declarations", nargs="+", metavar="DECLARATION",
                        help="this node's declaration files (the newest is served)")
    parser.add_argument("--state-root", default=default_state_root(),
                        help=f"node-side state root (default: ${STATE_ROOT_ENV} or "
                        f"{DEFAULT_STATE_ROOT})")
    parser.add_argument("--file-root", default=default_file_root(), metavar="DIR",
                        help="where `mesh apply` wrote this node's declared files, the transfer "
                        f"certificate among them (default: ${FILE_ROOT_ENV} or /)")
    parser.add_argument("--docker-host", default=os.environ.get("DOCKER_HOST"),
                        help="Docker Engine address, to check the instance no longer runs here")
    parser.add_argument("--bind", metavar="ADDRESS",
                        help="listen on this address (default: the node's address)")
    parser.add_argument("--forever", action="store_true",
                        help="keep serving after every departure was copied")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        declaration = max(load_declarations(args.declarations), key=lambda d: d[1].serial)[1]
    except (MeshError, OSError) as exc:
        print(f"mesh: {exc}", file=sys.stderr)
        return 2
    if not departures(declaration):
        print(f"mesh: nothing leaves {declaration.node} in declaration serial "
              f"{declaration.serial}: nothing to serve", file=sys.stderr)
        return 0

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        api = docker_engine.connect(args.docker_host)
        server = Server(declaration, NodePaths(args.state_root, args.file_root), api, say,
                        bind=args.bind)
    except (MeshError, OSError) as exc:
        print(f"mesh: cannot serve: {exc}", file=sys.stderr)
        return 1
    try:
        server.serve(forever=args.forever)
    except KeyboardInterrupt:
        return 130
    finally:
        server.close()
    return 0
