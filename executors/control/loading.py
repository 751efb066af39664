"""Reading a mesh directory from disk and writing files back atomically.

Invariants:
- All parsing and validation is the resolver's (resolver.load_inputs, handed each file's
  bytes); this module only finds and reads files, at most resolver.MAX_DOCUMENT_BYTES + 1
  bytes of each (so an oversized file is refused at its position, never read whole), and
  only regular files (a FIFO or a device is never opened).
- Faults of every document are gathered before one InputError is raised; a fault that only
  follows from another is not reported: when mesh.yaml does not parse, or its `catalogue:` /
  `ledger:` has the wrong type, nothing it would have named is looked for.
- A file-system fault (missing, a directory where a file belongs, permission denied, a name
  too long) is located where its path was named: at mesh.yaml's `catalogue:` / `ledger:`, or
  at the top of mesh.yaml when it leaves them to their defaults. Only the mesh directory and
  its mesh.yaml, which the command line names, are faults by path alone.
- Paths in faults are relative to the current directory when below it, so an operator can
  paste them into an editor.
- Files are written whole or not at all: a temp file in the same directory, fsync, rename,
  fsync of the directory. A ledger on disk is never replaced by one that does not load.
- The ledger is written only under its lock (control/ledger_lock.py): `mesh_lock(DIR)` around a
  whole load → compute → write, or `write_ledger` takes it for the one write.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from pathlib import Path
from typing import Iterator, Optional

import attrs

from executors.common.atomic import write_atomic  # noqa: F401  (re-exported: callers import it here)
from executors.control import ledger_lock
from resolver import (
    MAX_DOCUMENT_BYTES,
    Catalogue,
    DocumentPositions,
    Fault,
    InputError,
    Ledger,
    Mesh,
    MeshError,
    Sources,
    dump_ledger,
    load_inputs,
    load_ledger,
    parse_document,
)

MESH_FILE = "mesh.yaml"
MODULE_FILE = "module.yaml"
PROVISIONS_FILE = "provisions.yaml"
DEFAULT_CATALOGUE = "catalogue"
DEFAULT_LEDGER = "ledger.yaml"


@attrs.frozen
class MeshInputs:
    catalogue: Catalogue
    mesh: Mesh
    ledger: Ledger
    sources: Sources
    mesh_dir: Path
    ledger_path: Path


def display_path(path) -> str:
    """The path as an operator would type it: relative to the current directory if below it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError, RuntimeError):  # not below; a NUL; a deleted cwd; a loop
        return str(path)


def _shown(path) -> str:
    """A path for a message: whole unless absurdly long."""
    text = display_path(path)
    return text if len(text) <= 200 else f"{text[:120]}…{text[-60:]} ({len(text):,} characters)"


class _FileFault(MeshError):
    """What is wrong with a path (`is missing`, `is a directory`, ...); the caller says where
    the path was named and what was expected there."""

    def __init__(self, problem: str):
        super().__init__(problem)
        self.problem = problem


def _stat(path: Path, *, missing_ok: bool = False) -> Optional[os.stat_result]:
    try:
        return os.stat(path)
    except FileNotFoundError:
        if missing_ok:
            return None
        raise _FileFault("is missing") from None
    except OSError as exc:
        raise _FileFault(f"cannot be read: {exc.strerror or exc}") from None
    except ValueError:  # an embedded NUL: no file system names it
        raise _FileFault("cannot be named: the path holds a NUL character") from None


def _read_bytes(path: Path) -> bytes:
    """A regular file's first MAX_DOCUMENT_BYTES + 1 bytes (enough for the resolver to refuse
    an oversized one at its position)."""
    info = _stat(path)
    if stat.S_ISDIR(info.st_mode):
        raise _FileFault("is a directory")
    if not stat.S_ISREG(info.st_mode):
        raise _FileFault("is not a regular file")
    try:
        with open(path, "rb") as handle:
            return handle.read(MAX_DOCUMENT_BYTES + 1)
    except OSError as exc:
        raise _FileFault(f"cannot be read: {exc.strerror or exc}") from None


def _subdirectories(path: Path) -> list[Path]:
    info = _stat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise _FileFault("is not a directory")
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
        raise _FileFault(f"cannot be listed: {exc.strerror or exc}") from None
    return [path / name for name in sorted(names)]


