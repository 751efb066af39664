"""Where `mesh control backup` and `mesh control restore` take the passphrase from: a file
(`--passphrase-file`), the environment (`MESH_BACKUP_PASSPHRASE`), or a prompt on the
terminal; never the command line, where other users could read it in the process list.

Invariants:
- Standard library and the resolver's MeshError only: nothing of an extra.
- A file's passphrase is its first line, without its line ending; an empty one is refused.
- With none of them and no terminal, it is a usage error that names all three.
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from pathlib import Path

from resolver import MeshError

ENV = "MESH_BACKUP_PASSPHRASE"


class PassphraseMissing(MeshError):
    """No passphrase could be read; the message says how to give one."""


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--passphrase-file", metavar="FILE",
                        help=f"a file whose first line is the passphrase (else ${ENV}, else "
                        "a prompt on the terminal; never on the command line)")


def read(args: argparse.Namespace, confirm: bool) -> bytes:
    """The passphrase as bytes (UTF-8)."""
    named: str | None = args.passphrase_file
    if named:
        try:
            text = Path(named).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
            raise PassphraseMissing(f"{named}: cannot read the passphrase file: "
                                    f"{why or exc}") from None
        lines = text.splitlines()
        value = lines[0] if lines else ""
        if not value:
            raise PassphraseMissing(f"{named}: the passphrase file is empty; write the "
                                    f"passphrase on its first line")
        return value.encode("utf-8")
    if os.environ.get(ENV):
        return os.environ[ENV].encode("utf-8")
    if sys.stdin.isatty():
        value = getpass.getpass("passphrase: ")
        if confirm and getpass.getpass("passphrase again: ") != value:
            raise PassphraseMissing("the two passphrases differ; nothing was written")
        return value.encode("utf-8")
    raise PassphraseMissing(f"no passphrase: give --passphrase-file FILE or ${ENV}, or run "
                            f"on a terminal to be asked")

