"""A node's firewall intent rendered as one nftables transaction (native nft syntax).

Invariants:
- Pure: an intent (and the container runtime's bridge names) in, a script out; no I/O.
  Same inputs, same script, byte for byte, whatever the order of allows, floors, same-node
  openings and exposures in the intent.
- The script touches one table only, `inet mesh`: it adds, deletes and re-adds it with its
  full contents, so applying it replaces our table atomically and leaves every other table
  (the container runtime's among them) as it was. It never flushes the ruleset.
- No script is rendered without the ssh floor: an intent without one is refused.
- The rules do not grow with ports or sources: every (source, port) pair is an element of one
  set per protocol and kind of source, matched by one rule per hook:
    <proto>_any               inet_service                    floors and exposures from anywhere
    <proto>_v4, _v6           ipv4/ipv6_addr . inet_service   node addresses (bindings, floors)
                                                              and exposures to one address
    <proto>_v4_host, _v6_host the same, for ports nobody publishes (input hook only)
    <proto>_v4_net, _v6_net   the same, flags interval        exposures to networks (collapsed
                                                              per port: intervals never overlap)
    <proto>_local             ether_addr . inet_service       same-node consumers' containers,
                                                              arriving on the runtime's bridges
  The common case (exact addresses) is a plain hash set; only networks need intervals.
- Ports published by the container runtime are policed in the forward hook (`ct status
  dnat`, by `ct original` source and port); DNAT'd connections nobody is let in on are
  dropped, IPv4 and IPv6 alike.
- Native syntax, not JSON: libnftables evaluates it markedly faster (5,000 elements are the
  bulk of the work, and a change is evaluated twice: the check, then the commit). Each rule
  shape is written here once, as its text and as the JSON the kernel lists it as, so the
  script and a listing of the running table are read back by one reader
  (firewall_readback).
"""

from __future__ import annotations

import functools
import hashlib
import ipaddress
from typing import Iterable, Literal, Optional, Union

import attrs

from resolver import FirewallFloor, FirewallIntent, MeshError

from executors.common.marks import (
    DIGEST_CHAIN_PREFIX as DIGEST_CHAIN_PREFIX,  # part of this module's API
    FIREWALL_FAMILY,
    FIREWALL_TABLE,
    digest_chain_name,
    digest_from_chain_name as digest_from_chain_name,  # part of this module's API
)

FAMILY = FIREWALL_FAMILY
TABLE = FIREWALL_TABLE

INPUT_CHAIN = "input"
FORWARD_CHAIN = "forward"
# Before the filter-priority forward chains of the container runtime (iptables-nft's
# `ip filter FORWARD`, priority 0), so a drop here is final whatever they accept.
FORWARD_PRIORITY = -10
ANYWHERE = "any"  # the source of an opening from anywhere, in intents and read-back triples
PROTOCOLS = ("tcp", "udp")
COMMENT_MAX = 120  # libnftables aborts on rule comments longer than 128 bytes
BRIDGES_SET = "bridges"
DEFAULT_BRIDGES = ("docker0",)  # Docker's default bridge, where `mesh apply` puts containers
IFNAME_MAX = 15  # IFNAMSIZ - 1
OBJECT = f"{FAMILY} {TABLE}"  # how every command names our table

ICMP_TYPES = ["destination-unreachable", "echo-request", "parameter-problem", "time-exceeded"]
ICMPV6_TYPES = [
    "destination-unreachable", "echo-request", "nd-neighbor-advert", "nd-neighbor-solicit",
    "nd-router-advert", "nd-router-solicit", "packet-too-big", "parameter-problem",
    "time-exceeded", "mld-listener-query", "mld-listener-report", "mld2-listener-report",
]


@attrs.frozen
class SetKind:
    suffix: str
    source: str  # any | addr | net | local
    family: Optional[str]  # ip | ip6 | None
    published: bool  # matched in the forward hook too
    comment: str

    @property
    def type(self) -> str:
        if self.source == "any":
            return "inet_service"
        if self.source == "local":
            return "ether_addr . inet_service"
        return f"{'ipv4_addr' if self.family == 'ip' else 'ipv6_addr'} . inet_service"

    @property
    def interval(self) -> bool:
        return self.source == "net"

    @property
    def address_family(self) -> str:
        """`ip` or `ip6`: the family of the addresses or networks the set holds."""
        if self.family is None:
            raise FirewallError(f"set kind {self.suffix} holds no addresses")
        return self.family


