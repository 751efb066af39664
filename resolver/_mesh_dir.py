"""A mesh directory's layout: which documents a mesh is made of, and where each one lives.

Invariants:
- The path rules live here and nowhere else: mesh.yaml in the mesh directory; the catalogue
  where its `catalogue:` names it (relative to the mesh directory, default `catalogue`), with
  provisions.yaml and one directory per module holding module.yaml; the ledger where
  `ledger:` names it (default `ledger.yaml`), and a missing ledger is the empty ledger; beside
  it, the record of what was declared, one directory per node (`ledger.declared/<node>/
  declared.json`, resolver/_declared_record.py), joined into the ledger it loads.
- No I/O here: every read goes through the caller's MeshReader, which says what is wrong with
  a path by raising ReadFault. Paths are plain strings joined with `/`.
- Faults of every document are gathered before one InputError is raised; a fault that only
  follows from another is not reported: when mesh.yaml does not parse, or its `catalogue:` /
  `ledger:` has the wrong type, nothing it would have named is looked for.
- A fault of a file is located where its path was named: at mesh.yaml's `catalogue:` /
  `ledger:`, or at the top of mesh.yaml when it leaves them to their defaults. Only the mesh
  directory and its mesh.yaml are faults by path alone.
"""

from __future__ import annotations

import re
from typing import Any, Optional, Protocol, Sequence

import attrs

from ._declared_record import RECORD_FILE, declared_dir
from ._documents import Inputs, load_inputs
from ._errors import Fault, InputError, MeshError
from ._load import DocumentPositions, Parsed, parse_document
from ._yaml import MESH_LIMITS

#: The mesh description, in the mesh directory.
MESH_FILE = "mesh.yaml"
#: A module's manifest, in its directory of the catalogue.
MODULE_FILE = "module.yaml"
#: The provision definitions, in the catalogue directory.
PROVISIONS_FILE = "provisions.yaml"
#: The catalogue directory when mesh.yaml has no `catalogue:`.
DEFAULT_CATALOGUE = "catalogue"
#: The ledger file when mesh.yaml has no `ledger:`.
DEFAULT_LEDGER = "ledger.yaml"


class ReadFault(MeshError):
    """What a MeshReader found wrong with a path, said as the end of a sentence whose subject
    is the path (`is missing`, `is a directory`, `cannot be read: Permission denied`); the
    library says where the path was named and what was expected there."""

    def __init__(self, problem: str, *, missing: bool = False) -> None:
        super().__init__(problem)
        #: The fault as the end of a sentence (`is missing`).
        self.problem = problem
        #: True when nothing is at the path (a missing ledger is the empty ledger).
        self.missing = missing


class MeshReader(Protocol):
    """How load_mesh_dir reaches the documents of a mesh directory: the caller's I/O.

    Paths are strings as load_mesh_dir builds them: the directory it was given, joined with
    names and with the relative paths mesh.yaml gives, by `/` (an absolute path mesh.yaml gives
    replaces the directory). Each method raises ReadFault to say what is wrong with a path;
    any other exception is the reader's own failure and passes through unchanged."""

    def read(self, path: str) -> bytes:
        """The bytes of the regular file at `path`. A reader may stop after
        MAX_DOCUMENT_BYTES + 1 bytes: the library refuses a longer document at that byte
        without needing the rest. Raises ReadFault("is missing", missing=True) when nothing is
        there, ReadFault("is a directory") and the like for anything else unreadable."""
        ...

    def subdirectories(self, path: str) -> Sequence[str]:
        """The names of the directories in the directory at `path` (the catalogue's modules,
        the nodes of the record beside the ledger), hidden ones (a leading `.`) left out, in
        any order. Raises ReadFault when `path` is missing (missing=True: the record's
        directory is optional), is not a directory or cannot be listed."""
        ...

    def display(self, path: str) -> str:
        """`path` as faults should name it (for an operator: relative to where they stand)."""
        ...


def normal(path: str) -> str:
    """`path` written the way pathlib writes it: no `.` components, no doubled or trailing
    `/` (`./m//ledger.yaml` → `m/ledger.yaml`); `..` is kept, since what it means depends on
    links only the file system knows."""
    parts = [part for part in path.split("/") if part not in ("", ".")]
    if path.startswith("/"):
        return "/" + "/".join(parts)
    return "/".join(parts) or "."


