"""Things issued once: host ports and logins.

Invariants:
- A host port comes from the mesh's range, per node, and is never equal to another
  assignment, a fixed port, a floor or a claim on that node. A port recorded in the ledger for
  a live instance on the same node is kept as it is; a moved instance keeps its number when it
  is free on its new node.
- A login is derived once from (provision, provider instance, consumer instance), is a valid
  identifier for PostgreSQL and AMQP (lowercase letters, digits, underscore; starts with a
  letter; at most 61 characters so a dual-login suffix `_a` stays within PostgreSQL's 63), and never
  equals another login; a recorded login is kept.
"""

from __future__ import annotations

import hashlib
import re
from typing import Iterable, Optional

LOGIN_BASE_MAX = 30
_UNSAFE = re.compile(r"[^a-z0-9_]+")


class PortBook:
    """Free-port bookkeeping for one node: reserved numbers and the next candidate."""

    def __init__(self, first: int, last: int, reserved: Iterable[int] = ()):
        self.first, self.last = first, last
        self.taken: set[int] = set(reserved)
        self._next = first

    def reserve(self, port: int) -> bool:
        """Reserve `port`; False when it was taken already."""
        if port in self.taken:
            return False
        self.taken.add(port)
        return True

    def take_lowest(self) -> Optional[int]:
        port = self._next
        while port <= self.last and port in self.taken:
            port += 1
        if port > self.last:
            return None
        self.taken.add(port)
        self._next = port + 1
        return port

    def in_range(self, port: int) -> bool:
        return self.first <= port <= self.last


def derive_login(credential_id: str, consumer: str, used: set[str]) -> str:
    """A deterministic login for one credential, unique among `used` (which it joins)."""
    base = _UNSAFE.sub("_", consumer.lower()).strip("_")[:LOGIN_BASE_MAX].rstrip("_") or "m"
    if not base[0].isalpha():
        base = "m" + base
    digest = hashlib.sha256(credential_id.encode()).hexdigest()
    for width in (8, 12, 16, 24, 30):
        login = f"{base}_{digest[:width]}"
        if login not in used:
            used.add(login)
            return login
    raise AssertionError("sha256 prefixes of 30 hex digits collided")  # pragma: no cover