# In rule order.
SET_KINDS = (
    SetKind("any", "any", None, True, "from anywhere: floors and exposures"),
    SetKind("v4", "addr", "ip", True, "from IPv4 addresses: bindings, floors, exposures"),
    SetKind("v6", "addr", "ip6", True, "from IPv6 addresses: bindings, floors, exposures"),
    SetKind("v4_host", "addr", "ip", False, "from IPv4 addresses, ports nobody publishes"),
    SetKind("v6_host", "addr", "ip6", False, "from IPv6 addresses, ports nobody publishes"),
    SetKind("v4_net", "net", "ip", True, "from IPv4 networks: exposures"),
    SetKind("v6_net", "net", "ip6", True, "from IPv6 networks: exposures"),
    SetKind("local", "local", None, True, "same-node consumers: container MAC on the bridge"),
)
KIND = {k.suffix: k for k in SET_KINDS}

Triple = tuple[int, str, str]  # (port, protocol, source) an opening lets in
Canonical = tuple[int, int, str]  # an address: (version, integer, canonical text)
Network = Union[ipaddress.IPv4Network, ipaddress.IPv6Network]
# An exposure's source, told by its first item: from anywhere, one address, or a network.
Source = Union[tuple[Literal["any"], None], tuple[Literal["addr"], Canonical],
               tuple[Literal["net"], Network]]
# How a set's elements sort: the port (`any`), address and port in one integer (`v4`, `v6`),
# (network, prefix length, port) (`_net`) or (MAC, port) (`local`).
SortKey = Union[int, tuple[int, int, int], tuple[str, int]]
# One expression of a rule as `nft -j list` gives it (a JSON object).
Expr = dict[str, object]
# A rule as the script writes it (nft text) and as the kernel lists it (its expressions).
RuleShape = tuple[str, list[Expr]]


class FirewallError(MeshError):
    """A firewall intent or script the mesh refuses to render or apply."""


class SshFloorMissing(FirewallError):
    """The intent (or script) does not keep the ssh floor: applying it could lock us out."""


@attrs.frozen
class Rendered:
    """The script to apply and the digest that identifies it on the node."""

    text: str = attrs.field(eq=False, repr=False)  # nft syntax, one command a line
    digest: str
    ssh_triples: frozenset[Triple]  # the (port, protocol, source) the ssh floor must keep open


@functools.lru_cache(maxsize=1 << 16)
def canonical_address(text: str) -> Canonical:
    """(version, integer, canonical text) of an address; pure, cached for 5,000 sources."""
    address = ipaddress.ip_address(text)
    return (address.version, int(address), str(address))


def _address(text: str, where: str) -> Canonical:
    try:
        return canonical_address(text)
    except (ValueError, TypeError):
        raise FirewallError(f"{where}: {text!r} is not an IP address") from None


def parse_source(text: str, where: str) -> Source:
    """An exposure source: ("any", None), ("addr", (version, integer, text)), or ("net",
    ip_network) for a network wider than one address."""
    if text == ANYWHERE:
        return ("any", None)
    try:
        network = ipaddress.ip_network(text, strict=True)
    except (ValueError, TypeError):
        raise FirewallError(f"{where}: {text!r} is not `any`, an address or a network "
                            "without host bits") from None
    if network.prefixlen == network.max_prefixlen:
        return ("addr", canonical_address(str(network.network_address)))
    return ("net", network)


def collapse(networks: Iterable[Network]) -> list[Network]:
    """The networks with nested and adjacent ones merged (ipaddress.collapse_addresses),
    IPv4 and IPv6 each on their own."""
    nets = list(networks)
    return [*ipaddress.collapse_addresses(n for n in nets if isinstance(n, ipaddress.IPv4Network)),
            *ipaddress.collapse_addresses(n for n in nets if isinstance(n, ipaddress.IPv6Network))]


def parse_mac(text: str, where: str) -> str:
    parts = text.split(":") if isinstance(text, str) else []
    if len(parts) != 6 or not all(len(p) == 2 and all(c in "0123456789abcdefABCDEF" for c in p)
                                  for p in parts):
        raise FirewallError(f"{where}: {text!r} is not a MAC address (six hex octets)")
    if int(parts[0], 16) & 1:
        raise FirewallError(f"{where}: {text!r} is a multicast MAC address, never a container's")
    return text.lower()


