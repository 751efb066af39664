"""A node's firewall intent rendered as one nftables JSON transaction, and read back from it.

Invariants:
- Pure: an intent in, a document out; no I/O. Same intent, same document, byte for byte.
- The document touches one table only, `inet mesh`: it adds, deletes and re-adds it with its
  full contents, so applying it replaces our table atomically and leaves every other table
  (the container runtime's among them) as it was. It never flushes the ruleset.
- No document is rendered without the ssh floor: an intent without one is refused.
- Allowed sources live in named sets, one per (port, protocol, address family); one accept
  rule per set. Ports published by the container runtime are policed in the forward hook
  (`ct status dnat`); DNAT'd connections nobody is bound to are dropped, IPv4 and IPv6 alike.
"""

from __future__ import annotations

import functools
import hashlib
import ipaddress
import json
from typing import Any, Iterable, Optional

import attrs

from resolver import FirewallIntent, MeshError

FAMILY = "inet"
TABLE = "mesh"
INPUT_CHAIN = "input"
FORWARD_CHAIN = "forward"
# Before the filter-priority forward chains of the container runtime (iptables-nft's
# `ip filter FORWARD`, priority 0), so a drop here is final whatever they accept.
FORWARD_PRIORITY = -10
# The digest names an empty regular chain (never jumped to, so it matches nothing): listing
# chains is the cheapest question libnftables answers, it needs no set elements.
DIGEST_CHAIN_PREFIX = "digest_"
ANYWHERE = "any"  # the source of a floor with no sources, in read-back triples
PROTOCOLS = ("tcp", "udp")
COMMENT_MAX = 120  # libnftables aborts on rule comments longer than 128 bytes

ICMP_TYPES = ["destination-unreachable", "echo-request", "parameter-problem", "time-exceeded"]
ICMPV6_TYPES = [
    "destination-unreachable", "echo-request", "nd-neighbor-advert", "nd-neighbor-solicit",
    "nd-router-advert", "nd-router-solicit", "packet-too-big", "parameter-problem",
    "time-exceeded", "mld-listener-query", "mld-listener-report", "mld2-listener-report",
]


class FirewallError(MeshError):
    """A firewall intent or document the mesh refuses to render or apply."""


class SshFloorMissing(FirewallError):
    """The intent (or document) does not keep the ssh floor: applying it could lock us out."""


@attrs.frozen
class Rendered:
    """The document to apply and the digest that identifies it on the node."""

    document: dict = attrs.field(eq=False, repr=False)
    digest: str
    ssh_triples: frozenset  # the (port, protocol, source) the ssh floor must keep open

    @functools.cached_property
    def text(self) -> str:
        """The document as libnftables reads it (compact, canonical JSON)."""
        return canonical_json(self.document)


@attrs.frozen
class ReadBack:
    """What a document does, read from its rules and sets (not from the intent)."""

    input_policy: Optional[str]
    forward_priority: Optional[int]
    input: frozenset  # (port, protocol, source) accepted by the input hook; source ANYWHERE
    forward: frozenset  # (port, protocol, source) accepted for DNAT'd (published) traffic
    published_closed: bool  # the forward hook drops every other DNAT'd connection
    tables: frozenset  # (family, name) of every table the document mentions
    digest: Optional[str]  # from the digest chain's name


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


@functools.lru_cache(maxsize=1 << 16)
def _canonical(text: str) -> tuple:
    """(version, integer, canonical text) of an address; pure, cached for 5,000 sources."""
    address = ipaddress.ip_address(text)
    return (address.version, int(address), str(address))


def _address(text: str, where: str) -> tuple:
    try:
        return _canonical(text)
    except (ValueError, TypeError):
        raise FirewallError(f"{where}: {text!r} is not an IP address") from None


def digest_chain_name(digest: str) -> str:
    return DIGEST_CHAIN_PREFIX + digest.replace(":", "_", 1)


def digest_from_chain_name(name: str) -> Optional[str]:
    if not name.startswith(DIGEST_CHAIN_PREFIX):
        return None
    return name[len(DIGEST_CHAIN_PREFIX):].replace("_", ":", 1)


def _check_port(port: int, protocol: str, where: str) -> None:
    if type(port) is not int or not 1 <= port <= 65535:
        raise FirewallError(f"{where}: port {port!r} is not a whole number from 1 to 65535")
    if protocol not in PROTOCOLS:
        raise FirewallError(f"{where}: protocol {protocol!r} is not one of {', '.join(PROTOCOLS)}")


def ssh_floors(intent: FirewallIntent) -> list:
    return [f for f in intent.floors if f.reason.lower().startswith("ssh")]


