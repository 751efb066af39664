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

from typing import Container, Iterable, Mapping

from . import _codes as codes
from ._context import Blocked, Context, Findings
from ._declaration import HeldDecl, InstanceRendering, Problem
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
    kept: dict[str, dict[int, str]] = {}
    for name, entries in sorted(ports.items()):
        if name in instances:
            for listen_name, entry in (entries.items() if len(entries) == 1
                                       else sorted(entries.items())):
                kept.setdefault(entry.node, {}).setdefault(entry.port,
                                                           f"{name}/{listen_name}")
    for name, rendering in sorted(declared.items()):
        if name in instances:
            for container in rendering.containers:
                for p in container.ports:
                    kept.setdefault(rendering.node, {}).setdefault(
                        p.host_port, f"{name}/{p.listen}")
    return kept


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
