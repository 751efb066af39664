"""What a firewall script, or a listing of the running table, lets in.

Invariants:
- Pure. `read_back` reads a rendered script (nft text) or a JSON listing (`nft -j list table
  inet mesh`, what the kernel holds) and nothing else: its tables, chains, the rules that
  accept and the elements of the sets they match. A script's lines must be ones
  firewall_render writes (they are read through its table of text and expressions); what
  an accepting rule lets in is interpreted here from its expressions (which set, keyed by
  what, only on the runtime's bridges or not), never taken from the renderer, so a renderer
  that changes a rule's meaning is caught. Anything it cannot read raises UnrecognisedRule,
  since a rule it cannot read could open anything.
- A triple is (port, protocol, source); a source is `any`, an address (`10.0.0.2`), a
  network (`192.168.1.0/24`) or a container on a bridge (`ether 0a:…:… via docker0`).
"""

from __future__ import annotations

import functools
import ipaddress
import json
import re
from typing import Callable, Optional, Required, TypedDict, Union

import attrs

from executors.common.marks import digest_from_chain_name
from executors.node.firewall.meaning import ANY_BRIDGE, local_source
from executors.node.firewall.render import (
    ANYWHERE,
    BRIDGES_SET,
    ESTABLISHED,
    FORWARD_CHAIN,
    FORWARD_CLOSE,
    INPUT_CHAIN,
    INPUT_PREAMBLE,
    PROTOCOLS,
    SET_KINDS,
    Expr,
    FirewallError,
    Triple,
    canonical_address,
    forward_rule,
    input_rule,
)


class UnrecognisedRule(FirewallError):
    """A rule (or line) whose shape read_back does not know: it cannot vouch for what it does."""


# ---------------------------------------------------------------------------- listings
#
# What `nft -j list …` gives, as far as the mesh reads it (libnftables' JSON schema: every
# object has more keys, such as `handle`, that nothing here looks at).


class ListedTable(TypedDict):
    family: str
    name: str


class ListedSet(TypedDict, total=False):
    family: Required[str]
    table: Required[str]
    name: Required[str]
    type: Required[Union[str, list[str]]]  # a list for a concatenation
    flags: list[str]
    elem: list[object]  # ports, names, {"concat": [source, port]} (a source may be a prefix)


class ListedChain(TypedDict, total=False):
    family: Required[str]
    table: Required[str]
    name: Required[str]
    hook: str  # a base chain's, with prio and policy; a regular chain has none of the three
    prio: int
    policy: str


class ListedRule(TypedDict):
    family: str
    table: str
    chain: str
    expr: list[Expr]


class ListedItem(TypedDict, total=False):
    """One object of a listing: exactly one of these keys (or one the mesh never writes)."""

    metainfo: dict[str, object]
    table: ListedTable
    set: ListedSet
    chain: ListedChain
    rule: ListedRule


class Listing(TypedDict):
    """A JSON listing: `nft -j list table inet mesh`, `list chains`, `list tables`."""

    nftables: list[ListedItem]


@attrs.frozen
class ReadBack:
    """What a script or listing does, read from its rules and sets (not from the intent)."""

    input_policy: Optional[str]
    forward_priority: Optional[int]
    input: frozenset[Triple]  # (port, protocol, source) accepted by the input hook
    forward: frozenset[Triple]  # (port, protocol, source) accepted for DNAT'd (published) traffic
    published_closed: bool  # the forward hook drops every other DNAT'd connection
    tables: frozenset[tuple[str, str]]  # (family, name) of every table the script mentions
    digest: Optional[str]  # from the digest chain's name

    def accepts(self, port: int, protocol: str, source: str, *, forward: bool = False) -> bool:
        """Whether a connection from `source` (an address, or `ether MAC via BRIDGE`) to
        `port` is let in: from anywhere, by the address, or by a network holding it."""
        triples = self.forward if forward else self.input
        if (port, protocol, ANYWHERE) in triples or (port, protocol, source) in triples:
            return True
        if source.startswith("ether "):
            mac = source.split(" ")[1]
            return (port, protocol, local_source(mac, ANY_BRIDGE)) in triples or (
                port, protocol, "any via " + source.rsplit(" ", 1)[1]) in triples
        address = ipaddress.ip_address(source)
        return any(p == port and q == protocol and "/" in s
                   and address in ipaddress.ip_network(s) for p, q, s in triples)


# ---------------------------------------------------------------------------- parsing


