"""What a firewall script, or a listing of the running table, does; and what an intent means.

Invariants:
- Pure. `read_back` reads a rendered script (nft text) or a JSON listing (`nft -j list table
  inet mesh`, what the kernel holds) and nothing else: its tables, chains, the rules that
  accept and the elements of the sets they match. It knows exactly the rule shapes
  firewall_render writes and raises UnrecognisedRule for any other line or rule, since one
  it cannot read could open anything.
- `intent_triples` and `intent_accepts` say what an intent opens without looking at any
  script: the oracles the property tests hold the renderer (and the kernel) to.
- A triple is (port, protocol, source); a source is `any`, an address (`10.0.0.2`), a
  network (`192.168.1.0/24`) or a container on a bridge (`ether 0a:…:… via docker0`).
"""

from __future__ import annotations

import ipaddress
import json
import re
from typing import Callable, Iterable, Optional, Union

import attrs

from resolver import FirewallIntent

from .firewall_render import (
    ANYWHERE,
    BRIDGES_SET,
    DEFAULT_BRIDGES,
    ESTABLISHED,
    FORWARD_CHAIN,
    FORWARD_CLOSE,
    INPUT_CHAIN,
    INPUT_PREAMBLE,
    KIND,
    PROTOCOLS,
    SET_KINDS,
    FirewallError,
    _address,
    canonical_address,
    digest_from_chain_name,
    forward_rule,
    input_rule,
    parse_source,
    set_name,
)


class UnrecognisedRule(FirewallError):
    """A rule (or line) whose shape read_back does not know: it cannot vouch for what it does."""


def local_source(mac: str, bridge: str) -> str:
    return f"ether {mac.lower()} via {bridge}"


@attrs.frozen
class ReadBack:
    """What a script or listing does, read from its rules and sets (not from the intent)."""

    input_policy: Optional[str]
    forward_priority: Optional[int]
    input: frozenset  # (port, protocol, source) accepted by the input hook
    forward: frozenset  # (port, protocol, source) accepted for DNAT'd (published) traffic
    published_closed: bool  # the forward hook drops every other DNAT'd connection
    tables: frozenset  # (family, name) of every table the script mentions
    digest: Optional[str]  # from the digest chain's name

    def accepts(self, port: int, protocol: str, source: str, *, forward: bool = False) -> bool:
        """Whether a connection from `source` (an address, or `ether MAC via BRIDGE`) to
        `port` is let in: from anywhere, by the address, or by a network holding it."""
        triples = self.forward if forward else self.input
        if (port, protocol, ANYWHERE) in triples or (port, protocol, source) in triples:
            return True
        if source.startswith("ether "):
            return False
        address = ipaddress.ip_address(source)
        return any(p == port and q == protocol and "/" in s
                   and address in ipaddress.ip_network(s) for p, q, s in triples)


# ---------------------------------------------------------------------------- the intent


def intent_triples(intent: FirewallIntent, *, published_only: bool = False,
                   bridges: Iterable[str] = DEFAULT_BRIDGES) -> frozenset:
    """(port, protocol, source) the intent opens, computed from the intent alone.

    With published_only: what must pass the forward hook (all but allows marked as not
    published: floors, exposures and same-node consumers all reach published ports)."""
    triples = set()
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
    networks: dict = {}
    for exposure in intent.expose:
        for text in exposure.sources:
            kind, value = parse_source(text, "expose")
            if kind == "any":
                triples.add((exposure.port, exposure.protocol, ANYWHERE))
            elif kind == "addr":
                triples.add((exposure.port, exposure.protocol, value[2]))
            else:
                networks.setdefault((exposure.port, exposure.protocol, value.version),
                                    []).append(value)
    for (port, protocol, _), nets in networks.items():
        triples.update((port, protocol, str(n)) for n in ipaddress.collapse_addresses(nets))
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


# ---------------------------------------------------------------------------- parsing


@attrs.define
class _Set:
    type: str  # as nft writes it: "ipv4_addr . inet_service"
    interval: bool
    elements: Callable[[], list]  # parsed on demand: ints, strings or (source, port) pairs


@attrs.frozen
class _Parsed:
    """A script's or listing's tables, chains and sets, and which set each accepting rule
    matches (elements unread: reading 5,000 is the costly part, done where needed)."""

    tables: frozenset
    sets: dict  # name → _Set
    chains: dict  # name → {"hook", "prio", "policy"} (empty for a regular chain)
    input_sets: tuple  # set names the input hook accepts from, in rule order
    forward_sets: tuple
    closed: bool

    @property
    def bridges(self) -> list:
        found = self.sets.get(BRIDGES_SET)
        if found is None:
            return []
        if found.type != "ifname" or found.interval:
            raise UnrecognisedRule(f"set @{BRIDGES_SET} is not a plain set of interface names")
        return sorted(found.elements())


