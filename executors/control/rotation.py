"""Rotating credentials on the control node: a new generation, and the plan in two steps.

Invariants:
- A rotation addresses one credential, every credential a provider instance serves plus its
  own secrets, or every credential a consumer instance holds (issuer.select_credentials); each
  gets a new generation sealed to the holders of its current one (issuer.rotate). A provider's
  own admin secret is rotated provider first like its credentials (server_held).
- The plan is two resolutions: `now` (the rotated ledger: the provider's grant or admin
  changes first) and `once_applied` (as if each provider reported its pending generation in
  force: holders move). Nothing here writes; the caller writes `now.ledger`.
- Pure given the rotated ledger: the entropy is the issuer's, the rules the resolver's.
"""

from __future__ import annotations

from typing import Optional

import attrs

import resolver
from resolver import Ledger, Resolution
from resolver import is_dual, provider_applied, provider_first, server_held_credentials

from .issuer import rotate, select_credentials


@attrs.frozen
class RotationPlan:
    ids: tuple[str, ...]  # the credentials rotated
    server_held: frozenset[str]  # own secrets a provider's server holds (its admin)
    rotated: Ledger  # the ledger with each new generation
    before: Resolution  # the mesh as it is
    now: Resolution  # step 1: with the rotated ledger
    once_applied: Resolution  # step 2: once each provider reported its pending generation

    def kind(self, credential_id: str) -> str:
        """How the credential rotates, said for the operator."""
        credential = self.rotated.credentials[credential_id]
        if is_dual(credential):
            return "dual login, no window"
        if credential_id in self.server_held:
            return "the server's admin, changed on the running server first"
        if provider_first(credential_id):
            return "single credential, provider first: WINDOW"
        return "own secret, active at once"

    @property
    def waits_for_providers(self) -> bool:
        """Whether a second step follows (some generation stays pending until applied)."""
        return any(self.rotated.credentials[i].pending is not None for i in self.ids)


def with_providers_applied(ledger: Ledger, ids) -> Ledger:
    """The ledger as it will be once each provider reported its pending generation in force."""
    credentials = ledger.credentials
    for cred_id in ids:
        cred = credentials[cred_id]
        if cred.pending is not None:
            credentials = credentials.set(cred_id,
                                          provider_applied(cred, cred.pending.generation,
                                                           credential_id=cred_id))
    return attrs.evolve(ledger, credentials=credentials)


def plan_rotation(inputs, *, credential: Optional[str] = None, provider: Optional[str] = None,
                  consumer: Optional[str] = None) -> RotationPlan:
    """Rotate what is addressed (one of credential, provider, consumer) and resolve both
    steps; IssueError when nothing matches or a rotation is already in progress."""
    ids = select_credentials(inputs.ledger, credential=credential, provider=provider,
                             consumer=consumer)

    def resolve(ledger: Ledger) -> Resolution:
        return resolver.resolve(inputs.catalogue, inputs.mesh, ledger, sources=inputs.sources)

    before = resolve(inputs.ledger)
    server_held = frozenset(server_held_credentials(inputs.catalogue, inputs.mesh))
    rotated = rotate(before.ledger, ids, inputs.mesh, server_held=server_held)
    now = resolve(rotated)
    return RotationPlan(tuple(ids), server_held, rotated, before, now,
                        resolve(with_providers_applied(now.ledger, ids)))