@attrs.frozen
class _Named:
    """Where mesh.yaml names a path: the key's value, or the top of mesh.yaml for a default."""

    path: Path
    file: str
    line: int
    col: int
    key: str
    given: bool  # False: the key is absent and the default applies

    def fault(self, subject: str, problem: str, expected: str) -> Fault:
        source = (f"named by `{self.key}:`" if self.given
                  else f"the default (no `{self.key}:` key)")
        return Fault(self.file, self.line, self.col, f"{subject} {problem}",
                     f"{expected}, at the path {source}")


def _named(data: dict, where: DocumentPositions, mesh_dir: Path, key: str,
           default: str) -> Optional[_Named]:
    """The path mesh.yaml gives under `key`, located; None when its value has the wrong type
    (the loader reports that, and nothing is looked for under it)."""
    if key not in data:
        line, col = where.position(())
        return _Named(mesh_dir / default, where.file, line, col, key, False)
    value = data[key]
    if not isinstance(value, str):
        return None
    line, col = where.position((key,))
    return _Named(mesh_dir / value, where.file, line, col, key, True)


def _read_catalogue(named: _Named, documents: dict, faults: list[Fault]) -> None:
    try:
        module_dirs = _subdirectories(named.path)
    except _FileFault as problem:
        faults.append(named.fault(f"the catalogue directory {_shown(named.path)}",
                                  problem.problem, "a directory of modules"))
        return
    files = [("provisions", named.path / PROVISIONS_FILE, "the provision definitions")]
    files += [(f"module:{d.name}", d / MODULE_FILE, f"module {d.name}'s manifest")
              for d in module_dirs]
    for key, path, what in files:
        try:
            documents[key] = (_read_bytes(path), display_path(path))
        except _FileFault as problem:
            faults.append(named.fault(f"{what} {_shown(path)}", problem.problem,
                                      f"a readable file {path.name} in the catalogue"))


def _read_ledger(named: _Named, documents: dict, faults: list[Fault]) -> None:
    try:
        if _stat(named.path, missing_ok=True) is None:
            return  # a missing ledger is the empty ledger: nothing issued yet
        documents["ledger"] = (_read_bytes(named.path), display_path(named.path))
    except _FileFault as problem:
        faults.append(named.fault(f"the ledger {_shown(named.path)}", problem.problem,
                                  "a readable ledger file, or no file at all"))


def load_mesh_dir(path) -> MeshInputs:
    """Load mesh.yaml, the catalogue it names and the ledger; one InputError for all faults."""
    mesh_dir = Path(path)
    try:
        if not stat.S_ISDIR(_stat(mesh_dir).st_mode):
            raise _FileFault("is not a directory")
        mesh_path = mesh_dir / MESH_FILE
        mesh_file = display_path(mesh_path)
        try:
            mesh_bytes = _read_bytes(mesh_path)
        except _FileFault as problem:
            raise InputError([Fault(mesh_file, 0, 0, f"the mesh description {problem.problem}",
                                    f"a readable file at {mesh_path}")]) from None
    except _FileFault as problem:
        raise InputError([Fault(display_path(mesh_dir), 0, 0, problem.problem,
                                "a mesh directory holding mesh.yaml")]) from None
    documents: dict[str, tuple] = {"mesh": (mesh_bytes, mesh_file)}
    faults: list[Fault] = []
    catalogue = ledger = None
    try:
        parsed = parse_document(mesh_bytes, mesh_file)
    except InputError:
        parsed = None  # load_inputs reports it, once; nothing it names is looked for
    if parsed is not None:
        documents["mesh"] = (parsed, mesh_file)  # parsed once, not again by load_inputs
        if isinstance(parsed.data, dict):
            catalogue = _named(parsed.data, parsed.where, mesh_dir, "catalogue",
                               DEFAULT_CATALOGUE)
            ledger = _named(parsed.data, parsed.where, mesh_dir, "ledger", DEFAULT_LEDGER)
    if catalogue is not None:
        _read_catalogue(catalogue, documents, faults)
    if ledger is not None:
        _read_ledger(ledger, documents, faults)
    try:
        inputs = load_inputs(documents)
    except InputError as error:
        raise InputError(faults + list(error.faults)) from None
    if faults:
        raise InputError(faults)
    return MeshInputs(catalogue=inputs.catalogue, mesh=inputs.mesh, ledger=inputs.ledger,
                      sources=inputs.sources, mesh_dir=mesh_dir,
                      ledger_path=ledger.path if ledger else mesh_dir / DEFAULT_LEDGER)