def _bridge(name: str) -> str:
    if not isinstance(name, str) or not 0 < len(name) <= IFNAME_MAX or "/" in name \
            or not name.isprintable() or any(c.isspace() or c in '"\\*' for c in name):
        raise FirewallError(f"bridge {name!r} is not an interface name")
    return name


def _check_port(port: int, protocol: str, where: str) -> None:
    if type(port) is not int or not 1 <= port <= 65535:
        raise FirewallError(f"{where}: port {port!r} is not a whole number from 1 to 65535")
    if protocol not in PROTOCOLS:
        raise FirewallError(f"{where}: protocol {protocol!r} is not one of {', '.join(PROTOCOLS)}")


def ssh_floors(intent: FirewallIntent) -> list[FirewallFloor]:
    return [f for f in intent.floors if f.reason.lower().startswith("ssh")]


def set_name(protocol: str, suffix: str) -> str:
    return f"{protocol}_{suffix}"


# ---------------------------------------------------------------------------- grouping


@attrs.frozen
class Openings:
    """Every (source, port) pair of an intent, by protocol and set suffix; each value maps a
    sort key to the element as nft text (equal keys are equal elements)."""

    sets: dict[tuple[str, str], dict[SortKey, str]]  # (protocol, suffix) → {key: element text}
    bridges: tuple[str, ...]

    def elements(self, protocol: str, suffix: str) -> list[str]:
        found = self.sets.get((protocol, suffix), {})
        return [found[key] for key in sorted(found)]


@functools.lru_cache(maxsize=1 << 16)
def _element_head(text: str) -> tuple[int, int, str]:
    """(version, integer, '<canonical address> . ') of an address."""
    version, number, canonical = canonical_address(text)
    return version, number, canonical + " . "


def openings(intent: FirewallIntent, bridges: Iterable[str] = DEFAULT_BRIDGES) -> Openings:
    """Group the intent's pairs into the sets above; raises FirewallError on bad values.

    Elements are written as text here, once each (5,000 of them are the bulk of a script),
    sorted by source then port."""
    _address(intent.address, "address")
    sets: dict[tuple[str, str], dict[SortKey, str]] = {}

    def add(protocol: str, suffix: str, key: SortKey, element: str) -> None:
        sets.setdefault((protocol, suffix), {})[key] = element

    def add_addresses(protocol: str, port: int, sources: Iterable[str], where: str,
                      published: bool = True) -> None:
        host = "" if published else "_host"
        v4 = sets.setdefault((protocol, "v4" + host), {})
        v6 = sets.setdefault((protocol, "v6" + host), {})
        tail = str(port)
        for text in sources:
            try:
                version, number, head = _element_head(text)
            except (ValueError, TypeError):
                raise FirewallError(f"{where}: {text!r} is not an IP address") from None
            (v4 if version == 4 else v6)[number << 16 | port] = head + tail

    for i, floor in enumerate(intent.floors):
        _check_port(floor.port, floor.protocol, f"floor {i}")
        if not floor.sources:
            add(floor.protocol, "any", floor.port, str(floor.port))
        add_addresses(floor.protocol, floor.port, floor.sources, f"floor {i}")
    for i, allow in enumerate(intent.allow):
        _check_port(allow.port, allow.protocol, f"allow {i}")
        add_addresses(allow.protocol, allow.port, allow.sources, f"allow {i}", allow.published)
    networks: dict[tuple[str, int], list[Network]] = {}
    for i, exposure in enumerate(intent.expose):
        where = f"expose {i}"
        _check_port(exposure.port, exposure.protocol, where)
        for text in exposure.sources:
            source = parse_source(text, where)
            if source[0] == "any":
                add(exposure.protocol, "any", exposure.port, str(exposure.port))
            elif source[0] == "addr":
                add_addresses(exposure.protocol, exposure.port, [source[1][2]], where)
            else:
                networks.setdefault((exposure.protocol, exposure.port), []).append(source[1])
    for (protocol, port), nets in networks.items():
        # intervals of one set may not overlap: merge nested and adjacent networks first
        for net in collapse(nets):
            add(protocol, "v4_net" if net.version == 4 else "v6_net",
                (int(net.network_address), net.prefixlen, port), f"{net} . {port}")
    has_local = False
    for i, local in enumerate(intent.local):
        _check_port(local.port, local.protocol, f"local {i}")
        for text in local.macs:
            has_local = True
            mac = parse_mac(text, f"local {i}")
            add(local.protocol, "local", (mac, local.port), f"{mac} . {local.port}")
    names = tuple(sorted({_bridge(b) for b in bridges})) if has_local else ()
    if has_local and not names:
        raise FirewallError("the intent lets same-node consumers in, but no bridge of the "
                            "container runtime was given to let them in on")
    return Openings({k: v for k, v in sets.items() if v}, names)


