"""resolve(): the whole mesh state from a catalogue, a mesh description and a ledger.

Invariants:
- Pure and deterministic: the same inputs give the same Resolution, whatever the order of
  nodes, modules or instances in the input (everything is walked in sorted order).
- Resolution is a fixed sequence of pure stages (`resolution`): each is a function of the
  frozen Context (resolver/_context.py), or of the parts of it it reads, and of values the
  stages before it returned (the instances blocked so far, the floors refused, the
  bindings); it returns its findings and whatever it computed, and changes nothing it was
  handed. Problems are stated in stage order and a stage's blocks are merged into `blocked`
  before the next stage runs, so the order of problems (and of the codes a blocked instance
  lists) is that order.
- A refusal blocks exactly the instances it names (and, through bindings, their consumers);
  nothing else changes because of it. A blocked instance that was declared before (the
  ledger's `declared` holds its last written rendering) is held: its node's declaration keeps
  that rendering byte for byte, with the refusal, and a `held` problem says so. One never
  declared is absent. Only removing an instance from mesh.yaml removes what it had.
- A kept host port never moves: blocked and held instances keep theirs reserved, and a floor
  that collides with one is refused (resolver/_refusals.py).
- Issued things (ports, logins, bindings, serials) come from the ledger when recorded and are
  only added, never re-picked, so resolving with the ledger it produced is a fixed point (a
  recorded binding is kept while its provider is in mesh.yaml and its consumer still has the
  requirement, also where this resolution leaves it unbound: an optional requirement of a
  refused provider; the next resolution must not pick another).
- Every consumer, on the provider's node or not, is told the provider node's address and the
  assigned host port: the one assignment the published port and the firewall also derive from.
"""

from __future__ import annotations

from bisect import insort
from operator import attrgetter
from typing import Iterable, Mapping, Optional, Union

import attrs
from pyrsistent import pmap, pvector
from pyrsistent.typing import PVector

from . import _codes as codes
from ._assemble import Digests, Layout, assemble_reusing
from ._binding_files import check_ca_mounts
from ._check import validate
from ._collector import collector_paused
from ._differ import differing
from ._errors import InputError
from ._bound import Bound, BoundKey, credential_id
from ._context import NOTHING_BLOCKED, Blocked, Context, Findings, blocked_by
from ._declaration import (
    InstanceRendering,
    Problem,
    Request,
)
from ._held import (KeptPortsMade, held_candidates, held_instances, keeps_optional,
                    kept_ports, kept_ports_reusing, was_bound)
from ._ports import (Moved, PortsMade, assign_ports, new_ports, new_ports_reusing,
                     ports_moved)
from ._inputs import NO_SOURCES, Catalogue, Sources
from ._issue import derive_login
from ._ledger import Ledger
from ._frozen import EMPTY_FROZEN, FrozenMap, kept_or_new
from ._model import Instance, Mesh, Module, Require
from ._artifacts import (
    ARTIFACT_STORE,
    artifact_state,
    choose_artifact_store_instance,
)
from ._registry_access import MeshRegistry
from ._certs import certificate_requests
from ._tls import name_requests, tls_reason, tls_request, tls_servers
from ._names import ROUTE_PROVISION, certified_names, fqdns, served_names
from ._moves import carried
from ._refusals import (
    check_claims,
    check_defaults,
    check_floors,
    check_mesh_scope,
    check_moves,
    check_placement,
    check_public_keys,
    check_state_paths,
)
from ._firewall import check_exposures
from ._upgrades import check_upgrades
from ._backup_target import check_backup_target
from ._render import (NOTHING_KEPT, Kept, KeptLocal, local_openings_reusing,
                      render_instances_reusing)
from ._render_bindings import (KeptBindings, live_instances, own_secrets,
                               render_bindings_reusing, render_providers)
from ._resolution import Resolution
from ._select import EACH, Selection, select_every, select_provider

#: What a requirement is bound by: a provision's name, or ("module", module name).
_Wanted = Union[str, tuple[str, str]]


def resolution(r: Context) -> Resolution:
    """The stages of a resolution (resolution_reusing), keeping nothing for a later one."""
    return resolution_reusing(r, None)[0]


@attrs.frozen
class KeptBinds:
    """What bind_all made that a later run may reuse: `run`, the values every consumer's
    selection reads (the catalogue's modules and provisions, the mesh defaults, the
    candidates of each provision and required module with each candidate's node, whether that
    node is known, its refusals and its module); and by consumer, its key (its Instance and
    its recorded bindings) and what it bound. Only consumers that bound without a problem are
    kept (a problem is located through Sources, which the keys leave out)."""

    run: tuple[object, ...] = ()
    consumers: Mapping[str, tuple[tuple[object, ...], tuple[tuple[BoundKey, Bound], ...]]] = \
        EMPTY_FROZEN
    read: Optional["_BindRead"] = None
    """What the run read and returned (a later run whose `run` is equal binds again only
    the consumers a part of whose key may differ: bind_all_reusing)."""


