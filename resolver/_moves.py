"""Moves that carry their data: which node serves an instance's state to which, and the
opening that lets it.

Invariants:
- A transfer is declared for an instance that is live (not held), owns state directories,
  and was moved from the node its `state-from:` names: at the move (it was last declared
  there) and after it, while `state-from:` stays and the instance stays where it moved (its
  rendering keeps `carried_from`, so the next resolve knows). The new node applies it once (an
  arrival already in place is not fetched again); removing `state-from:` ends it, and adding
  it back later carries nothing. A `state-from:` naming a node the instance never ran on
  carries nothing (resolver/_refusals.py check_moves refuses it at a move).
- The same StateTransfer is in both declarations (role `leave` on the source, `arrive` on the
  target); nothing secret is in it. The two nodes authenticate each other by mutual TLS on
  their transfer certificates (resolver/_tls: `transfer:<node>`, one per node, requested for
  exactly the nodes of declared transfers, each key sealed to its node alone). Each node
  taking part holds its certificate, key and the mesh CA as declared files once issued; until
  both nodes' are, the transfer is declared with `waits` saying why (the target does not
  start the instance, the source serves nothing): it never runs unauthenticated.
- The source node's firewall opens TRANSFER_PORT to the target node's address only, for as
  long as the transfer is declared; no other node gets an opening for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

import attrs
from pyrsistent import pvector

from ._declaration import FileDecl, FirewallAllow, InstanceRendering, Request, StateTransfer
from ._frozen import FrozenMap
from ._refusals import previous_node
from ._tls import transfer_files, transfer_reason, transfer_request

if TYPE_CHECKING:  # pragma: no cover
    from ._context import Context

TRANSFER_PORT = 7470  # a node's state-transfer server (host process, not a container)


def carried(r: "Context", renderings: FrozenMap[str, InstanceRendering]
            ) -> FrozenMap[str, InstanceRendering]:
    """The live renderings, each of a move that carries its state marked `carried_from`: at
    the move (the instance was last declared on the node `state-from:` names), and after it
    for as long as `state-from:` still names that node and the instance stays where it
    moved. An instance that never ran on the node `state-from:` names is carried from nowhere."""
    marked: dict[str, InstanceRendering] = {}
    for name, rendering in renderings.items():
        inst = r.instances.get(name)
        source = inst.state_from if inst is not None else None
        if source is None or source == rendering.node or source not in r.mesh.nodes \
                or not rendering.state_dirs:
            continue
        before = r.declared.get(name)
        moving = previous_node(r, name) == source
        staying = before is not None and before.node == rendering.node \
            and before.carried_from == source
        if moving or staying:
            marked[name] = attrs.evolve(rendering, carried_from=source)
    return FrozenMap({**renderings, **marked}) if marked else renderings


def transfers(r: "Context", live: Mapping[str, InstanceRendering]
              ) -> dict[str, list[StateTransfer]]:
    """node → the transfers it takes part in (as source or target), sorted by instance."""
    found: dict[str, list[StateTransfer]] = {}
    for name in sorted(live):
        rendering = live[name]
        source_node = rendering.carried_from
        if source_node is None:
            continue
        source = r.mesh.nodes.get(source_node)
        target = r.mesh.nodes.get(rendering.node)
        if source is None or target is None:
            continue
        arrive = StateTransfer(
            instance=name, role="arrive", source=source_node,
            source_address=source.address, target=rendering.node,
            target_address=target.address, port=TRANSFER_PORT,
            dirs=pvector(sorted(rendering.state_dirs)))
        missing = [(node, why) for node in (source_node, rendering.node)
                   if (why := transfer_reason(r.mesh, r.ledger, node)) is not None]
        if not r.ledger.ca:
            missing.append(("the mesh", "no CA certificate recorded yet"))
        if missing:
            arrive = attrs.evolve(arrive, waits="; ".join(
                f"the transfer certificate of {node} is not issued ({why})"
                for node, why in missing) + ": `mesh plan --issue` issues it")
        else:
            files = transfer_files(r.ledger, rendering.node) or []
            arrive = attrs.evolve(arrive, certificate=files[0].path, key=files[1].path,
                                  ca=files[2].path)
        found.setdefault(rendering.node, []).append(arrive)
        found.setdefault(source_node, []).append(attrs.evolve(arrive, role="leave"))
    return found


def transfer_certificates(r: "Context", moving: Mapping[str, list[StateTransfer]]
                          ) -> tuple[dict[str, list[FileDecl]], list[Request]]:
    """(node → its transfer certificate's files, once issued; the requests of those to issue,
    renewal included) for every node taking part in a transfer."""
    files: dict[str, list[FileDecl]] = {}
    requests: list[Request] = []
    for node, taking_part in sorted(moving.items()):
        reason = transfer_reason(r.mesh, r.ledger, node, r.now)
        if reason is not None:
            requests.append(transfer_request(node, reason, (t.instance for t in taking_part)))
        held = transfer_files(r.ledger, node)
        if held is not None and transfer_reason(r.mesh, r.ledger, node) is None:
            files[node] = held
    return files, requests


def transfer_allows(node_transfers: list[StateTransfer]) -> list[FirewallAllow]:
    """The openings a source node keeps for its departures: its transfer port, from each
    target's address (one opening, host process: not published by the container runtime)."""
    leaving = [t for t in node_transfers if t.role == "leave"]
    if not leaving:
        return []
    sources = sorted({t.target_address for t in leaving})
    # "<what> for <instances>", as every opening's reason says it
    instances = ", ".join(sorted({t.instance for t in leaving}))
    return [FirewallAllow(TRANSFER_PORT, "tcp", pvector(sources),
                          f"state transfer for {instances}", published=False)]