# A set's element: a port (int), an interface name (str) or a (source, port) pair.
Element = Union[int, str, tuple[str, int]]
# What one part of a lookup key reads: (what, detail, origin), e.g. ("saddr", "ip", "packet")
# or ("dport", "", "ct") (the connection's original port: its protocol is the rule's l4proto).
_Field = tuple[str, str, str]


@attrs.define
class _Set:
    type: str  # as nft writes it: "ipv4_addr . inet_service"
    interval: bool
    elements: Callable[[], list[Element]]  # parsed on demand


@attrs.frozen
class _Chain:
    """A chain's hook, priority and policy: all None for a regular chain."""

    hook: Optional[str] = None
    prio: Optional[int] = None
    policy: Optional[str] = None


_REGULAR = _Chain()


@attrs.frozen
class _Accept:
    """What one accepting rule matches, interpreted from its expressions."""

    set: str  # the set it looks up
    protocol: str
    key: str  # any | ip | ip6 | ether: what the set's elements are keyed by
    bridges_only: bool  # only traffic arriving on the @bridges interfaces


@attrs.frozen
class _Parsed:
    """A script's or listing's tables, chains and sets, and what each accepting rule matches
    (elements unread: reading 5,000 is the costly part, done only where needed)."""

    tables: frozenset[tuple[str, str]]
    sets: dict[str, _Set]
    chains: dict[str, _Chain]
    input: tuple[_Accept, ...]  # the input hook's accepting rules, in order
    forward: tuple[_Accept, ...]  # the forward hook's rules for DNAT'd connections
    closed: bool

    @property
    def bridges(self) -> list[str]:
        found = self.sets.get(BRIDGES_SET)
        if found is None:
            return []
        bad = UnrecognisedRule(f"set @{BRIDGES_SET} is not a plain set of interface names")
        if found.type != "ifname" or found.interval:
            raise bad
        elements = found.elements()
        names = [e for e in elements if isinstance(e, str)]
        if len(names) != len(elements):
            raise bad
        return sorted(names)


# The parts of a script or listing, before the rules are interpreted: tables, sets, chains and
# each rule as (chain, expressions).
_Pieces = tuple[set[tuple[str, str]], dict[str, _Set], dict[str, _Chain],
                list[tuple[str, list[Expr]]]]


def _expr_key(expr: object) -> str:
    def norm(value: object) -> object:
        if isinstance(value, dict):
            return {k: (sorted(v) if k == "set" and isinstance(v, list) else norm(v))
                    for k, v in value.items()}
        if isinstance(value, list):
            return [norm(v) for v in value]
        return value
    return json.dumps(norm(expr), sort_keys=True)


# The fixed rules, compared whole; every accepting rule is interpreted by _interpret.
_FIXED = {(INPUT_CHAIN, _expr_key(e)): "" for _, e in INPUT_PREAMBLE}
_FIXED[(FORWARD_CHAIN, _expr_key(ESTABLISHED[1]))] = ""
_FIXED[(FORWARD_CHAIN, _expr_key(FORWARD_CLOSE[1]))] = "close"


def _text_to_expr() -> dict[tuple[str, str], list[Expr]]:
    """(chain, rule text) → expressions, for every rule the renderer can write: the script's
    text is read through this table, the kernel's listing gives expressions directly (the
    kernel property test holds the two to each other)."""
    table = {(INPUT_CHAIN, t): e for t, e in INPUT_PREAMBLE}
    table[(FORWARD_CHAIN, ESTABLISHED[0])] = ESTABLISHED[1]
    table[(FORWARD_CHAIN, FORWARD_CLOSE[0])] = FORWARD_CLOSE[1]
    for protocol in PROTOCOLS:
        for kind in SET_KINDS:
            table[(INPUT_CHAIN, input_rule(protocol, kind.suffix)[0])] = \
                input_rule(protocol, kind.suffix)[1]
            if kind.published:
                table[(FORWARD_CHAIN, forward_rule(protocol, kind.suffix)[0])] = \
                    forward_rule(protocol, kind.suffix)[1]
    return table


_TEXT = _text_to_expr()


def _field(expr: object) -> Optional[_Field]:
    """What a lookup key's part reads, as (what, detail, origin), or None if unknown: the
    packet's own header (origin "packet") or the connection's original tuple ("ct")."""
    if not isinstance(expr, dict):
        return None
    p = expr.get("payload")
    if isinstance(p, dict):
        if p.get("field") == "saddr" and p.get("protocol") in ("ip", "ip6", "ether"):
            return ("saddr", p["protocol"], "packet")
        if p.get("field") == "dport" and p.get("protocol") in PROTOCOLS:
            return ("dport", p["protocol"], "packet")
    c = expr.get("ct")
    if isinstance(c, dict):
        if c.get("dir") == "original" and c.get("key") in ("ip saddr", "ip6 saddr"):
            return ("saddr", c["key"].split()[0], "ct")
        if c.get("dir") == "original" and c.get("key") == "proto-dst":
            return ("dport", "", "ct")
    return None