@attrs.frozen(eq=False)
class _BindRead:
    """What one bind_all_reusing run read its consumers' keys from, and what it returned:
    every binding (`bound`), those of the consumers it bound with a problem (`refused`: not
    kept), and the placed instances."""

    instances: Mapping[str, Instance]
    recorded: Mapping[str, Mapping[str, str]]
    placed: frozenset[str]
    bound: Mapping[BoundKey, Bound]
    refused: Mapping[str, tuple[tuple[BoundKey, Bound], ...]]


@attrs.frozen
class Reused:
    """What one resolution made that the next may reuse (resolver/incremental.py holds it):
    each live instance's rendering with the key it was made from, each node's declaration
    contents and digest with their key, each consumer's parts of the bindings and its bindings
    with their keys, the requests' order, the same-node openings and MACs, the kept host
    ports, where each rendering was assembled, the new host ports."""

    renderings: Kept = NOTHING_KEPT
    digests: Digests = EMPTY_FROZEN
    bindings: KeptBindings = KeptBindings()
    binds: KeptBinds = KeptBinds()
    requests: tuple[frozenset[Request], tuple[Request, ...]] = (frozenset(), ())
    """The requests of the last run, as a set and in order (the same set: the same order)."""
    local: KeptLocal = KeptLocal()
    ports: Optional[KeptPortsMade] = None
    """The kept host ports by node, with what they were worked out from (kept_ports_reusing)."""
    layout: Optional[Layout] = None
    """Where assemble_reusing found each rendering, and the declarations it returned."""
    new_ports: Optional[PortsMade] = None
    """The ledger's new host ports, with what they were made from (new_ports_reusing)."""


