"""The record of what was declared, kept beside the ledger: one document per node.

Invariants:
- A ledger's `nodes` (each node's last written serial and digest) and `declared` (each
  instance's last written rendering) are kept out of ledger.yaml, one record per node: in
  the directory beside the ledger (`declared_dir`: `ledger.yaml` → `ledger.declared/`), the
  file `<node>/declared.json`. A node's record holds its serial and digest and the renderings
  of the instances declared on it (rendering.node); so a change of one node's declaration
  rewrites one small file, never the whole ledger.
- The record is YAML 1.2, written as canonical JSON with one instance per line (fast to
  write and to read, and a fault still has a line): read by json first and, when that fails
  or the shape is wrong, by the bounded YAML reader, so every fault is located as in any
  other document (MESH_LIMITS).
- Each record carries an `epoch`: one more than the largest on disk when its transaction
  wrote it. An instance found in two records (a crash between the files of one move) is
  taken from the newer (the larger epoch); so the writer writes the records that gain an
  instance before those that lose one, and a crash never leaves an instance unrecorded.
- A ledger.yaml that still holds `nodes:`/`declared:` (written before this record existed)
  loads: a record on disk wins for its node and its instances; the next write moves them.
- Pure: text in, records out; grouping and merging are functions of their arguments.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any, Iterable, Mapping, Optional, Union

import attrs
from pyrsistent import pmap
from pyrsistent.typing import PMap

from ._convert import CONVERTER, unstructure
from ._declaration import InstanceRendering
from ._errors import Fault, InputError
from ._ledger import Ledger, NodeSerial
from ._load import DocumentPositions, Parsed, load_document, parse_document
from ._model import EMPTY_MAP
from ._yaml import MESH_LIMITS, decode_document

#: The format of a node's record this library reads and writes.
RECORD_VERSION = 1
#: A node's record, in its directory under declared_dir(ledger).
RECORD_FILE = "declared.json"


def declared_dir(ledger_path: str) -> str:
    """The directory of the per-node records beside the ledger at `ledger_path`: its name
    without the extension, plus `.declared` (`m/ledger.yaml` → `m/ledger.declared`)."""
    head, slash, name = ledger_path.rpartition("/")
    stem = name.rpartition(".")[0] or name  # no extension (or a leading dot only): all of it
    return f"{head}{slash}{stem}.declared"


@attrs.frozen
class NodeRecord:
    """What was last declared to one node: its serial and digest, the rendering of each
    instance declared on it, and the epoch of the transaction that wrote it."""

    node: str
    version: int = RECORD_VERSION
    epoch: int = 0
    serial: Optional[int] = None
    digest: Optional[str] = None
    declared: PMap[str, InstanceRendering] = EMPTY_MAP

    @property
    def node_serial(self) -> Optional[NodeSerial]:
        """The node's last written serial and digest, or None before its first declaration."""
        if self.serial is None or self.digest is None:
            return None
        return NodeSerial(self.serial, self.digest)


def dump_record(record: NodeRecord) -> str:
    """The record's text: canonical JSON (keys sorted, no spaces), one instance a line."""
    head = {"digest": record.digest, "epoch": record.epoch, "node": record.node,
            "serial": record.serial, "version": record.version}
    lines = [json.dumps(name) + ":" + json.dumps(unstructure(rendering),
                                                 sort_keys=True, separators=(",", ":"))
             for name, rendering in sorted(record.declared.items())]
    body = "{\n" + ",\n".join(lines) + "\n}" if lines else "{}"
    rest = json.dumps(head, sort_keys=True, separators=(",", ":"))
    return '{"declared":' + body + "," + rest[1:] + "\n"


def _validate(node: Optional[str]) -> Any:
    def validate(record: NodeRecord, where: DocumentPositions) -> list[Fault]:
        faults = []
        if record.version != RECORD_VERSION:
            faults.append(where.fault(("version",), f"record version {record.version} is "
                                      "not read", f"version {RECORD_VERSION}"))
        if node is not None and record.node != node:
            faults.append(where.fault(("node",), f"the record of node {record.node!r} is in "
                                      f"{node!r}'s directory", repr(node)))
        if (record.serial is None) != (record.digest is None):
            faults.append(where.fault(("serial",), "a serial without a digest, or a digest "
                                      "without a serial", "both, or neither"))
        for name, rendering in sorted(record.declared.items()):
            if rendering.node != record.node:
                faults.append(where.fault(("declared", name, "node"), f"{name} is recorded "
                                          f"as declared on {rendering.node!r} in "
                                          f"{record.node!r}'s record", repr(record.node)))
        return faults
    return validate


def load_record(text: Union[str, bytes, Parsed], file: str,
                node: Optional[str] = None) -> NodeRecord:
    """A node's record (`node`: the name of the directory it was found in, which it must
    name); one InputError with every fault, located, when it does not read."""
    if not isinstance(text, Parsed):
        decoded = decode_document(text, file, MESH_LIMITS)  # size and encoding, at the byte
        try:
            data = json.loads(decoded, object_pairs_hook=_no_duplicates,
                              parse_constant=_no_constant)
            record = CONVERTER.structure(data, NodeRecord)
        except Exception:  # noqa: BLE001 - json's or the converter's: read again, located
            record = None
        if record is not None and not _validate(node)(record, _NOWHERE):
            return record
        text = parse_document(decoded, file, MESH_LIMITS)
    loaded, _ = load_document(text, file, NodeRecord, validate=_validate(node))
    return loaded