def _interpret(chain: str, expr: list[Expr]) -> _Accept:
    """An accepting rule's meaning, from its expressions alone (UnrecognisedRule otherwise):
    a set lookup keyed by [source .] destination port, optionally only on @bridges. In the
    input hook the key is the packet's; in the forward hook the rule applies to DNAT'd
    connections only and the key is the connection's original tuple (the frame's MAC for a
    container: a frame has no translated source)."""
    if not expr or expr[-1] != {"accept": None}:
        raise UnrecognisedRule(f"{chain} rule {expr!r}")
    bad = UnrecognisedRule(f"{chain} rule {expr!r}")
    dnat = bridges_only = False
    l4proto: Optional[str] = None
    lookup: Optional[tuple[str, list[_Field]]] = None
    for item in expr[:-1]:
        match = item.get("match") if isinstance(item, dict) else None
        if not isinstance(match, dict) or match.get("op") not in ("==", "in"):
            raise bad
        left: object = match["left"]
        right: object = match["right"]
        op: object = match["op"]
        if left == {"ct": {"key": "status"}} and right == "dnat" and op == "in" and not dnat:
            dnat = True
        elif left == {"meta": {"key": "iifname"}} and right == "@" + BRIDGES_SET \
                and op == "==" and not bridges_only:
            bridges_only = True
        elif left == {"meta": {"key": "l4proto"}} and isinstance(right, str) \
                and right in PROTOCOLS and op == "==" and l4proto is None:
            l4proto = right
        elif isinstance(right, str) and right.startswith("@") and op == "==" and lookup is None:
            parts = left["concat"] if isinstance(left, dict) and "concat" in left else [left]
            found = [_field(p) for p in parts] if isinstance(parts, list) else [None]
            fields = [f for f in found if f is not None]
            if len(fields) != len(found) or len(fields) > 2 or fields[-1][0] != "dport" \
                    or (len(fields) == 2 and fields[0][0] != "saddr"):
                raise bad
            lookup = (right[1:], fields)
        else:
            raise bad
    if lookup is None or dnat != (chain == FORWARD_CHAIN):
        raise bad
    name, fields = lookup
    source, port = (fields[0] if len(fields) == 2 else None), fields[-1]
    if chain == FORWARD_CHAIN:
        if port != ("dport", "", "ct") or l4proto is None:
            raise bad
        if source is not None and source[2] != ("packet" if source[1] == "ether" else "ct"):
            raise bad
        protocol = l4proto
    else:
        if port[2] != "packet" or l4proto is not None:
            raise bad
        if source is not None and source[2] != "packet":
            raise bad
        protocol = port[1]
    return _Accept(name, protocol, "any" if source is None else source[1], bridges_only)


_TABLE = re.compile(r"(add|delete) table (\S+) (\S+)")
_SET = re.compile(r"add set (\S+) (\S+) (\S+) \{ type ([^;{}]+);( flags interval;| size \d+;)? "
                  r"elements = \{ (.*) \} \}")
_CHAIN = re.compile(r"add chain (\S+) (\S+) (\S+)(?: \{ type filter hook (\w+) priority "
                    r"(-?\d+); policy (\w+); \})?")
_RULE = re.compile(r'add rule (\S+) (\S+) (\S+) (.*?)(?: comment "[^"]*")?')


def _text_element(text: str) -> Element:
    if " . " not in text:
        return text[1:-1] if text.startswith('"') else int(text)
    source, port = text.rsplit(" . ", 1)
    return (source, int(port))


def _text_elements(text: str) -> list[Element]:
    return [_text_element(x) for x in text.split(", ")]