def resolution_reusing(r: Context, reused: Optional[Reused]) -> tuple[Resolution, Reused]:
    """The stages of a resolution, composed in order: each is handed the frozen Context, or
    the parts of it it reads, and what it needs of the stages before it (the instances
    blocked so far, the floors refused, the bindings, the ports, the live instances, the
    parts of the renderings) and returns what it finds as values; the problems are stated
    in this order and each stage's blocks join `blocked` before the next stage asks.
    `reused`: what a previous resolution rendered and digested (None: keep nothing); with it,
    what this one made is returned for the next (Reused), and the Resolution is the same."""
    placement = check_placement(r)
    moves, changes = check_moves(r)
    upgrades, upgrade_changes = check_upgrades(r)  # resolver/_upgrades.py
    upgrades = upgrades + check_backup_target(r)  # resolver/_backup_target.py
    changes = changes + upgrade_changes
    stated, blocked = _stated((), NOTHING_BLOCKED, placement + moves + upgrades)
    stated, blocked = _stated(stated, blocked, check_mesh_scope(r, blocked))
    # node → host port → its holder: what floors and fixed ports meet
    ports_made: Optional[KeptPortsMade] = None
    kept: Mapping[str, Mapping[int, str]]
    if reused is None:
        kept = kept_ports(r.ledger.ports, r.instances, r.declared)
    else:
        kept, ports_made = kept_ports_reusing(r.ledger.ports, r.instances, r.declared,
                                              reused.ports)
    floor_conflicts, floors = check_floors(r, kept)  # the floors not applied
    stated, blocked = _stated(stated, blocked, floor_conflicts)
    stated, blocked = _stated(stated, blocked, check_claims(r, blocked, floors, kept))
    stated, blocked = _stated(stated, blocked, check_state_paths(r, blocked))
    stated, blocked = _stated(stated, blocked, check_ca_mounts(r, blocked))
    stated, blocked = _stated(stated, blocked, check_defaults(r))
    stated, blocked = _stated(stated, blocked, check_exposures(r))
    bound, unbound, kept_binds = bind_all_reusing(
        r, blocked, reused.binds if reused is not None else None)
    stated, blocked = _stated(stated, blocked, unbound)
    bound, propagated = propagate_blocks(r, blocked, bound)
    stated, blocked = _stated(stated, blocked, propagated)
    assigned, moved, exhausted = assign_ports(r, blocked, floors)
    stated, blocked = _stated(stated, blocked, exhausted)
    bound, propagated = propagate_blocks(r, blocked, bound)  # a port-range refusal too
    stated, blocked = _stated(stated, blocked, propagated)
    # no block is added after this point: `blocked` is final
    registry = mesh_registry(r, blocked, assigned)
    logins = assign_logins(r.recorded_logins, bound)
    live = live_instances(r.placed(blocked), r.instances, r.modules_of, r.mesh.nodes,
                          r.catalogue.modules, r.catalogue.provisions, fqdns(r.mesh),
                          r.mesh.domain)
    own = own_secrets(live, r.credentials)
    consumed, kept_bindings = render_bindings_reusing(
        live, bound, assigned, logins, r.credentials, own.refs,
        reused.bindings if reused is not None else None)
    providers = render_providers(live, assigned, r.credentials, own.refs)
    local, kept_local = local_openings_reusing(r.mesh.mesh, live, bound, assigned,
                                               reused.local if reused is not None else None,
                                               consumed.same, consumed.decls.keys())
    servers = tls_servers(live.names, live.modules, live.node_of,
                          registry.instance if registry is not None else None)
    served, name_holders = served_names(
        ((consumer, provider) for (consumer, _as, provider), b in bound.items()
         if b.requirement.provision == ROUTE_PROVISION and consumer in servers),
        live.node_of, live.fqdn_of)
    # with acme the ingress gets its names' certificates itself: none from the mesh CA
    served, name_holders = certified_names(r.mesh, served), certified_names(r.mesh, name_holders)
    # the instances whose host ports are not the last run's: worked out once, for the
    # renderings and the ledger's ports
    moved_ports: Optional[Moved] = None
    if reused is not None and reused.new_ports is not None:
        before = reused.new_ports.assigned
        moved_ports = (before, ports_moved(before, assigned))
    renderings, kept_renderings = render_instances_reusing(
        live, r.mesh, r.ledger, registry, assigned, own.refs, consumed, providers, local,
        servers, served, reused.renderings if reused is not None else None,
        r.catalogue.modules, moved_ports)
    renderings = carried(r, renderings)  # moves that carry their state (resolver/_moves.py)
    bindings, rendered = consumed.bindings, own.requests + consumed.requests
    # the rest of what those stages returned is in the renderings now: let it go, so a large
    # mesh keeps no second set of it alive (for the collector to walk) while the rest runs
    del live, own, consumed, providers, local
    held, held_problems = held_instances(r, blocked, stated)
    declarations, accounts, digests, layout = assemble_reusing(
        r, floors, renderings, held, registry, reused.digests if reused is not None else None,
        reused.layout if reused is not None else None)
    # every request of every stage, merged here (duplicates kept: the count per node
    # check_public_keys states is of requests made, as it always was)
    all_requests = [*rendered, *accounts,
                    *certificate_requests(r.mesh, r.ledger, r.now),
                    *tls_requests(r.mesh, r.ledger, r.now, servers),
                    *name_requests(r.mesh, r.ledger, r.now, name_holders)]
    problems = stated + held_problems + check_public_keys(r, all_requests)
    new_bindings: dict[str, dict[str, str]] = {}
    for (consumer, as_, _provider), b in bound.items():
        if not b.requirement.each:  # a list follows the mesh: its logins are what is kept
            new_bindings.setdefault(consumer, {})[as_] = b.provider
    for consumer, recorded in r.recorded_bindings.items():
        if consumer in r.instances and consumer not in blocked:
            mine = new_bindings.setdefault(consumer, {})
            if not mine.keys() >= recorded.keys():  # (else every one is bound: none to keep)
                _keep_unbound_records(r, consumer, recorded, mine)
            if not mine:
                del new_bindings[consumer]
    for consumer, recorded in r.recorded_bindings.items():  # (the ledger's, in its order)
        if consumer in blocked and consumer in r.mesh.instances:
            new_bindings[consumer] = dict(recorded)  # kept while it is refused
    live_creds = set(logins)
    kept_logins = {k: v for k, v in r.ledger.logins.items()
                   if k not in live_creds and _credential_parties_present(r, k)}
    ports_kept: Optional[PortsMade] = None
    if reused is None:
        ports, released = new_ports(r, blocked, assigned)
    else:
        ports, released, ports_kept = new_ports_reusing(r, blocked, assigned, reused.new_ports,
                                                        moved_ports)
    ledger = attrs.evolve(
        r.ledger,
        ports=kept_or_new(ports, r.ledger.ports),
        bindings=kept_or_new({k: kept_or_new(v, r.ledger.bindings.get(k))
                            for k, v in new_bindings.items()}, r.ledger.bindings),
        logins=kept_or_new({**kept_logins, **logins}, r.ledger.logins),
        # (the ledger's own map when no instance of it is gone: 10,000 entries not copied)
        declared=r.ledger.declared if all(k in r.instances for k in r.declared)
        else pmap({k: v for k, v in r.ledger.declared.items() if k in r.instances}),
    )
    made_requests = frozenset(all_requests)
    requests = _request_order_reusing(made_requests, reused.requests) if reused is not None \
        else _request_order(made_requests)
    return Resolution(
        declarations=declarations,
        bindings=pvector(bindings),  # (rendered in (consumer, requirement) order)
        problems=pvector(sorted(set(problems), key=_problem_order)),
        requests=pvector(requests),
        changes=pvector(sorted(set(changes + moved + released))),
        ledger=ledger,
        artifacts=artifact_state(r.catalogue, r.mesh, r.ledger,
                                 registry.address if registry is not None else None),
        registry=registry.address if registry is not None else None,
        registry_instance=registry.instance if registry is not None else None,
        renderings=renderings,
    ), Reused(kept_renderings, digests, kept_bindings, kept_binds,
              (made_requests, tuple(requests)) if reused is not None else (frozenset(), ()),
              kept_local, ports_made, layout, ports_kept)