_NOWHERE = DocumentPositions("", (0, 0, None))


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object, refused (so read as YAML, which says where) when a key repeats."""
    found = dict(pairs)
    if len(found) != len(pairs):
        raise ValueError("a duplicate key")
    return found


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not YAML")


def records_of(ledger: Ledger, epoch: int,
               kept: Mapping[str, NodeRecord] = EMPTY_MAP) -> dict[str, NodeRecord]:
    """The ledger's `nodes` and `declared`, one record per node (stamped `epoch`); a node
    whose record would record what its record in `kept` does (unchanged) is given that very
    record, so a writer finds the records to write by identity (and no other is built)."""
    groups: dict[str, dict[str, InstanceRendering]] = {}
    for name, rendering in ledger.declared.items():
        groups.setdefault(rendering.node, {})[name] = rendering
    records = {}
    for node in set(groups) | set(ledger.nodes):
        serial = ledger.nodes.get(node)
        numbers = (serial.serial, serial.digest) if serial else (None, None)
        group = groups.get(node, {})
        old = kept.get(node)
        if old is not None and _records(old, numbers[0], numbers[1], group):
            records[node] = old
            continue
        records[node] = NodeRecord(node=node, epoch=epoch, serial=numbers[0],
                                   digest=numbers[1], declared=pmap(group))
    return records


def _records(record: NodeRecord, serial: Optional[int], digest: Optional[str],
             declared: Mapping[str, InstanceRendering]) -> bool:
    """`record` records this serial, digest and renderings (its node and epoch aside)."""
    if (record.serial, record.digest) != (serial, digest) or \
            len(record.declared) != len(declared):
        return False
    for name, rendering in declared.items():
        was = record.declared.get(name)
        if was is not rendering and was != rendering:
            return False
    return True


def without_records(ledger: Ledger) -> Ledger:
    """The ledger as ledger.yaml keeps it: without `nodes` and `declared`."""
    if not ledger.nodes and not ledger.declared:
        return ledger
    return attrs.evolve(ledger, nodes=EMPTY_MAP, declared=EMPTY_MAP)


def with_records(ledger: Ledger, records: Iterable[NodeRecord]) -> Ledger:
    """The ledger read from ledger.yaml with the per-node records joined in: a record wins
    for its node's serial and for its instances (over what an older ledger.yaml still
    holds); an instance in two records is taken from the larger epoch."""
    chosen = sorted(records, key=lambda r: (r.epoch, r.node))
    if not chosen:
        return ledger
    nodes = dict(ledger.nodes)
    declared = dict(ledger.declared)
    for record in chosen:  # in epoch order: a newer record's instance replaces an older's
        serial = record.node_serial
        if serial is not None:
            nodes[record.node] = serial
        declared.update(record.declared)
    return attrs.evolve(ledger, nodes=pmap(nodes), declared=pmap(declared))


def rejoined(joined: Ledger, before: Mapping[str, NodeRecord],
             after: Mapping[str, NodeRecord]) -> Ledger:
    """with_records(core, after.values()), from `joined` = with_records(core, before.values())
    and changed only where a record changed (a record is compared by identity: one read again
    is a change), for a long-lived reader whose records change one or two at a time. Holds
    when the core keeps no `nodes`/`declared` of its own (a ledger.yaml written since the
    records moved out) and no instance is in two of `after`'s records (else with_records,
    which takes the newer, must join them whole)."""
    changed = [node for node in set(before) | set(after)
               if before.get(node) is not after.get(node)]
    if not changed:
        return joined
    declared, nodes = joined.declared.evolver(), joined.nodes.evolver()
    for node in changed:  # every removal before any addition: a move is in two records
        old, new = before.get(node), after.get(node)
        if old is None:
            continue
        for name in old.declared:
            if new is None or name not in new.declared:
                with contextlib.suppress(KeyError):  # not joined: nothing to remove
                    declared.remove(name)
        if new is None or new.node_serial is None:
            with contextlib.suppress(KeyError):
                nodes.remove(node)
    for node in changed:
        new = after.get(node)
        if new is None:
            continue
        for name, rendering in new.declared.items():
            declared[name] = rendering
        if new.node_serial is not None:
            nodes[node] = new.node_serial
    return attrs.evolve(joined, declared=declared.persistent(), nodes=nodes.persistent())


def unchanged(new: NodeRecord, old: Optional[NodeRecord]) -> bool:
    """`new` records what `old` does (its epoch aside): the file need not be written."""
    return old is not None and new.node == old.node and \
        _records(old, new.serial, new.digest, new.declared)


def gains(new: NodeRecord, old: Optional[NodeRecord]) -> bool:
    """`new` records an instance `old` does not (written before the records that lose it)."""
    return any(name not in (old.declared if old else {}) for name in new.declared)