def _parse_text(text: str) -> _Pieces:
    tables: set[tuple[str, str]] = set()
    sets: dict[str, _Set] = {}
    chains: dict[str, _Chain] = {}
    rules: list[tuple[str, list[Expr]]] = []
    for line in text.splitlines():
        if not line:
            continue
        if line.startswith("add set "):
            found = _SET.fullmatch(line)
            if found is None:
                raise UnrecognisedRule(f"set line {line[:200]!r}")
            family, table, name, type_, extra, elements = found.groups()
            tables.add((family, table))
            sets[name] = _Set(type_, extra == " flags interval;",
                              functools.partial(_text_elements, elements))
        elif line.startswith("add rule "):
            found = _RULE.fullmatch(line)
            if found is None:
                raise UnrecognisedRule(f"rule line {line!r}")
            family, table, chain, body = found.groups()
            tables.add((family, table))
            if (chain, body) not in _TEXT:
                raise UnrecognisedRule(f"{chain} rule {body!r}: not a rule the mesh writes")
            rules.append((chain, _TEXT[(chain, body)]))
        elif line.startswith("add chain "):
            found = _CHAIN.fullmatch(line)
            if found is None:
                raise UnrecognisedRule(f"chain line {line!r}")
            family, table, name, hook, prio, policy = found.groups()
            tables.add((family, table))
            chains[name] = _Chain(hook, int(prio), policy) if hook else _REGULAR
        else:
            found = _TABLE.fullmatch(line)
            if found is None:
                raise UnrecognisedRule(f"line {line!r}")
            tables.add((found.group(2), found.group(3)))
    return tables, sets, chains, rules


def _json_element(value: object) -> Element:
    if isinstance(value, dict) and "concat" in value:
        source, port = value["concat"]
        if isinstance(source, dict) and "prefix" in source:
            source = f"{source['prefix']['addr']}/{source['prefix']['len']}"
        elif isinstance(source, dict):
            raise UnrecognisedRule(f"set element {value!r}")
        return (source, port)
    if isinstance(value, (int, str)):
        return value
    raise UnrecognisedRule(f"set element {value!r}")


def _json_elements(elements: list[object]) -> list[Element]:
    return [_json_element(x) for x in elements]


def _parse_listing(listing: Listing) -> _Pieces:
    tables: set[tuple[str, str]] = set()
    sets: dict[str, _Set] = {}
    chains: dict[str, _Chain] = {}
    rules: list[tuple[str, list[Expr]]] = []
    for item in listing["nftables"]:
        ((kind, body),) = item.items()  # one object an item
        match item:
            case {"metainfo": _}:
                continue
            case {"table": table}:
                tables.add((table["family"], table["name"]))
            case {"set": found}:
                tables.add((found["family"], found["table"]))
                type_ = found["type"]
                sets[found["name"]] = _Set(
                    " . ".join(type_) if isinstance(type_, list) else type_,
                    "interval" in (found.get("flags") or []),
                    functools.partial(_json_elements, found.get("elem", [])))
            case {"chain": chain}:
                tables.add((chain["family"], chain["table"]))
                chains[chain["name"]] = (_Chain(chain["hook"], chain["prio"], chain["policy"])
                                         if "hook" in chain else _REGULAR)
            case {"rule": rule}:
                tables.add((rule["family"], rule["table"]))
                rules.append((rule["chain"], rule["expr"]))
            case _:
                name = body.get("name") if isinstance(body, dict) else None
                raise UnrecognisedRule(f"{kind} {name!r} in the listing")
    return tables, sets, chains, rules


def _parse(source: Union[str, Listing]) -> _Parsed:
    tables, sets, chains, rules = (_parse_text(source) if isinstance(source, str)
                                   else _parse_listing(source))
    for name, declared in chains.items():
        wanted = {INPUT_CHAIN: "input", FORWARD_CHAIN: "forward"}.get(name)
        if declared.hook != wanted or (wanted is None and not digest_from_chain_name(name)):
            raise UnrecognisedRule(f"chain {name!r} ({declared.hook or 'no hook'})")
    accepts: dict[str, list[_Accept]] = {INPUT_CHAIN: [], FORWARD_CHAIN: []}
    closed = False
    for chain, expr in rules:
        if chain not in accepts:
            raise UnrecognisedRule(f"a rule in chain {chain!r}")
        fixed = _FIXED.get((chain, _expr_key(expr)))
        if fixed == "close":
            closed = True
            continue
        if fixed == "":
            continue
        if chain == FORWARD_CHAIN and closed:
            raise UnrecognisedRule("an accept after the forward chain's closing drop")
        accept = _interpret(chain, expr)
        if accept.set not in sets:
            raise UnrecognisedRule(f"a rule matches set @{accept.set}, which is not added")
        accepts[chain].append(accept)
    return _Parsed(frozenset(tables), sets, chains, tuple(accepts[INPUT_CHAIN]),
                   tuple(accepts[FORWARD_CHAIN]), closed)


KEY_TYPES = {"any": "inet_service", "ip": "ipv4_addr . inet_service",
             "ip6": "ipv6_addr . inet_service", "ether": "ether_addr . inet_service"}