def _shapes() -> tuple[dict, dict]:
    """(chain, rule text or JSON expressions) → set name, or "" for the fixed rules, or
    "close" for the forward hook's closing drop."""
    by_text, by_expr = {}, {}

    def add(chain, text, expr, value):
        by_text[(chain, text)] = value
        by_expr[(chain, _expr_key(expr))] = value

    for text, expr in INPUT_PREAMBLE:
        add(INPUT_CHAIN, text, expr, "")
    add(FORWARD_CHAIN, *ESTABLISHED, "")
    add(FORWARD_CHAIN, *FORWARD_CLOSE, "close")
    for protocol in PROTOCOLS:
        for kind in SET_KINDS:
            add(INPUT_CHAIN, *input_rule(protocol, kind.suffix), set_name(protocol, kind.suffix))
            if kind.published:
                add(FORWARD_CHAIN, *forward_rule(protocol, kind.suffix),
                    set_name(protocol, kind.suffix))
    return by_text, by_expr


def _expr_key(expr) -> str:
    def norm(value):
        if isinstance(value, dict):
            return {k: (sorted(v) if k == "set" and isinstance(v, list) else norm(v))
                    for k, v in value.items()}
        if isinstance(value, list):
            return [norm(v) for v in value]
        return value
    return json.dumps(norm(expr), sort_keys=True)


_BY_TEXT, _BY_EXPR = _shapes()
_SUFFIX = {set_name(p, k.suffix): (p, k) for p in PROTOCOLS for k in SET_KINDS}

_TABLE = re.compile(r"(add|delete) table (\S+) (\S+)")
_SET = re.compile(r"add set (\S+) (\S+) (\S+) \{ type ([^;{}]+);( flags interval;)? "
                  r"elements = \{ (.*) \} \}")
_CHAIN = re.compile(r"add chain (\S+) (\S+) (\S+)(?: \{ type filter hook (\w+) priority "
                    r"(-?\d+); policy (\w+); \})?")
_RULE = re.compile(r'add rule (\S+) (\S+) (\S+) (.*?)(?: comment "[^"]*")?')


def _text_element(text: str):
    if " . " not in text:
        return text[1:-1] if text.startswith('"') else int(text)
    source, port = text.rsplit(" . ", 1)
    return (source, int(port))


def _parse_text(text: str) -> tuple:
    tables, sets, chains, rules = set(), {}, {}, []
    for line in text.splitlines():
        if not line:
            continue
        if line.startswith("add set "):
            found = _SET.fullmatch(line)
            if found is None:
                raise UnrecognisedRule(f"set line {line[:200]!r}")
            family, table, name, type_, interval, elements = found.groups()
            tables.add((family, table))
            sets[name] = _Set(type_, bool(interval),
                              lambda e=elements: [_text_element(x) for x in e.split(", ")])
        elif line.startswith("add rule "):
            found = _RULE.fullmatch(line)
            if found is None:
                raise UnrecognisedRule(f"rule line {line!r}")
            family, table, chain, body = found.groups()
            tables.add((family, table))
            rules.append((chain, _BY_TEXT.get((chain, body)), body))
        elif line.startswith("add chain "):
            found = _CHAIN.fullmatch(line)
            if found is None:
                raise UnrecognisedRule(f"chain line {line!r}")
            family, table, name, hook, prio, policy = found.groups()
            tables.add((family, table))
            chains[name] = ({"hook": hook, "prio": int(prio), "policy": policy} if hook else {})
        else:
            found = _TABLE.fullmatch(line)
            if found is None:
                raise UnrecognisedRule(f"line {line!r}")
            tables.add((found.group(2), found.group(3)))
    return tables, sets, chains, rules


def _json_element(value):
    if isinstance(value, dict) and "concat" in value:
        source, port = value["concat"]
        if isinstance(source, dict) and "prefix" in source:
            source = f"{source['prefix']['addr']}/{source['prefix']['len']}"
        elif isinstance(source, dict):
            raise UnrecognisedRule(f"set element {value!r}")
        return (source, port)
    if isinstance(value, dict):
        raise UnrecognisedRule(f"set element {value!r}")
    return value


def _parse_listing(listing: dict) -> tuple:
    tables, sets, chains, rules = set(), {}, {}, []
    for item in listing["nftables"]:
        ((kind, body),) = item.items()
        if kind == "metainfo":
            continue
        if kind == "table":
            tables.add((body["family"], body["name"]))
            continue
        tables.add((body["family"], body["table"]))
        if kind == "set":
            type_ = body["type"]
            sets[body["name"]] = _Set(
                " . ".join(type_) if isinstance(type_, list) else type_,
                "interval" in (body.get("flags") or []),
                lambda e=body.get("elem", []): [_json_element(x) for x in e])
        elif kind == "chain":
            chains[body["name"]] = ({"hook": body["hook"], "prio": body["prio"],
                                     "policy": body["policy"]} if "hook" in body else {})
        elif kind == "rule":
            rules.append((body["chain"], _BY_EXPR.get((body["chain"], _expr_key(body["expr"]))),
                          body["expr"]))
        else:
            raise UnrecognisedRule(f"{kind} {body.get('name')!r} in the listing")
    return tables, sets, chains, rules


