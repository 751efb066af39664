"""Host ports: assigned once per (instance, listen) on its node, recorded and kept.

Invariants:
- A host port comes from the mesh's range and never equals a floor, a fixed port or another
  assignment on its node (resolver/_issue.PortBook keeps the book).
- A kept port never moves: every port of a refused instance (recorded, or published by its
  held rendering) is reserved first, and a live instance fixing one of them on that node is
  refused naming its holder (a holder that moved away holds nothing on its old node unless it
  is refused, which check_claims cannot know when a later check refuses it); then fixed
  ports, then every recorded port of a live instance on its recorded node; only then are
  newcomers (and moved instances) given the lowest free port, a moved instance keeping its
  number when it is free on the new node.
- A port is released only when its instance is gone from mesh.yaml, and the plan says so;
  a refused instance's entries are kept unchanged.
- Pure: the instances refused so far and the floors refused are handed in; a node whose
  range is exhausted is returned as a finding (blocking the instance), never recorded.
"""

from __future__ import annotations

from typing import AbstractSet, Mapping, Optional

import attrs

from . import _codes as codes
from ._context import Blocked, Context, Findings, FloorRefusals
from ._declaration import Change, Problem
from ._differ import differing
from ._issue import PortBook
from ._ledger import PortAssignment
from ._model import Instance, Listen, Module
from ._frozen import FrozenMap, kept_or_new


def assign_ports(r: Context, blocked: Blocked, floor_refusals: FloorRefusals
                 ) -> tuple[dict[tuple[str, str], int], list[Change], Findings]:
    """((instance, listen) → host port for every live instance, the moves it made, the
    refusals of instances no port is left for): the ports recorded in the new ledger and a
    `moved` change per port given on a new node. `blocked`: the instances refused so far."""
    changes: list[Change] = []
    found: list[Problem] = []
    books: dict[str, PortBook] = {}
    for node in sorted(r.nodes):
        books[node] = PortBook(r.mesh.host_ports.first, r.mesh.host_ports.last,
                               (p for p, _proto in r.floor_ports(floor_refusals, node)))
    assigned: dict[tuple[str, str], int] = {}
    live = r.placed(blocked)
    listens_of: dict[str, list[tuple[str, Listen]]] = {}  # module → its listens, sorted

    def listens(name: str) -> list[tuple[str, Listen]]:
        module_name = r.instances[name].module
        found = listens_of.get(module_name)
        if found is None:
            found = listens_of[module_name] = sorted(r.placed_module(name).listens.items())
        return found

    # a refused instance keeps its ports (held, or until fixed); in name order, as r.names
    holders: dict[str, dict[int, str]] = {}  # node → port → the refused instance keeping it

    def keep_refused(name: str) -> None:
        for listen_name, kept in sorted(r.recorded_ports.get(name, {}).items()):
            if kept.node in books:
                books[kept.node].reserve(kept.port)
                holders.setdefault(kept.node, {}).setdefault(kept.port, f"{name}/{listen_name}")
        rendering = r.declared.get(name)
        if rendering is not None and rendering.node in books:
            for container in rendering.containers:
                for p in container.ports:
                    books[rendering.node].reserve(p.host_port)
                    holders.setdefault(rendering.node, {}).setdefault(
                        p.host_port, f"{name}/{p.listen}")

    for name in sorted(n for n in blocked if n in r.instances):
        keep_refused(name)
    # each live instance with its node and its module's listens, and whether one is fixed
    placed: list[tuple[str, str, list[tuple[str, Listen]], bool]] = []
    fixed_in: dict[str, bool] = {}  # module → whether a listen of it is fixed (read once)
    for name in live:
        inst, of = r.instances[name], listens(name)
        fixed = fixed_in.get(inst.module)
        if fixed is None:
            fixed = fixed_in[inst.module] = any(listen.fixed is not None for _, listen in of)
        placed.append((name, inst.node, of, fixed))
    # a fixed port a refused instance keeps on that node (a holder that moved away was taken
    # to hold nothing there by check_claims, then refused by a later check): refused too
    refused = _fixed_on_refused(r, placed, holders)
    if refused:
        found.extend(refused)
        gone = {problem.instance for problem in refused}
        placed = [entry for entry in placed if entry[0] not in gone]
        for name in sorted(n for n in gone if n is not None):
            keep_refused(name)
    for name, node, of, fixed in placed:  # fixed ports first: they are claims (refused already)
        if not fixed:
            continue  # (most modules: no fixed port)
        for listen_name, listen in of:
            if listen.fixed is not None:
                books[node].reserve(listen.fixed)
                assigned[(name, listen_name)] = listen.fixed
    pending: list[tuple[str, str, Optional[PortAssignment]]] = []
    no_ports: Mapping[str, PortAssignment] = {}
    for name, node, of, _fixed in placed:  # recorded ports next: a newcomer never takes them
        recorded = r.recorded_ports.get(name, no_ports)
        for listen_name, listen in of:
            if listen.fixed is not None:
                continue
            entry = recorded.get(listen_name)
            if entry is not None and entry.node == node and books[node].reserve(entry.port):
                assigned[(name, listen_name)] = entry.port
            else:
                pending.append((name, listen_name, entry))
    for name, listen_name, entry in pending:
        node = r.instances[name].node
        book = books[node]
        port: Optional[int]
        if entry is not None and book.in_range(entry.port) and book.reserve(entry.port):
            port = entry.port
        else:
            port = book.take_lowest()
        if port is None:
            found.append(r.problem(
                codes.PORT_RANGE_EXHAUSTED,
                f"no free host port left on node {node} in "
                f"{r.mesh.host_ports.first}-{r.mesh.host_ports.last} for "
                f"{name}/{listen_name}", path=("host-ports",), instance=name,
                blocks=[name]))
            continue
        assigned[(name, listen_name)] = port
        if entry is not None and entry.node != node:
            changes.append(Change("moved", name,
                                  f"{name} moved from node {entry.node} to {node}: "
                                  f"{listen_name} is now {node}:{port} (was "
                                  f"{entry.node}:{entry.port})"))
    return assigned, changes, tuple(found)


