"""`mesh node remove DIR NAME`: a node leaves the mesh (control/node_removal.py)."""

from __future__ import annotations

import argparse
import sys
from typing import Optional, TextIO

from executors.cli import _fleet_options
from executors.cli._verb import Subparsers
from executors.control.control_state import ControlState
from executors.control.node_removal import LEFT_ON_THE_MACHINE, NodeAssigned, remove_node


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser("node", help="nodes of the mesh: `mesh node remove`",
                                   description="Manage the mesh's nodes.")
    verbs = parser.add_subparsers(dest="node_verb", metavar="VERB")
    verbs.required = True
    remove = verbs.add_parser(
        "remove", help="NAME leaves the mesh: mesh.yaml, its broker account and queue, its "
        "certificate and key revoked",
        description="Remove NAME from the mesh: refused (exit 1, nothing changed) while an "
        "instance is assigned to it. Otherwise its entry is cut from mesh.yaml (comments and "
        "layout kept), its certificate and key are put on the mesh's revocation list (its "
        "reports and a new enrolment with that key are refused, agents refuse a revoked "
        "signer), and the next `mesh publish` or the control loop deletes its broker account "
        "and queue; the next resolution drops its registry pull account, its declaration and "
        "every firewall opening made for it on other nodes. Nothing is removed from the "
        "node's machine: the command says what stays there.")
    _fleet_options.add_directory(remove)
    remove.add_argument("name", metavar="NAME", help="the node to remove")
    remove.set_defaults(func=run)


def run(args: argparse.Namespace, out: Optional[TextIO] = None) -> int:
    out = out or sys.stdout
    directory: str = args.directory
    state_dir: Optional[str] = args.state_dir
    name: str = args.name
    try:
        removal = remove_node(directory, ControlState(directory, state_dir), name)
    except NodeAssigned as refused:
        print(f"mesh: node {name} not removed, nothing changed: it still runs "
              f"{len(refused.assigned)} instance(s):", file=sys.stderr)
        for instance, where in refused.assigned:
            print(f"  {where}: {instance}", file=sys.stderr)
        print("  move them to another node (`node:`) or delete them in mesh.yaml, then run "
              "this again", file=sys.stderr)
        return 1
    for line in removal.lines:
        print(line, file=out)
    if removal.behind:
        print(f"warning: {removal.behind}", file=out)
    print(f"left on {name}'s machine (the mesh removes nothing there; delete what you do not "
          f"keep):", file=out)
    for item in LEFT_ON_THE_MACHINE:
        print(f"  - {item}", file=out)
    return 0
