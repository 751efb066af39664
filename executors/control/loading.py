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
- A long-lived loader (MemoLoader: the control loop's) parses a document again only when its
  bytes changed (SHA-256 of what was read), and the ledger it wrote itself (write_ledger with
  the memo) not even then; when every document is the one it parsed last time, it returns the
  Inputs it made last time (frozen); what it returns equals load_mesh_dir(DIR) for the same files (a
  document's loader may normalize its parsed data in place, idempotently: a ledger's
  `declared` JSON texts, mesh.yaml's `backups: target:`; reading it again gives the same).
  Anything off the plain path (a file missing or unreadable, a document that does
  not parse or load, `catalogue:`/`ledger:` not a string) is loaded again whole by
  load_mesh_dir, so every fault reads exactly as it does there. The one-shot verbs (`mesh
  plan`, `mesh publish`) keep nothing between processes.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Iterator, Optional, Union

import attrs

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
    Parsed,
    dump_ledger,
    load_ledger,
    parse_document,
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


class _OffThePlainPath(MeshError):
    """The memo's plain path does not apply: load the directory whole (load_mesh_dir)."""


@attrs.define
class MemoLoader:
    """load_mesh_dir for a process that loads the same mesh directory again and again (the
    control loop): each document parsed again only when its bytes changed. Equal to
    load_mesh_dir(DIR) for the same files (tests/test_loading_memo.py)."""

    reader: FileReader = attrs.field(factory=FileReader)
    # path → (SHA-256 of its bytes, the document parsed from them)
    _parsed: dict[str, tuple[bytes, Parsed]] = attrs.field(init=False, factory=dict)
    parses: int = attrs.field(init=False, default=0)  # documents parsed (for tests, benches)
    # the last Inputs loaded: its directory and the parsed documents it was made of
    _last: Optional[tuple[str, tuple[tuple[str, Parsed], ...], Inputs]] = attrs.field(
        init=False, default=None)

    def load(self, path: PathLike) -> Inputs:
        try:
            return self._plain(str(path))
        except _OffThePlainPath:
            return load_mesh_dir(path)

    def remember(self, path: str, data: bytes, parsed: Parsed) -> None:
        """`data`, just written at `path` by this process, as parsed (write_ledger)."""
        self._parsed[path] = (hashlib.sha256(data).digest(), parsed)

    def _document(self, path: str, data: Optional[bytes] = None) -> Parsed:
        if data is None:
            try:
                data = self.reader.read(path)
            except ReadFault:
                raise _OffThePlainPath() from None
        digest = hashlib.sha256(data).digest()
        kept = self._parsed.get(path)
        if kept is not None and kept[0] == digest:
            return kept[1]
        try:
            parsed = parse_document(data, self.reader.display(path))
        except MeshError:
            self._parsed.pop(path, None)
            raise _OffThePlainPath() from None
        self.parses += 1
        self._parsed[path] = (digest, parsed)
        return parsed

    def _plain(self, mesh_dir: str) -> Inputs:
        if mesh_dir.startswith("//"):  # pathlib keeps a leading `//`; the resolver does not
            raise _OffThePlainPath()
        mesh_dir = str(PurePosixPath(mesh_dir))  # as the resolver writes it (normal)
        mesh = self._document(str(PurePosixPath(mesh_dir) / MESH_FILE))
        if not isinstance(mesh.data, dict):
            raise _OffThePlainPath()
        catalogue = _named_path(mesh_dir, mesh.data, "catalogue", "catalogue")
        ledger = _named_path(mesh_dir, mesh.data, "ledger", "ledger.yaml")
        try:
            modules = sorted(name for name in self.reader.subdirectories(catalogue)
                             if not name.startswith("."))
        except ReadFault:
            raise _OffThePlainPath() from None
        docs: dict[str, tuple[Any, str]] = {"mesh": (mesh, mesh.where.file)}
        named = [("provisions", str(PurePosixPath(catalogue) / "provisions.yaml"))]
        named += [(f"module:{name}", str(PurePosixPath(catalogue) / name / "module.yaml"))
                  for name in modules]
        for key, file in named:
            parsed = self._document(file)
            docs[key] = (parsed, parsed.where.file)
        try:
            ledger_bytes = self.reader.read(ledger)
        except ReadFault as problem:
            if not problem.missing:
                raise _OffThePlainPath() from None
        else:  # missing: the empty ledger, as load_mesh_dir has it
            parsed = self._document(ledger, ledger_bytes)
            docs["ledger"] = (parsed, parsed.where.file)
        used = tuple((key, parsed) for key, (parsed, _) in sorted(docs.items()))
        live = set(file for _, file in named) | {ledger, str(PurePosixPath(mesh_dir) / MESH_FILE)}
        for gone in set(self._parsed) - live:  # a module removed: its parse is not kept
            del self._parsed[gone]
        last = self._last
        if last is not None and last[0] == mesh_dir and len(last[1]) == len(used) and all(
                a[0] == b[0] and a[1] is b[1] for a, b in zip(last[1], used)):
            return last[2]  # made of the very same parsed documents: the same (frozen) Inputs
        try:
            inputs = resolver.load_inputs(docs)
        except MeshError:
            raise _OffThePlainPath() from None
        loaded = attrs.evolve(inputs, mesh_dir=mesh_dir, ledger_path=ledger)
        self._last = (mesh_dir, used, loaded)
        return loaded


def _named_path(mesh_dir: str, data: dict[Any, Any], key: str, default: str) -> str:
    """The path mesh.yaml names under `key` (else `default`), joined as the resolver joins it."""
    value = data.get(key, default)
    if not isinstance(value, str):
        raise _OffThePlainPath()
    return str(PurePosixPath(mesh_dir) / value)


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


def write_ledger(path: PathLike, ledger: Ledger, memo: Optional["MemoLoader"] = None) -> None:
    """Write the ledger under its lock, after proving the text reads back as the same ledger.
    `memo`: a MemoLoader that keeps the text as parsed for that proof, so its next load does
    not parse the file this wrote again."""
    text = dump_ledger(ledger)
    parsed = parse_document(text, (memo.reader if memo else FileReader()).display(str(path)))
    reread, _ = load_ledger(parsed, str(path))
    if reread != ledger:  # never replace a good ledger with one that reads differently
        raise MeshError(f"{path}: the ledger would not read back unchanged; not written")
    with ledger_lock.locked(path):
        write_atomic(path, text, mode=0o600)
    if memo is not None:
        memo.remember(str(path), text.encode("utf-8"), parsed)


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
