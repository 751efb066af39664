"""resolve(): the whole mesh state from a catalogue, a mesh description and a ledger.

Invariants:
- Pure and deterministic: the same inputs give the same Resolution, whatever the order of
  nodes, modules or instances in the input (everything is walked in sorted order).
- A refusal blocks exactly the instances it names (and, through bindings, their consumers);
  nothing else changes because of it. A blocked instance that was declared before (the
  ledger's `declared` holds its last written rendering) is held: its node's declaration keeps
  that rendering byte for byte, with the refusal, and a `held` problem says so. One never
  declared is absent. Only removing an instance from mesh.yaml removes what it had.
- A kept host port never moves: blocked and held instances keep theirs reserved, and a floor
  that collides with one is refused (resolver/_refusals.py).
- Issued things (ports, logins, bindings, serials) come from the ledger when recorded and are
  only added, never re-picked, so resolving with the ledger it produced is a fixed point.
- Every consumer, on the provider's node or not, is told the provider node's address and the
  assigned host port: the one assignment the published port and the firewall also derive from.
"""

from __future__ import annotations

from typing import Container, Iterable, Optional, Union

import attrs
from pyrsistent import pmap, pvector

from . import _codes as codes
from ._assemble import assemble
from ._check import validate
from ._errors import InputError
from ._bound import Bound, credential_id
from ._declaration import (
    InstanceRendering,
    Problem,
    Request,
)
from ._held import held_candidates, held_instances, keeps_optional, was_bound
from ._ports import assign_ports, new_ports
from ._inputs import NO_SOURCES, Catalogue, Sources
from ._issue import derive_login
from ._ledger import Ledger
from ._model import Mesh, Module, Require
from ._artifacts import (
    ARTIFACT_STORE,
    artifact_state,
    choose_artifact_store_instance,
)
from ._registry_access import MeshRegistry
from ._certs import certificate_requests
from ._tls import tls_reason, tls_request
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
from ._render import render_instances
from ._resolution import Resolution
from ._select import Selection, select_provider

#: What a requirement is bound by: a provision's name, or ("module", module name).
_Wanted = Union[str, tuple[str, str]]


