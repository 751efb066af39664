"""`mesh rollback DIR INSTANCE [--state-root DIR]`: return a stateful instance to the image it
ran before its last upgrade, and to the snapshot taken just before that upgrade.

Run where the mesh directory and the node's state root are both at hand (a one-node mesh, or
the control node with the record copied there: `--state-root`). It reads the node's upgrade
record (`<state root>/.mesh/upgrades/<instance>.json`, written by the apply that took the
snapshot), sets the ledger's pin of each artifact that changed back to the digest before (one
ledger transaction) and marks the record: the next `mesh plan` declares the image before, and
the next `mesh apply` (with --backup-password-file) recreates the instance on it and then
restores the snapshot. Refused (exit 2, nothing changed) when no upgrade is recorded, or when
the catalogue names another tag now than the image before was pinned as (set the tag back
first: the message names module.yaml's line). Exit 0: the pins are set back.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Optional, TextIO

import attrs

from resolver import Inputs, Ledger, MeshError
from resolver.backups import rollback_pins

from executors.cli._verb import Subparsers
from executors.control.ledger_transaction import transact
from executors.node.node_paths import (DEFAULT_STATE_ROOT, NodePaths, STATE_ROOT_ENV,
                                        default_state_root)
from executors.node.upgrade import read_upgrade_record, record_path, write_upgrade_record


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "rollback", help="return an instance to its image before its last upgrade and to the "
        "snapshot taken before it (the next plan and apply do it)",
        description="Set the ledger's pins of INSTANCE's artifacts back to the digests it ran "
        "before its last upgrade (the node's upgrade record says which, and which snapshot "
        "was taken first) and mark the record: the next `mesh plan` declares the image "
        "before; the next `mesh apply --backup-password-file FILE` recreates the instance on "
        "it and restores that snapshot.")
    parser.add_argument("directory", metavar="DIR", help="the mesh directory")
    parser.add_argument("instance", metavar="INSTANCE", help="the instance (postgres@anchor)")
    parser.add_argument("--state-root", default=default_state_root(),
                        help=f"the node's state root holding .mesh/upgrades/ (default: "
                        f"${STATE_ROOT_ENV} or {DEFAULT_STATE_ROOT})")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, out: Optional[TextIO] = None) -> int:
    stream = out or sys.stdout
    instance: str = args.instance
    paths = NodePaths(args.state_root)
    record = read_upgrade_record(paths, instance)
    if record is None or not record.get("from"):
        print(f"mesh: no upgrade of {instance} is recorded at {record_path(paths, instance)}; "
              "expected the state root of the node that ran it (--state-root)", file=sys.stderr)
        return 2

    def compute(inputs: Inputs) -> tuple[Ledger, list[str]]:
        declared = inputs.mesh.instances.get(instance)
        if declared is None:
            raise MeshError(f"mesh.yaml names no instance {instance!r}")
        module = inputs.catalogue.modules.get(declared.module)
        if module is None or module.name != record.get("module"):
            raise MeshError(f"{instance} is module {declared.module} now; its upgrade record "
                            f"is of module {record.get('module')}: nothing to roll back")
        rollback = rollback_pins(module, inputs.ledger.pins, dict(record["from"]))
        for artifact, (tag, was) in sorted(rollback.retag.items()):
            file, line, col = inputs.sources.where(f"module:{module.name}", "artifacts",
                                                   artifact, "tag")
            if tag is None:
                raise MeshError(f"{file}:{line}:{col}: artifact {artifact} is built, not "
                                "pinned: build the image before again instead")
            raise MeshError(f"{file}:{line}:{col}: artifact {artifact} names tag {tag}; "
                            f"{instance} ran it as tag {' or '.join(was)} before its upgrade: "
                            f"set the tag back, then run mesh rollback again")
        said = [f"{key} → {digest[7:19]}" for key, digest in sorted(rollback.pins.items())]
        return attrs.evolve(inputs.ledger,
                            pins=inputs.ledger.pins.update(dict(rollback.pins))), said

    try:
        done = transact(args.directory, compute)
    except MeshError as exc:
        print(f"mesh: {exc}", file=sys.stderr)
        return 2
    record["rollback"] = {"asked": int(time.time()), "snapshot": record["snapshot"]}
    write_upgrade_record(paths, instance, record)
    for line in done.result:
        print(f"pinned back: {line}", file=stream)
    print(f"{instance}: the next `mesh plan` declares the image it ran before its upgrade; "
          f"the next `mesh apply --backup-password-file FILE` recreates it on that image and "
          f"restores snapshot {str(record['snapshot'])[:8]}", file=stream)
    return 0