def _declared_paths(mesh_text: str, mesh_file: str) -> tuple[str, str]:
    """Catalogue and ledger paths as a parsed mesh.yaml names them (the defaults when it does
    not parse or gives them the wrong type: the loader reports that)."""
    try:
        data = parse_document(mesh_text.encode("utf-8"), mesh_file).data
    except InputError:
        data = None
    if not isinstance(data, dict):
        return DEFAULT_CATALOGUE, DEFAULT_LEDGER
    catalogue, ledger = data.get("catalogue"), data.get("ledger")
    return (catalogue if isinstance(catalogue, str) else DEFAULT_CATALOGUE,
            ledger if isinstance(ledger, str) else DEFAULT_LEDGER)


_TOP_LEVEL_PATH = re.compile(
    r"^(catalogue|ledger)[ \t]*:[ \t]*(?:\"([^\"\\]*)\"|'([^']*)'|([^\s#'\"][^\s#]*))"
    r"[ \t]*(?:#.*)?$", re.MULTILINE)


def mesh_paths(path) -> tuple[Path, Path]:
    """(catalogue directory, ledger file) of DIR as mesh.yaml names them (else the defaults),
    read without loading anything else: the top-level `catalogue:` and `ledger:` lines of a
    block-style mesh.yaml are read as they are written (cheap on every call: the ledger lock
    and the control loop ask often); anything else is parsed as YAML."""
    mesh_dir = Path(path)
    try:
        text = (mesh_dir / MESH_FILE).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return mesh_dir / DEFAULT_CATALOGUE, mesh_dir / DEFAULT_LEDGER
    found = {}
    for match in _TOP_LEVEL_PATH.finditer(text):
        found.setdefault(match.group(1), next(g for g in match.groups()[1:] if g is not None))
    if text.lstrip().startswith(("{", "---", "%")) or "\t" in text:
        catalogue, ledger = _declared_paths(text, str(mesh_dir / MESH_FILE))
    else:
        catalogue = found.get("catalogue", DEFAULT_CATALOGUE)
        ledger = found.get("ledger", DEFAULT_LEDGER)
    return mesh_dir / catalogue, mesh_dir / ledger


def ledger_path_of(path) -> Path:
    """Where DIR's ledger lives (mesh.yaml `ledger:`, else ledger.yaml)."""
    return mesh_paths(path)[1]


@contextlib.contextmanager
def mesh_lock(path, say=None) -> Iterator[None]:
    """Hold DIR's ledger lock around a whole load → compute → write (re-entrant)."""
    with ledger_lock.locked(ledger_path_of(path), say=say):
        yield


def write_ledger(path, ledger: Ledger) -> None:
    """Write the ledger under its lock, after proving the text reads back as the same ledger."""
    text = dump_ledger(ledger)
    reread, _ = load_ledger(text, str(path))
    if reread != ledger:  # never replace a good ledger with one that reads differently
        raise MeshError(f"{path}: the ledger would not read back unchanged; not written")
    with ledger_lock.locked(path):
        write_atomic(path, text, mode=0o600)


def inputs_fingerprint(mesh_dir) -> tuple:
    """What a change of the mesh's inputs changes: each file's path, inode, size and mtime (a
    write replaces the file: a new inode)."""
    catalogue, ledger = mesh_paths(mesh_dir)
    files = [Path(mesh_dir) / MESH_FILE, ledger]
    for root, _, names in os.walk(catalogue):
        files.extend(Path(root) / name for name in names if name.endswith(".yaml"))
    entries = []
    for path in files:
        try:
            facts = path.stat()
            entries.append((str(path), facts.st_ino, facts.st_size, facts.st_mtime_ns))
        except OSError:
            entries.append((str(path), None, None, None))
    return tuple(sorted(entries))