def intent_triples(intent: FirewallIntent, *, published_only: bool = False) -> frozenset:
    """(port, protocol, source) the intent opens; floors with no sources open from ANYWHERE.

    With published_only: what must pass the forward hook (published allows and every floor,
    since a floor's port, the broker's among them, may be published by the runtime)."""
    triples = set()
    for allow in intent.allow:
        if published_only and not allow.published:
            continue
        triples.update((allow.port, allow.protocol, _address(s, "allow")[2]) for s in allow.sources)
    for floor in intent.floors:
        if floor.sources:
            triples.update((floor.port, floor.protocol, _address(s, "floor")[2]) for s in floor.sources)
        else:
            triples.add((floor.port, floor.protocol, ANYWHERE))
    return frozenset(triples)


# ---------------------------------------------------------------------------- rendering


def _obj(kind: str, **fields) -> dict:
    return {kind: {"family": FAMILY, "table": TABLE, **fields}}


def _match(left: Any, right: Any, op: str = "==") -> dict:
    return {"match": {"op": op, "left": left, "right": right}}


def _payload(protocol: str, field: str) -> dict:
    return {"payload": {"protocol": protocol, "field": field}}


def _ct(key: str, direction: Optional[str] = None) -> dict:
    return {"ct": {"key": key, "dir": direction}} if direction else {"ct": {"key": key}}


def _comment(text: str) -> str:
    # libnftables aborts the whole process on a comment over 128 bytes, stops at a NUL, and
    # `nft list ruleset` prints quotes unescaped (a saved ruleset would not load back): keep
    # printable ASCII without quotes or backslashes, and keep it short.
    text = "".join(c if " " <= c <= "~" and c not in '"\\' else "?"
                   for c in " ".join(text.split()))
    return text if len(text) <= COMMENT_MAX else text[: COMMENT_MAX - 1] + "~"


def _ip_family(address: tuple) -> str:
    return "ip" if address[0] == 4 else "ip6"


@attrs.frozen
class _Opening:
    """One (kind, port, protocol, family) opening: one set (unless from anywhere), one rule."""

    port: int
    protocol: str
    kind: str  # floor | allow
    family: Optional[str]  # ip | ip6 | None (from anywhere)
    published: bool
    sources: tuple
    reasons: tuple

    @property
    def set_name(self) -> str:
        family = "v4" if self.family == "ip" else "v6"
        host_only = "" if self.published else "_host"  # not published: the input hook only
        return f"{self.kind}_{self.protocol}_{self.port}_{family}{host_only}"


def _openings(intent: FirewallIntent) -> list:
    grouped: dict = {}

    def add(kind, port, protocol, sources, reason, published, where):
        _check_port(port, protocol, where)
        if not sources and kind == "floor":
            grouped.setdefault((port, protocol, kind, None, published), [set(), set()])[1].add(reason)
            return
        for text in sources:
            address = _address(text, where)
            key = (port, protocol, kind, _ip_family(address), published)
            entry = grouped.setdefault(key, [set(), set()])
            entry[0].add(address)
            entry[1].add(reason)

    for index, floor in enumerate(intent.floors):
        add("floor", floor.port, floor.protocol, floor.sources, floor.reason, True, f"floor {index}")
    for index, allow in enumerate(intent.allow):
        add("allow", allow.port, allow.protocol, allow.sources, allow.reason, allow.published,
            f"allow {index}")
    return [
        _Opening(port, protocol, kind, family, published,
                 tuple(a[2] for a in sorted(addresses)), tuple(sorted(reasons)))
        for (port, protocol, kind, family, published), (addresses, reasons)
        in sorted(grouped.items(), key=lambda item: (*item[0][:3], item[0][3] or "", item[0][4]))
    ]


def _input_rule(opening: _Opening) -> dict:
    expr = []
    if opening.family is not None:
        expr.append(_match(_payload(opening.family, "saddr"), "@" + opening.set_name))
    expr += [_match(_payload(opening.protocol, "dport"), opening.port), {"accept": None}]
    comment = f"{opening.kind} {opening.protocol}/{opening.port}: " + "; ".join(opening.reasons)
    return _obj("rule", chain=INPUT_CHAIN, expr=expr, comment=_comment(comment))


def _forward_rule(opening: _Opening) -> dict:
    expr = [
        _match(_ct("status"), "dnat", op="in"),
        _match({"meta": {"key": "l4proto"}}, opening.protocol),
        _match(_ct("proto-dst", "original"), opening.port),
    ]
    if opening.family is not None:
        expr.append(_match(_ct(f"{opening.family} saddr", "original"), "@" + opening.set_name))
    expr.append({"accept": None})
    comment = f"published {opening.protocol}/{opening.port}: " + "; ".join(opening.reasons)
    return _obj("rule", chain=FORWARD_CHAIN, expr=expr, comment=_comment(comment))


