"""Reading a mesh directory from disk and writing files back atomically.

Invariants:
- The path rules of a mesh directory (mesh.yaml, `catalogue:`, `ledger:`, module directories,
  provisions.yaml) and all parsing and validation are the resolver's (resolver.load_mesh_dir);
  this module is the file-system reader it reads through (FileReader) and a thin
  load_mesh_dir(DIR) over it.
- The reader reads at most resolver.MAX_DOCUMENT_BYTES + 1 bytes of a file (so an oversized
  file is refused at its position, never read whole), and only regular files (a FIFO or a
  device is never opened). What is wrong with a path (missing, a directory where a file
  belongs, permission denied, a name too long) is a resolver.ReadFault; the library locates
  it where the path was named.
- Paths in faults are relative to the current directory when below it, so an operator can
  paste them into an editor.
- Files are written whole or not at all: a temp file in the same directory, fsync, rename,
  fsync of the directory. A ledger on disk is never replaced by one that does not load.
- The ledger is written only under its lock (control/ledger_lock.py): every writer goes
  through the one transaction (control/ledger_transaction.transact: `mesh_lock(DIR)` around
  a whole load → compute → write); `write_ledger` takes the lock itself for the one write.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import Callable, Iterator, Optional, Union

import resolver
from resolver import documents
from executors.common.atomic import write_atomic
from executors.control import ledger_lock
from resolver import (
    MAX_DOCUMENT_BYTES,
    Inputs,
    Ledger,
    MeshError,
    ReadFault,
)
from resolver.documents import (
    MESH_FILE,
    dump_ledger,
    load_ledger,
)

#: A path as callers hand it: a str or a pathlib.Path.
PathLike = Union[str, os.PathLike[str]]

#: What a change of a mesh's inputs changes: (path, inode, size, mtime) per file, None when
#: the file cannot be read.
Fingerprint = tuple[tuple[str, Optional[int], Optional[int], Optional[int]], ...]


def display_path(path: PathLike) -> str:
    """The path as an operator would type it: relative to the current directory if below it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError, RuntimeError):  # not below; a NUL; a deleted cwd; a loop
        return str(path)


def _stat(path: str) -> os.stat_result:
    try:
        return os.stat(path)
    except FileNotFoundError:
        raise ReadFault("is missing", missing=True) from None
    except OSError as exc:
        raise ReadFault(f"cannot be read: {exc.strerror or exc}") from None
    except ValueError:  # an embedded NUL: no file system names it
        raise ReadFault("cannot be named: the path holds a NUL character") from None


class FileReader:
    """The file system as resolver.load_mesh_dir reads a mesh directory (a MeshReader)."""

    def read(self, path: str) -> bytes:
        """A regular file's first MAX_DOCUMENT_BYTES + 1 bytes (enough for the resolver to
        refuse an oversized one at its position)."""
        info = _stat(path)
        if stat.S_ISDIR(info.st_mode):
            raise ReadFault("is a directory")
        if not stat.S_ISREG(info.st_mode):
            raise ReadFault("is not a regular file")
        try:
            with open(path, "rb") as handle:
                return handle.read(MAX_DOCUMENT_BYTES + 1)
        except OSError as exc:
            raise ReadFault(f"cannot be read: {exc.strerror or exc}") from None

    def subdirectories(self, path: str) -> list[str]:
        """The names of the directories in `path` (hidden ones left out)."""
        info = _stat(path)
        if not stat.S_ISDIR(info.st_mode):
            raise ReadFault("is not a directory")
        try:
            with os.scandir(path) as entries:
                names = []
                for entry in entries:
                    if entry.name.startswith("."):
                        continue
                    try:
                        if entry.is_dir():
                            names.append(entry.name)
                    except OSError:
                        names.append(entry.name)  # reading its manifest will say what is wrong
        except OSError as exc:
            raise ReadFault(f"cannot be listed: {exc.strerror or exc}") from None
        return names

    def display(self, path: str) -> str:
        return display_path(path)


def load_mesh_dir(path: PathLike) -> Inputs:
    """Load mesh.yaml, the catalogue it names and the ledger from disk; one InputError for all
    faults (resolver.load_mesh_dir through FileReader)."""
    return resolver.load_mesh_dir(str(path), FileReader())


def mesh_paths(path: PathLike) -> tuple[Path, Path]:
    """(catalogue directory, ledger file) of DIR as mesh.yaml names them (else the defaults),
    read without loading anything else (resolver.documents.mesh_paths: cheap on every call, the
    ledger lock and the control loop ask often)."""
    mesh_dir = str(path)
    try:
        text: Optional[str] = (Path(mesh_dir) / MESH_FILE).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError, ValueError):
        text = None
    paths = documents.mesh_paths(mesh_dir, text)
    return Path(paths.catalogue), Path(paths.ledger)


def ledger_path_of(path: PathLike) -> Path:
    """Where DIR's ledger lives (mesh.yaml `ledger:`, else ledger.yaml)."""
    return mesh_paths(path)[1]


@contextlib.contextmanager
def mesh_lock(path: PathLike,
              say: Optional[Callable[[str], None]] = None) -> Iterator[None]:
    """Hold DIR's ledger lock around a whole load → compute → write (re-entrant)."""
    with ledger_lock.locked(ledger_path_of(path), say=say):
        yield


def write_ledger(path: PathLike, ledger: Ledger) -> None:
    """Write the ledger under its lock, after proving the text reads back as the same ledger."""
    text = dump_ledger(ledger)
    reread, _ = load_ledger(text, str(path))
    if reread != ledger:  # never replace a good ledger with one that reads differently
        raise MeshError(f"{path}: the ledger would not read back unchanged; not written")
    with ledger_lock.locked(path):
        write_atomic(path, text, mode=0o600)


def inputs_fingerprint(mesh_dir: PathLike) -> Fingerprint:
    """What a change of the mesh's inputs changes: each file's path, inode, size and mtime (a
    write replaces the file: a new inode)."""
    catalogue, ledger = mesh_paths(mesh_dir)
    files = [Path(mesh_dir) / MESH_FILE, ledger]
    for root, _, names in os.walk(catalogue):
        files.extend(Path(root) / name for name in names if name.endswith(".yaml"))
    entries: list[tuple[str, Optional[int], Optional[int], Optional[int]]] = []
    for path in files:
        try:
            facts = path.stat()
            entries.append((str(path), facts.st_ino, facts.st_size, facts.st_mtime_ns))
        except OSError:
            entries.append((str(path), None, None, None))
    return tuple(sorted(entries))
