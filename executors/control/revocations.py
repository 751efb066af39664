"""The control node's revocation list (common/revocation.py says what it is), kept in the
control state directory as `revoked.json`.

Invariants:
- Written only under the ledger lock (control/loading.mesh_lock), whole or not at all; it only
  grows (revocation.merge).
- Read by whoever decides on what a node sends or is sent: the inbox (a removed node's report
  or enrolment request is refused, naming the removal), publishing (every declaration message
  carries the list, so the agents refuse a revoked signer), the control loop (a removed node's
  queue is deleted).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from executors.common import revocation
from executors.common.revocation import Revocation
from executors.control.control_state import ControlState

FILE = "revoked.json"


def path(state: ControlState) -> Path:
    return state.root / FILE


def load(state: ControlState) -> tuple[Revocation, ...]:
    return revocation.read_file(path(state))


def add(state: ControlState, entry: Revocation) -> tuple[Revocation, ...]:
    """The list with `entry` added and written (call it under the ledger lock)."""
    kept = load(state)
    merged = revocation.merge(kept, [entry])
    if merged != kept:
        state.ensure()
        revocation.write_file(path(state), merged)
    return merged


def removal_of(revocations: tuple[Revocation, ...], node: str) -> Optional[Revocation]:
    """The latest revocation of `node` leaving the mesh, if it left."""
    return next((r for r in reversed(revocations) if r.node == node), None)


def removed_nodes(state: ControlState) -> frozenset[str]:
    return frozenset(r.node for r in load(state) if r.node is not None)