# ---------------------------------------------------------------------------- rule shapes
#
# Each rule the script holds, as nft text and as the expression list `nft -j list` gives for
# it (what firewall_readback compares a listing with).


def _match(left: object, right: object, op: str = "==") -> Expr:
    return {"match": {"op": op, "left": left, "right": right}}


def _payload(protocol: str, field: str) -> Expr:
    return {"payload": {"protocol": protocol, "field": field}}


def _ct(key: str, direction: Optional[str] = None) -> Expr:
    return {"ct": {"key": key, "dir": direction}} if direction else {"ct": {"key": key}}


def _meta(key: str) -> Expr:
    return {"meta": {"key": key}}


ACCEPT: Expr = {"accept": None}
DROP: Expr = {"drop": None}
ESTABLISHED: RuleShape = ("ct state established,related accept",
               [_match(_ct("state"), ["established", "related"], op="in"), ACCEPT])
INPUT_PREAMBLE: tuple[RuleShape, ...] = (
    ('iif "lo" accept', [_match(_meta("iif"), "lo"), ACCEPT]),
    ESTABLISHED,
    ("ct state invalid drop", [_match(_ct("state"), "invalid", op="in"), DROP]),
    (f"icmp type {{ {', '.join(ICMP_TYPES)} }} accept",
     [_match(_payload("icmp", "type"), {"set": ICMP_TYPES}), ACCEPT]),
    (f"icmpv6 type {{ {', '.join(ICMPV6_TYPES)} }} accept",
     [_match(_payload("icmpv6", "type"), {"set": ICMPV6_TYPES}), ACCEPT]),
)
FORWARD_CLOSE: RuleShape = ("ct status dnat drop", [_match(_ct("status"), "dnat", op="in"), DROP])


def input_rule(protocol: str, suffix: str) -> RuleShape:
    """The input rule accepting what set `<protocol>_<suffix>` holds: (text, expressions)."""
    kind = KIND[suffix]
    name = set_name(protocol, suffix)
    dport = _payload(protocol, "dport")
    if kind.source == "any":
        return (f"{protocol} dport @{name} accept", [_match(dport, "@" + name), ACCEPT])
    if kind.source == "local":
        return (f"iifname @{BRIDGES_SET} ether saddr . {protocol} dport @{name} accept",
                [_match(_meta("iifname"), "@" + BRIDGES_SET),
                 _match({"concat": [_payload("ether", "saddr"), dport]}, "@" + name), ACCEPT])
    family = kind.address_family
    return (f"{family} saddr . {protocol} dport @{name} accept",
            [_match({"concat": [_payload(family, "saddr"), dport]}, "@" + name), ACCEPT])


def forward_rule(protocol: str, suffix: str) -> RuleShape:
    """The forward rule accepting DNAT'd connections the set holds: (text, expressions)."""
    kind = KIND[suffix]
    name = set_name(protocol, suffix)
    dnat = _match(_ct("status"), "dnat", op="in")
    l4 = _match(_meta("l4proto"), protocol)
    port = _ct("proto-dst", "original")
    if kind.source == "any":
        return (f"ct status dnat meta l4proto {protocol} ct original proto-dst @{name} accept",
                [dnat, l4, _match(port, "@" + name), ACCEPT])
    if kind.source == "local":
        return (f"ct status dnat iifname @{BRIDGES_SET} meta l4proto {protocol} "
                f"ether saddr . ct original proto-dst @{name} accept",
                [dnat, _match(_meta("iifname"), "@" + BRIDGES_SET), l4,
                 _match({"concat": [_payload("ether", "saddr"), port]}, "@" + name), ACCEPT])
    family = kind.address_family
    return (f"ct status dnat meta l4proto {protocol} ct original {family} saddr . "
            f"ct original proto-dst @{name} accept",
            [dnat, l4, _match({"concat": [_ct(f"{family} saddr", "original"), port]},
                              "@" + name), ACCEPT])