def fixed_on_kept(r: Context, name: str, module: str, node: str, listen_name: str,
                  listen: Listen, holder: str, why: str = "") -> Problem:
    """The refusal of `name`, whose module fixes a host port the ledger keeps on `node` for
    `holder` (`instance/listen`; `why`: how the holder still holds it, after its name)."""
    holder_instance = holder.split("/", 1)[0]
    # the message names both sides and never a position (it reads the same however the
    # mesh was loaded); the positions are the problem's own (the refused instance) and
    # `also`: the fixed port's line and the holder's entry
    return r.problem(
        codes.PORT_CONFLICT,
        f"{name} fixes host port {listen.fixed}/{listen.protocol} on node {node} "
        f"({module}'s listen {listen_name}), which the ledger keeps for {holder}{why}"
        f": a kept port never moves, so {name} is refused; "
        f"give {module}'s listen {listen_name} another fixed port, or remove "
        f"{holder_instance} from mesh.yaml first to release the port",
        path=("instances", name), instance=name,
        candidates=sorted({name, holder_instance}), blocks=[name],
        also=[(f"module:{module}", ("listens", listen_name, "fixed")),
              ("mesh", ("instances", holder_instance))])


def _fixed_on_refused(r: Context, placed: list[tuple[str, str, list[tuple[str, Listen]], bool]],
                      holders: Mapping[str, Mapping[int, str]]) -> list[Problem]:
    """Live instances fixing a host port that a refused instance keeps on their node
    (`holders`: node → port → `instance/listen`): refused, naming both (as
    _refusals._fixed_on_kept refuses one fixing a port kept for a live instance: the same
    words, fixed_on_kept)."""
    found: list[Problem] = []
    for name, node, of, fixed in placed:
        if not fixed:
            continue
        for listen_name, listen in of:
            holder = holders.get(node, {}).get(listen.fixed) if listen.fixed is not None \
                else None
            if holder is None or holder.split("/", 1)[0] == name:
                continue
            found.append(fixed_on_kept(r, name, r.instances[name].module, node, listen_name,
                                       listen, holder, " (refused, and so kept where it is)"))
            break  # one refusal per instance
    return found


def new_ports(r: Context, blocked: Blocked, assigned: dict[tuple[str, str], int]
              ) -> tuple[FrozenMap[str, FrozenMap[str, PortAssignment]], list[Change]]:
    """(the ledger's ports after this resolution, a `port-released` change per port of an
    instance gone from mesh.yaml); a refused instance's (in `blocked`) entries are kept
    unchanged."""
    ports: dict[str, dict[str, PortAssignment]] = {}
    fixed_of: dict[str, frozenset[str]] = {}  # module → its fixed listens (read once)
    instances, recorded_ports = r.instances, r.recorded_ports
    for (name, listen_name), port in assigned.items():
        inst = instances[name]
        fixed = fixed_of.get(inst.module)
        if fixed is None:
            fixed = fixed_of[inst.module] = frozenset(
                n for n, listen in r.placed_module(name).listens.items()
                if listen.fixed is not None)
        if fixed and listen_name in fixed:
            continue
        ports.setdefault(name, {})[listen_name] = _entry(recorded_ports.get(name), listen_name,
                                                         inst.node, port)
    for name, entries in r.ledger.ports.items():
        if name in r.instances and (name not in ports or name in blocked):
            ports[name] = dict(entries)  # kept for a blocked instance, unchanged
    return FrozenMap({k: kept_or_new(v, r.recorded_ports.get(k)) for k, v in ports.items()}), \
        _released(r.ledger.ports, r.instances)


