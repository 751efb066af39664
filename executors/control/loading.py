"""Reading a mesh directory from disk and writing files back atomically.

Invariants:
- All parsing and validation is the resolver's (resolver.load_inputs); this module only reads
  files, names them, and reports missing ones as faults with their path.
- Faults of every document are gathered before one InputError is raised.
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
from pathlib import Path
from typing import Iterator, Optional

import attrs

from executors.common.atomic import write_atomic  # noqa: F401  (re-exported: callers import it here)
from executors.control import ledger_lock
from resolver import (
    Catalogue,
    Fault,
    InputError,
    Ledger,
    Mesh,
    MeshError,
    Sources,
    dump_ledger,
    load_inputs,
    load_ledger,
    parse_yaml,
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


def display_path(path: Path) -> str:
    """The path as an operator would type it: relative to the current directory if below it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _read(path: Path, faults: list[Fault], what: str) -> Optional[str]:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        faults.append(Fault(display_path(path), 0, 0, f"{what} is missing", f"a file at {path}"))
    except UnicodeDecodeError as exc:
        faults.append(Fault(display_path(path), 0, 0, f"{what} is not UTF-8 text ({exc.reason})",
                            "a UTF-8 YAML document"))
    except OSError as exc:
        faults.append(Fault(display_path(path), 0, 0, f"{what} cannot be read: {exc.strerror}",
                            "a readable file"))
    return None


def _declared_paths(mesh_text: str, mesh_file: str) -> tuple[str, str]:
    """Catalogue and ledger paths named in mesh.yaml, read even when mesh.yaml has other
    faults, so those documents are checked in the same run."""
    try:
        data, _ = parse_yaml(mesh_text, mesh_file)
    except InputError:
        data = None
    if not isinstance(data, dict):
        return DEFAULT_CATALOGUE, DEFAULT_LEDGER
    catalogue, ledger = data.get("catalogue"), data.get("ledger")
    return (catalogue if isinstance(catalogue, str) else DEFAULT_CATALOGUE,
            ledger if isinstance(ledger, str) else DEFAULT_LEDGER)


def load_mesh_dir(path) -> MeshInputs:
    """Load mesh.yaml, the catalogue it names and the ledger; one InputError for all faults."""
    mesh_dir = Path(path)
    faults: list[Fault] = []
    documents: dict[str, tuple[str, str]] = {}
    if not mesh_dir.is_dir():
        raise InputError([Fault(display_path(mesh_dir), 0, 0, "is not a directory",
                                "a mesh directory holding mesh.yaml")])
    mesh_path = mesh_dir / MESH_FILE
    mesh_text = _read(mesh_path, faults, "the mesh description")
    if mesh_text is None:
        raise InputError(faults)
    documents["mesh"] = (mesh_text, display_path(mesh_path))
    catalogue_rel, ledger_rel = _declared_paths(mesh_text, display_path(mesh_path))

    catalogue_dir = mesh_dir / catalogue_rel
    if not catalogue_dir.is_dir():
        faults.append(Fault(display_path(catalogue_dir), 0, 0, "the catalogue directory is missing",
                            f"a directory of modules (mesh.yaml `catalogue: {catalogue_rel}`)"))
    else:
        provisions_path = catalogue_dir / PROVISIONS_FILE
        text = _read(provisions_path, faults, "the provision definitions")
        if text is not None:
            documents["provisions"] = (text, display_path(provisions_path))
        for module_dir in sorted(p for p in catalogue_dir.iterdir() if p.is_dir()):
            if module_dir.name.startswith("."):
                continue
            module_path = module_dir / MODULE_FILE
            text = _read(module_path, faults, f"module {module_dir.name}'s manifest")
            if text is not None:
                documents[f"module:{module_dir.name}"] = (text, display_path(module_path))

    ledger_path = mesh_dir / ledger_rel
    if ledger_path.exists():  # a missing ledger is the empty ledger: nothing issued yet
        text = _read(ledger_path, faults, "the ledger")
        if text is not None:
            documents["ledger"] = (text, display_path(ledger_path))

    try:
        inputs = load_inputs(documents)
    except InputError as error:
        raise InputError(faults + list(error.faults)) from None
    if faults:
        raise InputError(faults)
    return MeshInputs(catalogue=inputs.catalogue, mesh=inputs.mesh, ledger=inputs.ledger,
                      sources=inputs.sources, mesh_dir=mesh_dir, ledger_path=ledger_path)


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
            stat = path.stat()
            entries.append((str(path), stat.st_ino, stat.st_size, stat.st_mtime_ns))
        except OSError:
            entries.append((str(path), None, None, None))
    return tuple(sorted(entries))
