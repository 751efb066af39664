"""What was declared, remembered: each node's last serial and each instance's last rendering.

Where the last good declaration is remembered (issue 11): in the ledger. `nodes` holds the
serial and digest of the last declaration written for each node; `declared` the rendering of
each instance in the last declaration written for it while it was not refused (its
containers, state directories, accesses, provides, binding values, and its grants and
firewall allows on its providers' nodes). The ledger is the record of what was issued and
kept; every command reads it, so a plain `mesh plan` already knows what a refusal would
otherwise tear down, and it travels with the mesh directory. The declarations in a `--out`
directory are a second record, read for serials only (newest_written), because a ledger can
lag behind them (restored from a backup, or written before this record existed).

Invariants:
- resolve() never changes `nodes` or `declared` (it only drops the records of instances gone
  from mesh.yaml); record_declared, called by whatever writes declarations, records exactly
  the nodes it wrote. So issuing, rotating or `--write-ledger` alone advance no serial, and
  the first declaration written is serial 1.
- next_serial: a declaration keeps the last written serial when its digest is the same and
  takes one more otherwise, so serials never go backwards and change exactly with the digest.
- A held instance's record is never rewritten: its rendering is not in Resolution.renderings.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Optional

import attrs

from ._ledger import Ledger, NodeSerial
from ._resolution import Resolution


def next_serial(previous: Optional[NodeSerial], digest: str) -> int:
    """The serial of a declaration with `digest`, after `previous` was written."""
    if previous is None:
        return 1
    return previous.serial if previous.digest == digest else previous.serial + 1


def newest_written(ledger: Ledger, written: Mapping[str, NodeSerial]) -> Ledger:
    """The ledger whose record of each node is the newer of its own and `written` (the serial
    and digest of declarations found where new ones are about to be written)."""
    nodes = ledger.nodes
    for node, serial in sorted(written.items()):
        recorded = nodes.get(node)
        if recorded is None or serial.serial > recorded.serial:
            nodes = nodes.set(node, serial)
    return ledger if nodes is ledger.nodes else attrs.evolve(ledger, nodes=nodes)


def record_declared(resolution: Resolution, nodes: Optional[Iterable[str]] = None) -> Ledger:
    """The resolution's ledger recording that the declarations of `nodes` (default: all) were
    written: their serials and digests, and the rendering of every live instance on them."""
    written = set(resolution.declarations) if nodes is None else set(nodes)
    ledger = resolution.ledger
    serials = ledger.nodes
    for node in sorted(written):
        declaration = resolution.declarations[node]
        serials = serials.set(node, NodeSerial(declaration.serial, declaration.digest))
    declared = ledger.declared
    for name, rendering in sorted(resolution.renderings.items()):
        if rendering.node in written:
            declared = declared.set(name, rendering)
    return attrs.evolve(ledger, nodes=serials, declared=declared)
