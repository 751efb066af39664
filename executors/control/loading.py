"""Reading a mesh directory from disk and writing files back atomically.

Invariants:
- The path rules of a mesh directory (mesh.yaml, `catalogue:`, `ledger:`, module directories,
  provisions.yaml) and all parsing and validation are the resolver's (resolver.load_mesh_dir);
  this module is the file-system reader it reads through (FileReader) and a thin
  load_mesh_dir(DIR) over it.
- The reader reads at most resolver.MAX_DOCUMENT_BYTES + 1 bytes of a file (the largest
  document kind's limit: so an oversized file is refused at its position, never read
  whole), and only regular files (a FIFO or a
  device is never opened). What is wrong with a path (missing, a directory where a file
  belongs, permission denied, a name too long) is a resolver.ReadFault; the library locates
  it where the path was named.
- Paths in faults are relative to the current directory when below it, so an operator can
  paste them into an editor.
- Files are written whole or not at all: a temp file in the same directory, fsync, rename,
  fsync of the directory. A ledger on disk is never replaced by one that does not load.
- write_ledger writes the ledger as two things (resolver.documents: records_of,
  without_records): each node's record of what was declared beside ledger.yaml, written only
  when that node's record changed (those gaining an instance first), and ledger.yaml, written
  last and only when what it holds changed; ledger_transaction.py says why that order.
- The ledger is written only under its lock (control/ledger_lock.py): every writer goes
  through the one transaction (control/ledger_transaction.transact: `mesh_lock(DIR)` around
  a whole load → compute → write); `write_ledger` takes the lock itself for the one write.
- A long-lived loader (MemoLoader: the control loop's) parses a document again only when its
  bytes changed (SHA-256 of what was read; a node's record is not even read again while its
  inode, size and mtime are the ones it read or wrote), and the ledger it wrote itself (write_ledger with
  the memo) not even then; when every document is the one it parsed last time, it returns the
  Inputs it made last time (frozen). It keeps the ledger loaded (structured again only when
  ledger.yaml's bytes change), each node's record by its bytes, and their join (changed only
  where a record changed). What it returns equals load_mesh_dir(DIR) for the same files (a
  document's loader may normalize its parsed data in place, idempotently: a ledger's
  `declared` JSON texts, mesh.yaml's `backups: target:`; reading it again gives the same).
  An edit of mesh.yaml is parsed again in part (resolver.documents.parse_again: the entries
  it touched, spliced into the last parse; exactly what parsing it whole gives), and loaded
  structuring again only the instances and nodes whose parsed data changed (load_mesh_again:
  an unchanged one is the very same Instance or Node; the whole Mesh validated as always).
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
from executors.common.runtime import collector_paused
from executors.control import ledger_lock
from resolver import (
    MAX_DOCUMENT_BYTES,
    Inputs,
    Ledger,
    MeshError,
    ReadFault,
)
from resolver.documents import (
    Loaded,
    MANIFEST_LIMITS,
    MESH_FILE,
    MESH_LIMITS,
    RECORD_FILE,
    NodeRecord,
    Parsed,
    ParsedText,
    WrittenLedger,
    declared_dir,
    dump_record,
    gains,
    load_ledger,
    load_mesh_again,
    load_module,
    load_record,
    parse_again,
    parse_document,
    records_of,
    rejoined,
    with_records,
    without_records,
    written_ledger,
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
    # a node's record path → (SHA-256 of its bytes, the record read from them)
    _records: dict[str, tuple[bytes, NodeRecord]] = attrs.field(init=False, factory=dict)
    parses: int = attrs.field(init=False, default=0)  # documents parsed (for tests, benches)
    _records_read: Optional[str] = attrs.field(init=False, default=None)  # their directory
    _doubled: bool = attrs.field(init=False, default=False)  # an instance in two records
    # (the records directory, its records by file, how many of them hold each instance) as
    # last read: 10,000 renderings are not counted again when a record or two changed
    _holders: tuple[Optional[str], dict[str, NodeRecord], dict[str, int]] = attrs.field(
        init=False, factory=lambda: (None, {}, {}))
    # a node's record path → its (inode, size, mtime) when read or written last: 400 records
    # of a 10,000-instance mesh (25 MB) are not read again each round to find them unchanged
    _stamps: dict[str, Optional[tuple[int, int, int]]] = attrs.field(init=False, factory=dict)
    # the last join of ledger.yaml and the records: (ledger.yaml loaded, records, joined)
    _merge: Optional[tuple[Loaded, dict[str, NodeRecord], Loaded]] = attrs.field(
        init=False, default=None)
    # a module's path → (its document, the module loaded from it): an edit of mesh.yaml does
    # not structure the catalogue again, and the resolver compares the same Module objects
    _modules: dict[str, tuple[Parsed, Loaded]] = attrs.field(init=False, factory=dict)
    # mesh.yaml's path → its text as last parsed (resolver.documents.parse_again)
    _texts: dict[str, ParsedText] = attrs.field(init=False, factory=dict)
    # mesh.yaml's path → (its document, the mesh loaded from it)
    _meshes: dict[str, tuple[Parsed, Loaded]] = attrs.field(init=False, factory=dict)
    # ledger path → the ledger without records this loader wrote there, as written
    _written: dict[str, WrittenLedger] = attrs.field(init=False, factory=dict)
    # ledger path → (its document, the ledger it holds without records, as loaded)
    _cores: dict[str, tuple[Parsed, Ledger, Loaded]] = attrs.field(init=False, factory=dict)
    # the last Inputs loaded: its directory and the parsed documents it was made of
    _last: Optional[tuple[str, tuple[tuple[str, Parsed], ...], Inputs]] = attrs.field(
        init=False, default=None)

    def load(self, path: PathLike) -> Inputs:
        with collector_paused():
            try:
                return self._plain(str(path))
            except _OffThePlainPath:
                return load_mesh_dir(path)

    def remember(self, path: str, data: bytes, parsed: Parsed,
                 written: Optional[WrittenLedger] = None) -> None:
        """`data`, just written at `path` by this process, as parsed (write_ledger);
        `written`: a ledger written without its records, as written_ledger wrote it (its next
        load structures nothing: the ledger it holds is `written.ledger`; its next write
        encodes only the entries that changed)."""
        self._parsed[path] = (hashlib.sha256(data).digest(), parsed)
        if written is not None:
            self._cores[path] = (parsed, written.ledger, Loaded(written.ledger, parsed.where))
            self._written[path] = written

    def written(self, path: str) -> Optional[WrittenLedger]:
        """The ledger in the file at `path` as written_ledger wrote it, when this loader wrote
        that file and it is unchanged since; None otherwise."""
        written = self._written.get(path)
        if written is None or self.kept_core(path) is not written.ledger:
            return None
        return written

    def untidy(self, path: str) -> bool:
        """The ledger at `path` and its records, as last read, need writing again though the
        ledger they make did not change: ledger.yaml still holds `nodes:`/`declared:` (an
        older version wrote it), or an instance is in two records (a crash mid-move)."""
        kept = self._parsed.get(path)
        legacy = kept is not None and isinstance(kept[1].data, dict) and (
            "nodes" in kept[1].data or "declared" in kept[1].data)
        return legacy or (self._doubled and self._records_read == str(
            PurePosixPath(declared_dir(path))))

    def _merged(self, loaded: Loaded, records: dict[str, NodeRecord]) -> Loaded:
        """The ledger `loaded` with the records joined (resolver.documents.with_records),
        changed from the last join by the records that changed (a round's edit rewrites a
        record or two: the 10,000 other renderings are not joined again) while ledger.yaml
        holds no record of its own. No instance is in two records here (_doubled:
        with_records decides those)."""
        last = self._merge
        model = loaded.model
        if last is None or model.nodes or model.declared or last[0].model.nodes or \
                last[0].model.declared:  # an older ledger.yaml's own record: joined whole
            merged = with_records(model, records.values())
        else:  # `nodes` and `declared` are the records' alone: changed where they changed
            joined = last[2].model if last[0] is loaded else attrs.evolve(
                model, declared=last[2].model.declared, nodes=last[2].model.nodes)
            merged = rejoined(joined, last[1], records)
            if merged is last[2].model:
                return last[2]
        result = Loaded(merged, loaded.where)
        self._merge = (loaded, dict(records), result)
        return result

    def _ledger(self, path: str, parsed: Parsed) -> Union[Parsed, Loaded]:
        """The ledger loaded from `parsed` (kept while the file is the same: a mesh.yaml edit
        does not structure the ledger again); `parsed` itself when it does not load, so
        load_inputs reports why."""
        kept = self._cores.get(path)
        if kept is not None and kept[0] is parsed:
            return kept[2]
        try:
            ledger, where = load_ledger(parsed, parsed.where.file)
        except MeshError:
            return parsed
        loaded = Loaded(ledger, where)
        self._cores[path] = (parsed, without_records(ledger), loaded)
        return loaded

    def _module(self, path: str, name: str, parsed: Parsed) -> Union[Parsed, Loaded]:
        """The module loaded from `parsed` (kept while its file is the same); `parsed` itself
        when it does not load, so load_inputs reports why."""
        kept = self._modules.get(path)
        if kept is not None and kept[0] is parsed:
            return kept[1]
        try:
            module, where = load_module(parsed, parsed.where.file, name=name)
        except MeshError:
            return parsed
        loaded = Loaded(module, where)
        self._modules[path] = (parsed, loaded)
        return loaded

    def _mesh(self, path: str, parsed: Parsed) -> Union[Parsed, Loaded]:
        """The mesh loaded from `parsed`, structuring again only the instances and nodes an
        edit changed (resolver.documents.load_mesh_again); `parsed` itself when it does not
        load, so load_inputs reports why."""
        kept = self._meshes.get(path)
        if kept is not None and kept[0] is parsed:
            return kept[1]
        try:
            mesh, where = load_mesh_again(parsed, parsed.where.file, None if kept is None
                                          else (kept[0], kept[1].model))
        except MeshError:  # the last load stays the one to reuse from
            return parsed
        loaded = Loaded(mesh, where)
        self._meshes[path] = (parsed, loaded)
        return loaded

    def kept_core(self, path: str) -> Optional[Ledger]:
        """The ledger in the file at `path` as last read or written by this loader, when it
        holds no record of what was declared (an older ledger.yaml that does is written
        again without them); None when not known."""
        kept = self._parsed.get(path)
        if kept is None or not isinstance(kept[1].data, dict):
            return None
        if "nodes" in kept[1].data or "declared" in kept[1].data:
            return None
        core = self._cores.get(path)
        if core is not None and core[0] is kept[1]:
            return core[1]
        return None

    def remember_record(self, path: str, data: bytes, record: NodeRecord) -> None:
        """A node's record `data`, just written at `path` by this process (write_ledger)."""
        self._records[path] = (hashlib.sha256(data).digest(), record)
        self._stamps[path] = _stamp(path)

    def forget_record(self, path: str) -> None:
        self._records.pop(path, None)
        self._stamps.pop(path, None)

    def records(self, ledger: str) -> Optional[dict[str, NodeRecord]]:
        """The records beside `ledger` as last read or written, by node (None: not read)."""
        directory = str(PurePosixPath(declared_dir(ledger)))
        if self._records_read != directory:
            return None
        within = directory + "/"  # (a record's path: DIRECTORY/NODE/RECORD_FILE)
        return {record.node: record for path, (_, record) in self._records.items()
                if path.startswith(within) and path.count("/") == directory.count("/") + 2}

    def _record(self, path: str, node: str) -> Optional[NodeRecord]:
        stamp = _stamp(path)
        seen = self._stamps.get(path)
        kept = self._records.get(path)
        if stamp is not None and seen == stamp and kept is not None:
            return kept[1]  # the file as read or written last (write_atomic: a new inode)
        try:
            data = self.reader.read(path)
        except ReadFault as problem:
            if problem.missing:
                self._records.pop(path, None)
                return None
            raise _OffThePlainPath() from None
        digest = hashlib.sha256(data).digest()
        if kept is not None and kept[0] == digest:
            self._stamps[path] = stamp
            return kept[1]
        try:
            record = load_record(data, self.reader.display(path), node)
        except MeshError:
            self._records.pop(path, None)
            raise _OffThePlainPath() from None
        self.parses += 1
        self._records[path] = (digest, record)
        self._stamps[path] = stamp
        return record

    def _read_records(self, ledger: str) -> list[tuple[str, NodeRecord, str]]:
        """(node, record, file) of each node's record beside `ledger`; whether an instance is
        in two of them (_doubled) counted again only for the records that changed."""
        directory = str(PurePosixPath(declared_dir(ledger)))
        try:
            nodes = sorted(name for name in self.reader.subdirectories(directory)
                           if not name.startswith("."))
        except ReadFault as problem:
            if not problem.missing:
                raise _OffThePlainPath() from None
            nodes = []
        found = []
        live = set()
        for node in nodes:
            path = directory + "/" + node + "/" + RECORD_FILE  # (PurePosixPath's spelling)
            record = self._record(path, node)
            if record is not None:
                live.add(path)
                found.append((node, record, path))
        self._count_holders(directory, {path: record for _, record, path in found})
        for gone in [p for p in self._records if p not in live]:
            del self._records[gone]
            self._stamps.pop(gone, None)
        self._records_read = directory
        return found

    def _count_holders(self, directory: str, records: dict[str, NodeRecord]) -> None:
        """_doubled for `records` (by file), from the count of records holding each instance
        as last counted, changed by the records that changed (compared by identity)."""
        last_directory, counted, holders = self._holders
        if last_directory != directory:
            counted, holders = {}, {}
        changed = [path for path in set(counted) | set(records)
                   if counted.get(path) is not records.get(path)]
        for path in changed:
            old = counted.get(path)
            for name in old.declared if old is not None else ():
                holders[name] -= 1
                if not holders[name]:
                    del holders[name]
        for path in changed:
            new = records.get(path)
            for name in new.declared if new is not None else ():
                holders[name] = holders.get(name, 0) + 1
        self._holders = (directory, dict(records), holders)
        self._doubled = len(holders) != sum(holders.values())

    def _document(self, path: str, data: Optional[bytes] = None, *,
                  large: bool = False, ledger: bool = False) -> Parsed:
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
            if large:  # mesh.yaml: only the entries an edit touched are read again
                text = parse_again(data, self.reader.display(path), MESH_LIMITS,
                                   self._texts.get(path))
                self._texts[path] = text
                parsed = text.parsed
            else:
                parsed = parse_document(data, self.reader.display(path),
                                        MESH_LIMITS if ledger else MANIFEST_LIMITS)
        except MeshError:
            self._parsed.pop(path, None)
            self._texts.pop(path, None)
            raise _OffThePlainPath() from None
        self.parses += 1
        self._parsed[path] = (digest, parsed)
        return parsed

    def _plain(self, mesh_dir: str) -> Inputs:
        if mesh_dir.startswith("//"):  # pathlib keeps a leading `//`; the resolver does not
            raise _OffThePlainPath()
        mesh_dir = str(PurePosixPath(mesh_dir))  # as the resolver writes it (normal)
        mesh = self._document(str(PurePosixPath(mesh_dir) / MESH_FILE), large=True)
        if not isinstance(mesh.data, dict):
            raise _OffThePlainPath()
        catalogue = _named_path(mesh_dir, mesh.data, "catalogue", "catalogue")
        ledger = _named_path(mesh_dir, mesh.data, "ledger", "ledger.yaml")
        try:
            modules = sorted(name for name in self.reader.subdirectories(catalogue)
                             if not name.startswith("."))
        except ReadFault:
            raise _OffThePlainPath() from None
        docs: dict[str, tuple[Any, str]] = {
            "mesh": (self._mesh(str(PurePosixPath(mesh_dir) / MESH_FILE), mesh), mesh.where.file)}
        named = [("provisions", str(PurePosixPath(catalogue) / "provisions.yaml"))]
        named += [(f"module:{name}", str(PurePosixPath(catalogue) / name / "module.yaml"))
                  for name in modules]
        for key, file in named:
            parsed = self._document(file)
            document: Union[Parsed, Loaded] = parsed
            if key.startswith("module:"):
                document = self._module(file, key[len("module:"):], parsed)
            docs[key] = (document, parsed.where.file)
        try:
            ledger_bytes = self.reader.read(ledger)
        except ReadFault as problem:
            if not problem.missing:
                raise _OffThePlainPath() from None
        else:  # missing: the empty ledger, as load_mesh_dir has it
            parsed = self._document(ledger, ledger_bytes, ledger=True)
            docs["ledger"] = (self._ledger(ledger, parsed), parsed.where.file)
        found = self._read_records(ledger)
        given = docs.get("ledger")
        if given is not None and isinstance(given[0], Loaded) and not self._doubled:
            docs["ledger"] = (self._merged(given[0], {node: r for node, r, _ in found}),
                              given[1])
        else:  # load_inputs joins them (and reports an unloadable ledger)
            for node, record, path in found:
                docs[f"declared:{node}"] = (record, self.reader.display(path))
        used = tuple((key, parsed) for key, (parsed, _) in sorted(docs.items()))
        live = set(file for _, file in named) | {ledger, str(PurePosixPath(mesh_dir) / MESH_FILE)}
        for gone in set(self._parsed) - live:  # a module removed: its parse is not kept
            del self._parsed[gone]
        for gone in set(self._modules) - live:
            del self._modules[gone]
        for gone in set(self._texts) - live:
            del self._texts[gone]
        for gone in set(self._meshes) - live:
            del self._meshes[gone]
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
    """Write the ledger under its lock: each node's record of what was declared that changed
    (resolver.documents.NodeRecord, in declared_dir(path): those gaining an instance first,
    then the rest, then those of nodes no longer recorded removed), then ledger.yaml without
    them, when that changed; each read back before it replaces anything and written only if
    it reads as what it records: a record through load_record; ledger.yaml through
    resolver.documents.written_ledger (its text as json reads it, structured and validated
    as load_ledger does; after a text this loader wrote, its changed entries alone, the
    rest being that text's lines, which read back then; that the document reader reads the
    text as json does, within its limits, and finds every position where the writer's
    layout puts it, is its property, property_tests/test_written_ledger_props.py).
    `memo`: a MemoLoader that read the ledger and the records (the transaction's), so only
    what changed is written and its next load parses nothing this wrote."""
    path = str(path)
    memo = memo if memo is not None else MemoLoader()
    display = memo.reader.display
    with ledger_lock.locked(path), collector_paused():
        on_disk = memo.records(path)
        if on_disk is None:
            try:
                on_disk = {node: record for node, record, _ in memo._read_records(path)}
            except _OffThePlainPath:
                raise MeshError(f"{declared_dir(path)}: a node's record of what was declared "
                                "cannot be read; nothing written (`mesh plan DIR` says where)"
                                ) from None
        epoch = max((record.epoch for record in on_disk.values()), default=0) + 1
        records = records_of(ledger, epoch, on_disk)  # an unchanged node's: on_disk's own
        changed = [node for node, record in records.items() if record is not on_disk.get(node)]
        changed.sort(key=lambda node: (not gains(records[node], on_disk.get(node)), node))
        directory = PurePosixPath(declared_dir(path))
        for node in changed:
            file = str(directory / node / RECORD_FILE)
            text = dump_record(records[node])
            if load_record(text, display(file), node) != records[node]:
                raise MeshError(f"{file}: node {node}'s record would not read back "
                                "unchanged; not written")
            write_atomic(file, text, mode=0o600)
            memo.remember_record(file, text.encode("utf-8"), records[node])
        for node in sorted(set(on_disk) - set(records)):
            file = str(directory / node / RECORD_FILE)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(file)
            with contextlib.suppress(OSError):
                os.rmdir(directory / node)
            memo.forget_record(file)
        core = without_records(ledger)
        if memo.kept_core(path) == core:
            return  # ledger.yaml holds this already (and no record of what was declared)
        # the text, what the document reader reads from it (its data as json reads it, its
        # positions laid out as written: property_tests/test_written_ledger_props.py), and
        # that it reads back as `core` (after the last text this wrote: its changed entries)
        written = written_ledger(core, display(path), memo.written(path))
        write_atomic(path, written.text, mode=0o600)
        memo.remember(path, written.text.encode("utf-8"), written.parsed, written)


def _stamp(path: str) -> Optional[tuple[int, int, int]]:
    """(inode, size, mtime) of a file, None when it cannot be looked at."""
    try:
        facts = os.stat(path)
    except (OSError, ValueError):
        return None
    return facts.st_ino, facts.st_size, facts.st_mtime_ns


def inputs_fingerprint(mesh_dir: PathLike) -> Fingerprint:
    """What a change of the mesh's inputs changes: each file's path, inode, size and mtime (a
    write replaces the file: a new inode), the records of what was declared included."""
    catalogue, ledger = mesh_paths(mesh_dir)
    files = [Path(mesh_dir) / MESH_FILE, ledger]
    records = Path(declared_dir(str(ledger)))
    with contextlib.suppress(OSError):
        files.extend(Path(entry.path) / RECORD_FILE for entry in os.scandir(records)
                     if not entry.name.startswith("."))
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
