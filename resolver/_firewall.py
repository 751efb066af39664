"""Each node's firewall intent: who may reach which assigned host port, and from where.

Invariants:
- Pure: check_exposures returns its findings as values (resolver/_context.py). Each
  instance's rendering carries the openings it needs (resolver/_render_bindings.py,
  resolver/_render.py); the assembly merges them per node (resolver/_assemble.py). A
  provider's assigned port is open to exactly: the node addresses of its consumers on other
  nodes; the containers of its consumers on its own node (by the MAC address each is
  created with); the sources its instance's `expose:` names. Besides, every node keeps its
  floors: ssh from anywhere, the broker's port from the mesh's nodes, mesh.yaml's `floors`.
- Every opening is of a port the mesh assigned (the listen's host port, as published and as
  announced to consumers), so published = announced = firewalled by construction. An
  exposure only opens a port; it never assigns or moves one.
- A container's MAC is derived from the mesh and the container's name alone, so it survives
  restarts and moves; it is locally administered with first octet 0a (Docker generates 02:42:…,
  never 0a:…) and unique on its node: a collision takes the next derivation, in name order.
- Exposure sources are canonical: `any`, an address (a /32 or /128 is written as the
  address), or a network with no host bits (`192.168.1.0/24`, `fd00::/64`).
"""

from __future__ import annotations

import hashlib
import ipaddress
from typing import Callable, Iterable, Mapping, Optional, TypeVar, Union

import attrs
from pyrsistent import pvector
from pyrsistent.typing import PVector

from . import _codes as codes
from ._bound import Bound, BoundKey
from ._context import Context, Findings
from ._declaration import (
    FirewallAllow,
    FirewallExposure,
    FirewallLocal,
    Problem,
)
from ._model import Instance, Module

#: The exposure source that opens a listen to every address.
ANYWHERE = "any"
#: The first octet of every derived MAC address.
MAC_PREFIX = "0a"  # locally administered, unicast; Docker's own MACs start 02:42


def canonical_source(text: str) -> Optional[str]:
    """`any`, an address or a network in canonical form; None when `text` is none of them
    (a network with host bits set, such as 192.168.1.5/24, is none of them)."""
    if text == ANYWHERE:
        return ANYWHERE
    try:
        network = ipaddress.ip_network(text, strict=True)
    except (ValueError, TypeError):
        return None
    if network.prefixlen == network.max_prefixlen:
        return str(network.network_address)
    return str(network)


def source_family(source: str) -> Optional[int]:
    """4 or 6 for an address or network in canonical form; None for `any`."""
    if source == ANYWHERE:
        return None
    return ipaddress.ip_network(source, strict=False).version


def derive_mac(mesh: str, container: str, attempt: int = 0) -> str:
    """The MAC of a container, from the mesh and its name (and the attempt, after a collision)."""
    seed = f"{mesh}\0{container}" + (f"\0{attempt}" if attempt else "")
    tail = hashlib.sha256(seed.encode()).digest()[:5]
    return f"{MAC_PREFIX}:{tail.hex(':')}"


def assign_macs(mesh: str, containers: list[str],
                taken: frozenset[str] = frozenset()) -> dict[str, str]:
    """container name → MAC for the containers of one node, unique among them and `taken`."""
    used = set(taken)
    macs: dict[str, str] = {}
    for name in sorted(containers):
        attempt = 0
        mac = derive_mac(mesh, name)
        while mac in used:
            attempt += 1
            mac = derive_mac(mesh, name, attempt)
        used.add(mac)
        macs[name] = mac
    return macs


def consumer_container_macs(mesh: str, bound: Mapping[BoundKey, Bound],
                            name_of: Callable[[str, str, str], str],
                            node: Mapping[str, str], instances: Mapping[str, Instance],
                            modules: Mapping[str, Module]
                            ) -> tuple[dict[str, str], dict[str, list[str]]]:
    """(container name → MAC, instance → its containers' MACs) for every instance bound to a
    provider on its own node, in mesh `mesh`; `name_of(mesh, instance, container)` names a
    container, `node` maps every instance to its node, `modules` every bound one to its
    module."""
    mac_of, consumer_macs, _ = consumer_container_macs_reusing(mesh, bound, name_of, node,
                                                               instances, modules, None)
    return mac_of, consumer_macs


@attrs.frozen
class KeptMacs:
    """What consumer_container_macs_reusing made that a later run may reuse: by consumer, the
    Instance and Module its containers' names were made from, and those names; by node, the
    names of its consumers' containers and the MACs assigned to them (in mesh `mesh`)."""

    mesh: str = ""
    names: Mapping[str, tuple[Instance, Module, list[str]]] = attrs.Factory(dict)
    nodes: Mapping[str, tuple[list[str], dict[str, str]]] = attrs.Factory(dict)