def _ports(name: str, elements: list[Element]) -> list[int]:
    """The elements of a set of ports (UnrecognisedRule for anything else)."""
    ports = [e for e in elements if isinstance(e, int)]
    if len(ports) != len(elements):
        raise UnrecognisedRule(f"set @{name} holds elements other than ports")
    return ports


def _pairs(name: str, elements: list[Element]) -> list[tuple[str, int]]:
    """The elements of a set of (source, port) pairs (UnrecognisedRule for anything else)."""
    pairs = [e for e in elements if isinstance(e, tuple)]
    if len(pairs) != len(elements):
        raise UnrecognisedRule(f"set @{name} holds elements other than (source, port) pairs")
    return pairs


def _accepted(parsed: _Parsed, accept: _Accept) -> list[Triple]:
    """The triples a rule accepts: its set's elements, read as the rule keys them, checked
    against the type the set declares."""
    found = parsed.sets[accept.set]
    if found.type != KEY_TYPES[accept.key]:
        raise UnrecognisedRule(f"set @{accept.set} is {found.type}, matched as "
                               f"{KEY_TYPES[accept.key]}")
    elements = found.elements()
    protocol = accept.protocol
    bridges = parsed.bridges if accept.bridges_only else [ANY_BRIDGE]
    if accept.key == "any":
        ports = _ports(accept.set, elements)
        if accept.bridges_only:
            return [(port, protocol, f"any via {b}") for port in ports for b in bridges]
        return [(port, protocol, ANYWHERE) for port in ports]
    pairs = _pairs(accept.set, elements)
    if accept.key == "ether":
        return [(port, protocol, local_source(mac, b)) for mac, port in pairs for b in bridges]
    if accept.bridges_only:
        raise UnrecognisedRule(f"an address lookup limited to @{BRIDGES_SET} ({accept.set})")
    version = 4 if accept.key == "ip" else 6
    triples: list[Triple] = []
    for source, port in pairs:
        if found.interval:
            network = ipaddress.ip_network(source)
            if network.version != version:
                raise UnrecognisedRule(f"set @{accept.set} holds {network}")
            if network.prefixlen == network.max_prefixlen:
                triples.append((port, protocol, str(network.network_address)))
            else:
                triples.append((port, protocol, str(network)))
        else:
            checked = canonical_address(source)
            if checked[0] != version:
                raise UnrecognisedRule(f"set @{accept.set} holds {source}")
            triples.append((port, protocol, checked[2]))
    return triples


def read_back(source: Union[str, Listing]) -> ReadBack:
    """What a rendered script (nft text) or a JSON listing of table inet mesh opens.

    Each accepting rule is interpreted from its expressions, each set read as its rules key
    it; anything else raises UnrecognisedRule, since an unknown rule could open anything."""
    parsed = _parse(source)
    accepted_in: set[Triple] = set()
    accepted_fwd: set[Triple] = set()
    for accept in parsed.input:
        accepted_in.update(_accepted(parsed, accept))
    for accept in parsed.forward:
        accepted_fwd.update(_accepted(parsed, accept))
    digests = [d for d in map(digest_from_chain_name, parsed.chains) if d]
    return ReadBack(
        input_policy=parsed.chains.get(INPUT_CHAIN, _REGULAR).policy,
        forward_priority=parsed.chains.get(FORWARD_CHAIN, _REGULAR).prio,
        input=frozenset(accepted_in),
        forward=frozenset(accepted_fwd),
        published_closed=parsed.closed,
        tables=parsed.tables,
        digest=digests[0] if len(digests) == 1 else None,
    )


def keeps_ssh_floor(source: Union[str, Listing], ssh_triples: frozenset[Triple]) -> bool:
    """Whether the script accepts every ssh-floor triple under a dropping input policy.

    Every line is read (an unknown one raises UnrecognisedRule); of the sets' elements, only
    those of the rules an ssh triple could pass (from anywhere, or by an address of its
    family), since reading 5,000 elements is most of the cost."""
    parsed = _parse(source)
    if not ssh_triples or parsed.chains.get(INPUT_CHAIN, _REGULAR).policy != "drop":
        return False
    keys = {"any" if s == ANYWHERE else ("ip" if canonical_address(s)[0] == 4 else "ip6")
            for _, _, s in ssh_triples}
    found: set[Triple] = set()
    for accept in parsed.input:
        if accept.key in keys and not accept.bridges_only:
            found.update(_accepted(parsed, accept))
    return ssh_triples <= found