def _body(intent: FirewallIntent) -> list:
    _address(intent.address, "address")
    openings = _openings(intent)
    table = {"family": FAMILY, "name": TABLE}
    commands: list = [
        {"add": {"table": dict(table)}},  # so the delete below never fails on a fresh node
        {"delete": {"table": dict(table)}},
        {"add": {"table": dict(table)}},
    ]
    for opening in openings:
        if opening.family is not None:
            commands.append({"add": _obj(
                "set", name=opening.set_name,
                type="ipv4_addr" if opening.family == "ip" else "ipv6_addr",
                elem=list(opening.sources),
            )})
    commands.append({"add": _obj("chain", name=INPUT_CHAIN, type="filter", hook="input",
                                 prio=0, policy="drop")})
    commands.append({"add": _obj("chain", name=FORWARD_CHAIN, type="filter", hook="forward",
                                 prio=FORWARD_PRIORITY, policy="accept")})

    def rule(chain: str, expr: list, comment: Optional[str] = None) -> dict:
        fields = {"chain": chain, "expr": expr}
        if comment:
            fields["comment"] = comment
        return {"add": _obj("rule", **fields)}

    established = _match(_ct("state"), ["established", "related"], op="in")
    commands += [
        rule(INPUT_CHAIN, [_match({"meta": {"key": "iif"}}, "lo"), {"accept": None}]),
        rule(INPUT_CHAIN, [established, {"accept": None}]),
        rule(INPUT_CHAIN, [_match(_ct("state"), "invalid", op="in"), {"drop": None}]),
        rule(INPUT_CHAIN, [_match(_payload("icmp", "type"), {"set": ICMP_TYPES}), {"accept": None}]),
        rule(INPUT_CHAIN, [_match(_payload("icmpv6", "type"), {"set": ICMPV6_TYPES}),
                           {"accept": None}]),
    ]
    commands += [{"add": _input_rule(o)} for o in openings]
    commands.append(rule(FORWARD_CHAIN, [established, {"accept": None}]))
    commands += [{"add": _forward_rule(o)} for o in openings if o.published]
    commands.append(rule(FORWARD_CHAIN, [_match(_ct("status"), "dnat", op="in"), {"drop": None}],
                         "published ports nobody is bound to"))
    return commands


def render(intent: FirewallIntent) -> Rendered:
    """The transaction replacing table inet mesh with what `intent` opens.

    Raises SshFloorMissing without an ssh floor, FirewallError on a malformed intent."""
    if not ssh_floors(intent):
        raise SshFloorMissing(
            "the firewall intent has no ssh floor (a floor whose reason starts with 'ssh'): "
            "refusing to render a ruleset that could lock the operator out"
        )
    body = _body(intent)
    digest = "sha256:" + hashlib.sha256(canonical_json({"nftables": body}).encode()).hexdigest()
    document = {"nftables": body + [{"add": _obj("chain", name=digest_chain_name(digest))}]}
    ssh = frozenset(
        (f.port, f.protocol, _address(s, "floor")[2])
        for f in ssh_floors(intent) for s in f.sources
    ) | frozenset((f.port, f.protocol, ANYWHERE) for f in ssh_floors(intent) if not f.sources)
    return Rendered(document=document, digest=digest, ssh_triples=ssh)


# ---------------------------------------------------------------------------- reading back


class UnrecognisedRule(FirewallError):
    """A rule whose shape read_back does not know: it cannot vouch for what it does."""


def _tables_in(command: Any) -> Iterable:
    for verb in command.values():
        for kind, obj in verb.items():
            if kind == "table":
                yield (obj.get("family"), obj.get("name"))
            else:
                yield (obj.get("family"), obj.get("table"))


def _as_port_match(expr: dict, protocols=PROTOCOLS) -> Optional[tuple]:
    match = expr.get("match")
    if not match or match["op"] != "==":
        return None
    left = match["left"].get("payload", {})
    if left.get("field") == "dport" and left.get("protocol") in protocols:
        return (match["right"], left["protocol"])
    return None


def _elements(sets: dict, reference: Any, family: str) -> list:
    if not isinstance(reference, str) or not reference.startswith("@"):
        raise UnrecognisedRule(f"source match against {reference!r}, not a named set")
    found = sets.get(reference[1:])
    if found is None:
        raise UnrecognisedRule(f"rule refers to set {reference} that the document does not add")
    expected = "ipv4_addr" if family == "ip" else "ipv6_addr"
    if found["type"] != expected:
        raise UnrecognisedRule(f"set {reference} holds {found['type']}, matched as {family} saddr")
    return [_canonical(e)[2] for e in found.get("elem", [])]