def consumer_container_macs_reusing(
        mesh: str, bound: Mapping[BoundKey, Bound], name_of: Callable[[str, str, str], str],
        node: Mapping[str, str], instances: Mapping[str, Instance],
        modules: Mapping[str, Module], kept: Optional[KeptMacs]
        ) -> tuple[dict[str, str], dict[str, list[str]], KeptMacs]:
    """consumer_container_macs, reusing what a previous run made (`kept`; None: keep nothing):
    a consumer's containers' names when its Instance and Module are the same, a node's MACs
    when the names of its consumers' containers are the same (in the same mesh)."""
    if kept is not None and kept.mesh != mesh:
        kept = KeptMacs()  # every name and MAC reads the mesh's name
    local = sorted({b.consumer for b in bound.values() if node[b.consumer] == node[b.provider]})
    names: dict[str, list[str]] = {}  # instance → its container names (parts switched on)
    made_names: dict[str, tuple[Instance, Module, list[str]]] = {}
    for name in local:
        inst, module = instances[name], modules[name]
        before = kept.names.get(name) if kept is not None else None
        if before is not None and (before[0] is inst or before[0] == inst) \
                and (before[1] is module or before[1] == module):  # (identity first)
            names[name] = before[2]
            made_names[name] = before
            continue
        names[name] = [name_of(mesh, name, c.name) for c in module.containers
                       if c.part is None or c.part in inst.parts]
        made_names[name] = (inst, module, names[name])
    per_node: dict[str, list[str]] = {}
    for name in local:
        per_node.setdefault(node[name], []).extend(names[name])
    mac_of: dict[str, str] = {}
    made_nodes: dict[str, tuple[list[str], dict[str, str]]] = {}
    for node_name in sorted(per_node):
        held = kept.nodes.get(node_name) if kept is not None else None
        macs = held[1] if held is not None and held[0] == per_node[node_name] \
            else assign_macs(mesh, per_node[node_name])
        made_nodes[node_name] = (per_node[node_name], macs)
        mac_of.update(macs)
    consumer_macs: dict[str, list[str]] = {}
    for name in local:
        mine = names[name]  # (one container, the most: no sort)
        consumer_macs[name] = [mac_of[mine[0]]] if len(mine) == 1 \
            else sorted([mac_of[c] for c in mine])
    return mac_of, consumer_macs, KeptMacs(mesh, made_names, made_nodes)


def check_exposures(r: Context) -> Findings:
    """An exposure naming no listen of the instance's module is refused (it blocks the
    instance: the operator meant something reachable that would silently not be); a source
    of the other address family than the node's address is a warning (the port is published
    on the node's address only, so it can never answer there)."""
    found: list[Problem] = []
    for name in r.names:
        inst = r.instances[name]
        module = r.module_of(name)
        if module is None or not inst.expose or inst.node not in r.nodes:
            continue
        node_family = ipaddress.ip_address(r.mesh.nodes[inst.node].address).version
        for listen in sorted(inst.expose):
            path = ("instances", name, "expose", listen)
            if listen not in module.listens:
                known = ", ".join(sorted(module.listens)) or "(none)"
                found.append(r.problem(
                    codes.UNKNOWN_LISTEN,
                    f"instance {name} exposes {listen!r}, which is not a listen of module "
                    f"{module.name} (its listens: {known})", path=path, instance=name,
                    blocks=[name], at_key=True))
                continue
            for i, source in enumerate(inst.expose[listen].to):
                canonical = canonical_source(source)
                if canonical is not None and source_family(canonical) not in (None, node_family):
                    found.append(r.problem(
                        codes.EXPOSURE_FAMILY,
                        f"{name}/{listen} is exposed to {canonical}, an IPv"
                        f"{source_family(canonical)} source, but node {inst.node} publishes "
                        f"its ports on {r.mesh.nodes[inst.node].address} (IPv{node_family}) "
                        f"only: that source can never reach it", path=path + ("to", i),
                        instance=name, severity="warning"))
    return tuple(found)


def exposures_of(name: str, inst: Instance, module: Module,
                 assigned: Mapping[tuple[str, str], int]) -> PVector[FirewallExposure]:
    """The openings beyond the mesh that instance `name` (`inst`, of `module`) asks for on its
    node with its `expose:`."""
    found: list[FirewallExposure] = []
    for listen_name, exposure in sorted(inst.expose.items()):
        if (name, listen_name) not in assigned:
            continue
        listen = module.listens[listen_name]
        sources = sorted({c for c in map(canonical_source, exposure.to) if c is not None},
                         key=_source_order)
        why = f"{name}/{listen_name} exposed" + (f": {exposure.reason}" if exposure.reason
                                                  else " by mesh.yaml")
        found.append(FirewallExposure(assigned[(name, listen_name)], listen.protocol,
                                      pvector(sources), why))
    return pvector(sorted(found))


_Opening = TypeVar("_Opening", FirewallAllow, FirewallLocal)


def merge_openings(openings: Iterable[tuple[str, Union[FirewallAllow, FirewallLocal]]],
                   cls: Callable[[int, str, PVector[str], str], _Opening]) -> PVector[_Opening]:
    """One opening per (port, protocol) from the per-binding ones `(consumer, opening)`: the
    union of their sources, the reason naming what is reached and for which consumers."""
    merged: dict[tuple[int, str], dict[str, set[str]]] = {}
    for consumer, o in openings:
        entry = merged.setdefault((o.port, o.protocol), {"sources": set(), "what": set(),
                                                         "consumers": set()})
        entry["sources"].update(o.macs if isinstance(o, FirewallLocal) else o.sources)
        entry["what"].add(o.reason)
        entry["consumers"].add(consumer)
    return pvector(cls(port, proto, pvector(sorted(e["sources"])),
                       f"{', '.join(sorted(e['what']))} for {', '.join(sorted(e['consumers']))}")
                   for (port, proto), e in sorted(merged.items()))


def _source_order(source: str) -> tuple[int, int, int]:
    if source == ANYWHERE:
        return (0, 0, 0)
    network = ipaddress.ip_network(source)
    return (network.version, int(network.network_address), network.prefixlen)