def _keep_unbound_records(r: Context, consumer: str, recorded: Mapping[str, str],
                          bindings: dict[str, str]) -> None:
    """Add to `bindings` (a live consumer's new ones) each recorded binding of a requirement it
    still has (not `each`, its part on) that this resolution left unbound while the recorded
    provider is still in mesh.yaml (refused, say, or on an unknown node): the next resolution
    must not pick another (never silently rebound); the record goes with the provider or the
    requirement."""
    if bindings.keys() >= recorded.keys():
        return  # every recorded requirement is bound by this resolution: nothing to keep
    inst, module = r.instances[consumer], r.placed_module(consumer)
    wanted = {q.as_ for q in module.requires
              if not q.each and (q.part is None or q.part in inst.parts)}
    for as_, provider in recorded.items():
        if as_ in wanted and as_ not in bindings and provider in r.instances:
            bindings[as_] = provider


def _request_order(requests: Iterable[Request]) -> list[Request]:
    """`requests` ordered by kind, id, reason, holders, slot (none first). One stable sort per
    field, the last field first: the same order as one sort by a tuple of them, without a key
    tuple alive for every request while the sort runs (on a large mesh, tens of thousands of
    objects for the collector)."""
    ordered = sorted(requests, key=_slot_text)
    for field in ("holders", "reason", "id", "kind"):  # PVectors compare as tuples do
        ordered.sort(key=attrgetter(field))
    return ordered


def _request_order_reusing(requests: frozenset[Request],
                           before: tuple[frozenset[Request], tuple[Request, ...]]
                           ) -> list[Request]:
    """_request_order(requests), from the set a previous run ordered and its order (`before`):
    its requests still made keep their order, and the few new ones are put in their places."""
    if requests == before[0]:
        return list(before[1])
    new = requests - before[0]
    if len(new) * 8 > len(requests):
        return _request_order(requests)  # (many new ones: one sort is as quick)
    ordered = [q for q in before[1] if q in requests]
    for request in new:
        insort(ordered, request, key=_request_key)
    return ordered


def _request_key(request: Request) -> tuple[str, str, str, PVector[str], str]:
    return (request.kind, request.id, request.reason, request.holders, request.slot or "")


def _slot_text(request: Request) -> str:
    return request.slot or ""


def _stated(stated: Findings, blocked: Blocked, found: Findings) -> tuple[Findings, Blocked]:
    """(the problems stated so far, the instances blocked so far) after a stage's findings."""
    return stated + found, blocked_by(blocked, found)


# ---------------------------------------------------------------------- bindings

def candidates_index(r: Context, held: dict[str, InstanceRendering]
                     ) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """(provision → instances providing it, module → its instances), in name order; a held
    instance whose module is unknown provides what its rendering says."""
    by_provision: dict[str, list[str]] = {}
    by_module: dict[str, list[str]] = {}
    modules_of = r.modules_of
    provides_of: dict[str, list[str]] = {}  # module name → the provisions it provides
    for name in r.names:  # blocked providers stay candidates: see propagate_blocks
        module = modules_of[name]
        if module is None:  # a held one still provides what its rendering says
            provides = [p.provision for p in held[name].providers] if name in held else []
        else:
            by_module.setdefault(module.name, []).append(name)
            known = provides_of.get(module.name)  # (an empty list too: made once)
            provides = known if known is not None else provides_of.setdefault(
                module.name, [p.provision for p in module.provides])
        for provision in provides:
            lst = by_provision.setdefault(provision, [])
            if not lst or lst[-1] != name:  # (names come in order: a repeat is the last)
                lst.append(name)
    return by_provision, by_module


def bind_all(r: Context, blocked: Blocked) -> tuple[dict[BoundKey, Bound], Findings]:
    """((consumer, as, provider) → its Bound for every requirement of a live instance that a
    provider serves (every provider in scope of one that says `each`), the refusals and
    warnings of those none can serve). `blocked`: the instances refused so far (they bind
    nothing; they stay candidate providers, except of a requirement taking every provider)."""
    bound, found, _ = bind_all_reusing(r, blocked, None)
    return bound, found