# ---------------------------------------------------------------------------- rendering


def _comment(text: str) -> str:
    # libnftables aborts the whole process on a comment over 128 bytes, stops at a NUL, and
    # `nft list ruleset` prints quotes unescaped (a saved ruleset would not load back): keep
    # printable ASCII without quotes or backslashes, and keep it short.
    text = "".join(c if " " <= c <= "~" and c not in '"\\' else "?"
                   for c in " ".join(text.split()))
    return text if len(text) <= COMMENT_MAX else text[: COMMENT_MAX - 1] + "~"


def _rule(chain: str, text: str, comment: str = "") -> str:
    return f"add rule {OBJECT} {chain} {text}" + (f' comment "{_comment(comment)}"'
                                                  if comment else "")


def set_size(elements: int) -> int:
    """The size a hash set is declared with: a power of two, at least 64, never below its
    element count."""
    return max(64, 1 << max(elements - 1, 0).bit_length())


def _lines(openings: Openings) -> list[str]:
    """The transaction's commands, one a line, in order."""
    lines = [f"add table {OBJECT}",  # so the delete below never fails on a fresh node
             f"delete table {OBJECT}",
             f"add table {OBJECT}"]
    present = [(protocol, kind) for protocol in PROTOCOLS for kind in SET_KINDS
               if openings.sets.get((protocol, kind.suffix))]
    for protocol, kind in present:
        elements = openings.elements(protocol, kind.suffix)
        # A hash set told its size up front is built at that size, not grown while 5,000
        # elements go in (the table is replaced whole, so nothing is added to it later).
        extra = " flags interval;" if kind.interval else f" size {set_size(len(elements))};"
        lines.append(f"add set {OBJECT} {set_name(protocol, kind.suffix)} {{ type {kind.type};"
                     f"{extra} elements = {{ " + ", ".join(elements) + " } }")
    if openings.bridges:
        lines.append(f"add set {OBJECT} {BRIDGES_SET} {{ type ifname; elements = {{ "
                     + ", ".join(f'"{b}"' for b in openings.bridges) + " } }")
    lines.append(f"add chain {OBJECT} {INPUT_CHAIN} "
                 "{ type filter hook input priority 0; policy drop; }")
    lines.append(f"add chain {OBJECT} {FORWARD_CHAIN} "
                 f"{{ type filter hook forward priority {FORWARD_PRIORITY}; policy accept; }}")
    lines += [_rule(INPUT_CHAIN, text) for text, _ in INPUT_PREAMBLE]
    for protocol, kind in present:
        lines.append(_rule(INPUT_CHAIN, input_rule(protocol, kind.suffix)[0],
                           f"{protocol} {kind.comment}"))
    lines.append(_rule(FORWARD_CHAIN, ESTABLISHED[0]))
    for protocol, kind in present:
        if kind.published:  # published ports are policed here too
            lines.append(_rule(FORWARD_CHAIN, forward_rule(protocol, kind.suffix)[0],
                               f"published {protocol} {kind.comment}"))
    lines.append(_rule(FORWARD_CHAIN, FORWARD_CLOSE[0], "published ports nobody is let in on"))
    return lines


def render(intent: FirewallIntent, bridges: Iterable[str] = DEFAULT_BRIDGES) -> Rendered:
    """The transaction replacing table inet mesh with what `intent` opens. `bridges` are the
    container runtime's bridge interfaces same-node consumers arrive on.

    Raises SshFloorMissing without an ssh floor, FirewallError on a malformed intent."""
    if not ssh_floors(intent):
        raise SshFloorMissing(
            "the firewall intent has no ssh floor (a floor whose reason starts with 'ssh'): "
            "refusing to render a ruleset that could lock the operator out"
        )
    lines = _lines(openings(intent, bridges))
    body = "\n".join(lines) + "\n"
    digest = "sha256:" + hashlib.sha256(body.encode()).hexdigest()
    ssh = frozenset(
        (f.port, f.protocol, _address(s, "floor")[2])
        for f in ssh_floors(intent) for s in f.sources
    ) | frozenset((f.port, f.protocol, ANYWHERE) for f in ssh_floors(intent) if not f.sources)
    return Rendered(text=body + f"add chain {OBJECT} {digest_chain_name(digest)}\n",
                    digest=digest, ssh_triples=ssh)
