"""What a refused instance keeps: the rules of holding (issue 11).

Invariants:
- An instance is held when it is refused now and the ledger records a rendering of it
  (`declared`: the last one written while it was not refused) on a node still in the mesh.
  Its node's declaration carries that rendering byte for byte (resolver/_assemble.py), with
  one HeldDecl per refusal, and the plan a `held` warning at the first refusal's position.
- A held instance keeps what it holds: its host ports stay reserved, its claims, state
  paths and mesh-scoped provisions stay its own (resolver/_refusals.py), and it stays a
  candidate provider for what its rendering provides, so a typo never rebinds its consumers
  to another provider nor makes a refused consumer bindable elsewhere: its consumers are
  refused and held with it.
- An optional requirement never quietly loses a binding that was declared: when its provider
  was named, or its recorded provider is still in mesh.yaml but refused, the consumer is
  refused (and so held) instead of unbound.
- Only removing an instance from mesh.yaml drops its record (resolve() prunes `declared`).
- Pure: which instances are refused is the `blocked` mapping the caller hands in (the
  stages before it decided it); held_instances returns its `held` problems, it appends to
  nothing.
"""

from __future__ import annotations

from typing import AbstractSet, Container, Iterable, Mapping, Optional

import attrs

from . import _codes as codes
from ._context import Blocked, Context, Findings
from ._declaration import HeldDecl, InstanceRendering, Problem
from ._differ import differing
from ._ledger import PortAssignment
from ._model import Require
from ._select import Selection


def held_candidates(r: Context, blocked: Blocked) -> dict[str, InstanceRendering]:
    """Instances refused so far (`blocked`) that were declared before: instance → last
    rendering."""
    return {n: r.declared[n] for n in r.names
            if n in blocked and n in r.declared
            and r.declared[n].node in r.nodes}


KeptPorts = Mapping[str, Mapping[int, str]]
"""node → host port → `instance/listen` holding it (kept_ports)."""


def kept_ports(ports: Mapping[str, Mapping[str, PortAssignment]], instances: Container[str],
               declared: Mapping[str, InstanceRendering]) -> dict[str, dict[int, str]]:
    """node → host port → `instance/listen` for every port kept for an instance still in
    mesh.yaml (`instances`): recorded in the ledger (`ports`), or published by its last written
    rendering (`declared`)."""
    return _kept_all(*_on_nodes(ports, declared), ports, declared, instances)


def _kept_all(ports_on: Mapping[str, tuple[str, ...]],
              declared_on: Mapping[str, tuple[str, ...]],
              ports: Mapping[str, Mapping[str, PortAssignment]],
              declared: Mapping[str, InstanceRendering],
              instances: Container[str]) -> dict[str, dict[int, str]]:
    """kept_ports from the instances on each node (_on_nodes)."""
    kept: dict[str, dict[int, str]] = {}
    for node in sorted(ports_on.keys() | declared_on.keys()):
        mine = _kept_on(node, ports_on.get(node, ()), declared_on.get(node, ()), ports,
                        declared, instances)
        if mine:
            kept[node] = mine
    return kept


def _on_nodes(ports: Mapping[str, Mapping[str, PortAssignment]],
              declared: Mapping[str, InstanceRendering]
              ) -> tuple[dict[str, tuple[str, ...]], dict[str, tuple[str, ...]]]:
    """By node, the instances with a recorded port there and those with a rendering
    declared there, each in name order."""
    ports_on: dict[str, list[str]] = {}
    for name in sorted(ports):
        for node in sorted({entry.node for entry in ports[name].values()}):
            ports_on.setdefault(node, []).append(name)
    declared_on: dict[str, list[str]] = {}
    for name in sorted(declared):
        declared_on.setdefault(declared[name].node, []).append(name)
    return ({n: tuple(v) for n, v in ports_on.items()},
            {n: tuple(v) for n, v in declared_on.items()})