def bind_all_reusing(r: Context, blocked: Blocked, kept: Optional[KeptBinds]
                     ) -> tuple[dict[BoundKey, Bound], Findings, KeptBinds]:
    """bind_all, reusing what a previous run bound (`kept`; None: keep nothing, make no
    keys): a consumer whose key equals the kept one, in a run whose KeptBinds.run equals the
    kept one, gets the kept bindings (the same objects); what this run made is returned. In
    such a run, with what the kept run read (KeptBinds.read), only the consumers placed in
    one of the two runs and not the other, not kept, or whose Instance or recorded bindings
    are not the very ones read are walked; every other one's key is the kept one (made of
    those very objects), and its bindings are taken from what the kept run returned."""
    held = held_candidates(r, blocked)
    by_provision, by_module = candidates_index(r, held)
    instances, modules_of = r.instances, r.modules_of
    instance_nodes = {n: instances[n].node for n in r.names if modules_of[n] is not None}
    instance_nodes.update({n: rendering.node for n, rendering in held.items()})
    keeping = kept is not None
    run: tuple[object, ...] = ()
    made: dict[str, tuple[tuple[object, ...], tuple[tuple[BoundKey, Bound], ...]]] = {}
    # the modules some module requires (a requirement of a placed instance names no other)
    required = sorted({q.module for m in r.catalogue.modules.values() for q in m.requires
                       if q.module is not None})
    modules = {m: by_module[m] for m in required if m in by_module}
    if keeping:
        serving = {c for names in (*by_provision.values(), *modules.values()) for c in names}
        run = (r.catalogue.modules, r.catalogue.provisions, r.mesh.defaults, by_provision,
               modules, {c: (instance_nodes.get(c), instance_nodes.get(c) in r.nodes,
                             blocked.get(c), r.modules_of.get(c) and r.instances[c].module)
                         for c in sorted(serving)})
        if kept is not None and kept.run != run:
            kept = None  # what every selection reads changed: nothing is reused
    bound: dict[BoundKey, Bound] = {}
    found: list[Problem] = []
    # (what, node) → candidates on it, and what → its candidates as a set: of the provisions
    # and the required modules (what a requirement can name), made when a consumer is bound
    # anew (none when every one is reused)
    local_index: dict[tuple[_Wanted, str], list[str]] = {}
    sets: dict[_Wanted, set[str]] = {}
    by_wanted: list[tuple[_Wanted, list[str]]] = [
        *by_provision.items(), *((("module", m), n) for m, n in modules.items())]
    provisions = dict(r.catalogue.provisions)
    defaults = dict(r.mesh.defaults)  # (plain dicts: a miss in a PMap costs a raised KeyError)
    # (provider's module, provision, listen asked) → the listen serving it
    listens: dict[tuple[str, Optional[str], Optional[str]], str] = {}
    placed = r.placed(blocked)
    walk: Iterable[str] = placed
    unkept: dict[str, tuple[tuple[BoundKey, Bound], ...]] = {}  # bound with a problem
    placed_now: frozenset[str] = frozenset(placed) if keeping else frozenset()
    if kept is not None and kept.read is not None:
        # the same run: only the consumers placed anew or no longer, and those whose
        # Instance or recorded bindings are not the very ones read, are walked (the others'
        # keys are the kept ones: what they bound is taken as it is)
        read = kept.read
        todo = set(placed_now ^ read.placed)
        todo.update(placed_now - kept.consumers.keys())
        if read.instances is not instances:
            was_instances = read.instances
            todo.update(n for n, i in instances.items() if was_instances.get(n) is not i)
        todo.update(differing(read.recorded, r.recorded_bindings, same=True))
        bound = dict(read.bound)
        made = dict(kept.consumers)
        unkept = dict(read.refused)
        for name in todo:  # what they bound is bound again (or not: no longer placed)
            kept_one = made.pop(name, None)
            for bound_key, _ in kept_one[1] if kept_one is not None \
                    else unkept.pop(name, ()):
                bound.pop(bound_key, None)
        walk = sorted(todo & placed_now)
    for name in walk:
        inst = instances[name]
        recorded = r.recorded_bindings.get(name)
        consumer_key: tuple[object, ...] = ()
        if keeping:
            consumer_key = (inst, recorded)
            before = kept.consumers.get(name) if kept is not None else None
            if before is not None and before[0] == consumer_key:
                bound.update(before[1])
                made[name] = before
                continue
            first_found = len(found)
        if not sets and by_wanted:  # the first consumer bound anew: make the indexes
            for wanted, names in by_wanted:
                for n in names:
                    local_index.setdefault((wanted, instance_nodes[n]), []).append(n)
                sets[wanted] = set(names)
        module = r.placed_module(name)
        overrides = dict(inst.bind) if inst.bind else None
        mine: list[tuple[BoundKey, Bound]] = []  # this consumer's, in the order bound
        for index, req in enumerate(module.requires):
            if req.part is not None and req.part not in inst.parts:
                continue
            if req.provision is not None:
                candidates = by_provision.get(req.provision, [])
                if req.provision not in provisions:
                    found.append(r.problem(
                        codes.UNKNOWN_PROVISION,
                        f"{name} requires provision {req.provision!r}, which "
                        f"provisions.yaml does not define",
                        doc=f"module:{module.name}", path=("requires", index),
                        instance=name, requirement=req.as_,
                        blocks=[] if req.optional else [name]))
                    continue
                key: _Wanted = req.provision
            else:
                assert req.module is not None, req  # validated: a provision or a module
                candidates = by_module.get(req.module, [])
                key = ("module", req.module)
            local = local_index.get((key, inst.node), [])
            if name in sets.get(key, ()):  # an instance never serves itself
                candidates = [c for c in candidates if c != name]
                local = [c for c in local if c != name]
            what = req.provision or f"module {req.module}"
            if req.each:
                every, refused = bind_every(r, name, module, index, req, candidates,
                                            instance_nodes, blocked, overrides, listens)
                found.extend(refused)
                mine.extend(((name, req.as_, b.provider), b) for b in every)
                continue
            selection = select_provider(
                consumer_node=inst.node,
                override=overrides.get(req.as_) if overrides is not None else None,
                manifest=req.provider,
                recorded=recorded.get(req.as_) if recorded is not None else None,
                default=defaults.get(req.provision) if req.provision else None,
                candidates=candidates, instance_nodes=instance_nodes, known_nodes=r.nodes,
                local=local)
            if selection.provider is None:
                found.append(refuse_requirement(r, name, module, index, req, what, selection))
                continue
            if r.module_of(selection.provider) is None:
                # a held provider whose module is unknown now: it serves nothing new, and
                # what it served stays held with it
                named = selection.provider
                optional = req.optional and not was_bound(r, name, req.as_, named)
                found.append(r.problem(
                    codes.BLOCKED_BY_PROVIDER,
                    f"{name} requires {what} ({req.as_}) from {named} "
                    f"({selection.chosen_by}), which is itself refused "
                    f"({', '.join(blocked[named])}) and held",
                    doc=f"module:{module.name}", path=("requires", index),
                    instance=name, requirement=req.as_,
                    severity="warning" if optional else "error",
                    blocks=[] if optional else [name]))
                continue
            served = (r.placed_module(selection.provider).name, req.provision, req.listen)
            listen = listens.get(served)
            if listen is None:  # the same for every provider of the module: found once
                listen = listens[served] = serving_listen(r, selection.provider, req)
            assert selection.chosen_by is not None  # a chosen provider names its rule
            kind, credential = "none", None
            if req.provision is not None:
                kind = provisions[req.provision].grant
                if kind != "none":
                    credential = credential_id(req.provision, selection.provider, name)
            mine.append(((name, req.as_, selection.provider), Bound(
                name, req, selection.provider, selection.chosen_by, listen, kind, credential)))
        bound.update(mine)
        if keeping and len(found) == first_found:
            made[name] = (consumer_key, tuple(mine))
        elif keeping:
            unkept[name] = tuple(mine)
    if not keeping:
        return bound, tuple(found), KeptBinds()
    return bound, tuple(found), KeptBinds(run, FrozenMap(made), _BindRead(
        instances, r.recorded_bindings, placed_now, bound, unkept))


