"""`mesh firewall DECLARATION`: make this machine's nftables table `inet mesh` match a declaration.

Invariants:
- Reads one declaration file (YAML or JSON of resolver.documents.unstructure(Declaration)); bad
  input is reported as file:line:col (exit 2), never a traceback.
- Touches table `inet mesh` in the current network namespace only (see executors/node/firewall/executor.py).
- Exit 0 when the table matches (changed or not), 1 when refused or failed.
"""

from __future__ import annotations

import argparse
import os
import sys

from executors.cli._verb import Subparsers
from executors.node.firewall.executor import DEFAULT_STATE_DIR, apply_firewall
from executors.node.firewall.render import FirewallError, render
from executors.node.apply.runner import firewall_bridges, load_declaration


def run(args: argparse.Namespace) -> int:
    declaration = load_declaration(args.declaration)
    if declaration.firewall is None:
        print(f"mesh firewall: {args.declaration}: the declaration of node {declaration.node} "
              "has no firewall intent; nothing applied", file=sys.stderr)
        return 1
    bridges = firewall_bridges(declaration.firewall, given=args.bridge,
                               docker_host=args.docker_host,
                               say=lambda line: print(line, file=sys.stderr))
    if args.show:
        try:
            rendered = render(declaration.firewall, bridges)
        except FirewallError as error:
            print(f"mesh firewall: refused: {error}", file=sys.stderr)
            return 1
        print(rendered.text, end="")
        return 0
    report = apply_firewall(declaration.firewall, args.state_dir, dry_run=args.dry_run,
                            emit=lambda line: print(line, flush=True), bridges=bridges)
    if report.ok and not report.steps:
        return 0
    if report.ok:
        print(f"firewall: node {declaration.node} now carries {report.digest}"
              if not args.dry_run else f"firewall: dry run for {report.digest}, nothing applied")
        return 0
    return 1


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "firewall",
        help="apply a declaration's firewall to this machine (nftables table inet mesh)",
        description="Render the declaration's firewall intent to one nftables transaction for "
        "table inet mesh and apply it atomically, after a dry-run check. Nothing happens when "
        "the running table already carries the declaration's digest.",
    )
    parser.add_argument("declaration", help="the node's declaration (YAML or JSON)")
    parser.add_argument("--dry-run", action="store_true",
                        help="check the batch with the kernel but apply nothing")
    parser.add_argument("--state-dir", default=DEFAULT_STATE_DIR,
                        help=f"where the applied digest is kept (default {DEFAULT_STATE_DIR})")
    parser.add_argument("--show", action="store_true",
                        help="print the rendered nftables script (nft syntax) and exit")
    parser.add_argument("--bridge", action="append", metavar="IFNAME",
                        help="a bridge of the container runtime that same-node consumers "
                        "arrive on (repeatable; default: ask the Docker Engine for its default "
                        "network's bridge, docker0 if none answers)")
    parser.add_argument("--docker-host", default=os.environ.get("DOCKER_HOST"),
                        help="Docker Engine address asked for its bridge (default: "
                        "$DOCKER_HOST or the local socket)")
    parser.set_defaults(func=run)
