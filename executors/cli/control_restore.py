"""`mesh control restore FILE --dir DIR`: a control node again, from its archive.

Unpacks what `mesh control backup` wrote into DIR (new or empty) and the control node's key
into `--key`, after checking the passphrase and the archive whole: nothing is written when
anything is wrong (executors/control/backup.py). With `--node NAME` this machine becomes the
control node: the staged mesh.yaml is rewritten before it is put in place
(executors/control/control_move.py: the `control: true` flag moves, the node is added with
the control key when it is new, the control instance leaves or moves), and the control loop
is installed as a host service here (executors/common/service.py) unless it moves into
control@NAME's container or `--no-service` is given.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

from executors.cli import _passphrase
from executors.cli._fleet_options import ENV
from executors.cli._verb import Subparsers
from executors.cli.supervise import MESH
from executors.common.service import (RUN_DIR, UNIT_DIR, Service, ServiceError, install,
                                      passed_environment)
from executors.control.backup import restore
from executors.control.control_move import ControlLoop, restore_edit


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "control restore",
        help="unpack a control node's archive into a new mesh directory; this machine the "
        "control node",
        description="Unpack an archive `mesh control backup` wrote into DIR, which must not "
        "exist or be empty, and the control node's key into --key. With --node NAME this "
        "machine becomes the control node in the restored mesh.yaml (round trip, comments "
        "kept, each change said): NAME gets `control: true` (the old control node loses it), "
        "NAME is added with the control key's public-key and --address when it is not a node "
        "yet, and the control loop runs here: by default as a host service (a systemd unit, "
        "else `mesh supervise`), the control instance (control@OLD) and its old machine's "
        "mesh-dir/control-key facilities out of mesh.yaml; with --control-loop container it "
        "moves to control@NAME, NAME offering this DIR, --key and its Engine (NAME must be a "
        "node whose agent runs here; then `mesh publish DIR --key KEY` once). The fleet goes "
        "on: no node enrols again. Refused, with nothing written, for a wrong passphrase, a "
        "truncated or altered archive, a file that is not one, a DIR with something in it, a "
        "--node that is new without --address, or one whose public-key is not the control "
        "node's key.")
    parser.add_argument("archive", metavar="FILE", help="the archive")
    parser.add_argument("--dir", required=True, metavar="DIR", dest="directory",
                        help="the mesh directory to create")
    parser.add_argument("--key", metavar="FILE", default=os.environ.get(ENV["key"]),
                        help="where to write the control node's key (0600; an existing file "
                        f"must be the same key) (${ENV['key']})")
    parser.add_argument("--node", metavar="NAME",
                        help="this machine's node: it becomes the control node (without it, "
                        "mesh.yaml is restored as it was, naming the old control node)")
    parser.add_argument("--address", metavar="IP",
                        help="this machine's address: needed when NAME is not a node of the "
                        "mesh yet, else written as NAME's new address")
    parser.add_argument("--control-loop", choices=[loop.value for loop in ControlLoop],
                        default=ControlLoop.SERVICE.value,
                        help="where the control loop runs: a host service here (default) or "
                        "control@NAME's container on NAME's Engine")
    parser.add_argument("--no-service", action="store_true",
                        help="install no service: print the command that runs the control "
                        "loop instead")
    parser.add_argument("--run-dir", default=str(RUN_DIR), metavar="DIR",
                        help=f"without systemd: the supervisor's pid files and log (default "
                        f"{RUN_DIR})")
    parser.add_argument("--unit-dir", default=str(UNIT_DIR), metavar="DIR",
                        help=f"with systemd: where the unit is written (default {UNIT_DIR})")
    _passphrase.add_options(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.node is None and args.address is not None:
        print("mesh control restore: --address names this machine's address as node --node: "
              "give --node NAME too", file=sys.stderr)
        return 2
    try:
        passphrase = _passphrase.read(args, confirm=False)
    except _passphrase.PassphraseMissing as exc:
        print(f"mesh control restore: {exc}", file=sys.stderr)
        return 2
    directory = Path(os.path.abspath(args.directory))
    key = Path(os.path.abspath(args.key)) if args.key else None
    loop = ControlLoop(args.control_loop)
    edit = None
    if args.node is not None:
        if key is None:
            print("mesh control restore: --node makes this machine the control node, which "
                  f"needs the control node's key: give --key FILE (or ${ENV['key']})",
                  file=sys.stderr)
            return 2
        edit = restore_edit(args.node, args.address, directory, key, loop)
    done = restore(args.archive, directory, passphrase, key, edit)
    print(f"mesh {done.mesh}: {done.files} files restored into {done.directory}"
          + (f", the control node's key into {done.key}" if done.key else
             ", no control node's key in the archive"), file=sys.stderr)
    for line in done.changes:
        print(f"mesh.yaml: {line}", file=sys.stderr)
    if done.catalogue_missing:
        print(f"the catalogue {done.catalogue_outside} (relative to {done.directory}) was not "
              f"in the archive and is not there: put it there before `mesh control`",
              file=sys.stderr)
    key_shown = str(key) if key else "FILE"
    command = ("control", str(directory), "--key", key_shown)
    if args.node is None:
        print(f"mesh.yaml is as it was (its control node and control instance are the old "
              f"machine's): give --node NAME [--address IP] to make this machine the control "
              f"node; next: `mesh control {directory} --key {key_shown}` on this machine",
              file=sys.stderr)
        return 0
    if loop is ControlLoop.CONTAINER:
        print(f"next: `mesh publish {directory} --key {key_shown}` once: {args.node}'s agent "
              f"starts control@{args.node}, the control loop from then on (`mesh build "
              f"{directory} --local` first when the mesh's registry does not hold the control "
              f"image)", file=sys.stderr)
        return 0
    if args.no_service:
        print(f"next: run `mesh {shlex.join(command)}` as a service on this machine (exactly "
              f"one control loop)", file=sys.stderr)
        return 0
    service = Service("control", f"mesh control loop of mesh {done.mesh}", command, MESH,
                      working_directory=str(directory), environment=passed_environment())
    try:
        install(service, say=lambda line: print(f"control loop: {line}", file=sys.stderr),
                run_dir=Path(args.run_dir), unit_dir=Path(args.unit_dir))
    except (ServiceError, OSError) as exc:
        print(f"mesh control restore: {done.directory} is restored, but the control loop's "
              f"service is not installed: {exc}; run `mesh {shlex.join(command)}` as a service "
              f"on this machine", file=sys.stderr)
        return 1
    print(f"{args.node} is the control node: its control loop runs here and publishes to the "
          f"fleet; no node enrols again", file=sys.stderr)
    return 0
