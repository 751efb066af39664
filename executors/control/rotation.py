"""Rotating credentials on the control node: a new generation, and the plan in two steps.

Invariants:
- A rotation addresses one credential, every credential a provider instance serves plus its
  own secrets, or every credential a consumer instance holds (issuer.select_credentials); each
  gets a new generation sealed to the holders of its current one (issuer.rotate). A provider's
  own admin secret is rotated provider first like its credentials (server_held).
- The plan is two resolutions: `now` (the rotated ledger: the provider's grant or admin
  changes first) and `once_applied` (as if each provider reported its pending generation in
  force: holders move). `rotate_in_ledger` keeps `now.ledger` in one ledger transaction
  (control/ledger_transaction.transact); a refused rotation keeps nothing.
- Pure given the rotated ledger: the entropy is the issuer's, the rules the resolver's.
"""

from __future__ import annotations

from typing import AbstractSet, Iterable, Mapping, Optional, Sequence, Union

import attrs

import resolver
from resolver import Inputs, Ledger, MeshError, Resolution
from resolver.rotation import SecretWay, secret_way
from resolver.rotation import is_dual, provider_applied, provider_first, server_held_credentials

from .issuer import rotate, select_credentials
from .ledger_transaction import Transacted, transact
from .loading import PathLike


class RotationRefused(MeshError):
    """A rotation that would record a generation no running process uses: each own secret
    refused, with why and the way out (resolver.rotation.secret_way)."""

    def __init__(self, ways: Sequence[SecretWay]):
        self.ways = tuple(ways)
        super().__init__("; ".join(w.why for w in self.ways))


@attrs.frozen
class RotationPlan:
    ids: tuple[str, ...]  # the credentials rotated
    server_held: frozenset[str]  # own secrets a provider's server holds (its admin)
    rotated: Ledger  # the ledger with each new generation
    before: Resolution  # the mesh as it is
    now: Resolution  # step 1: with the rotated ledger
    once_applied: Resolution  # step 2: once each provider reported its pending generation
    ways: Mapping[str, SecretWay] = attrs.field(factory=dict)  # own secret → how it takes effect

    def kind(self, credential_id: str) -> str:
        """How the credential rotates, said for the operator."""
        credential = self.rotated.credentials[credential_id]
        way = self.ways.get(credential_id)
        if is_dual(credential):
            return "dual login, no window"
        if way is not None and way.how == "provisioner":
            return "the server's admin, changed on the running server by its provisioner first"
        if way is not None and way.how == "by-hand":
            return (f"by hand: {way.instruction} ({way.where}); then `mesh applied NODE ... "
                    f"--by-hand {credential_id}`" if credential_id in self.server_held else
                    f"by hand once its containers run the new generation: {way.instruction} "
                    f"({way.where})")
        if way is not None and way.how == "step":
            return f"its step {way.step} puts it in force before the app starts ({way.where})"
        if provider_first(credential_id):
            return "single credential, provider first: WINDOW"
        return "own secret, read at every start: active at once, its containers recreated"

    @property
    def waits_for_providers(self) -> bool:
        """Whether a second step follows (some generation stays pending until applied)."""
        return any(self.rotated.credentials[i].pending is not None for i in self.ids)


def with_providers_applied(ledger: Ledger, ids: Iterable[str]) -> Ledger:
    """The ledger as it will be once each provider reported its pending generation in force."""
    credentials = ledger.credentials
    for cred_id in ids:
        cred = credentials[cred_id]
        if cred.pending is not None:
            credentials = credentials.set(cred_id,
                                          provider_applied(cred, cred.pending.generation,
                                                           credential_id=cred_id))
    return attrs.evolve(ledger, credentials=credentials)


def plan_rotation(inputs: Inputs, *, credential: Optional[str] = None, provider: Optional[str] = None,
                  consumer: Optional[str] = None,
                  provisioned: AbstractSet[str] = frozenset()) -> RotationPlan:
    """Rotate what is addressed (one of credential, provider, consumer) and resolve both
    steps; IssueError when nothing matches or a rotation is already in progress;
    RotationRefused when an own secret addressed has no way to take effect (`provisioned`:
    the grant kinds that have a provisioner, from the node's registry)."""
    ids = select_credentials(inputs.ledger, credential=credential, provider=provider,
                             consumer=consumer)
    ways = {i: way for i in ids
            if (way := secret_way(inputs.catalogue, inputs.mesh, i, provisioned,
                                  inputs.sources)) is not None}
    refused = [way for way in ways.values() if way.how == "refused"]
    if refused:
        raise RotationRefused(refused)

    def resolve(ledger: Ledger) -> Resolution:
        return resolver.resolve_inputs(inputs, ledger)

    before = resolve(inputs.ledger)
    server_held = frozenset(server_held_credentials(inputs.catalogue, inputs.mesh))
    rotated = rotate(before.ledger, ids, inputs.mesh, server_held=server_held)
    now = resolve(rotated)
    return RotationPlan(tuple(ids), server_held, rotated, before, now,
                        resolve(with_providers_applied(now.ledger, ids)), ways)


def rotate_in_ledger(mesh_dir: PathLike, *, credential: Optional[str] = None,
                     provider: Optional[str] = None, consumer: Optional[str] = None,
                     provisioned: AbstractSet[str] = frozenset(),
                     write: bool = True) -> Transacted[Union[RotationPlan, RotationRefused]]:
    """plan_rotation in one ledger transaction: the rotated ledger (`now`) kept, or the
    refusal and nothing kept; `write=False` is a dry run (no lock, nothing written)."""

    def compute(inputs: Inputs) -> tuple[Ledger, Union[RotationPlan, RotationRefused]]:
        try:
            plan = plan_rotation(inputs, credential=credential, provider=provider,
                                 consumer=consumer, provisioned=provisioned)
        except RotationRefused as refused:
            return inputs.ledger, refused
        return plan.now.ledger, plan

    return transact(mesh_dir, compute, write=write)