def bind_every(r: Context, name: str, module: Module, index: int, req: Require,
               candidates: list[str], instance_nodes: Mapping[str, str], blocked: Blocked,
               overrides: Optional[Mapping[str, str]],
               listens: dict[tuple[str, Optional[str], Optional[str]], str]
               ) -> tuple[list[Bound], list[Problem]]:
    """(one Bound per provider in scope, the refusals) of requirement `req` (the `index`th of
    `module`) of instance `name`, which takes every provider (`each: true`): the providers are
    chosen by select_every alone; each gets its own credential. A `bind:` of it, or fewer
    providers than its `at-least`, refuses the consumer. `listens` caches the serving listen
    by (provider's module, provision, listen asked)."""
    assert req.provision is not None  # validated: `each` only with a provision
    if overrides is not None and req.as_ in overrides:
        return [], [r.problem(
            codes.BIND_ON_EACH,
            f"{name} binds {req.as_} to {overrides[req.as_]}, but requirement {req.as_} takes "
            f"every provider of {req.provision} (each: true): remove it from `bind:`",
            path=("instances", name, "bind", req.as_), instance=name, requirement=req.as_,
            blocks=[name])]
    node = r.instances[name].node
    providers = select_every(consumer=name, consumer_node=node, within=req.within,
                             candidates=candidates, instance_nodes=instance_nodes,
                             known_nodes=r.nodes, refused=blocked)
    if len(providers) < req.at_least:
        scope = f"on node {node}" if req.within == "node" else "in the mesh"
        return [], [r.problem(
            codes.TOO_FEW_PROVIDERS,
            f"{name} requires at least {req.at_least} provider"
            f"{'s' if req.at_least != 1 else ''} of {req.provision} "
            f"({req.as_}) {scope} and has {len(providers)}"
            + (f": {', '.join(providers)}" if providers else ""),
            doc=f"module:{module.name}", path=("requires", index, "at-least"),
            instance=name, requirement=req.as_, state=codes.TOO_FEW_PROVIDERS,
            candidates=providers, blocks=[name])]
    kind = r.catalogue.provisions[req.provision].grant
    every = []
    for provider in providers:
        served = (r.placed_module(provider).name, req.provision, req.listen)
        listen = listens.get(served)
        if listen is None:
            listen = listens[served] = serving_listen(r, provider, req)
        credential = credential_id(req.provision, provider, name) if kind != "none" else None
        every.append(Bound(name, req, provider, EACH, listen, kind, credential))
    return every, []


