"""What every resolution stage reads: the inputs, lookups derived from them, and findings.

Invariants:
- A Context is frozen and built once per resolve() (`Context.of`): the inputs, and plain
  dicts derived from them for the hot lookups (a pmap lookup costs several times a dict's).
  Nothing writes to it or to those dicts after construction; a stage that needs more returns
  it as a value. (So resolve_from may share the lookups of an earlier run's Context made from
  the very same input objects: Context.of_reusing.)
- A stage states what it finds as values: a tuple of Problems (Findings), each naming the
  instances it blocks (Problem.blocks). resolve() merges them in stage order; `blocked_by`
  turns findings into the next "blocked so far" (instance → codes, in the order stated), which
  the stages that ask whether an instance is live are handed explicitly. Nothing is cached
  and nothing counts: the same inputs and the same blocked mapping give the same answer.
- One helper makes a Problem (`Context.problem`): it locates the input through Sources and
  returns the Problem; it records nothing.
- Imports only the model, the inputs and the declaration types: every stage imports it, it
  imports no stage.
"""

from __future__ import annotations

from itertools import chain
from typing import Container, Iterable, Mapping, Optional, TypeVar

import attrs
from pyrsistent import pvector

from ._declaration import InstanceRendering, Problem
from ._frozen import FrozenMap
from ._inputs import Catalogue, Sources
from ._ledger import Credential, Ledger, PortAssignment
from ._model import Instance, Mesh, Module

_K = TypeVar("_K")
_V = TypeVar("_V")

Findings = tuple[Problem, ...]
"""What a stage found: its problems, in the order it states them (each names what it blocks)."""

Blocked = Mapping[str, tuple[str, ...]]
"""Instances refused so far → the codes of the problems that refuse them, in stated order."""

NOTHING_BLOCKED: Blocked = {}
"""The blocked mapping before the first stage."""


def blocked_by(blocked: Blocked, findings: Iterable[Problem]) -> Blocked:
    """`blocked` with the blocks of `findings` added (a new mapping; `blocked` is unchanged).
    Codes keep the order the problems were stated in."""
    added: dict[str, tuple[str, ...]] = {}
    for problem in findings:
        for name in problem.blocks:
            added[name] = added.get(name, blocked.get(name, ())) + (problem.code,)
    return {**blocked, **added} if added else blocked


@attrs.frozen
class FloorRefusals:
    """The mesh floors not applied and the nodes whose ssh-port is not kept open, because a
    kept host port collides with them (check_floors decides)."""

    floors: frozenset[int] = frozenset()
    """Indexes into Mesh.floors of the floors refused."""
    ssh_ports: frozenset[str] = frozenset()
    """Nodes whose ssh-port is a kept host port (not kept open as a floor)."""