def join(directory: str, path: str) -> str:
    """`path` under `directory` (`path` itself when absolute), normalized as pathlib's
    `Path(directory) / path` is."""
    return normal(path if path.startswith("/") or not directory else f"{directory}/{path}")


@attrs.frozen
class MeshPaths:
    """Where a mesh directory's catalogue and ledger are, as its mesh.yaml names them."""

    #: The catalogue directory (mesh.yaml `catalogue:`, else `catalogue`).
    catalogue: str
    #: The ledger file (mesh.yaml `ledger:`, else `ledger.yaml`).
    ledger: str


_TOP_LEVEL_PATH = re.compile(
    r"^(catalogue|ledger)[ \t]*:[ \t]*(?:\"([^\"\\]*)\"|'([^']*)'|([^\s#'\"][^\s#]*))"
    r"[ \t]*(?:#.*)?$", re.MULTILINE)


def mesh_paths(mesh_dir: str, mesh_text: Optional[str]) -> MeshPaths:
    """The catalogue directory and ledger file of the mesh directory `mesh_dir` whose mesh.yaml
    holds `mesh_text` (None: unreadable, so the defaults). Cheap on every call: the top-level
    `catalogue:` and `ledger:` lines of a block-style mesh.yaml are read as they are written;
    any other text is parsed as YAML. A value of the wrong type (or a mesh.yaml that does not
    parse) gives the default: loading reports that fault."""
    catalogue, ledger = DEFAULT_CATALOGUE, DEFAULT_LEDGER
    if mesh_text is None:
        pass
    elif mesh_text.lstrip().startswith(("{", "---", "%")) or "\t" in mesh_text:
        try:
            data = parse_document(mesh_text.encode("utf-8"), MESH_FILE, MESH_LIMITS).data
        except InputError:
            data = None
        if isinstance(data, dict):
            named_catalogue, named_ledger = data.get("catalogue"), data.get("ledger")
            catalogue = named_catalogue if isinstance(named_catalogue, str) else catalogue
            ledger = named_ledger if isinstance(named_ledger, str) else ledger
    else:
        found: dict[str, str] = {}
        for match in _TOP_LEVEL_PATH.finditer(mesh_text):
            found.setdefault(match.group(1),
                             next(g for g in match.groups()[1:] if g is not None))
        catalogue = found.get("catalogue", catalogue)
        ledger = found.get("ledger", ledger)
    return MeshPaths(join(mesh_dir, catalogue), join(mesh_dir, ledger))


def _shown(reader: MeshReader, path: str) -> str:
    """A path for a message: whole unless absurdly long."""
    text = reader.display(path)
    return text if len(text) <= 200 else f"{text[:120]}…{text[-60:]} ({len(text):,} characters)"


@attrs.frozen
class _Named:
    """Where mesh.yaml names a path: the key's value, or the top of mesh.yaml for a default."""

    path: str
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


def _named(data: dict[Any, Any], where: DocumentPositions, mesh_dir: str, key: str,
           default: str) -> Optional[_Named]:
    """The path mesh.yaml gives under `key`, located; None when its value has the wrong type
    (the loader reports that, and nothing is looked for under it)."""
    if key not in data:
        line, col = where.position(())
        return _Named(join(mesh_dir, default), where.file, line, col, key, False)
    value = data[key]
    if not isinstance(value, str):
        return None
    line, col = where.position((key,))
    return _Named(join(mesh_dir, value), where.file, line, col, key, True)


Documents = dict[str, tuple[Any, str]]


def _read_catalogue(reader: MeshReader, named: _Named, documents: Documents,
                    faults: list[Fault]) -> None:
    try:
        names = sorted(name for name in reader.subdirectories(named.path)
                       if not name.startswith("."))
    except ReadFault as problem:
        faults.append(named.fault(f"the catalogue directory {_shown(reader, named.path)}",
                                  problem.problem, "a directory of modules"))
        return
    files = [("provisions", PROVISIONS_FILE, join(named.path, PROVISIONS_FILE),
              "the provision definitions")]
    files += [(f"module:{name}", MODULE_FILE, join(join(named.path, name), MODULE_FILE),
               f"module {name}'s manifest") for name in names]
    for key, file_name, path, what in files:
        try:
            documents[key] = (reader.read(path), reader.display(path))
        except ReadFault as problem:
            faults.append(named.fault(f"{what} {_shown(reader, path)}", problem.problem,
                                      f"a readable file {file_name} in the catalogue"))