def _entry(recorded: Optional[Mapping[str, PortAssignment]], listen_name: str, node: str,
           port: int) -> PortAssignment:
    """The ledger's entry of a listen given `port` on `node`: the recorded one when it says
    that (equal, kept: the next run compares by identity), else a new one."""
    entry = recorded.get(listen_name) if recorded is not None else None
    if entry is None or entry.node != node or entry.port != port:
        entry = PortAssignment(node, port)
    return entry


def _released(ledger_ports: Mapping[str, Mapping[str, PortAssignment]],
              instances: Mapping[str, Instance]) -> list[Change]:
    """A `port-released` change per recorded port of an instance gone from mesh.yaml."""
    return [Change("port-released", name, f"{name} is gone: host port {entry.node}:"
                   f"{entry.port} ({listen_name}) is released")
            for name in sorted(ledger_ports.keys() - instances.keys())
            for listen_name, entry in sorted(ledger_ports[name].items())]


@attrs.frozen(eq=False)
class PortsMade:
    """What new_ports_reusing read and returned, for a later run."""

    assigned: Mapping[tuple[str, str], int]
    instances: Mapping[str, Instance]
    modules_of: Mapping[str, Optional[Module]]
    recorded: Mapping[str, Mapping[str, PortAssignment]]
    ledger_ports: Mapping[str, Mapping[str, PortAssignment]]
    blocked: frozenset[str]
    ports: Mapping[str, FrozenMap[str, PortAssignment]]


Moved = tuple[Mapping[tuple[str, str], int], AbstractSet[str]]
"""(a run's host ports by (instance, listen), the instances whose host ports differ from
them in another run's: ports_moved), worked out once for the stages that compare with it."""


def ports_moved(before: Mapping[tuple[str, str], int], assigned: Mapping[tuple[str, str], int]
                ) -> set[str]:
    """The instances whose host ports in `assigned` are not those in `before` (a port
    another, or one of them only in one of the two)."""
    if before is assigned:
        return set()
    return {k[0][0] for k in assigned.items() ^ before.items()}


def moved_since(before: Mapping[tuple[str, str], int], assigned: Mapping[tuple[str, str], int],
                moved: Optional[Moved]) -> AbstractSet[str]:
    """ports_moved(before, assigned): `moved`'s answer when it was worked out from that very
    `before`."""
    if moved is not None and moved[0] is before:
        return moved[1]
    return ports_moved(before, assigned)


def new_ports_reusing(r: Context, blocked: Blocked, assigned: dict[tuple[str, str], int],
                      made: Optional[PortsMade], moved: Optional[Moved] = None
                      ) -> tuple[FrozenMap[str, FrozenMap[str, PortAssignment]], list[Change],
                                 PortsMade]:
    """new_ports(r, blocked, assigned), with what the next run may reuse: from what a
    previous run read and returned (`made`; None: all made anew), only the instances a part
    of whose entry is not the very one it read (their host ports assigned, their Instance,
    module, recorded ports or ledger entry, whether they are refused, whether they are in
    mesh.yaml) are worked out again (an instance's entry reads only those). `moved`: the
    instances whose host ports differ from those of a run, when worked out already."""
    now_blocked = frozenset(blocked)
    if made is None:
        whole, released = new_ports(r, blocked, assigned)
        return whole, released, PortsMade(assigned, r.instances, r.modules_of,
                                          r.recorded_ports, r.ledger.ports, now_blocked, whole)
    instances, recorded, ledger_ports = r.instances, r.recorded_ports, r.ledger.ports
    again = set(moved_since(made.assigned, assigned, moved))
    again.update(now_blocked ^ made.blocked)
    for before, now in ((made.instances, instances), (made.modules_of, r.modules_of),
                        (made.recorded, recorded), (made.ledger_ports, ledger_ports)):
        again.update(differing(before, now, same=True))
    ports: dict[str, FrozenMap[str, PortAssignment]] = dict(made.ports)
    for name in again:
        ports.pop(name, None)
        mine: dict[str, PortAssignment] = {}
        inst = instances.get(name)
        module = r.modules_of.get(name) if inst is not None else None
        if inst is not None and module is not None:
            had = recorded.get(name)
            for listen_name, listen in sorted(module.listens.items()):
                port = assigned.get((name, listen_name))
                if port is None or listen.fixed is not None:
                    continue
                mine[listen_name] = _entry(had, listen_name, inst.node, port)
        entries = ledger_ports.get(name)
        if inst is not None and entries is not None and (not mine or name in blocked):
            mine = dict(entries)  # kept for a blocked instance, unchanged
        if mine:
            ports[name] = kept_or_new(mine, recorded.get(name))
    result = FrozenMap(ports)
    return result, _released(ledger_ports, instances), PortsMade(
        assigned, instances, r.modules_of, recorded, ledger_ports, now_blocked, result)


