"""What a holder is told of a credential: the reference to put in force, and what to issue.

Invariants:
- Pure: the ledger's credentials in, a SecretRef and the requests it takes out; nothing is
  appended anywhere. The caller (a resolution stage) returns the requests with its values,
  and resolve() merges every stage's requests in one place.
- A credential never issued is referenced without a generation and requested; one issued is
  referenced at its active generation, and requested again (re-sealed, no new generation)
  only when its holders changed (a move).
"""

from __future__ import annotations

from typing import Iterable, Mapping, Optional

from pyrsistent import pvector

from ._declaration import Request, SecretRef
from ._ledger import Credential


def secret_ref(credentials: Mapping[str, Credential], cred_id: str, holders: Iterable[str],
               reason: str, slot: Optional[str] = None) -> tuple[SecretRef, list[Request]]:
    """The reference holders of `cred_id` are given, and the requests it needs (none, one to
    issue it, or one to re-seal it to holders that changed)."""
    holders = set(holders)
    cred = credentials.get(cred_id)
    active = cred.active if cred is not None else None
    if cred is None or active is None:
        return SecretRef(cred_id, None), [Request("credential", cred_id, pvector(sorted(holders)),
                                                  reason, slot)]
    newest = cred.pending or active  # a holder sealed into a pending rotation is satisfied
    missing = sorted(holders - set(newest.sealed))
    extra = sorted(set(newest.sealed) - holders)
    requests = []
    if missing or extra:  # the holders changed (a move): the same values, re-sealed
        what = [f"to {', '.join(missing)}"] if missing else []
        what += [f"no longer to {', '.join(extra)}"] if extra else []
        numbers = sorted(g.generation for g in (cred.retiring, active, cred.pending)
                         if g is not None)
        requests.append(Request(
            "credential", cred_id, pvector(sorted(holders)),
            f"re-seal generation {', '.join(map(str, numbers))} {' and '.join(what)}; "
            f"no new generation", active.slot))
    return SecretRef(cred_id, active.generation), requests
