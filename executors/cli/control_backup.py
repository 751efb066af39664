"""`mesh control backup DIR --out FILE`: the control node in one encrypted archive.

The mesh directory (mesh.yaml, catalogue, ledger with its escrow, the CA and delivery keys
and certificates, the control state), and the control node's own key, encrypted with a
passphrase (argon2id + SecretBox: executors/control/backup.py). The passphrase comes from
`--passphrase-file`, `$MESH_BACKUP_PASSPHRASE` or a prompt (cli/_passphrase.py).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Optional

from executors.cli import _passphrase
from executors.cli._fleet_options import ENV
from executors.cli._verb import Subparsers
from executors.control.backup import backup


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "control backup",
        help="write the control node (mesh directory, ledger, CA, control state, its key) "
        "into one passphrase-encrypted archive",
        description="Write one archive of the control node: the mesh directory DIR (mesh.yaml, "
        "the catalogue inside it, the ledger with its escrow, the mesh CA and the delivery key, "
        "the control state DIR/.control) and the control node's key (--key), encrypted with a "
        "passphrase (argon2id, then XSalsa20-Poly1305). Taken under the ledger lock; written "
        "whole or not at all, mode 0600. Make one after every enrolment, `mesh plan --issue` "
        "and rotation (the ledger changed), and keep it off the control node.")
    parser.add_argument("directory", metavar="DIR", help="the mesh directory holding mesh.yaml")
    parser.add_argument("--out", required=True, metavar="FILE",
                        help="the archive to write (outside DIR)")
    parser.add_argument("--key", metavar="FILE", default=os.environ.get(ENV["key"]),
                        help="the control node's private key, which opens the escrow "
                        f"(${ENV['key']}); required unless --without-key")
    parser.add_argument("--without-key", action="store_true",
                        help="leave the control node's key out (keep it safe yourself: "
                        "without it the escrow cannot be opened)")
    parser.add_argument("--state-dir", metavar="DIR",
                        help="the control state when kept outside DIR (default: DIR/.control)")
    _passphrase.add_options(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    key: Optional[str] = None if args.without_key else (args.key or None)
    if key is None and not args.without_key:
        print("mesh control backup: the control node's key is part of what it needs to go "
              "on: name it with --key FILE (or MESH_CONTROL_KEY), or say --without-key",
              file=sys.stderr)
        return 2
    try:
        passphrase = _passphrase.read(args, confirm=True)
    except _passphrase.PassphraseMissing as exc:
        print(f"mesh control backup: {exc}", file=sys.stderr)
        return 2
    made = backup(args.directory, args.out, passphrase, key, args.state_dir)
    print(f"mesh {made.mesh}: {made.files} files written to {args.out} (0600), "
          f"{'with' if made.key else 'without'} the control node's key", file=sys.stderr)
    if made.catalogue_outside:
        print(f"the catalogue ({made.catalogue_outside}) lies outside {args.directory} and is "
              f"not in the archive: keep it where it is kept (e.g. its repository)",
              file=sys.stderr)
    return 0
