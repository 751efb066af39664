"""Provider selection: which provider instance serves one consumer requirement.

Invariants:
- The order is fixed (DESIGN.md, decision 1): instance override, manifest `provider:`, the
  binding recorded in the ledger, the only candidate on the consumer's node, the mesh default,
  the only candidate in the mesh. Nothing else picks; several candidates left is a refusal that
  lists every candidate, never a silent pick.
- A rule that names an instance which does not exist or does not provide the requirement is a
  refusal stating so; it never falls through to a weaker rule (the operator meant that one).
- A recorded binding whose provider still exists and still provides wins over every automatic
  rule, so adding providers never rebinds an existing consumer. `chosen_by` says "recorded"
  only where the automatic rules would now pick otherwise (or nothing).
- Pure and total: every outcome is a Selection, chosen or refused with its state.
- A requirement that takes every provider (`each: true`) is decided by `select_every` alone:
  every candidate in its scope (not the consumer, not refused, on a known node; `within:
  node`, on the consumer's node) exactly once, in instance-name order, so one provider coming
  or going changes only its own entry and renaming an instance outside the list moves none.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Callable, Container, Iterable, Mapping, Optional, Sequence

import attrs

from . import _codes as codes
from ._codes import ChosenBy

INSTANCE_OVERRIDE = ChosenBy.INSTANCE_OVERRIDE
MANIFEST = ChosenBy.MANIFEST
RECORDED = ChosenBy.RECORDED
CO_LOCATED = ChosenBy.CO_LOCATED
MESH_DEFAULT = ChosenBy.MESH_DEFAULT
SOLE_PROVIDER = ChosenBy.SOLE_PROVIDER
EACH = ChosenBy.EACH

WITHIN_MESH, WITHIN_NODE = "mesh", "node"
WITHIN = (WITHIN_MESH, WITHIN_NODE)
"""The scopes a requirement taking every provider may have (`within:`); mesh by default."""


@attrs.frozen
class Selection:
    """The provider chosen for one requirement and the rule that chose it, or why none
    was (`state`, a REQUIREMENT_STATES member, and the instance and rule it names)."""

    provider: Optional[str]
    chosen_by: Optional[str] = None
    state: Optional[str] = None  # a codes.REQUIREMENT_STATES member when refused
    candidates: tuple[str, ...] = ()
    named: Optional[str] = None  # the instance a rule named, when refused because of it
    rule: Optional[str] = None  # the rule that refused


def select_provider(
    *,
    consumer_node: str,
    override: Optional[str],
    manifest: Optional[str],
    recorded: Optional[str],
    default: Optional[str],
    candidates: Sequence[str],
    instance_nodes: Mapping[str, str],
    known_nodes: Container[str],
    local: Optional[Sequence[str]] = None,
) -> Selection:
    """Pick the provider for one requirement.

    `candidates` are the instances able to serve the requirement (sorted); `instance_nodes`
    maps every assigned instance to its node; `known_nodes` is the set of the mesh's nodes;
    `local`, when the caller has it indexed, the candidates on the consumer's node (a subset
    of `candidates`).
    """
    if local is None:
        local = [c for c in candidates if instance_nodes.get(c) == consumer_node]
    is_candidate = _membership(candidates, local)
    for rule, named in ((INSTANCE_OVERRIDE, override), (MANIFEST, manifest)):
        if named is None:
            continue
        if named not in instance_nodes:
            return Selection(None, state=codes.PROVIDER_NOT_ASSIGNED, named=named, rule=rule,
                             candidates=tuple(candidates))
        if not is_candidate(named):
            return Selection(None, state=codes.NOT_A_PROVIDER, named=named, rule=rule,
                             candidates=tuple(candidates))
        return _placed(named, rule, instance_nodes, known_nodes)
    automatic = _automatic(local, default, candidates, is_candidate)
    if recorded is not None and is_candidate(recorded):
        # the ledger decides; say "recorded" only when it is what keeps this provider, so a
        # plan keeps telling why a binding was first made while the rules still agree
        kept = automatic[1] if automatic[0] == recorded else RECORDED
        return _placed(recorded, kept, instance_nodes, known_nodes)
    if automatic[0] is not None:
        return _placed(automatic[0], automatic[1], instance_nodes, known_nodes)
    if not candidates:
        return Selection(None, state=codes.NO_PROVIDER)
    return Selection(None, state=codes.AMBIGUOUS_PROVIDER, candidates=tuple(candidates))


def _membership(candidates: Sequence[str], local: Sequence[str]) -> Callable[[str], bool]:
    """Whether an instance is one of `candidates` (sorted), asked without making a set of them
    all for each requirement: the local candidates (a few, a subset) answer the common
    question, and a binary search of the others answers the rest. Every consumer of a mesh
    sees every provider of what it requires as a candidate: a set per requirement made
    selection grow with the square of the mesh, and so did a scan for each consumer bound to
    another node."""

    def is_candidate(name: str) -> bool:
        if name in local:
            return True
        at = bisect_left(candidates, name)
        return at < len(candidates) and candidates[at] == name

    return is_candidate


def _automatic(local: Sequence[str], default: Optional[str], candidates: Sequence[str],
               is_candidate: Callable[[str], bool]) -> tuple[Optional[str], ChosenBy]:
    if len(local) == 1:
        return local[0], CO_LOCATED
    if default is not None and is_candidate(default):
        return default, MESH_DEFAULT
    if len(candidates) == 1:
        return candidates[0], SOLE_PROVIDER
    return None, SOLE_PROVIDER  # no provider: the rule is not read


def _placed(provider: str, rule: ChosenBy, instance_nodes: Mapping[str, str],
            known_nodes: Container[str]) -> Selection:
    if instance_nodes[provider] not in known_nodes:
        return Selection(None, state=codes.PROVIDER_NODE_UNKNOWN, named=provider, rule=rule)
    return Selection(provider, chosen_by=rule)


def select_every(*, consumer: str, consumer_node: str, within: Optional[str],
                 candidates: Iterable[str], instance_nodes: Mapping[str, str],
                 known_nodes: Container[str], refused: Container[str] = ()) -> tuple[str, ...]:
    """Every provider a requirement with `each: true` binds: the `candidates` (the instances
    providing its provision) in its scope, each once, in name order. The scope leaves out the
    consumer itself, the instances `refused` so far, those not placed on a known node (not in
    `instance_nodes`, or on a node not in `known_nodes`) and, `within: node`, those on
    another node than `consumer_node`. An empty tuple is an answer, not a refusal."""
    same_node = within == WITHIN_NODE
    chosen = set()
    for name in candidates:
        node = instance_nodes.get(name)
        if (name == consumer or node is None or node not in known_nodes or name in refused
                or (same_node and node != consumer_node)):
            continue
        chosen.add(name)
    return tuple(sorted(chosen))
