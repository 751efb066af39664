"""Recording what a node reported applied: one library for `mesh applied` and the control loop.

Invariants:
- A report moves rotations only by executors/node/applied_record.acceptance: its apply
  succeeded in every phase, it names the declaration the mesh declares for the node now, and
  it was written by this version. Anything else is refused with the reason; nothing moves.
- As provider, the node's report counts only for the generations its provisioners reported in
  force (plus what the operator put in force by hand and names with `by_hand`: grants the
  report lists as not provisioned by the mesh, and a provider's admin waiting on the node that
  no provisioner put in force); as holder, for what its declaration holds
  (resolver.rotation.record_applied).
- record_report and record_digest are pure: the caller loads the mesh (under the ledger
  lock) and keeps the returned ledger. `record_in_ledger` is that for `mesh applied`, in one
  ledger transaction (control/ledger_transaction.transact): the ledger written is the one
  resolved with the report recorded, and only when it changed; a refused report keeps
  nothing.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

import attrs

import resolver
from resolver import Declaration, Inputs, Ledger, MeshError, Resolution
from resolver.rotation import record_applied

from executors.common.applied_record import acceptance
from executors.control.ledger_transaction import Transacted, transact
from executors.control.loading import PathLike


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


@attrs.frozen
class Applied:
    """`mesh applied`: the report as recorded (or refused), and the mesh resolved with it."""

    recorded: Recorded
    after: Optional[Resolution] = None  # None: refused, nothing recorded


def record_in_ledger(mesh_dir: PathLike, node: str, *, report: object = None,
                     digest: Optional[str] = None,
                     by_hand: Sequence[str] = ()) -> Transacted[Applied]:
    """Record the operator's word that `node` applied its whole declaration `digest`, or else
    its applied `report` (its applied.json), in one ledger transaction; the ledger kept is the
    mesh resolved with it (a refused report keeps nothing)."""

    def compute(inputs: Inputs) -> tuple[Ledger, Applied]:
        if digest is not None:  # the operator's word that the whole declaration is in force
            recorded = record_digest(inputs, node, digest)
        else:
            recorded = record_report(inputs, node, report, by_hand=by_hand)
        if recorded.ledger is None:
            return inputs.ledger, Applied(recorded)
        after = resolve_current(inputs, recorded.ledger)
        return after.ledger, Applied(recorded, after)

    return transact(mesh_dir, compute)


def _declared(current: Resolution, node: str) -> Declaration:
    declaration = current.declarations.get(node)
    if declaration is None:
        raise MeshError(f"no node {node} in the mesh; nodes: "
                        f"{', '.join(sorted(current.declarations))}")
    return declaration


def _moved(before: Ledger, after: Ledger) -> tuple[str, ...]:
    return tuple(sorted(c for c in after.credentials
                        if after.credentials[c] != before.credentials.get(c)))