def _kept_on(node: str, port_names: Iterable[str], declared_names: Iterable[str],
             ports: Mapping[str, Mapping[str, PortAssignment]],
             declared: Mapping[str, InstanceRendering],
             instances: Container[str]) -> dict[int, str]:
    """host port → `instance/listen` kept on `node`: the instances in mesh.yaml with a
    recorded port there (`port_names`, in name order, each one's listens in order), then
    those with a rendering declared there (`declared_names`); the first holder of a port
    keeps it."""
    mine: dict[int, str] = {}
    for name in port_names:
        if name in instances:
            entries = ports[name]
            for listen_name, entry in (entries.items() if len(entries) == 1
                                       else sorted(entries.items())):
                if entry.node == node:
                    mine.setdefault(entry.port, f"{name}/{listen_name}")
    for name in declared_names:
        if name in instances:
            for container in declared[name].containers:
                for p in container.ports:
                    mine.setdefault(p.host_port, f"{name}/{p.listen}")
    return mine


@attrs.frozen(eq=False)
class KeptPortsMade:
    """What kept_ports_reusing made, for a later run: the maps it read, what it returned, and
    by node the instances with a recorded port there (`ports_on`) and with a rendering
    declared there (`declared_on`), each sorted."""

    ports: Mapping[str, Mapping[str, PortAssignment]]
    instances: AbstractSet[str]
    declared: Mapping[str, InstanceRendering]
    kept: Mapping[str, Mapping[int, str]]
    ports_on: Mapping[str, tuple[str, ...]]
    declared_on: Mapping[str, tuple[str, ...]]


def kept_ports_reusing(ports: Mapping[str, Mapping[str, PortAssignment]],
                       instances: Mapping[str, object],
                       declared: Mapping[str, InstanceRendering],
                       made: Optional[KeptPortsMade]
                       ) -> tuple[Mapping[str, Mapping[int, str]], KeptPortsMade]:
    """(kept_ports(ports, instances, declared), what the next run may reuse): from what a
    previous run made (`made`; None: made whole), only the nodes it touches are worked out
    again: each node of an old or new recorded port, or an old or new declared rendering, of
    an instance whose entry is not the very one `made` read, or which joined or left
    `instances` (a node's ports read only the entries on that node: kept_ports walks the
    instances in name order, each one's listens in order, the declared ones after all of
    them, the first holder of a port kept; so does each node here)."""
    names = instances.keys()
    if made is None:
        ports_on, declared_on = _on_nodes(ports, declared)
        kept = _kept_all(ports_on, declared_on, ports, declared, names)
        return kept, KeptPortsMade(ports, set(names), declared, kept, ports_on, declared_on)
    touched: set[str] = set()  # nodes worked out again
    moved_ports: dict[str, tuple[set[str], set[str]]] = {}  # node → (names gone, names come)
    moved_declared: dict[str, tuple[set[str], set[str]]] = {}
    changed_names: set[str] = set()
    if made.instances != names:
        changed_names.update(names - made.instances)
        changed_names.update(made.instances - names)
    if made.ports is not ports:
        was_ports = made.ports
        for name in differing(was_ports, ports, same=True):
            before = {e.node for e in was_ports[name].values()} if name in was_ports else set()
            after = {e.node for e in ports[name].values()} if name in ports else set()
            for node in before - after:
                moved_ports.setdefault(node, (set(), set()))[0].add(name)
            for node in after - before:
                moved_ports.setdefault(node, (set(), set()))[1].add(name)
            touched.update(before | after)
    if made.declared is not declared:
        was_declared = made.declared
        for name in differing(was_declared, declared, same=True):
            old, new = was_declared.get(name), declared.get(name)
            if old is not None and (new is None or new.node != old.node):
                moved_declared.setdefault(old.node, (set(), set()))[0].add(name)
            if new is not None and (old is None or new.node != old.node):
                moved_declared.setdefault(new.node, (set(), set()))[1].add(name)
            touched.update(r.node for r in (old, new) if r is not None)
    for name in changed_names:
        touched.update(e.node for e in ports.get(name, {}).values())
        touched.update(e.node for e in made.ports.get(name, {}).values())
        for rendering in (declared.get(name), made.declared.get(name)):
            if rendering is not None:
                touched.add(rendering.node)
    if not touched:
        return made.kept, KeptPortsMade(ports, made.instances, declared, made.kept,
                                        made.ports_on, made.declared_on)
    new_ports_on = _moved(made.ports_on, moved_ports)
    new_declared_on = _moved(made.declared_on, moved_declared)
    result: dict[str, Mapping[int, str]] = dict(made.kept)
    for node in touched:
        mine = _kept_on(node, new_ports_on.get(node, ()), new_declared_on.get(node, ()), ports,
                        declared, instances)
        if mine:
            result[node] = mine
        else:
            result.pop(node, None)
    return result, KeptPortsMade(ports, set(names), declared, result, new_ports_on,
                               new_declared_on)


