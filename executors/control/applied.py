"""Recording what a node reported applied: one library for `mesh applied` and the control loop.

Invariants:
- A report moves rotations only by executors/node/applied_record.acceptance: its apply
  succeeded in every phase, it names the declaration the mesh declares for the node now, and
  it was written by this version. Anything else is refused with the reason; nothing moves.
- As provider, the node's report counts only for the generations its provisioners reported in
  force (plus what the operator put in force by hand and names with `by_hand`: grants the
  report lists as not provisioned by the mesh, and a provider's admin waiting on the node that
  no provisioner put in force); as holder, for what its declaration holds
  (resolver.record_applied).
- Pure apart from nothing: the caller loads the mesh (under the ledger lock) and writes the
  returned ledger; nothing here touches a file.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

import attrs

import resolver
from resolver import Declaration, Inputs, Ledger, MeshError, Resolution
from resolver import record_applied

from executors.common.applied_record import acceptance


@attrs.frozen
class Recorded:
    """What a report did to the ledger: refused (`why`), or the ledger it leads to."""

    node: str
    digest: str
    current: Resolution  # the mesh as the report found it
    why: Optional[str] = None  # not None: refused, nothing recorded
    ledger: Optional[Ledger] = None  # the ledger with the report recorded
    moved: tuple[str, ...] = ()  # credentials whose rotation state changed

    @property
    def accepted(self) -> bool:
        return self.why is None


def resolve_current(inputs: Inputs, ledger: Optional[Ledger] = None) -> Resolution:
    return resolver.resolve_inputs(inputs, ledger)


def by_hand_generations(node: str, declaration: Declaration, record: object,
                        credentials: Sequence[str]) -> dict[str, int]:
    """What the operator put in force by hand (`--by-hand`): grants the report lists as not
    provisioned by the mesh, at their declared generation; and a provider's admin secret whose
    new generation waits on this node (`admin_pending`) and that the report does not say its
    provisioner put in force (a module whose admin rotates by hand: keycloak, minio)."""
    facts: Mapping[str, Any] = record if isinstance(record, Mapping) else {}
    unprovisioned = {g["credential"] for g in facts.get("not_provisioned") or []}
    declared = {g.credential.credential: g.credential.generation for g in declaration.grants}
    provisioned = set(facts.get("granted") or {})
    admins = {p.admin_pending.credential: p.admin_pending.generation
              for p in declaration.providers if p.admin_pending is not None
              and p.admin_pending.credential not in provisioned}
    confirmed: dict[str, int] = {}
    for credential in credentials:
        admin_generation = admins.get(credential)
        if admin_generation is not None:
            confirmed[credential] = admin_generation
            continue
        generation = declared.get(credential)
        if credential not in unprovisioned or generation is None:
            raise MeshError(f"--by-hand {credential}: not a grant {node}'s report lists as "
                            f"not provisioned by the mesh ("
                            f"{', '.join(sorted(unprovisioned)) or 'none is'}), nor an admin "
                            f"secret waiting on {node} ("
                            f"{', '.join(sorted(admins)) or 'none is'})")
        confirmed[credential] = generation
    return confirmed


def record_report(inputs: Inputs, node: str, record: object,
                  by_hand: Sequence[str] = (), current: Optional[Resolution] = None,
                  onto: Optional[Ledger] = None) -> Recorded:
    """The ledger once `node`'s applied record (its `<state root>/.mesh/applied.json`) is
    recorded, or why it is refused. Judged against the mesh as `current` declares it; recorded
    onto `onto` (default: current's ledger), so a batch of reports is recorded one after the
    other against the declarations the nodes were handed."""
    current = current or resolve_current(inputs)
    base = current.ledger if onto is None else onto
    declaration = _declared(current, node)
    why, granted = acceptance(record, node, declaration.digest)
    digest = record.get("digest", "") if isinstance(record, Mapping) else ""
    if why is not None:
        return Recorded(node, str(digest), current, why=why)
    granted.update(by_hand_generations(node, declaration, record, by_hand))
    ledger = record_applied(base, node, declaration, granted=granted)
    return Recorded(node, str(digest), current, ledger=ledger, moved=_moved(base, ledger))


def record_digest(inputs: Inputs, node: str, digest: str,
                  current: Optional[Resolution] = None) -> Recorded:
    """The operator's word that `node` applied its whole declaration `digest`."""
    current = current or resolve_current(inputs)
    declaration = _declared(current, node)
    if declaration.digest != digest:
        raise MeshError(f"{node} reported declaration {digest}, but the mesh declares "
                        f"{declaration.digest} for it now: nothing recorded (apply the "
                        f"newest declaration on {node}, then report it)")
    ledger = record_applied(current.ledger, node, declaration)
    return Recorded(node, digest, current, ledger=ledger, moved=_moved(current.ledger, ledger))


def _declared(current: Resolution, node: str) -> Declaration:
    declaration = current.declarations.get(node)
    if declaration is None:
        raise MeshError(f"no node {node} in the mesh; nodes: "
                        f"{', '.join(sorted(current.declarations))}")
    return declaration


def _moved(before: Ledger, after: Ledger) -> tuple[str, ...]:
    return tuple(sorted(c for c in after.credentials
                        if after.credentials[c] != before.credentials.get(c)))