class _Resolver:
    def __init__(self, catalogue: Catalogue, mesh: Mesh, ledger: Ledger, sources: Sources,
                 now: Optional[str]) -> None:
        self.catalogue: Catalogue = catalogue
        self.mesh: Mesh = mesh
        self.ledger: Ledger = ledger
        self.sources: Sources = sources
        self.now: Optional[str] = now
        self.problems: list[Problem] = []
        self.blocked: dict[str, list[str]] = {}  # instance → codes that block it
        self.names = sorted(mesh.instances)
        self.nodes = set(mesh.nodes)
        # plain dicts for the hot lookups: a pmap lookup costs several times a dict's
        self.instances = dict(mesh.instances)
        self.modules = dict(catalogue.modules)
        self._module_of = {n: self.modules.get(i.module) for n, i in self.instances.items()}
        self.recorded_bindings = {k: dict(v) for k, v in ledger.bindings.items()}
        self.recorded_ports = {k: dict(v) for k, v in ledger.ports.items()}
        self.recorded_logins = dict(ledger.logins)
        self.credentials = dict(ledger.credentials)
        self.recorded_providers = {p for v in self.recorded_bindings.values() for p in v.values()}
        self.refused_floors: set[int] = set()  # indexes of mesh floors not applied
        self.ssh_conflicts: set[str] = set()  # nodes whose ssh-port is a kept host port

    # ------------------------------------------------------------------ problems

    def problem(self, code: str, message: str, *, doc: str = "mesh",
                path: tuple[str | int, ...] = (), instance: Optional[str] = None,
                requirement: Optional[str] = None, severity: str = "error",
                state: Optional[str] = None, candidates: Iterable[str] = (),
                blocks: Iterable[str] = (), at_key: bool = False) -> None:
        """State a problem at `path` of document `doc`; each instance in `blocks` is refused
        (blocked) by it."""
        file, line, col = self.sources.where(doc, *path, at_key=at_key)
        self.problems.append(Problem(
            code=code, severity=severity, message=message, instance=instance,
            requirement=requirement, file=file, line=line, col=col, state=state,
            candidates=pvector(sorted(candidates)), blocks=pvector(sorted(blocks))))
        for name in blocks:
            self.blocked.setdefault(name, []).append(code)

    def module_of(self, name: str) -> Optional[Module]:
        return self._module_of[name]

    def placed_module(self, name: str) -> Module:
        """The module of a placed instance (check_placement refused every instance whose
        module the catalogue does not hold, so a placed one always has one)."""
        module = self._module_of[name]
        assert module is not None, name
        return module

    def live(self, name: str) -> bool:
        return name not in self.blocked

    # ------------------------------------------------------------------ placement

    def image_digest(self, module: Module, artifact_name: str) -> Optional[str]:
        artifact = module.artifacts.get(artifact_name)
        if artifact is None:
            return None
        if artifact.repository:
            return self.ledger.pins.get(f"{artifact.repository}:{artifact.tag}")
        record = self.ledger.builds.get(f"{module.name}/{artifact_name}")
        return record.digest if record else None

    def placed(self) -> list[str]:
        return [n for n in self.names if self.live(n)]

    # ------------------------------------------------------------------ singular things

    def first_holder(self, names: list[str], held: Container[str] = ()) -> str:
        """The instance that keeps a singular thing: a held one, else one already recorded,
        else the first."""
        recorded = [n for n in names if n in self.recorded_ports or n in self.recorded_bindings
                    or n in self.recorded_providers or n in self.ledger.declared]
        return sorted([n for n in names if n in held] or recorded or names)[0]

    def floor_ports(self, node: str) -> set[tuple[int, str]]:
        """The floors a node keeps that no kept host port collides with (check_floors)."""
        ports: set[tuple[int, str]] = (
            set() if node in self.ssh_conflicts else {(self.mesh.nodes[node].ssh_port, "tcp")})
        ports.update((f.port, f.protocol) for i, f in enumerate(self.mesh.floors)
                     if i not in self.refused_floors)
        return ports

    # ------------------------------------------------------------------ bindings

    def candidates_index(self, held: dict[str, InstanceRendering]
                         ) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
        by_provision: dict[str, list[str]] = {}
        by_module: dict[str, list[str]] = {}
        for name in self.names:  # blocked providers stay candidates: see propagate_blocks
            module = self.module_of(name)
            if module is None:  # a held one still provides what its rendering says
                provides = [p.provision for p in held[name].providers] if name in held else []
            else:
                by_module.setdefault(module.name, []).append(name)
                provides = [p.provision for p in module.provides]
            for provision in provides:
                lst = by_provision.setdefault(provision, [])
                if name not in lst:
                    lst.append(name)
        return by_provision, by_module

    def bind_all(self) -> dict[tuple[str, str], Bound]:
        held = held_candidates(self)
        by_provision, by_module = self.candidates_index(held)
        instance_nodes = {n: self.instances[n].node for n in self.names
                          if self.module_of(n) is not None}
        instance_nodes.update({n: rendering.node for n, rendering in held.items()})
        bound: dict[tuple[str, str], Bound] = {}
        local_index: dict[tuple[_Wanted, str], list[str]] = {}  # (what, node) → candidates on it
        by_wanted: list[tuple[_Wanted, list[str]]] = [*by_provision.items()]
        for wanted, names in by_wanted + [(("module", m), n) for m, n in by_module.items()]:
            for n in names:
                local_index.setdefault((wanted, instance_nodes[n]), []).append(n)
        sets: dict[_Wanted, set[str]] = {p: set(v) for p, v in by_provision.items()}
        sets.update({("module", m): set(v) for m, v in by_module.items()})
        for name in self.placed():
            inst, module = self.instances[name], self.placed_module(name)
            for index, req in enumerate(module.requires):
                if req.part is not None and req.part not in inst.parts:
                    continue
                if req.provision is not None:
                    candidates = by_provision.get(req.provision, [])
                    if req.provision not in self.catalogue.provisions:
                        self.problem(codes.UNKNOWN_PROVISION,
                                     f"{name} requires provision {req.provision!r}, which "
                                     f"provisions.yaml does not define",
                                     doc=f"module:{module.name}", path=("requires", index),
                                     instance=name, requirement=req.as_,
                                     blocks=[] if req.optional else [name])
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
                selection = select_provider(
                    consumer_node=inst.node, override=inst.bind.get(req.as_),
                    manifest=req.provider,
                    recorded=self.recorded_bindings.get(name, {}).get(req.as_),
                    default=self.mesh.defaults.get(req.provision) if req.provision else None,
                    candidates=candidates, instance_nodes=instance_nodes, known_nodes=self.nodes,
                    local=local)
                if selection.provider is None:
                    self.refuse_requirement(name, module, index, req, what, selection)
                    continue
                if self.module_of(selection.provider) is None:
                    # a held provider whose module is unknown now: it serves nothing new, and
                    # what it served stays held with it
                    named = selection.provider
                    optional = req.optional and not was_bound(self, name, req.as_, named)
                    self.problem(codes.BLOCKED_BY_PROVIDER,
                                 f"{name} requires {what} ({req.as_}) from {named} "
                                 f"({selection.chosen_by}), which is itself refused "
                                 f"({', '.join(self.blocked[named])}) and held",
                                 doc=f"module:{module.name}", path=("requires", index),
                                 instance=name, requirement=req.as_,
                                 severity="warning" if optional else "error",
                                 blocks=[] if optional else [name])
                    continue
                listen = self.serving_listen(selection.provider, req)
                assert selection.chosen_by is not None  # a chosen provider names its rule
                bound[(name, req.as_)] = Bound(name, req, selection.provider,
                                                selection.chosen_by, listen)
        return bound

    def serving_listen(self, provider: str, req: Require) -> str:
        module = self.placed_module(provider)
        if req.provision is not None:
            return next(p.listen for p in module.provides if p.provision == req.provision)
        return req.listen or sorted(module.listens)[0]

    def refuse_requirement(self, name: str, module: Module, index: int, req: Require, what: str,
                           selection: Selection) -> None:
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
                       f"{self.instances[selection.named].node!r} is not in the mesh")
        if req.optional and not keeps_optional(self, name, req, selection):
            self.problem(state, message + "; the requirement is optional, so it stays unbound",
                         doc=doc, path=path, instance=name, requirement=req.as_,
                         severity="warning", state=state, candidates=selection.candidates)
        else:
            self.problem(state, message, doc=doc, path=path, instance=name, requirement=req.as_,
                         state=state, candidates=selection.candidates, blocks=[name])

    def propagate_blocks(self, bound: dict[tuple[str, str], Bound]) -> None:
        """A consumer of a blocked provider is blocked too (it could not start honestly)."""
        changed = True
        while changed:
            changed = False
            for (consumer, as_), b in sorted(bound.items()):
                if self.live(consumer) and not self.live(b.provider):
                    if b.requirement.optional and not was_bound(self, consumer, as_, b.provider):
                        continue
                    module = self.placed_module(consumer)
                    index = list(module.requires).index(b.requirement)
                    self.problem(codes.BLOCKED_BY_PROVIDER,
                                 f"{consumer} requires {b.requirement.provision or b.requirement.module}"
                                 f" ({as_}) from {b.provider}, which is itself refused "
                                 f"({', '.join(self.blocked[b.provider])})",
                                 doc=f"module:{module.name}", path=("requires", index),
                                 instance=consumer, requirement=as_, blocks=[consumer])
                    changed = True
        for key in [k for k, b in bound.items() if not (self.live(b.consumer)
                                                         and self.live(b.provider))]:
            del bound[key]

    # ------------------------------------------------------------------ ports and logins

    def assign_logins(self, bound: dict[tuple[str, str], Bound]) -> dict[str, str]:
        logins: dict[str, str] = {}
        used = set(self.ledger.logins.values())
        for b in sorted(bound.values(), key=lambda b: (b.consumer, b.requirement.as_)):
            if b.requirement.provision is None:
                continue
            kind = self.catalogue.provisions[b.requirement.provision].grant
            if kind == "none":
                continue
            b.kind = kind
            b.credential = credential_id(b.requirement.provision, b.provider, b.consumer)
            if b.credential in logins:
                continue
            recorded = self.recorded_logins.get(b.credential)
            logins[b.credential] = recorded or derive_login(b.credential, b.consumer, used)
        return logins

    # ------------------------------------------------------------------ credentials

    # ------------------------------------------------------------------ the whole

    def run(self) -> Resolution:
        check_placement(self)
        changes = check_moves(self)
        check_mesh_scope(self)
        check_floors(self)
        check_claims(self)
        check_state_paths(self)
        check_defaults(self)
        check_exposures(self)
        bound = self.bind_all()
        self.propagate_blocks(bound)
        assigned, moved = assign_ports(self)
        self.propagate_blocks(bound)  # a port-range refusal blocks consumers too
        registry = self.mesh_registry(assigned)  # no block is added after this point
        logins = self.assign_logins(bound)
        renderings, bindings, rendered = render_instances(self, bound, assigned, logins, registry)
        declarations, accounts = assemble(self, renderings, held_instances(self), registry)
        # every request of every stage, merged here (duplicates kept: the count per node
        # check_public_keys states is of requests made, as it always was)
        all_requests = [*rendered, *accounts,
                        *certificate_requests(self.mesh, self.ledger, self.now),
                        *self.tls_requests(registry)]
        check_public_keys(self, all_requests)
        new_bindings: dict[str, dict[str, str]] = {}
        for (consumer, as_), b in bound.items():
            new_bindings.setdefault(consumer, {})[as_] = b.provider
        for consumer, recorded in self.ledger.bindings.items():
            if consumer in self.mesh.instances and not self.live(consumer):
                new_bindings[consumer] = dict(recorded)  # kept while it is refused
        live_creds = set(logins)
        kept_logins = {k: v for k, v in self.ledger.logins.items()
                       if k not in live_creds and self._credential_parties_present(k)}
        ports, released = new_ports(self, assigned)
        ledger = attrs.evolve(
            self.ledger,
            ports=ports,
            bindings=pmap({k: pmap(v) for k, v in new_bindings.items()}),
            logins=pmap({**kept_logins, **logins}),
            declared=pmap({k: v for k, v in self.ledger.declared.items()
                           if k in self.mesh.instances}),
        )
        requests = sorted(set(all_requests), key=lambda q: (q.kind, q.id, q.reason, tuple(q.holders),
                                                             q.slot or ""))
        return Resolution(
            declarations=declarations,
            bindings=pvector(sorted(bindings, key=lambda b: (b.consumer, b.requirement))),
            problems=pvector(sorted(set(self.problems), key=_problem_order)),
            requests=pvector(requests),
            changes=pvector(sorted(set(changes + moved + released))),
            ledger=ledger,
            artifacts=artifact_state(self.catalogue, self.mesh, self.ledger,
                                     registry.address if registry is not None else None),
            registry=registry.address if registry is not None else None,
            registry_instance=registry.instance if registry is not None else None,
            renderings=pmap(renderings),
        )

    def _credential_parties_present(self, cred_id: str) -> bool:
        parts = cred_id.split("/")
        return len(parts) == 3 and parts[1] in self.mesh.instances and parts[2] in self.mesh.instances

    # ------------------------------------------------------------------ artifacts

    def mesh_registry(self, assigned: dict[tuple[str, str], int]) -> Optional[MeshRegistry]:
        """The mesh's own artifact store (choose_artifact_store_instance decides which), when
        one serves: declared live with an assigned port, or held (it still serves)."""
        stores: dict[str, str] = {}
        nodes: dict[str, str] = {}
        for name in self.placed():
            for provide in self.placed_module(name).provides:
                if provide.provision == ARTIFACT_STORE:
                    port = assigned.get((name, provide.listen))
                    if port is not None:
                        node = self.instances[name].node
                        stores[name] = f"{self.mesh.nodes[node].address}:{port}"
                        nodes[name] = node
        for name, rendering in held_candidates(self).items():  # held, it still serves
            for served in rendering.providers:
                if served.provision == ARTIFACT_STORE:
                    stores.setdefault(
                        name, f"{self.mesh.nodes[rendering.node].address}:{served.port}")
                    nodes.setdefault(name, rendering.node)
        chosen = choose_artifact_store_instance(stores, self.mesh.defaults.get(ARTIFACT_STORE))
        return None if chosen is None else MeshRegistry(stores[chosen], chosen, nodes[chosen])

    def tls_requests(self, registry: Optional[MeshRegistry]) -> list[Request]:
        """The artifact store's server certificate, when it must be issued (resolver/_tls)."""
        if registry is None:
            return []
        reason = tls_reason(self.mesh, self.ledger, registry.instance, registry.node, self.now)
        return [] if reason is None else [tls_request(registry.instance, registry.node, reason)]


def _problem_order(p: Problem) -> tuple[str, str, str, str]:
    return (p.instance or "", p.requirement or "", p.code, p.message)


def resolve(catalogue: Catalogue, mesh: Mesh, ledger: Ledger, *, sources: Sources = NO_SOURCES,
            now: Optional[str] = None, checked: bool = False) -> Resolution:
    """Resolve the whole mesh. `now` (ISO 8601, UTC) enables certificate renewal windows.

    The inputs are validated first (validate(), the rules loading applies): inputs with faults
    raise InputError with every fault; everything else is a problem in the Resolution.
    `checked=True` says the caller has validated them already and skips that (a test feeding
    the renderer names no document may hold does it knowingly)."""
    if not checked:
        faults = validate(catalogue, mesh, ledger, sources)
        if faults:
            raise InputError(faults)
    return _Resolver(catalogue, mesh, ledger, sources, now).run()