def _moved(on: Mapping[str, tuple[str, ...]], moved: dict[str, tuple[set[str], set[str]]]
           ) -> Mapping[str, tuple[str, ...]]:
    """`on` (node → names, sorted) with each node's names gone taken out and come put in."""
    if not moved:
        return on
    changed = dict(on)
    for node, (gone, come) in moved.items():
        names = tuple(sorted((set(on.get(node, ())) - gone) | come))
        if names:
            changed[node] = names
        else:
            changed.pop(node, None)
    return changed


def was_bound(r: Context, consumer: str, as_: str, provider: str) -> bool:
    """Whether the consumer was declared bound to `provider` for `as_` (an optional
    requirement it then loses would change a running service: it is held instead)."""
    return (consumer in r.declared
            and r.recorded_bindings.get(consumer, {}).get(as_) == provider)


def keeps_optional(r: Context, name: str, req: Require, selection: Selection) -> bool:
    """Whether an optional requirement that cannot be satisfied now refuses its consumer
    instead of leaving it unbound: when the consumer was declared and the provider was
    named explicitly, or its recorded provider is still in mesh.yaml (refused). Unbinding
    it would change a running service because of a mistake; holding it does not."""
    if name not in r.declared:
        return False
    if selection.rule in ("instance override", "manifest"):
        return True
    return r.recorded_bindings.get(name, {}).get(req.as_) in r.instances


def held_instances(r: Context, blocked: Blocked, problems: Iterable[Problem]
                   ) -> tuple[dict[str, tuple[InstanceRendering, list[HeldDecl]]], Findings]:
    """(refused instances declared before: instance → (its last written rendering, why),
    their `held` problems), each problem at its instance's first refusal's position;
    `blocked` and `problems` are every block and every problem stated before."""
    held = {}
    found: list[Problem] = []
    problems = tuple(problems)
    for name in r.names:
        rendering = r.declared.get(name)
        if name not in blocked or rendering is None or rendering.node not in r.nodes:
            continue
        refusals = sorted((p for p in problems
                           if p.severity == "error" and name in p.blocks),
                          key=lambda p: (p.file, p.line, p.col, p.code))
        if not refusals:  # pragma: no cover - every block comes with an error
            continue
        why = [HeldDecl(name, p.code, p.message, p.file, p.line, p.col) for p in refusals]
        held[name] = (rendering, why)
        first = refusals[0]
        listed = "; ".join(f"[{p.code}] {p.where}" for p in refusals)
        found.append(Problem(
            code=codes.HELD, severity="warning", instance=name, file=first.file,
            line=first.line, col=first.col,
            message=(f"{name} is refused ({listed}) and held: node {rendering.node} keeps "
                     f"its last good declaration (containers, grants, firewall allows, "
                     f"binding values, state directories) until the refusal is fixed; "
                     f"only removing {name} from mesh.yaml removes it")))
    return held, tuple(found)
