"""Strategies for firewall intents: nodes, bindings, floors, same-node consumers, exposures.

Addresses are drawn from a pool of IPv4 and IPv6 node addresses, so sets of both families
appear; ports and protocols may repeat across allows (they are merged into one set); reasons
are arbitrary text, so comments with any character or length are exercised. Exposures draw
from networks that nest, touch and overlap (10.77.0.0/24 and its halves, ::/0 and fd00::/64),
so the renderer's merging of intervals is exercised; same-node openings draw container MACs.
Every intent keeps the ssh floor unless drawn with `ssh=False`.
"""

from __future__ import annotations

import ipaddress

from hypothesis import strategies as st
from pyrsistent import pvector

from resolver import FirewallAllow, FirewallExposure, FirewallFloor, FirewallIntent, FirewallLocal

IPV4 = [f"10.77.{a}.{b}" for a in (0, 1) for b in (1, 2, 3, 9, 200)]
IPV6 = ["fd00::1", "fd00::2", "fd00:77::a", "2001:db8::9"]
NETWORKS = ["10.77.0.0/24", "10.77.0.0/25", "10.77.0.128/25", "10.77.1.0/24", "10.0.0.0/8",
            "192.168.1.0/24", "0.0.0.0/0", "fd00::/64", "fd00::/16", "2001:db8::/32", "::/0",
            "fd00:77::/96"]
MACS = ["0a:00:00:00:00:01", "0a:12:34:56:78:9a", "0a:ff:00:aa:bb:cc", "02:42:ac:11:00:02",
        "0e:01:02:03:04:05"]
BRIDGES = [("docker0",), ("docker0", "br-mesh"), ("br-0123456789a",)]
PROBES = IPV4 + IPV6 + ["10.77.0.77", "10.77.0.200", "10.1.2.3", "192.168.1.5", "192.168.2.5",
                        "8.8.8.8", "fd00::77", "fd00:1::1", "2001:db8:1::1", "fe80::1"]


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
locals_ = st.builds(
    FirewallLocal, port=ports, protocol=protocols,
    macs=st.lists(st.sampled_from(MACS), min_size=1, max_size=3, unique=True).map(
        lambda m: pvector(sorted(m))),
    reason=reasons,
)
exposure_sources = st.one_of(
    st.just(pvector(["any"])),
    st.lists(st.sampled_from(NETWORKS + IPV4 + IPV6), min_size=1, max_size=4, unique=True)
    .map(pvector),
)
exposures = st.builds(FirewallExposure, port=ports, protocol=protocols,
                      sources=exposure_sources, reason=reasons)


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
    local = draw(st.lists(locals_, max_size=3))
    expose = draw(st.lists(exposures, max_size=4))
    return FirewallIntent(address=address, allow=pvector(allow), floors=pvector(floors),
                          mesh_sources=pvector(mesh), local=pvector(local),
                          expose=pvector(expose))