def _parse(source: Union[str, dict]) -> _Parsed:
    tables, sets, chains, rules = (_parse_text(source) if isinstance(source, str)
                                   else _parse_listing(source))
    for name, chain in chains.items():
        wanted = {INPUT_CHAIN: "input", FORWARD_CHAIN: "forward"}.get(name)
        if chain.get("hook") != wanted or (wanted is None and not digest_from_chain_name(name)):
            raise UnrecognisedRule(f"chain {name!r} ({chain.get('hook') or 'no hook'})")
    input_sets, forward_sets, closed = [], [], False
    for chain, shape, rule in rules:
        if shape is None or chain not in (INPUT_CHAIN, FORWARD_CHAIN):
            raise UnrecognisedRule(f"{chain} rule {rule!r}")
        if chain == FORWARD_CHAIN and shape == "close":
            closed = True
        elif chain == FORWARD_CHAIN and shape:
            if closed:
                raise UnrecognisedRule("an accept after the forward chain's closing drop")
            forward_sets.append(shape)
        elif shape:
            input_sets.append(shape)
    for name in input_sets + forward_sets:
        if name not in sets:
            raise UnrecognisedRule(f"a rule matches set @{name}, which is not added")
    return _Parsed(frozenset(tables), sets, chains, tuple(input_sets), tuple(forward_sets),
                   closed)


def _set_triples(parsed: _Parsed, name: str) -> list:
    """The triples set `name` holds, checked against the type its name says it has."""
    found = parsed.sets[name]
    protocol, kind = _SUFFIX[name]
    if found.type != kind.type or found.interval != kind.interval:
        raise UnrecognisedRule(f"set @{name} is {found.type}"
                               f"{' (interval)' if found.interval else ''}, expected {kind.type}"
                               f"{' (interval)' if kind.interval else ''}")
    elements = found.elements()
    if kind.source == "any":
        return [(port, protocol, ANYWHERE) for port in elements]
    if kind.source == "local":
        bridges = parsed.bridges
        return [(port, protocol, local_source(mac, b)) for mac, port in elements for b in bridges]
    version = 4 if kind.family == "ip" else 6
    triples = []
    for source, port in elements:
        if kind.source == "net":
            network = ipaddress.ip_network(source)
            if network.version != version:
                raise UnrecognisedRule(f"set @{name} holds {network}")
            triples.append((port, protocol, str(network)))
        else:
            checked = canonical_address(source)
            if checked[0] != version:
                raise UnrecognisedRule(f"set @{name} holds {source}")
            triples.append((port, protocol, checked[2]))
    return triples


def read_back(source: Union[str, dict]) -> ReadBack:
    """What a rendered script (nft text) or a JSON listing of table inet mesh opens.

    Only the shapes the renderer writes are understood; anything else raises
    UnrecognisedRule, since an unknown rule could open anything."""
    parsed = _parse(source)
    accepted_in, accepted_fwd = set(), set()
    for name in parsed.input_sets:
        accepted_in.update(_set_triples(parsed, name))
    for name in parsed.forward_sets:
        accepted_fwd.update(_set_triples(parsed, name))
    digests = [d for d in map(digest_from_chain_name, parsed.chains) if d]
    return ReadBack(
        input_policy=parsed.chains.get(INPUT_CHAIN, {}).get("policy"),
        forward_priority=parsed.chains.get(FORWARD_CHAIN, {}).get("prio"),
        input=frozenset(accepted_in),
        forward=frozenset(accepted_fwd),
        published_closed=parsed.closed,
        tables=parsed.tables,
        digest=digests[0] if len(digests) == 1 else None,
    )


def keeps_ssh_floor(source: Union[str, dict], ssh_triples: frozenset) -> bool:
    """Whether the script accepts every ssh-floor triple under a dropping input policy.

    Every line is read (an unknown one raises UnrecognisedRule); of the sets' elements, only
    those of the sets an ssh triple could be in (from anywhere, or addresses of its family)."""
    parsed = _parse(source)
    if not ssh_triples or parsed.chains.get(INPUT_CHAIN, {}).get("policy") != "drop":
        return False
    wanted = set()
    for port, protocol, source_ in ssh_triples:
        if source_ == ANYWHERE:
            wanted.add(set_name(protocol, "any"))
        else:
            wanted.add(set_name(protocol, "v4" if canonical_address(source_)[0] == 4 else "v6"))
    found = set()
    for name in wanted & set(parsed.input_sets):
        found.update(_set_triples(parsed, name))
    return ssh_triples <= found