def _read_input_rule(expr: list, sets: dict) -> Optional[list]:
    """Triples an input rule accepts; None for the known infrastructure rules."""
    verdict = expr[-1]
    if "drop" in verdict:
        if expr[:-1] == [_match(_ct("state"), "invalid", op="in")]:
            return []
        raise UnrecognisedRule(f"input drop rule {expr!r}")
    if "accept" not in verdict:
        raise UnrecognisedRule(f"input rule with verdict {verdict!r}")
    matches = expr[:-1]
    known = (
        [_match({"meta": {"key": "iif"}}, "lo")],
        [_match(_ct("state"), ["established", "related"], op="in")],
        [_match(_payload("icmp", "type"), {"set": ICMP_TYPES})],
        [_match(_payload("icmpv6", "type"), {"set": ICMPV6_TYPES})],
    )
    if matches in known:
        return None
    if len(matches) == 1 and (port := _as_port_match(matches[0])):
        return [(port[0], port[1], ANYWHERE)]
    if len(matches) == 2 and (port := _as_port_match(matches[1])):
        source = matches[0].get("match", {})
        payload = source.get("left", {}).get("payload", {})
        if source.get("op") == "==" and payload.get("field") == "saddr" \
                and payload.get("protocol") in ("ip", "ip6"):
            return [(port[0], port[1], s) for s in _elements(sets, source["right"], payload["protocol"])]
    raise UnrecognisedRule(f"input accept rule {expr!r}")


def _read_forward_rule(expr: list, sets: dict) -> Optional[list]:
    """Triples a forward rule accepts for DNAT'd traffic; None for known rules, "closed"."""
    dnat = _match(_ct("status"), "dnat", op="in")
    if expr == [_match(_ct("state"), ["established", "related"], op="in"), {"accept": None}]:
        return None
    if expr == [dnat, {"drop": None}]:
        return "closed"
    if expr[-1] != {"accept": None} or len(expr) not in (4, 5) or expr[0] != dnat:
        raise UnrecognisedRule(f"forward rule {expr!r}")
    proto = expr[1].get("match", {})
    port = expr[2].get("match", {})
    if proto.get("left") != {"meta": {"key": "l4proto"}} or proto.get("op") != "==" \
            or proto.get("right") not in PROTOCOLS \
            or port.get("left") != _ct("proto-dst", "original") or port.get("op") != "==":
        raise UnrecognisedRule(f"forward rule {expr!r}")
    if len(expr) == 4:
        return [(port["right"], proto["right"], ANYWHERE)]
    source = expr[3].get("match", {})
    key = source.get("left", {}).get("ct", {})
    family = {"ip saddr": "ip", "ip6 saddr": "ip6"}.get(key.get("key"))
    if source.get("op") != "==" or key.get("dir") != "original" or family is None:
        raise UnrecognisedRule(f"forward rule {expr!r}")
    return [(port["right"], proto["right"], s) for s in _elements(sets, source["right"], family)]


def read_back(document: dict) -> ReadBack:
    """What `document` opens, read from its chains, rules and sets.

    Only the rule shapes the renderer emits are understood; any other rule raises
    UnrecognisedRule, since an unknown rule could open anything."""
    commands = document["nftables"]
    tables = frozenset(t for c in commands for t in _tables_in(c))
    adds = [c["add"] for c in commands if "add" in c]
    sets = {o["set"]["name"]: o["set"] for o in adds if "set" in o}
    chains = {o["chain"]["name"]: o["chain"] for o in adds if "chain" in o}
    rules = [o["rule"] for o in adds if "rule" in o]
    digests = [d for d in map(digest_from_chain_name, chains) if d]
    for name, chain in chains.items():
        if name in (INPUT_CHAIN, FORWARD_CHAIN):
            continue
        if not digest_from_chain_name(name) or "hook" in chain:
            raise UnrecognisedRule(f"chain {name!r}")
    accepted_in, accepted_fwd, closed = set(), set(), False
    for rule in rules:
        if rule["chain"] == INPUT_CHAIN:
            triples = _read_input_rule(rule["expr"], sets)
            accepted_in.update(triples or ())
        elif rule["chain"] == FORWARD_CHAIN:
            triples = _read_forward_rule(rule["expr"], sets)
            if triples == "closed":
                closed = True
            elif closed and triples:
                raise UnrecognisedRule("an accept after the forward chain's closing drop")
            else:
                accepted_fwd.update(triples or ())
        else:
            raise UnrecognisedRule(f"rule in chain {rule['chain']!r}")
    return ReadBack(
        input_policy=chains.get(INPUT_CHAIN, {}).get("policy"),
        forward_priority=chains.get(FORWARD_CHAIN, {}).get("prio"),
        input=frozenset(accepted_in),
        forward=frozenset(accepted_fwd),
        published_closed=closed,
        tables=tables,
        digest=digests[0] if len(digests) == 1 else None,
    )


def keeps_ssh_floor(document: dict, ssh_triples: frozenset) -> bool:
    """Whether `document` accepts every ssh-floor triple under a dropping input policy."""
    back = read_back(document)
    return bool(ssh_triples) and ssh_triples <= back.input and back.input_policy == "drop"
