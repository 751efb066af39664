"""The revocation list as an agent keeps it (`<state root>/.mesh/agent/revoked.json`).

Invariants:
- It is learnt only from a declaration message that verified (signed by a signer not revoked
  by what was kept before), and only grows: the union of every list handed over
  (common/revocation.merge), so a later message cannot take a revocation back.
- Every message is checked against what is kept (common/messages.open_signed `revoked`): a
  declaration signed by a revoked delivery certificate is refused, whatever it carries.
- A kept file that does not read is said, and kept as it is (never overwritten by a shorter
  list): the agent then refuses nothing by it until it is repaired or a message brings it anew.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from executors.common import revocation
from executors.common.revocation import Revocation, RevocationError


class KeptRevocations:
    def __init__(self, path: Path, say: Callable[[str], None]):
        self.path = path
        self.say = say
        self.kept: tuple[Revocation, ...] = ()
        self.readable = True
        try:
            self.kept = revocation.read_file(path)
        except RevocationError as error:
            self.readable = False
            say(f"{error}: kept as it is")

    def serials(self) -> frozenset[str]:
        return revocation.revoked_serials(self.kept)

    def learn(self, carried: object, where: str) -> None:
        """Keep the union with the list a verified message carried (absent: nothing)."""
        if carried is None:
            return
        try:
            more = revocation.parse(carried, where)
        except RevocationError as error:
            self.say(f"{error}: not kept")
            return
        merged = revocation.merge(self.kept, more)
        if merged != self.kept:
            added = len(merged) - len(self.kept)
            self.kept = merged
            if self.readable:
                revocation.write_file(self.path, merged)
            self.say(f"revocation list: {added} new entr{'y' if added == 1 else 'ies'} kept "
                     f"({len(self.serials())} certificate(s) revoked)")
