"""The two ends of every binding as rendering states them: what each live instance is, what a
consumer is told, what its provider grants it and opens for it, and what a provider serves.

Invariants:
- Pure stages of resolution() (resolver/_resolve.py), each handed the parts of the inputs it
  reads and returning one frozen value; the credential requests a stage's references need are
  part of that value, and resolution() merges them with every other stage's.
- Every value a consumer is told comes from one place: the provider node's address and the
  host port assigned to the provider's listen; the firewall allow of a consumer on another
  node is of that same port, so the two ends agree by construction.
- Secrets appear only as `${secret:<credential id>}` tokens plus a SecretRef with the
  generation in force; nothing here holds a value.
- Everything is attributed to one instance: a consumer's binding values, and by provider
  node its grants and firewall allows; a provider's ProviderDecls with its admin credential.
- A requirement that takes every provider (`each`) is rendered entry by entry exactly as a
  single binding is (its own values, credential, grant and allow per provider), then told as
  one BindingDecl listing the entries in provider order with their `count`; a live consumer
  is told every such requirement of its own, an empty one included.
- A binding to a TLS listen (resolver/_tls.tls_binding) is told the provision's `tls:` values
  and url, and its consumer is in `verifying` (it gets the CA); any other is told the plain
  keys only, exactly as before TLS existed.
- Reuse (render_bindings_reusing, for resolver/incremental.py): a consumer's parts are taken
  from a previous run only when its _GroupKey, which holds every value they are made from,
  equals the kept one (known equal without being made when none of its parts differs from
  what the kept run read: _suspect_consumers); they take the same place in the (consumer,
  requirement) order.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from operator import itemgetter
from typing import Iterable, Mapping, Optional

import attrs
from pyrsistent import pvector
from pyrsistent.typing import PVector

from ._bound import (RESOURCE_KEYS, SECRET_KEYS, Bound, BoundKey, binding_record, secret_id,
                     two_slots)
from ._differ import differing, differing_plain
from ._declaration import (
    Binding,
    BindingDecl,
    BindingEntry,
    FirewallAllow,
    GrantDecl,
    ProviderDecl,
    Request,
    SecretRef,
)
from ._frozen import FrozenMap
from ._ledger import Credential
from ._model import Instance, Listen, Module, Node, Provision, Require
from ._placeholders import secret_token
from ._rotation import grant_view
from ._secrets import secret_ref
from ._shape import Told
from ._tls import CA_CONTAINER_FILE, tls_binding
from ._names import FQDN_KEY

HolderVectors = dict[tuple[str, ...], PVector[str]]
"""One sorted holders vector per set of holders, shared by the requests of one stage (they are
values: sharing is invisible, and a large mesh makes thousands; see secret_ref)."""


@attrs.frozen
class Live:
    """The live instances (not blocked, once `blocked` is final) as rendering reads them, in
    plain dicts for the hot lookups (a pmap lookup costs several times a dict's)."""

    names: tuple[str, ...]
    """The live instances, sorted: the order rendering walks them in."""
    instances: Mapping[str, Instance]
    """Every instance of mesh.yaml."""
    node_of: Mapping[str, str]
    """Every instance → its node."""
    modules: Mapping[str, Module]
    """Every live instance → its module (check_placement refused any whose module is unknown)."""
    address: Mapping[str, str]
    """Every node → its address."""
    listens_of: Mapping[str, Mapping[str, Listen]]
    """Every module of the catalogue (by name) → its listens."""
    provisions: Mapping[str, Provision]
    """The catalogue's provisions."""
    fqdn_of: Mapping[str, str] = attrs.Factory(dict)
    """Every named instance → its DNS name (resolver/_names): a route's `fqdn`."""
    domain: Optional[str] = None
    """The mesh domain (`${self.domain}`), if mesh.yaml names one."""


def live_instances(names: Iterable[str], instances: Mapping[str, Instance],
                   modules_of: Mapping[str, Optional[Module]], nodes: Mapping[str, Node],
                   modules: Mapping[str, Module], provisions: Mapping[str, Provision],
                   fqdn_of: Optional[Mapping[str, str]] = None,
                   domain: Optional[str] = None) -> Live:
    """The Live view of the instances `names` (the placed ones: not blocked), from mesh.yaml's
    `instances` and `nodes`, each instance's module (`modules_of`), and the catalogue's
    `modules` and `provisions`."""
    live = tuple(names)
    placed: dict[str, Module] = {}
    for name in live:
        module = modules_of[name]
        assert module is not None, name  # check_placement refused it otherwise
        placed[name] = module
    return Live(
        names=live, instances=instances,
        node_of={name: inst.node for name, inst in instances.items()},
        modules=placed,
        address={name: node.address for name, node in nodes.items()},
        listens_of={name: dict(module.listens) for name, module in modules.items()},
        provisions=dict(provisions), fqdn_of=dict(fqdn_of or {}), domain=domain)


# ---------------------------------------------------------------------- module-own secrets

@attrs.frozen
class OwnSecrets:
    """Each live instance's module-own secrets: one credential each, held by the instance's
    node only."""

    refs: Mapping[tuple[str, str], SecretRef]
    """(instance, secret name) → the reference its containers and provisioner are given."""
    requests: tuple[Request, ...]
    """What those references need issued or re-sealed, in (instance, secret) order."""


def own_secrets(live: Live, credentials: Mapping[str, Credential]) -> OwnSecrets:
    """The module-own secrets of every live instance, and the requests they need."""
    refs: dict[tuple[str, str], SecretRef] = {}
    requests: list[Request] = []
    vectors: HolderVectors = {}
    for name in live.names:
        node = live.node_of[name]
        for own in live.modules[name].secrets:
            refs[(name, own)], needed = secret_ref(
                credentials, secret_id(name, own), {node}, f"secret {own} of {name}",
                vectors=vectors)
            requests.extend(needed)
    return OwnSecrets(refs=FrozenMap(refs), requests=tuple(requests))


# ---------------------------------------------------------------------- the consumer's end

@attrs.frozen
class Consumed:
    """What every bound consumer is told and needs, by consumer (a consumer with no binding is
    in none of the maps), each part frozen once the consumer's last binding is rendered."""

    bindings: tuple[Binding, ...]
    """The plan's bindings, in (consumer, requirement) order."""
    decls: Mapping[str, PVector[BindingDecl]]
    """Consumer → its bindings as its declaration lists them."""
    told: Mapping[str, Mapping[str, Told]]
    """Consumer → requirement (`as`) → its binding: what the consumer's env is filled from."""
    grants: Mapping[str, FrozenMap[str, PVector[GrantDecl]]]
    """Consumer → provider node → the grants made for it there (consumers with a login)."""
    allows: Mapping[str, FrozenMap[str, PVector[FirewallAllow]]]
    """Consumer → provider node → the allows of its node's address (providers elsewhere)."""
    requests: tuple[Request, ...]
    """What the references given out need issued or re-sealed, in binding order."""
    verifying: frozenset[str] = frozenset()
    """The consumers with a TLS binding: they verify against the mesh CA (resolver/_tls.py)."""
    same: frozenset[str] = frozenset()
    """The consumers whose _GroupKey equals the kept one (render_bindings_reusing): every
    value their bindings are made from is the previous run's (local_openings_reusing reads
    it: what it keys a consumer by, bar its MACs, is part of that key)."""


_ProviderKey = tuple[object, ...]
"""What a binding reads of its provider: its node and the node's address, its module, its
own secrets' references, its DNS name and the host ports of its listens."""

_GroupKey = tuple[object, ...]
"""Exactly what one consumer's parts of the bindings are made from (render_bindings_reusing)."""


@attrs.frozen
class _Piece:
    """One consumer's parts of a Consumed."""

    bindings: tuple[Binding, ...]
    requests: tuple[Request, ...]
    decls: PVector[BindingDecl]
    told: Mapping[str, Told]
    grants: Optional[FrozenMap[str, PVector[GrantDecl]]]
    allows: Optional[FrozenMap[str, PVector[FirewallAllow]]]
    verifies: bool


@attrs.frozen
class KeptBindings:
    """What render_bindings_reusing made that a later run may reuse."""

    provisions: Mapping[str, Provision] = attrs.Factory(dict)
    """The catalogue's provisions (when they differ, nothing else here is reused)."""
    providers: Mapping[str, _ProviderKey] = attrs.Factory(dict)
    """Provider → its _ProviderKey."""
    consumers: Mapping[str, tuple[_GroupKey, _Piece]] = attrs.Factory(dict)
    """Consumer → the key and the parts made from it."""
    read: Optional["_BindingsRead"] = None
    """The maps the run read its keys' parts from (a consumer none of whose parts differs
    from them is taken without making its key: _suspect_consumers)."""


@attrs.frozen(eq=False)
class _BindingsRead:
    """The maps one render_bindings_reusing run read its _GroupKeys' parts from."""

    bound: Mapping[BoundKey, Bound]
    instances: Mapping[str, Instance]
    modules: Mapping[str, Module]
    address: Mapping[str, str]
    logins: Mapping[str, str]
    credentials: Mapping[str, Credential]


def _provider_key(live: Live, provider: str, assigned: Mapping[tuple[str, str], int],
                  own: Mapping[tuple[str, str], SecretRef],
                  kept: Mapping[str, _ProviderKey]) -> _ProviderKey:
    """The _ProviderKey of `provider`: the kept object itself when equal, so the keys holding
    it compare by identity."""
    module = live.modules[provider]
    node = live.node_of[provider]
    key: _ProviderKey = (node, live.address[node], live.instances[provider].module, module,
                         tuple(own.get((provider, s)) for s in module.secrets),
                         live.fqdn_of.get(provider),
                         tuple(assigned.get((provider, listen)) for listen in sorted(module.listens)))
    known = kept.get(provider)
    return known if known is not None and known == key else key


def render_bindings(live: Live, bound: Mapping[BoundKey, Bound],
                    assigned: Mapping[tuple[str, str], int], logins: Mapping[str, str],
                    credentials: Mapping[str, Credential],
                    own: Mapping[tuple[str, str], SecretRef]) -> Consumed:
    """Binding values, grants and firewall allows of every binding in `bound` (both ends
    live), rendered in (consumer, requirement) order: each consumer's are consecutive, so each
    consumer's parts are frozen as soon as its last binding is rendered. `own`: the module-own
    secrets (a provider's admin credential is one)."""
    return render_bindings_reusing(live, bound, assigned, logins, credentials, own, None)[0]


def render_bindings_reusing(live: Live, bound: Mapping[BoundKey, Bound],
                            assigned: Mapping[tuple[str, str], int], logins: Mapping[str, str],
                            credentials: Mapping[str, Credential],
                            own: Mapping[tuple[str, str], SecretRef],
                            kept: Optional["KeptBindings"]) -> tuple[Consumed, "KeptBindings"]:
    """render_bindings, reusing what a previous resolution rendered: with `kept` (None: keep
    nothing, make no keys), a consumer whose _GroupKey (each of its Bounds, with its login,
    its credential and its provider's _ProviderKey; its own node, address, instance and
    module; the catalogue's provisions) equals the one kept for it gets the parts kept for
    it (the same objects), in the same place of the order; every keyed consumer's parts are
    returned with their key for the next run."""
    if kept is not None and kept.provisions != live.provisions:
        kept = KeptBindings()  # the provisions every binding reads changed: nothing is kept
    made: dict[str, tuple[_GroupKey, _Piece]] = {}
    provider_keys: dict[str, _ProviderKey] = {}
    same: list[str] = []  # the consumers whose key equals the kept one
    suspects: Optional[set[str]] = None
    if kept is not None and kept.read is not None:
        suspects = _suspect_consumers(kept.read, kept.providers, live, bound, assigned, own,
                                      logins, credentials, provider_keys)

    node_of, address, instances, modules = live.node_of, live.address, live.instances, \
        live.modules
    # one SecretRef per (credential, generation): references are values, so sharing is
    # invisible (keyed by itself: no key tuple kept for each)
    interned: dict[SecretRef, SecretRef] = {}
    vectors: HolderVectors = {}
    one_source = {at: pvector([at]) for at in set(address.values())}  # an allow's sources
    admin_of: dict[tuple[str, str], Optional[str]] = {}  # (module, provision) → admin secret
    bindings: list[Binding] = []
    requests: list[Request] = []
    decls_of: dict[str, PVector[BindingDecl]] = {}
    told_of: dict[str, Mapping[str, Told]] = {}
    granted_of: dict[str, FrozenMap[str, PVector[GrantDecl]]] = {}
    allowed_of: dict[str, FrozenMap[str, PVector[FirewallAllow]]] = {}
    ordered = sorted(bound)
    verifying: set[str] = set()
    decls: list[BindingDecl] = []
    told: dict[str, Told] = {}
    entries: dict[str, list[BindingEntry]] = {}  # requirement `as` → its entries (`each`)
    lists_of: dict[str, tuple[Require, ...]] = {}  # module → its requirements taking every one
    grants: defaultdict[str, list[GrantDecl]] = defaultdict(list)
    allows: defaultdict[str, list[FirewallAllow]] = defaultdict(list)

    def take(consumer: str, piece: _Piece) -> None:
        """The kept run's piece of `consumer`, taken as this run's (its key is the kept one)."""
        same.append(consumer)
        bindings.extend(piece.bindings)
        requests.extend(piece.requests)
        decls_of[consumer], told_of[consumer] = piece.decls, piece.told
        if piece.grants is not None:
            granted_of[consumer] = piece.grants
        if piece.allows is not None:
            allowed_of[consumer] = piece.allows
        if piece.verifies:
            verifying.add(consumer)

    last = 0
    # (consumer → its number of bindings, counted in C: each consumer's bindings are the
    # [first, last) of `ordered`)
    for consumer, count in Counter(map(itemgetter(0), ordered)).items():
        first = last
        last += count
        group: Optional[_GroupKey] = None
        if suspects is not None and consumer not in suspects:
            # every part of its _GroupKey is what the kept run read: its key equals the kept
            known = kept.consumers.get(consumer) if kept is not None else None
            if known is not None:
                take(consumer, known[1])
                made[consumer] = known
                continue
        if kept is not None:  # its _GroupKey: its node, address, instance and module; each
            # binding with its provider's _ProviderKey, its login and its credential
            consumer_node = node_of[consumer]
            parts: list[object] = [consumer_node, address[consumer_node], instances[consumer],
                                   modules[consumer]]
            for at in range(first, last):
                one = bound[ordered[at]]
                provider_key = provider_keys.get(one.provider)
                if provider_key is None:
                    provider_key = provider_keys[one.provider] = _provider_key(
                        live, one.provider, assigned, own, kept.providers)
                credential = one.credential
                if credential is None:
                    parts.append((one, provider_key, None, None))
                else:
                    parts.append((one, provider_key, logins.get(credential),
                                  credentials.get(credential)))
            group = tuple(parts)
            known = kept.consumers.get(consumer)
            if known is not None and known[0] == group:
                piece = known[1]
                take(consumer, piece)
                # kept with this run's key (equal): the objects the next run is handed are
                # this run's (its Bounds), so its comparison finds them identical
                made[consumer] = known if known[0] is group else (group, piece)
                continue
        first_binding, first_request = len(bindings), len(requests)
        for key in ordered[first:last]:
            b = bound[key]
            req = b.requirement
            provider_node = node_of[b.provider]
            consumer_node = node_of[b.consumer]
            port = assigned[(b.provider, b.listen)]
            values = _Missing(host=address[provider_node], port=str(port))
            secret: Optional[SecretRef] = None
            if b.credential is not None:
                login = logins[b.credential]
                cred = credentials.get(b.credential)
                active = cred.active if cred is not None else None
                dual = two_slots(b.kind, active.slot if active is not None else None,
                                 active is not None)
                slot = (active.slot if active is not None and active.slot else "a") if dual else None
                given, needed = secret_ref(
                    credentials, b.credential, {provider_node, consumer_node},
                    f"{req.provision} for {b.consumer} from {b.provider}", slot, vectors=vectors)
                requests.extend(needed)
                secret = interned.setdefault(given, given)
                values["user"] = f"{login}_{slot}" if dual else login
                if b.kind in RESOURCE_KEYS:
                    values[RESOURCE_KEYS[b.kind]] = login
                values[SECRET_KEYS.get(b.kind, "password")] = secret_token(b.credential)
                # the provider is told the newest generation (pending, during a rotation) and the
                # one it must still accept; holders stay on `active` until the provider applied
                newest, retiring = grant_view(cred) if cred is not None and active is not None \
                    else (None, None)
                grant_secret = secret
                if newest:
                    newest_ref = SecretRef(b.credential, newest.generation)
                    grant_secret = interned.setdefault(newest_ref, newest_ref)
                retiring_ref: Optional[SecretRef] = None
                if retiring:
                    retiring_ref = SecretRef(b.credential, retiring.generation)
                    retiring_ref = interned.setdefault(retiring_ref, retiring_ref)
                assert req.provision is not None  # only a provision grants a login
                provider_module = instances[b.provider].module
                if (provider_module, req.provision) not in admin_of:
                    admin_of[(provider_module, req.provision)] = next(
                        (p.admin for p in live.modules[b.provider].provides
                         if p.provision == req.provision), None)
                admin_name = admin_of[(provider_module, req.provision)]
                grants[provider_node].append(GrantDecl(
                    provision=req.provision, kind=b.kind, provider=b.provider,
                    consumer=b.consumer, consumer_node=consumer_node, login=login, resource=login,
                    credential=grant_secret, slot=newest.slot if newest else slot,
                    retiring=retiring_ref, retiring_slot=retiring.slot if retiring else None,
                    admin=own.get((b.provider, admin_name)) if admin_name else None))
            template: Optional[str] = None
            listen = live.listens_of[instances[b.provider].module][b.listen]
            tls = tls_binding(listen, provider_node == consumer_node)
            if req.provision is not None:
                definition = live.provisions[req.provision]
                template = definition.url
                if FQDN_KEY in definition.keys:
                    values[FQDN_KEY] = live.fqdn_of.get(b.provider, "")
                for name, value in sorted(definition.values.items()):  # told as written
                    values[name] = value
                if tls and definition.tls is not None:
                    fields = _Missing(values, ca=CA_CONTAINER_FILE)
                    template = definition.tls.url or template
                    for name, value in sorted(definition.tls.values.items()):
                        values[name] = value.format_map(fields)
            else:
                template = "https://{host}:{port}" if tls else "http://{host}:{port}"
            if tls:
                verifying.add(b.consumer)
            if template:
                values["url"] = template.format_map(_Missing(values, ca=CA_CONTAINER_FILE)
                                                    if tls else values)
            frozen = FrozenMap(values)
            bindings.append(binding_record(b, consumer_node, provider_node, port, frozen, secret))
            if req.each:
                entries.setdefault(req.as_, []).append(BindingEntry(b.provider, frozen, secret))
            else:
                decl = BindingDecl(b.consumer, req.as_, b.provider, req.provision, frozen, secret,
                                   b.kind)
                decls.append(decl)
                told[req.as_] = decl  # (what the consumer's env is filled from: no second record)
            if provider_node != consumer_node:
                allows[provider_node].append(FirewallAllow(
                    port, listen.protocol, one_source[address[consumer_node]],
                    f"{b.provider}/{b.listen}"))
        # the consumer's last binding is rendered: freeze its parts
        for listed in _lists(live, consumer, entries, lists_of):
            decls.append(listed)
            told[listed.requirement] = listed
        decls_of[consumer] = pvector(sorted(decls, key=_binding_order))
        told_of[consumer] = told
        if grants:
            granted_of[consumer] = FrozenMap({node: pvector(sorted(g, key=_grant_order))
                                               for node, g in grants.items()})
        if allows:
            allowed_of[consumer] = FrozenMap({node: pvector(a)
                                               for node, a in allows.items()})
        if group is not None:
            made[consumer] = (group, _Piece(
                tuple(bindings[first_binding:]), tuple(requests[first_request:]),
                decls_of[consumer], told, granted_of.get(consumer),
                allowed_of.get(consumer), consumer in verifying))
        decls, told, grants, allows = [], {}, defaultdict(list), defaultdict(list)
        entries = {}
    for name in live.names:  # a consumer bound to nothing may still take an empty list
        if name not in decls_of:
            listed_only = _lists(live, name, {}, lists_of)
            if listed_only:
                decls_of[name] = pvector(sorted(listed_only, key=_binding_order))
                told_of[name] = {d.requirement: d for d in listed_only}
    consumed = Consumed(bindings=tuple(bindings), decls=decls_of, told=told_of,
                        grants=granted_of, allows=allowed_of, requests=tuple(requests),
                        verifying=frozenset(verifying), same=frozenset(same))
    if kept is None:
        return consumed, KeptBindings()
    return consumed, KeptBindings(live.provisions, FrozenMap(provider_keys), FrozenMap(made),
                                  _BindingsRead(bound, live.instances, live.modules,
                                                live.address, logins, credentials))


def _suspect_consumers(read: _BindingsRead, kept_providers: Mapping[str, _ProviderKey],
                       live: Live, bound: Mapping[BoundKey, Bound],
                       assigned: Mapping[tuple[str, str], int],
                       own: Mapping[tuple[str, str], SecretRef], logins: Mapping[str, str],
                       credentials: Mapping[str, Credential],
                       provider_keys: dict[str, _ProviderKey]) -> set[str]:
    """The consumers a part of whose _GroupKey may differ from the one the kept run (which
    read `read`) made: a binding of theirs is not the very Bound that run read (or is new, or
    gone); their Instance or Module is not the one it read; their node's address differs; a
    provider's _ProviderKey is not the kept one; a login or credential of theirs differs.
    Every other consumer that run kept has a key equal to the kept one. `provider_keys` gets
    the _ProviderKey of every kept provider still live (the kept object when equal)."""
    suspects: set[str] = set()
    suspects.update(k[0] for k in differing(read.bound, bound, same=True))
    for before, now in ((read.instances, live.instances), (read.modules, live.modules)):
        if before is not now:
            suspects.update(n for n, v in now.items() if before.get(n) is not v)
    if read.address is not live.address:
        readdressed = {n for n, a in live.address.items() if read.address.get(n) != a}
        if readdressed:
            suspects.update(n for n, node in live.node_of.items() if node in readdressed)
    changed: set[str] = set()  # providers whose key is not the kept one
    for provider, key in kept_providers.items():
        if provider in live.modules:  # (one no longer live: its bindings are gone)
            made = provider_keys[provider] = _provider_key(live, provider, assigned, own,
                                                           kept_providers)
            if made is not key:
                changed.add(provider)
    # (logins are strings: the entries that differ, either way, found by the sets' own walk)
    credentials_changed = differing_plain(read.logins, logins)
    credentials_changed.update(differing(read.credentials, credentials, same=True))
    if changed or credentials_changed:
        suspects.update(b.consumer for b in bound.values()
                        if b.provider in changed or b.credential in credentials_changed)
    return suspects


def _lists(live: Live, consumer: str, entries: Mapping[str, list[BindingEntry]],
           lists_of: dict[str, tuple[Require, ...]]) -> list[BindingDecl]:
    """The BindingDecl of every requirement of live `consumer` that takes every provider (its
    parts switched on), with its `entries` (none: an empty list, a visible state) and their
    count. `lists_of` caches each module's such requirements."""
    module = live.modules[consumer]
    wanted = lists_of.get(module.name)
    if wanted is None:
        wanted = lists_of[module.name] = tuple(r for r in module.requires if r.each)
    if not wanted:
        return []
    parts = live.instances[consumer].parts
    found = []
    for req in wanted:
        if req.part is not None and req.part not in parts:
            continue
        assert req.provision is not None  # validated: `each` only with a provision
        listed = entries.get(req.as_, [])
        found.append(BindingDecl(
            consumer, req.as_, "", req.provision, FrozenMap({"count": str(len(listed))}),
            None, live.provisions[req.provision].grant, each=True, entries=pvector(listed)))
    return found


# ---------------------------------------------------------------------- the provider's end

def render_providers(live: Live, assigned: Mapping[tuple[str, str], int],
                     credentials: Mapping[str, Credential],
                     own: Mapping[tuple[str, str], SecretRef]
                     ) -> Mapping[str, PVector[ProviderDecl]]:
    """Live instance → what it provides (only those providing something with an assigned
    port), with its provisioner's admin credential (`own`: the module-own secrets) and the
    pending generation of that credential's rotation in progress."""
    providers_of: dict[str, PVector[ProviderDecl]] = {}
    for name in live.names:
        module = live.modules[name]
        if not module.provides:
            continue
        provided: list[ProviderDecl] = []
        for provide in module.provides:
            if (name, provide.listen) not in assigned:
                continue
            definition = live.provisions.get(provide.provision)
            provided.append(ProviderDecl(
                instance=name, provision=provide.provision,
                kind=definition.grant if definition is not None else "none",
                listen=provide.listen, port=assigned[(name, provide.listen)],
                container_port=live.listens_of[live.instances[name].module][provide.listen].port,
                admin=own.get((name, provide.admin)) if provide.admin else None,
                admin_pending=_pending_ref(credentials, secret_id(name, provide.admin))
                if provide.admin else None))
        if provided:
            providers_of[name] = pvector(sorted(provided, key=_provider_order))
    return FrozenMap(providers_of)


def _pending_ref(credentials: Mapping[str, Credential], cred_id: str) -> Optional[SecretRef]:
    """The pending generation of a rotation of `cred_id` in progress, or None."""
    cred = credentials.get(cred_id)
    pending = cred.pending if cred is not None else None
    return SecretRef(cred_id, pending.generation) if pending is not None else None


def _provider_order(p: ProviderDecl) -> tuple[str, str]:
    return (p.instance, p.provision)


def _binding_order(b: BindingDecl) -> tuple[str, str]:
    return (b.consumer, b.requirement)


def _grant_order(g: GrantDecl) -> tuple[str, str, str]:
    return (g.provider, g.consumer, g.provision)


class _Missing(dict[str, str]):
    """Binding values for a url template: a key it does not hold stays as `{key}`."""

    def __missing__(self, key: str) -> str:
        return "{" + key + "}"