def serving_listen(r: Context, provider: str, req: Require) -> str:
    """The listen of `provider` that serves `req`: the provision's, else the one the
    requirement names, else the module's first."""
    module = r.placed_module(provider)
    if req.provision is not None:
        return next(p.listen for p in module.provides if p.provision == req.provision)
    return req.listen or sorted(module.listens)[0]


def refuse_requirement(r: Context, name: str, module: Module, index: int, req: Require,
                       what: str, selection: Selection) -> Problem:
    """The problem of a requirement no provider can serve, at the input that decided it; it
    blocks the consumer unless the requirement is optional and may stay unbound."""
    path: tuple[str | int, ...]
    if selection.rule == "instance override":
        doc, path = "mesh", ("instances", name, "bind", req.as_)
    elif selection.rule == "manifest":
        doc, path = f"module:{module.name}", ("requires", index, "provider")
    else:
        doc, path = f"module:{module.name}", ("requires", index)
    state = selection.state
    assert state is not None  # a refusal names its state
    if state == codes.AMBIGUOUS_PROVIDER:
        message = (f"{name} requires {what} ({req.as_}) and several providers could serve "
                   f"it: {', '.join(selection.candidates)}; name one with `bind: "
                   f"{{{req.as_}: INSTANCE}}` on the instance or set a mesh default")
    elif state == codes.NO_PROVIDER:
        message = f"{name} requires {what} ({req.as_}) and nothing in the mesh provides it"
    elif state == codes.PROVIDER_NOT_ASSIGNED:
        message = (f"{name} requires {what} ({req.as_}) from {selection.named} "
                   f"({selection.rule}), which is not assigned to any node")
    elif state == codes.NOT_A_PROVIDER:
        message = (f"{name} requires {what} ({req.as_}) from {selection.named} "
                   f"({selection.rule}), which does not provide it")
    else:
        assert selection.named is not None  # PROVIDER_NODE_UNKNOWN names the instance
        message = (f"{name} requires {what} ({req.as_}) from {selection.named}, whose node "
                   f"{r.instances[selection.named].node!r} is not in the mesh")
    if req.optional and not keeps_optional(r, name, req, selection):
        return r.problem(state, message + "; the requirement is optional, so it stays unbound",
                         doc=doc, path=path, instance=name, requirement=req.as_,
                         severity="warning", state=state, candidates=selection.candidates)
    return r.problem(state, message, doc=doc, path=path, instance=name, requirement=req.as_,
                     state=state, candidates=selection.candidates, blocks=[name])


def propagate_blocks(r: Context, blocked: Blocked, bound: dict[BoundKey, Bound]
                     ) -> tuple[dict[BoundKey, Bound], Findings]:
    """(the bindings whose consumer and provider are both live, the refusals of consumers
    of a blocked provider): such a consumer is blocked too (it could not start honestly),
    and so, in turn, are its own consumers. A requirement that takes every provider loses the
    entry of a blocked provider instead, and blocks its consumer only when fewer than its
    `at-least` are left. `bound` is not changed."""
    if not blocked or not any(b.provider in blocked or b.consumer in blocked
                              for b in bound.values()):
        return bound, ()  # no binding touches a refused instance: nothing to drop or refuse
    now: dict[str, tuple[str, ...]] = dict(blocked)  # blocked so far, within this stage
    found: list[Problem] = []
    ordered = sorted(bound)  # (the keys sorted once: no (key, value) pair made for each)
    lists: dict[tuple[str, str], list[str]] = {}  # (consumer, as) → its providers (`each`)
    for consumer, as_, provider in ordered:
        if bound[(consumer, as_, provider)].requirement.each:
            lists.setdefault((consumer, as_), []).append(provider)
    changed = True
    while changed:
        changed = False
        for key in ordered:
            b = bound[key]
            consumer, as_, _provider = key
            if consumer not in now and b.provider in now:
                if b.requirement.optional and not was_bound(r, consumer, as_, b.provider):
                    continue
                left = [p for p in lists.get((consumer, as_), ()) if p not in now]
                if b.requirement.each and len(left) >= b.requirement.at_least:
                    continue  # the list goes on without it
                module = r.placed_module(consumer)
                index = list(module.requires).index(b.requirement)
                why = (f"; at least {b.requirement.at_least} are required and "
                       f"{len(left)} are left" if b.requirement.each else "")
                problem = r.problem(
                    codes.BLOCKED_BY_PROVIDER,
                    f"{consumer} requires {b.requirement.provision or b.requirement.module}"
                    f" ({as_}) from {b.provider}, which is itself refused "
                    f"({', '.join(now[b.provider])}){why}",
                    doc=f"module:{module.name}", path=("requires", index),
                    instance=consumer, requirement=as_, blocks=[consumer])
                found.append(problem)
                now[consumer] = now.get(consumer, ()) + (problem.code,)
                changed = True
    def live(b: Bound) -> bool:
        return b.consumer not in now and b.provider not in now

    if all(live(b) for b in bound.values()):
        return bound, tuple(found)  # (nothing to drop: the same bindings, not a copy)
    return {k: b for k, b in bound.items() if live(b)}, tuple(found)


