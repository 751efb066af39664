"""The mesh's revocation list: certificates of the mesh CA no longer to be believed, and the
keys of nodes that left the mesh.

Invariants:
- Public data (serial numbers, node names, public keys, times), never a secret. The control
  node keeps it (`<control state>/revoked.json`, control/revocations.py); every declaration
  message carries it, signed with the declaration; each agent keeps the union of what it was
  handed (`<state root>/.mesh/agent/revoked.json`) and refuses a message whose signer's
  certificate is on it (common/messages.open_signed).
- It only grows: merging two lists is their union, an entry is never removed or changed. A
  node that left and comes back does so with a new key (its old key stays revoked).
- A certificate is named by its serial number in lowercase hexadecimal, as the ledger records
  a node's certificate (`certificates.<node>.serial`).
- A list that does not read as one is a RevocationError naming where it came from; a missing
  file is an empty list.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Optional, Sequence

import attrs

from resolver import MeshError

from executors.common.atomic import write_atomic

FORMAT = "mesh-revoked/1"


class RevocationError(MeshError):
    """A revocation list that does not read as one."""


@attrs.frozen
class Revocation:
    """One revocation: what it revokes (`node` and its `public_key` when a node left; the
    serials of certificates of the mesh CA), when, and why."""

    at: str  # ISO 8601, UTC
    reason: str  # one line: "node lab removed (mesh node remove)"
    serials: tuple[str, ...] = ()  # lowercase hex
    node: Optional[str] = None
    public_key: Optional[str] = None  # the node's X25519 key, base64

    def as_json(self) -> dict[str, object]:
        document: dict[str, object] = {"at": self.at, "reason": self.reason,
                                       "serials": list(self.serials)}
        if self.node is not None:
            document["node"] = self.node
        if self.public_key is not None:
            document["public_key"] = self.public_key
        return document


def serial_hex(serial: int) -> str:
    return format(serial, "x")


def _text(entry: dict[str, object], key: str, where: str, index: int,
          optional: bool = False) -> Optional[str]:
    value = entry.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value:
        raise RevocationError(f"{where}: revoked[{index}].{key} is not a non-empty string")
    return value


def parse(document: object, where: str) -> tuple[Revocation, ...]:
    """The revocations of a list as JSON (`{"format": …, "revoked": [...]}` or the bare
    list a declaration message carries); RevocationError naming `where` otherwise."""
    entries = document.get("revoked") if isinstance(document, dict) else document
    if isinstance(document, dict) and document.get("format") != FORMAT:
        raise RevocationError(f"{where}: not a revocation list (no `format: {FORMAT}`)")
    if not isinstance(entries, list):
        raise RevocationError(f"{where}: `revoked` is not a list")
    found = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise RevocationError(f"{where}: revoked[{index}] is not an object")
        serials = entry.get("serials", [])
        if not isinstance(serials, list) or not all(
                isinstance(s, str) and s and all(c in "0123456789abcdef" for c in s)
                for s in serials):
            raise RevocationError(f"{where}: revoked[{index}].serials is not a list of "
                                  f"lowercase hexadecimal serial numbers")
        found.append(Revocation(
            at=_text(entry, "at", where, index) or "",
            reason=_text(entry, "reason", where, index) or "",
            serials=tuple(serials), node=_text(entry, "node", where, index, optional=True),
            public_key=_text(entry, "public_key", where, index, optional=True)))
    return tuple(found)


def as_list(revocations: Sequence[Revocation]) -> list[object]:
    """The bare list, as a declaration message carries it."""
    return [r.as_json() for r in revocations]


def merge(kept: Sequence[Revocation], more: Iterable[Revocation]) -> tuple[Revocation, ...]:
    """The union, `kept` first, in order: nothing already kept is added twice."""
    merged = list(kept)
    for revocation in more:
        if revocation not in merged:
            merged.append(revocation)
    return tuple(merged)


def revoked_serials(revocations: Iterable[Revocation]) -> frozenset[str]:
    return frozenset(s for r in revocations for s in r.serials)


def revoking_key(revocations: Iterable[Revocation], public_key: str) -> Optional[Revocation]:
    """The revocation of the node key `public_key`, if it was revoked."""
    return next((r for r in revocations if r.public_key == public_key), None)


def read_file(path: Path) -> tuple[Revocation, ...]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ()
    except OSError as error:
        raise RevocationError(f"{path}: cannot read the revocation list: {error}") from None
    try:
        document: object = json.loads(text)
    except ValueError:
        raise RevocationError(f"{path}: the revocation list is not JSON") from None
    return parse(document, str(path))


def write_file(path: Path, revocations: Sequence[Revocation]) -> None:
    """Written whole or not at all; public, so 0644."""
    text = json.dumps({"format": FORMAT, "revoked": as_list(revocations)}, indent=2,
                      sort_keys=True)
    write_atomic(path, text + "\n", mode=0o644)
