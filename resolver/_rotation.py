"""Credential rotation as pure state over ledger Credentials.

Invariants:
- Holders are only ever told a generation the provider has reported in force: a rotated
  generation waits as `pending` until the provider reports it applied, then becomes `active`.
- Dual-login credentials (generations carry a slot, a|b: the provider holds two valid logins
  for one role) rotate with no window: the new generation takes the idle slot and the old one
  stays `retiring`, still accepted, until every holder node reported the new one applied.
- Single credentials (slot None: one password per account, e.g. an AMQP account issued before
  accounts had two slots, a bucket key, an OIDC client secret) rotate
  provider first; once the provider applies, the old generation is retired at once and every
  holder that has not applied the new one yet is in a window the plan states.
- A provider's own admin secret (`secret/<instance>/<name>` named by a `provides[].admin`; its
  server holds it) is server-held: rotated provider first too. Pending: holders and the server's
  container keep the generation in force, and the provisioner changes the password on the
  running server, authenticating with that generation, then reports the new one in force.
  Promoted: it is active, and the old one stays `retiring` (sealed, no longer accepted by the
  server) until its holder node reports the new one applied; only then is it retired. So the
  ledger never retires the only generation the server accepts, and never tells a holder one
  the server does not accept yet. The server's own container reads it only to initialise an
  empty data directory, so a new generation never recreates it (`server_held_secrets`).
- Any other module's own secret has no provider apart from its holder: the new generation is
  active at once and the old one stays `retiring` until the holder reports the new applied.
- A retired generation is never accepted again; generation numbers only grow.
- One rotation at a time per credential: rotating again while one is in progress is refused.
- `record_applied` takes a node's report: the generations its provisioners reported in force
  (never more than that) and the generations its containers hold.
- Holders changing (an instance moved) is not a rotation: reseal() keeps every generation's
  number and slot and seals the same values to exactly the new holders; a retiring generation
  retires then if no holder left waits for the new one (those who waited may all have left).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterable, Mapping, Optional

import attrs
from pyrsistent import pmap

from ._errors import MeshError
from ._ledger import Credential, Generation, Ledger

if TYPE_CHECKING:  # annotations only: no import at run time, so no circle
    from ._declaration import ContainerDecl, Declaration, SecretRef
    from ._inputs import Catalogue
    from ._model import Mesh

#: The two login slots of a dual-login credential (PostgreSQL logins, broker accounts,
#: registry entries): a new generation takes the one the active generation does not use.
SLOTS = ("a", "b")
OWN_SECRET_PREFIX = "secret/"


class RotationError(MeshError):
    """A rotation or a report the rotation rules refuse (named credential, stated reason)."""


def is_dual(credential: Credential) -> bool:
    """Whether the provider can hold two valid generations at once (a login per slot)."""
    return credential.active is not None and credential.active.slot is not None


def holder_nodes(credential: Credential) -> tuple[str, ...]:
    """The nodes that hold the credential: those its active generation is sealed to."""
    return tuple(sorted(credential.active.sealed)) if credential.active is not None else ()


def next_generation_number(credential: Credential) -> int:
    """The number the next generation takes: above every generation the
    credential has had, retired ones included."""
    known = [g.generation for g in (credential.active, credential.retiring, credential.pending)
             if g is not None]
    return max(known + list(credential.retired) + [0]) + 1


def _active(credential: Credential) -> Generation:
    """The active generation of a credential whose state says it has one (rotating, dual)."""
    if credential.active is None:
        raise RotationError("a credential in rotation has no active generation; "
                            "the ledger is damaged")
    return credential.active


def idle_slot(credential: Credential) -> Optional[str]:
    """The slot a new generation takes: the one the active generation does not use."""
    if not is_dual(credential):
        return None
    return SLOTS[1] if _active(credential).slot == SLOTS[0] else SLOTS[0]


def in_progress(credential: Credential) -> Optional[str]:
    """Why a rotation of this credential is still under way, or None when it is settled."""
    if credential.pending is not None:
        return (f"generation {credential.pending.generation} is waiting for the provider to "
                f"report it in force")
    if credential.retiring is not None:
        waiting = waiting_holders(credential)
        return (f"generation {credential.retiring.generation} is retiring until "
                f"{', '.join(waiting) or 'every holder'} report(s) generation "
                f"{_active(credential).generation} applied")
    return None


def first_generation(sealed: Mapping[str, str], slot: Optional[str] = None,
                     escrow: Mapping[str, str] = pmap()) -> Credential:
    """A newly issued credential: generation 1, told to holders at once (nothing to retire)."""
    return Credential(active=Generation(generation=1, slot=slot, sealed=pmap(sealed),
                                        escrow=pmap(escrow)))


def provider_first(credential_id: str, server_held: bool = False) -> bool:
    """Whether a rotated generation waits for a provider: every credential but a module's own
    secret whose only holder is its own node; a server-held own secret (a provider's admin)
    waits for its server."""
    return server_held or not credential_id.startswith(OWN_SECRET_PREFIX)


def is_own_secret(credential_id: str) -> bool:
    """Whether the credential is a module's own secret (`secret/<instance>/<name>`)."""
    return credential_id.startswith(OWN_SECRET_PREFIX)


def server_held_credentials(catalogue: Catalogue, mesh: Mesh) -> frozenset[str]:
    """The own secrets a provider's server holds: `secret/<instance>/<admin>` for each
    `provides[].admin` of each instance's module (what `mesh rotate` rotates provider first)."""
    held = set()
    for name, instance in mesh.instances.items():
        module = catalogue.modules.get(instance.module)
        for provide in (module.provides if module is not None else ()):
            if provide.admin is not None:
                held.add(f"{OWN_SECRET_PREFIX}{name}/{provide.admin}")
    return frozenset(held)


def server_held_secrets(declaration: Declaration, container: ContainerDecl) -> frozenset[str]:
    """The credentials `container` holds that its provisioner puts in force on the running
    server instead: the admin secret of a provider whose server this container is (it publishes
    the provider's listen). Such a container reads the value only when it initialises an empty
    data directory (POSTGRES_PASSWORD, RABBITMQ_DEFAULT_PASS), so a new generation of it is
    written to its env file and never recreates it."""
    published = {port.listen for port in container.ports}
    return frozenset(p.admin.credential for p in declaration.providers
                     if p.admin is not None and p.instance == container.instance
                     and p.listen in published)


def begin_rotation(credential_id: str, credential: Credential,
                   sealed: Mapping[str, str], escrow: Mapping[str, str] = pmap(), *,
                   server_held: bool = False) -> Credential:
    """A new generation (values sealed per holder node, and to the control node's escrow). A
    provider's credential, and a server-held own secret, waits as `pending` until the provider
    put it in force (dual credentials take the idle slot); any other module's own secret is
    active at once, the old one retiring until its holder applied."""
    if credential.active is None:
        raise RotationError(f"credential {credential_id} has never been issued; "
                            f"`mesh plan --issue` issues it")
    reason = in_progress(credential)
    if reason is not None:
        raise RotationError(f"credential {credential_id} is already rotating: {reason}")
    if credential_id.startswith("backup-key/"):  # resolver/_backup_target.key_credential
        raise RotationError(f"credential {credential_id} is a restic repository's password: "
                            "its snapshots are encrypted with it, so a new one would lose "
                            "them; it is never rotated (move the instance to a new name for a "
                            "new repository)")
    new = Generation(generation=next_generation_number(credential),
                     slot=idle_slot(credential), sealed=pmap(sealed), escrow=pmap(escrow))
    if provider_first(credential_id, server_held):
        return attrs.evolve(credential, pending=new)
    return attrs.evolve(credential, active=new, retiring=credential.active)


def reseal(credential: Credential, holders: Iterable[str],
           sealed_for: Callable[[Generation, list[str]], Mapping[str, str]]) -> Credential:
    """The credential with each generation's value sealed to exactly `holders`: a holder that
    stays keeps its sealed box, a new holder gets `sealed_for(generation, nodes)` (node →
    sealed box of the same value), a node no longer holding it loses its box and its applied
    report. Generation numbers and slots do not change, nor does the rotation's state, except
    that a retiring generation retires when no holder left waits for the new one."""
    holding = set(holders)

    def one(generation: Optional[Generation]) -> Optional[Generation]:
        if generation is None:
            return None
        kept = {n: v for n, v in generation.sealed.items() if n in holding}
        missing = sorted(holding - set(kept))
        if missing:
            kept.update(sealed_for(generation, missing))
        return attrs.evolve(generation, sealed=pmap(kept))

    resealed = attrs.evolve(credential, active=one(credential.active),
                            pending=one(credential.pending), retiring=one(credential.retiring),
                            applied=pmap({n: g for n, g in credential.applied.items()
                                          if n in holding}))
    # the holders that waited for the new generation may all have left: nobody needs the old
    # one then, and no report would ever retire it (the rotation would never end)
    return _retire_if_done(resealed)


def provider_applied(credential: Credential, generation: int, *,
                     credential_id: str) -> Credential:
    """The provider reports `generation` (and everything its grant asked for) in force. A
    promoted own secret (a server's admin) keeps the old generation sealed as `retiring` until
    its holder applied the new one; an account's single password retires the old at once."""
    credential = attrs.evolve(credential,
                              provider_applied=max(credential.provider_applied, generation))
    pending = credential.pending
    if pending is None or generation < pending.generation:
        return credential  # a stale or repeated report changes nothing
    old = _active(credential)
    if is_dual(credential) or is_own_secret(credential_id):
        promoted = attrs.evolve(credential, active=pending, pending=None, retiring=old)
    else:
        promoted = attrs.evolve(credential, active=pending, pending=None,
                                retired=credential.retired.append(old.generation))
    return _retire_if_done(promoted)


def holder_applied(credential: Credential, node: str, generation: int) -> Credential:
    """A holder node reports `generation` applied (its containers hold it now)."""
    if credential.active is None or generation > credential.active.generation:
        return credential  # never told that generation: not a report of this credential
    if generation <= credential.applied.get(node, 0):
        return credential
    return _retire_if_done(attrs.evolve(credential,
                                        applied=credential.applied.set(node, generation)))


def _retire_if_done(credential: Credential) -> Credential:
    if credential.retiring is None or waiting_holders(credential):
        return credential
    return attrs.evolve(credential, retiring=None,
                        retired=credential.retired.append(credential.retiring.generation))


def waiting_holders(credential: Credential) -> tuple[str, ...]:
    """Holder nodes that have not reported the active generation applied."""
    if credential.active is None:
        return ()
    target = credential.active.generation
    return tuple(n for n in holder_nodes(credential) if credential.applied.get(n, 0) < target)


def holder_generation(credential: Credential, node: str = "") -> Optional[Generation]:
    """What every holder is told: the active generation (its slot is the login to use)."""
    return credential.active


def provider_generations(credential: Credential) -> tuple[Generation, ...]:
    """The generations the provider must hold in force now, newest first."""
    candidates: tuple[Optional[Generation], ...]
    if is_dual(credential):
        candidates = (credential.pending, credential.active, credential.retiring)
    else:  # one password per account: the pending one replaces the active one
        candidates = (credential.pending or credential.active,)
    return tuple(g for g in candidates if g is not None)


def accepted_generations(credential: Credential) -> frozenset[int]:
    """The generation numbers the provider must accept (never a retired one)."""
    return frozenset(g.generation for g in provider_generations(credential))


def grant_view(credential: Credential) -> tuple[Optional[Generation], Optional[Generation]]:
    """(credential, retiring) for a provider's grant: the newest generation to put in force and
    the older one it must keep accepting. For a dual credential the grant is the same while
    pending and while retiring, so promoting a generation does not touch the provider again."""
    generations = provider_generations(credential)
    if not generations:
        return None, None
    return generations[0], (generations[1] if len(generations) > 1 else None)


def window_holders(credential: Credential) -> tuple[str, ...]:
    """Holder nodes whose applied generation the provider no longer accepts: the stated window
    of a single-credential rotation (always empty for a dual credential)."""
    accepted = accepted_generations(credential)
    return tuple(n for n in holder_nodes(credential)
                 if 0 < credential.applied.get(n, 0) and credential.applied[n] not in accepted)


def describe_rotation(credential_id: str, credential: Credential) -> str:
    """One sentence for a plan: where the rotation of this credential stands and its window."""
    pending, active = credential.pending, credential.active
    if active is None:  # never issued: nothing rotates
        return f"{credential_id}: generation none, settled"
    holders = ", ".join(holder_nodes(credential)) or "no node"
    if pending is not None and is_dual(credential):
        return (f"{credential_id}: generation {pending.generation} goes to idle login slot "
                f"{pending.slot} on the provider first; then holders ({holders}) move to it while "
                f"generation {active.generation} (slot {active.slot}) stays valid: no window")
    if pending is not None and is_own_secret(credential_id):
        return (f"{credential_id}: the provisioner changes the password on the running server "
                f"from generation {active.generation} to {pending.generation} first "
                f"(authenticating with {active.generation}) and waits until the server accepts "
                f"it; then its holders ({holders}) are told {pending.generation}: the server's "
                f"own container is not recreated (it reads it only to initialise an empty data "
                f"directory); any other container that uses it is recreated, and cannot "
                f"authenticate between the two applies (WINDOW)")
    if pending is not None:
        return (f"{credential_id}: the provider replaces generation {active.generation} with "
                f"{pending.generation} first, then holders ({holders}) are moved; WINDOW: between "
                f"the provider applying and each holder applying, that holder cannot "
                f"authenticate (one credential per account)")
    if credential.retiring is not None and not is_dual(credential):
        return (f"{credential_id}: generation {active.generation} is active for its holder "
                f"({holders}), which rewrites or recreates what uses it; generation "
                f"{credential.retiring.generation} stays sealed until "
                f"{', '.join(waiting_holders(credential))} report(s) it applied")
    if credential.retiring is not None:
        return (f"{credential_id}: holders use generation {active.generation} (slot "
                f"{active.slot}); generation {credential.retiring.generation} stays valid until "
                f"{', '.join(waiting_holders(credential))} report(s) it applied")
    window = window_holders(credential)
    if window:
        return (f"{credential_id}: WINDOW open: {', '.join(window)} still hold(s) a retired "
                f"generation until applying generation {active.generation}")
    return f"{credential_id}: generation {active.generation}, settled"


def report_applied(ledger: Ledger, credential_id: str, node: str, *,
                   holder: Optional[int] = None, provider: Optional[int] = None) -> Ledger:
    """The ledger after `node` reported a credential applied: as a holder (the generation its
    containers hold) and/or as the provider (the generation its grant put in force)."""
    credential = ledger.credentials.get(credential_id)
    if credential is None:
        return ledger
    if provider is not None:
        credential = provider_applied(credential, provider, credential_id=credential_id)
    if holder is not None:
        credential = holder_applied(credential, node, holder)
    return attrs.evolve(ledger, credentials=ledger.credentials.set(credential_id, credential))


# What the package's root takes from this module (resolver/__init__.py joins these lists).
__all__ = ["RotationError"]


def declared_grants(declaration: Declaration) -> dict[str, int]:
    """What a declaration asks its node's provisioners to put in force: each grant's newest
    generation and each provider's pending admin generation (credential id → generation)."""
    granted: dict[str, int] = {}
    for grant in declaration.grants:
        if grant.credential.generation is not None:
            granted[grant.credential.credential] = grant.credential.generation
    for provider in declaration.providers:
        pending = provider.admin_pending
        if pending is not None and pending.generation is not None:
            granted[pending.credential] = pending.generation
    return granted


LEDGER_CONSUMER = "control"
"""The consumer of a grant whose holder is the control node's own tools (`mesh build`,
`mirror`, the control loop pushing to the mesh's registry): they read the ledger itself, so they
use a generation from the moment it is active, with no declaration to apply or report."""


def record_applied(ledger: Ledger, node: str, declaration: Declaration,
                   granted: Optional[Mapping[str, int]] = None) -> Ledger:
    """The ledger after `node` reported its whole `declaration` applied.

    As the provider, `granted` (the generations its provisioners reported in force; the
    declaration's grants when not given) is in force. As a holder, the node holds what its
    containers, binding files, registry logins (its runtime pulls with them) and declared
    files refer to; a node that holds a credential only to grant it (the
    provider's node) holds its grant's generation; the control node, holding a grant's
    credential for its own tools (consumer `LEDGER_CONSUMER`), holds the active generation as
    soon as the provider's report leaves one active (they read it from the ledger). Provider reports go first, so a generation
    promoted by this report counts for the holders that applied it."""
    held: dict[str, int] = {}
    for container in declaration.containers:
        for ref in container.secrets:
            if ref.generation is not None:
                held[ref.credential] = min(held.get(ref.credential, ref.generation),
                                           ref.generation)
    told_refs: list[Optional[SecretRef]] = [
        ref for b in declaration.bindings for ref in b.held_secrets()]  # a list: each entry's
    told_refs += [login.secret for login in declaration.registry_logins]  # its runtime pulls
    told_refs += [ref for f in declaration.files for ref in f.refs()]  # files it writes (a TLS
    # key, a binding file: a list's holds each entry's credential)
    for told in told_refs:
        if told is not None and told.generation is not None:
            held[told.credential] = min(held.get(told.credential, told.generation),
                                        told.generation)
    for grant in declaration.grants:
        admin = grant.admin  # the provisioner authenticates with it: held, not granted
        if admin is not None and admin.generation is not None:
            held.setdefault(admin.credential, admin.generation)
    for provider in declaration.providers:
        if provider.admin is not None and provider.admin.generation is not None:
            held.setdefault(provider.admin.credential, provider.admin.generation)
    granted = dict(declared_grants(declaration) if granted is None else granted)
    for credential_id, generation in sorted(granted.items()):
        ledger = report_applied(ledger, credential_id, node, provider=generation)
    for grant in declaration.grants:  # the control node's tools hold what is active, at once
        reader = ledger.credentials.get(grant.credential.credential)
        if grant.consumer == LEDGER_CONSUMER and grant.consumer_node != node \
                and reader is not None and reader.active is not None:
            ledger = report_applied(ledger, grant.credential.credential, grant.consumer_node,
                                    holder=reader.active.generation)
    for credential_id, generation in sorted(granted.items()):
        held.setdefault(credential_id, generation)
    for credential_id, generation in sorted(held.items()):
        ledger = report_applied(ledger, credential_id, node, holder=generation)
    return ledger