# ---------------------------------------------------------------------- logins

def assign_logins(recorded: Mapping[str, str], bound: Mapping[BoundKey, Bound]
                  ) -> dict[str, str]:
    """Credential id → its login for every binding that carries a credential: the one the
    ledger records (`recorded`), else a new one derived (unique among the logins recorded and
    given)."""
    logins: dict[str, str] = {}
    used: Optional[set[str]] = None  # the logins taken: made when the first is derived
    # in (consumer, as, provider) order: the keys sorted, made once
    for b in map(bound.__getitem__, sorted(bound)):
        credential = b.credential
        if credential is None or credential in logins:
            continue
        login = recorded.get(credential)
        if not login:
            if used is None:
                used = set(recorded.values())
            login = derive_login(credential, b.consumer, used)
        logins[credential] = login
    return logins


def _credential_parties_present(r: Context, cred_id: str) -> bool:
    parts = cred_id.split("/")
    return len(parts) == 3 and parts[1] in r.mesh.instances and parts[2] in r.mesh.instances


# ---------------------------------------------------------------------- artifacts

def mesh_registry(r: Context, blocked: Blocked, assigned: dict[tuple[str, str], int]
                  ) -> Optional[MeshRegistry]:
    """The mesh's own artifact store (choose_artifact_store_instance decides which), when
    one serves: declared live with an assigned port, or held (it still serves)."""
    stores: dict[str, str] = {}
    nodes: dict[str, str] = {}
    for name in r.placed(blocked):
        for provide in r.placed_module(name).provides:
            if provide.provision == ARTIFACT_STORE:
                port = assigned.get((name, provide.listen))
                if port is not None:
                    node = r.instances[name].node
                    stores[name] = f"{r.mesh.nodes[node].address}:{port}"
                    nodes[name] = node
    for name, rendering in held_candidates(r, blocked).items():  # held, it still serves
        for served in rendering.providers:
            if served.provision == ARTIFACT_STORE:
                stores.setdefault(
                    name, f"{r.mesh.nodes[rendering.node].address}:{served.port}")
                nodes.setdefault(name, rendering.node)
    chosen = choose_artifact_store_instance(stores, r.mesh.defaults.get(ARTIFACT_STORE))
    return None if chosen is None else MeshRegistry(stores[chosen], chosen, nodes[chosen])


def tls_requests(mesh: Mesh, ledger: Ledger, now: Optional[str],
                 servers: Mapping[str, tuple[str, str]]) -> list[Request]:
    """The server certificate of each TLS server (instance → (node, key owner)) that must be
    issued (resolver/_tls)."""
    requests: list[Request] = []
    for instance, (node, _) in sorted(servers.items()):
        reason = tls_reason(mesh, ledger, instance, node, now)
        if reason is not None:
            requests.append(tls_request(instance, node, reason))
    return requests


def _problem_order(p: Problem) -> tuple[str, str, str, str]:
    return (p.instance or "", p.requirement or "", p.code, p.message)


def resolve(catalogue: Catalogue, mesh: Mesh, ledger: Ledger, *, sources: Sources = NO_SOURCES,
            now: Optional[str] = None, checked: bool = False) -> Resolution:
    """Resolve the whole mesh. `now` (ISO 8601, UTC) enables certificate renewal windows.

    The inputs are validated first (validate(), the rules loading applies): inputs with faults
    raise InputError with every fault; everything else is a problem in the Resolution.
    `checked=True` says the caller has validated them already and skips that (a test feeding
    the renderer names no document may hold does it knowingly).

    CPython's cyclic garbage collector is paused while it runs and the caller's setting
    (enabled or disabled) is restored when it returns or raises (resolver/_collector.py): a
    resolution creates no reference cycle, so nothing it drops waits for the collector, and
    the collections the default thresholds would trigger would only rescan the objects it is
    building. The setting is process-wide: another thread's collections wait for it too."""
    with collector_paused():
        if not checked:
            faults = validate(catalogue, mesh, ledger, sources)
            if faults:
                raise InputError(faults)
        return resolution(Context.of(catalogue, mesh, ledger, sources, now))


# What the package's root takes from this module (resolver/__init__.py joins these lists).
__all__ = ["resolve"]
