"""Strategies for firewall intents: nodes, bindings, floors, as the resolver hands them over.

Addresses are drawn from a pool of IPv4 and IPv6 node addresses, so sets of both families
appear; ports and protocols may repeat across allows (they are merged into one set); reasons
are arbitrary text, so comments with any character or length are exercised. Every intent
keeps the ssh floor unless drawn with `ssh=False`.
"""

from __future__ import annotations

import ipaddress

from hypothesis import strategies as st
from pyrsistent import pvector

from resolver import FirewallAllow, FirewallFloor, FirewallIntent

IPV4 = [f"10.77.{a}.{b}" for a in (0, 1) for b in (1, 2, 3, 9, 200)]
IPV6 = ["fd00::1", "fd00::2", "fd00:77::a", "2001:db8::9"]


def _sorted(addresses) -> list:
    return sorted(set(addresses), key=lambda a: (ipaddress.ip_address(a).version,
                                                 ipaddress.ip_address(a)))


addresses = st.sampled_from(IPV4 + IPV6)
source_lists = st.lists(addresses, max_size=6).map(lambda a: pvector(_sorted(a)))
ports = st.integers(min_value=1, max_value=65535)
protocols = st.sampled_from(["tcp", "udp"])
reasons = st.one_of(st.text(max_size=40), st.text(min_size=100, max_size=300))  # long: comment limits

allows = st.builds(
    FirewallAllow, port=ports, protocol=protocols, sources=source_lists, reason=reasons,
    published=st.booleans(),
)


@st.composite
def intents(draw, *, ssh: bool = True, max_allows: int = 8) -> FirewallIntent:
    mesh = draw(st.lists(addresses, min_size=1, max_size=6).map(_sorted))
    address = draw(st.sampled_from(mesh))
    floors = []
    if ssh:
        floors.append(FirewallFloor(draw(st.sampled_from([22, 2222, 22022])), "tcp", pvector(),
                                    draw(st.sampled_from(["ssh", "ssh (operator)", "SSH"]))))
    if draw(st.booleans()):
        floors.append(FirewallFloor(draw(st.sampled_from([5672, 5671])), "tcp",
                                    pvector(mesh), "broker enrolment"))
    if draw(st.booleans()):  # a floor from a few named sources, of either family
        reason = draw(reasons.filter(lambda r: not r.lower().startswith("ssh")))
        floors.append(FirewallFloor(draw(ports), draw(protocols), draw(source_lists), reason))
    allow = draw(st.lists(allows, max_size=max_allows))
    return FirewallIntent(address=address, allow=pvector(allow), floors=pvector(floors),
                          mesh_sources=pvector(mesh))
