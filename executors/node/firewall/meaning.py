"""What a firewall intent opens, said from the intent alone.

Invariants:
- Pure, and independent of the rendering: `intent_triples` and `intent_accepts` never look at
  a script; they are the oracles the property tests hold the renderer, the reader
  (firewall_readback) and the kernel's listing to.
- A triple is (port, protocol, source); a source is `any`, an address (`10.0.0.2`), a
  network (`192.168.1.0/24`) or a container on a bridge (`ether 0a:…:… via docker0`).
"""

from __future__ import annotations

import ipaddress
from typing import Iterable

from resolver import FirewallIntent

from executors.node.firewall.render import (
    ANYWHERE,
    DEFAULT_BRIDGES,
    Network,
    Triple,
    _address,
    collapse,
    parse_source,
)

ANY_BRIDGE = "*"  # a same-node opening not limited to the runtime's bridges (never rendered)


def local_source(mac: str, bridge: str) -> str:
    return f"ether {mac.lower()} via {bridge}"


def intent_triples(intent: FirewallIntent, *, published_only: bool = False,
                   bridges: Iterable[str] = DEFAULT_BRIDGES) -> frozenset[Triple]:
    """(port, protocol, source) the intent opens, computed from the intent alone.

    With published_only: what must pass the forward hook (all but allows marked as not
    published: floors, exposures and same-node consumers all reach published ports)."""
    triples: set[Triple] = set()
    for allow in intent.allow:
        if published_only and not allow.published:
            continue
        triples.update((allow.port, allow.protocol, _address(s, "allow")[2]) for s in allow.sources)
    for floor in intent.floors:
        if floor.sources:
            triples.update((floor.port, floor.protocol, _address(s, "floor")[2])
                           for s in floor.sources)
        else:
            triples.add((floor.port, floor.protocol, ANYWHERE))
    networks: dict[tuple[int, str], list[Network]] = {}
    for exposure in intent.expose:
        for text in exposure.sources:
            source = parse_source(text, "expose")
            if source[0] == "any":
                triples.add((exposure.port, exposure.protocol, ANYWHERE))
            elif source[0] == "addr":
                triples.add((exposure.port, exposure.protocol, source[1][2]))
            else:
                networks.setdefault((exposure.port, exposure.protocol), []).append(source[1])
    for (port, protocol), nets in networks.items():
        triples.update((port, protocol, str(n)) for n in collapse(nets))
    names = sorted(set(bridges))
    for local in intent.local:
        triples.update((local.port, local.protocol, local_source(mac, bridge))
                       for mac in local.macs for bridge in names)
    return frozenset(triples)


def intent_accepts(intent: FirewallIntent, port: int, protocol: str, source: str, *,
                   bridges: Iterable[str] = DEFAULT_BRIDGES) -> bool:
    """Whether the intent lets `source` reach `port`, decided from the intent's own words:
    each exposure network asked whether it holds the address; nothing merged, no sets."""
    anywhere = any((f.port, f.protocol) == (port, protocol) and not f.sources
                   for f in intent.floors) or any(
        (e.port, e.protocol) == (port, protocol) and ANYWHERE in e.sources
        for e in intent.expose)
    if source.startswith("ether "):  # a container on a bridge: its own opening, or anywhere
        return anywhere or any(
            (local.port, local.protocol) == (port, protocol)
            and source in {local_source(m, b) for m in local.macs for b in bridges}
            for local in intent.local)
    if anywhere:
        return True
    address = ipaddress.ip_address(source)
    for floor in intent.floors:
        if (floor.port, floor.protocol) == (port, protocol) and (
                not floor.sources or any(ipaddress.ip_address(s) == address
                                         for s in floor.sources)):
            return True
    for allow in intent.allow:
        if (allow.port, allow.protocol) == (port, protocol) and any(
                ipaddress.ip_address(s) == address for s in allow.sources):
            return True
    for exposure in intent.expose:
        if (exposure.port, exposure.protocol) == (port, protocol) and any(
                s == ANYWHERE or address in ipaddress.ip_network(s) for s in exposure.sources):
            return True
    return False