@attrs.frozen
class Context:
    """The inputs of one resolution and read-only lookups derived from them (frozen; the
    dicts in it are never written after `of` builds them)."""

    catalogue: Catalogue
    mesh: Mesh
    ledger: Ledger
    sources: Sources
    now: Optional[str]
    names: tuple[str, ...]
    """Every instance of mesh.yaml, sorted: the order every stage walks them in."""
    nodes: frozenset[str]
    instances: Mapping[str, Instance]
    modules_of: Mapping[str, Optional[Module]]
    """Instance → its module (None when the catalogue has no such module)."""
    recorded_bindings: Mapping[str, Mapping[str, str]]
    recorded_ports: Mapping[str, Mapping[str, PortAssignment]]
    recorded_logins: Mapping[str, str]
    credentials: Mapping[str, Credential]
    recorded_providers: frozenset[str]
    """Every instance the ledger records as some consumer's provider."""
    declared: Mapping[str, InstanceRendering]
    """Instance → the rendering last written for it (the ledger's `declared`)."""

    @classmethod
    def of(cls, catalogue: Catalogue, mesh: Mesh, ledger: Ledger, sources: Sources,
           now: Optional[str]) -> "Context":
        """The context of resolving `mesh` with `catalogue` and `ledger`."""
        return cls.of_reusing(catalogue, mesh, ledger, sources, now, None)

    @classmethod
    def of_reusing(cls, catalogue: Catalogue, mesh: Mesh, ledger: Ledger, sources: Sources,
                   now: Optional[str], previous: Optional["Context"]) -> "Context":
        """Context.of(catalogue, mesh, ledger, sources, now), taking from `previous` (the
        Context of an earlier run; None: take nothing) the lookups made from the very same
        input objects (the inputs are frozen values: the same object is the same value; the
        lookups are never written): the ledger's when `ledger` is previous's (else each one
        made from a map of it that is previous's ledger's: bindings, ports, credentials); the
        instances' (names, instances) when mesh.instances is previous's (of other instances,
        the names when they are the same names), and their modules too when
        catalogue.modules is previous's or equal (of other instances, looked up again only
        for those that are not the very ones previous's were made from); the nodes' when
        mesh.nodes is previous's."""
        # (a catalogue loaded again holds the very same modules: equal at once)
        same_modules = previous is not None and (
            previous.catalogue.modules is catalogue.modules
            or previous.catalogue.modules == catalogue.modules)
        if previous is not None and previous.mesh.instances is mesh.instances:
            names, instances = previous.names, previous.instances
            modules_of = previous.modules_of if same_modules else None
        else:
            instances = dict(mesh.instances.items())  # (a PMap's items: 3x dict(PMap))
            names = previous.names if previous is not None \
                and previous.instances.keys() == instances.keys() else tuple(sorted(instances))
            modules_of = None
            if previous is not None and same_modules:
                # the same modules: previous's lookup, with the instances that are not the
                # very ones it was made from looked up again
                looked_up = previous.instances
                modules_of = dict(previous.modules_of)
                for n in looked_up.keys() - instances.keys():
                    del modules_of[n]
                for n, i in instances.items():
                    if looked_up.get(n) is not i:
                        modules_of[n] = catalogue.modules.get(i.module)
        if modules_of is None:
            modules = dict(catalogue.modules.items())
            modules_of = {n: modules.get(i.module) for n, i in instances.items()}
        nodes = previous.nodes if previous is not None and previous.mesh.nodes is mesh.nodes \
            else frozenset(mesh.nodes)
        if previous is not None and previous.ledger is ledger:  # its lookups as they are
            return attrs.evolve(previous, catalogue=catalogue, mesh=mesh, sources=sources,
                                now=now, names=names, nodes=nodes, instances=instances,
                                modules_of=modules_of)
        # (each of another ledger's lookups made from the very same map as previous's is
        # previous's: a ledger written by the last run keeps the maps that did not change)
        if previous is not None and previous.ledger.bindings is ledger.bindings:
            recorded_bindings = previous.recorded_bindings
            recorded_providers = previous.recorded_providers
        else:
            recorded_bindings = _plain_each(ledger.bindings)
            recorded_providers = frozenset(chain.from_iterable(
                map(_values, recorded_bindings.values())))
        return cls(
            catalogue=catalogue, mesh=mesh, ledger=ledger, sources=sources, now=now,
            names=names, nodes=nodes, instances=instances, modules_of=modules_of,
            recorded_bindings=recorded_bindings,
            recorded_ports=previous.recorded_ports
            if previous is not None and previous.ledger.ports is ledger.ports
            else _plain_each(ledger.ports),
            recorded_logins=_plain(ledger.logins),
            credentials=previous.credentials
            if previous is not None and previous.ledger.credentials is ledger.credentials
            else _plain(ledger.credentials),
            recorded_providers=recorded_providers,
            declared=_plain(ledger.declared))

    def problem(self, code: str, message: str, *, doc: str = "mesh",
                path: tuple[str | int, ...] = (), instance: Optional[str] = None,
                requirement: Optional[str] = None, severity: str = "error",
                state: Optional[str] = None, candidates: Iterable[str] = (),
                blocks: Iterable[str] = (), at_key: bool = False,
                also: Iterable[tuple[str, tuple[str | int, ...]]] = ()) -> Problem:
        """The Problem stated at `path` of document `doc` (located through Sources), with the
        other inputs it involves (`also`: (document, path) pairs); each instance in `blocks` is
        refused by it. Records nothing: the caller returns it."""
        file, line, col = self.sources.where(doc, *path, at_key=at_key)
        others = [self.sources.where(other, *at) for other, at in also]
        return Problem(
            code=code, severity=severity, message=message, instance=instance,
            requirement=requirement, file=file, line=line, col=col, state=state,
            candidates=pvector(sorted(candidates)), blocks=pvector(sorted(blocks)),
            also=pvector(f"{f}:{n}:{c}" if n else f for f, n, c in others))

    def module_of(self, name: str) -> Optional[Module]:
        """The module of instance `name` (None when the catalogue has no such module)."""
        return self.modules_of[name]

    def placed_module(self, name: str) -> Module:
        """The module of a placed instance (check_placement refused every instance whose
        module the catalogue does not hold, so a placed one always has one)."""
        module = self.modules_of[name]
        assert module is not None, name
        return module

    def placed(self, blocked: Blocked) -> list[str]:
        """The instances not blocked, sorted."""
        return [n for n in self.names if n not in blocked]

    def image_digest(self, module: Module, artifact_name: str) -> Optional[str]:
        """The digest the ledger records for an artifact of `module` (its pin, or its build),
        None when it records none."""
        artifact = module.artifacts.get(artifact_name)
        if artifact is None:
            return None
        if artifact.repository:
            return self.ledger.pins.get(f"{artifact.repository}:{artifact.tag}")
        record = self.ledger.builds.get(f"{module.name}/{artifact_name}")
        return record.digest if record else None

    def first_holder(self, names: list[str], held: Container[str] = ()) -> str:
        """The instance that keeps a singular thing: a held one, else one already recorded,
        else the first."""
        recorded = [n for n in names if n in self.recorded_ports or n in self.recorded_bindings
                    or n in self.recorded_providers or n in self.declared]
        return sorted([n for n in names if n in held] or recorded or names)[0]

    def floor_ports(self, refusals: FloorRefusals, node: str) -> set[tuple[int, str]]:
        """The floors a node keeps that no kept host port collides with (`refusals`: what
        check_floors refused)."""
        ports: set[tuple[int, str]] = (
            set() if node in refusals.ssh_ports else {(self.mesh.nodes[node].ssh_port, "tcp")})
        ports.update((f.port, f.protocol) for i, f in enumerate(self.mesh.floors)
                     if i not in refusals.floors)
        return ports


def _plain_each(mapping: Mapping[_K, Mapping[str, _V]]) -> Mapping[_K, Mapping[str, _V]]:
    """`mapping` of mappings for fast lookups, each of them too (_plain): a FrozenMap of
    FrozenMaps (what the resolver puts in a ledger) as it is."""
    if isinstance(mapping, FrozenMap) and all(type(v) is FrozenMap for v in mapping.values()):
        return mapping
    return {k: _plain(v) for k, v in mapping.items()}


def _values(mapping: Mapping[_K, _V]) -> Iterable[_V]:
    return mapping.values()


def _plain(mapping: Mapping[_K, _V]) -> Mapping[_K, _V]:
    """`mapping` for fast lookups: a FrozenMap (what the resolver puts in a ledger) as it is,
    any other mapping (a PMap a program built) copied into a dict."""
    return mapping if isinstance(mapping, FrozenMap) else dict(mapping.items())
