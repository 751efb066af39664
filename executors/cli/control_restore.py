"""`mesh control restore FILE --dir DIR`: a control node again, from its archive.

Unpacks what `mesh control backup` wrote into DIR (new or empty) and the control node's key
into `--key`, after checking the passphrase and the archive whole: nothing is written when
anything is wrong (executors/control/backup.py).
"""

from __future__ import annotations

import argparse
import os
import sys

from executors.cli import _passphrase
from executors.cli._fleet_options import ENV
from executors.cli._verb import Subparsers
from executors.control.backup import restore


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "control restore",
        help="unpack a control node's archive into a new mesh directory",
        description="Unpack an archive `mesh control backup` wrote into DIR, which must not "
        "exist or be empty, and the control node's key into --key: after that this machine "
        "runs the control plane (`mesh control DIR --key FILE`) and the fleet goes on, no node "
        "enrolled again. Refused, with nothing written, for a wrong passphrase, a truncated or "
        "altered archive, a file that is not one, or a DIR with something in it.")
    parser.add_argument("archive", metavar="FILE", help="the archive")
    parser.add_argument("--dir", required=True, metavar="DIR", dest="directory",
                        help="the mesh directory to create")
    parser.add_argument("--key", metavar="FILE", default=os.environ.get(ENV["key"]),
                        help="where to write the control node's key (0600; an existing file "
                        f"must be the same key) (${ENV['key']})")
    _passphrase.add_options(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        passphrase = _passphrase.read(args, confirm=False)
    except _passphrase.PassphraseMissing as exc:
        print(f"mesh control restore: {exc}", file=sys.stderr)
        return 2
    done = restore(args.archive, args.directory, passphrase, args.key or None)
    print(f"mesh {done.mesh}: {done.files} files restored into {done.directory}"
          + (f", the control node's key into {done.key}" if done.key else
             ", no control node's key in the archive"), file=sys.stderr)
    if done.catalogue_missing:
        print(f"the catalogue {done.catalogue_outside} (relative to {done.directory}) was not "
              f"in the archive and is not there: put it there before `mesh control`",
              file=sys.stderr)
    print(f"next: `mesh control {done.directory} --key FILE` on this machine", file=sys.stderr)
    return 0