def _read_ledger(reader: MeshReader, named: _Named, documents: Documents,
                 faults: list[Fault]) -> None:
    try:
        documents["ledger"] = (reader.read(named.path), reader.display(named.path))
    except ReadFault as problem:
        if not problem.missing:  # a missing ledger is the empty ledger: nothing issued yet
            faults.append(named.fault(f"the ledger {_shown(reader, named.path)}",
                                      problem.problem, "a readable ledger file, or no file at all"))
            return  # what is wrong with its path is wrong with the record's beside it
    _read_records(reader, named, documents, faults)


def _read_records(reader: MeshReader, named: _Named, documents: Documents,
                  faults: list[Fault]) -> None:
    """Each node's record of what was declared, in the directory beside the ledger (none
    there, or no directory: nothing recorded yet)."""
    directory = declared_dir(named.path)
    try:
        nodes = sorted(name for name in reader.subdirectories(directory)
                       if not name.startswith("."))
    except ReadFault as problem:
        if not problem.missing:
            faults.append(named.fault(f"the record of what was declared "
                                      f"{_shown(reader, directory)}", problem.problem,
                                      "a directory of one directory per node, beside the ledger"))
        return
    for node in nodes:
        path = join(join(directory, node), RECORD_FILE)
        try:
            documents[f"declared:{node}"] = (reader.read(path), reader.display(path))
        except ReadFault as problem:
            if not problem.missing:  # a node's directory without its record: nothing recorded
                faults.append(named.fault(f"node {node}'s record {_shown(reader, path)}",
                                          problem.problem, "a readable record, or none"))


def _read_mesh_file(reader: MeshReader, mesh_dir: str) -> tuple[bytes, str]:
    """mesh.yaml's bytes and its displayed name; a fault of the directory or of the file is
    a fault by path alone."""
    mesh_path = join(mesh_dir, MESH_FILE)
    mesh_file = reader.display(mesh_path)
    try:
        return reader.read(mesh_path), mesh_file
    except ReadFault as problem:
        try:
            reader.subdirectories(mesh_dir)
        except ReadFault as directory_problem:  # the directory itself is what is wrong
            raise InputError([Fault(reader.display(mesh_dir), 0, 0, directory_problem.problem,
                                    "a mesh directory holding mesh.yaml")]) from None
        raise InputError([Fault(mesh_file, 0, 0, f"the mesh description {problem.problem}",
                                f"a readable file at {mesh_path}")]) from None


def load_mesh_dir(path: str, reader: MeshReader) -> Inputs:
    """Load the mesh directory at `path` through `reader`: mesh.yaml, the catalogue it names
    (provisions.yaml and every module's module.yaml) and the ledger (none: the empty ledger).
    Returns Inputs carrying `mesh_dir` (= `path`) and `ledger_path`; raises one InputError
    holding the faults of every document, a missing or unreadable file located where its path
    was named."""
    mesh_dir = normal(str(path))
    mesh_bytes, mesh_file = _read_mesh_file(reader, mesh_dir)
    documents: Documents = {"mesh": (mesh_bytes, mesh_file)}
    faults: list[Fault] = []
    catalogue: Optional[_Named] = None
    ledger: Optional[_Named] = None
    parsed: Optional[Parsed]
    try:
        parsed = parse_document(mesh_bytes, mesh_file, MESH_LIMITS)
    except InputError:
        parsed = None  # load_inputs reports it, once; nothing it names is looked for
    if parsed is not None:
        documents["mesh"] = (parsed, mesh_file)  # parsed once, not again by load_inputs
        if isinstance(parsed.data, dict):
            catalogue = _named(parsed.data, parsed.where, mesh_dir, "catalogue",
                               DEFAULT_CATALOGUE)
            ledger = _named(parsed.data, parsed.where, mesh_dir, "ledger", DEFAULT_LEDGER)
    if catalogue is not None:
        _read_catalogue(reader, catalogue, documents, faults)
    if ledger is not None:
        _read_ledger(reader, ledger, documents, faults)
    try:
        inputs = load_inputs(documents)
    except InputError as error:
        raise InputError(faults + list(error.faults)) from None
    if faults:
        raise InputError(faults)
    ledger_path = ledger.path if ledger is not None else join(mesh_dir, DEFAULT_LEDGER)
    return attrs.evolve(inputs, mesh_dir=mesh_dir, ledger_path=ledger_path)


# What the package's root takes from this module (resolver/__init__.py joins these lists).
__all__ = ["load_mesh_dir", "MeshReader", "ReadFault"]
