"""What changes between two sets of declarations, section by section, as `terraform plan` shows it.

Invariants:
- Pure comparison of declarations (node → Declaration): it never looks at a machine or a ledger.
  Every part of a declaration but its serial and digest belongs to exactly one section: the
  node itself, its scalars (mesh, address, certificate, the firewall's own address), and one
  keyed section per list (containers, state directories, accesses, firewall allows, floors,
  same-node openings, exposures and mesh sources, grants, providers, bindings, instances, held
  instances, files, registry logins), plus the order of the containers (they run in it).
- Each change is `+` (added), `-` (removed) or `~` (changed), names its node, section and
  subject (the element's key in its section), carries the element before and after, and says
  why (`causes`): a container's differing parts (resolver/_plan.container_causes), a firewall
  rule's reason and the sources it gains or loses, a grant's binding and generations, a held
  instance's refusal and its position.
- Applying every change to the old declarations gives the new ones, serials and digests aside
  (`apply_changes`); an unchanged mesh lists nothing. Changes are sorted by node, then section
  in the order above, then subject.
- Declarations carry no secret value (only credential ids and generations), so neither does a
  change.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional, Sequence

import attrs
from pyrsistent import pvector
from pyrsistent.typing import PVector

from ._declaration import ContainerDecl, Declaration, FirewallIntent, GrantDecl, HeldDecl, SecretRef
from ._plan import container_change

ADD, REMOVE, CHANGE = "+", "-", "~"


@attrs.frozen(order=True)
class DeclarationChange:
    """One change of one node's declaration: `action` is `+`, `-` or `~`; `section` names the
    part of the declaration (`container`, `firewall-allow`, `grant`, …), `subject` the
    element within it; `before`/`after` are the element (None where it is absent), `causes`
    why it changes. For a container `verb` says what the node does: create, remove, recreate or
    in-place."""

    node: str
    section: str
    subject: str
    action: str
    causes: PVector[str] = pvector()
    verb: Optional[str] = None
    position: Optional[int] = None  # a container's place among the node's new containers
    before: Any = attrs.field(default=None, eq=False, order=False)
    after: Any = attrs.field(default=None, eq=False, order=False)


_EMPTY_FIREWALL = FirewallIntent(address="")


def _firewall(d: Declaration) -> FirewallIntent:
    return d.firewall if d.firewall is not None else _EMPTY_FIREWALL


def _with_firewall(d: Declaration, **fields: Any) -> Declaration:
    return attrs.evolve(d, firewall=attrs.evolve(_firewall(d), **fields))


@attrs.frozen
class _Section:
    """A list of a declaration compared element by element, each known by its key."""

    name: str
    read: Callable[[Declaration], Sequence[Any]]
    write: Callable[[Declaration, PVector[Any]], Declaration]
    key: Callable[[Any], str]
    added: Callable[[Any], list[str]]  # why an element comes (or goes)
    ordered: bool = False  # kept in its own order (containers), not sorted
    sort_key: Optional[Callable[[Any], Any]] = None  # how the declaration sorts it, if not by value


def _reason(element: Any) -> list[str]:
    return [element.reason] if getattr(element, "reason", "") else []


def _sources(before: Sequence[str], after: Sequence[str]) -> list[str]:
    return ([f"from {s} added" for s in sorted(set(after) - set(before))]
            + [f"from {s} removed" for s in sorted(set(before) - set(after))])


def _generation(ref: Optional[SecretRef]) -> str:
    if ref is None:
        return "none"
    return "pending" if ref.generation is None else str(ref.generation)


def _strings(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, str) \
        and all(isinstance(x, str) for x in value)


def _fields(before: Any, after: Any) -> list[str]:
    """Why an element with the same key differs: its fields, a secret by its generation, a
    list of sources by what it gains and loses, never a value that is not already public."""
    causes: list[str] = []
    for field in attrs.fields(type(before)):
        old, new = getattr(before, field.name), getattr(after, field.name)
        if old == new:
            continue
        name = field.name.replace("_", "-")
        if field.name in ("sources", "macs"):
            causes.extend(_sources(old, new))
        elif _strings(old) and _strings(new):
            causes.extend([f"{name}: {x} added" for x in sorted(set(new) - set(old))]
                          + [f"{name}: {x} removed" for x in sorted(set(old) - set(new))])
        elif isinstance(old, SecretRef) or isinstance(new, SecretRef):
            credential = (new or old).credential
            causes.append(f"{name} {credential} generation {_generation(old)} → "
                          f"{_generation(new)}")
        elif field.name == "content":
            causes.append("content")
        elif isinstance(old, (str, int, bool)) and isinstance(new, (str, int, bool)) \
                and len(str(old)) + len(str(new)) < 120:
            causes.append(f"{name} {old} → {new}")
        else:
            causes.append(name)
    return causes


def _grant_why(g: GrantDecl) -> list[str]:
    return [f"binding {g.consumer} → {g.provider} ({g.provision}), credential "
            f"{g.credential.credential} generation {_generation(g.credential)}"]


def _held_why(h: HeldDecl) -> list[str]:
    where = f"{h.file}:{h.line}:{h.col}" if h.line else h.file
    return [f"held: [{h.code}] at {where}"]


SECTIONS: tuple[_Section, ...] = (
    _Section("container", lambda d: d.containers,
             lambda d, v: attrs.evolve(d, containers=v), lambda c: c.name,
             lambda c: [f"instance {c.instance}"] + (["run-once step"] if c.run_once else []),
             ordered=True),
    _Section("state-dir", lambda d: d.state_dirs, lambda d, v: attrs.evolve(d, state_dirs=v),
             lambda s: s.path,
             lambda s: [f"state {s.name} of {s.instance}, {s.uid}:{s.gid} {s.mode}"]),
    _Section("access", lambda d: d.accesses, lambda d, v: attrs.evolve(d, accesses=v),
             lambda a: a.path, lambda a: [f"{a.mode} for {', '.join(a.instances)}"]),
    _Section("firewall-allow", lambda d: _firewall(d).allow,
             lambda d, v: _with_firewall(d, allow=v), lambda a: f"{a.port}/{a.protocol}",
             lambda a: [f"from {', '.join(a.sources)}"] + _reason(a)),
    _Section("firewall-floor", lambda d: _firewall(d).floors,
             lambda d, v: _with_firewall(d, floors=v),
             lambda f: f"{f.port}/{f.protocol}",
             lambda f: [f"from {', '.join(f.sources) or 'anywhere'}"] + _reason(f)),
    _Section("firewall-same-node", lambda d: _firewall(d).local,
             lambda d, v: _with_firewall(d, local=v), lambda o: f"{o.port}/{o.protocol}",
             lambda o: [f"from containers {', '.join(o.macs)}"] + _reason(o)),
    _Section("firewall-expose", lambda d: _firewall(d).expose,
             lambda d, v: _with_firewall(d, expose=v), lambda e: f"{e.port}/{e.protocol}",
             lambda e: [f"to {', '.join(e.sources)}"] + _reason(e)),
    _Section("firewall-mesh-source", lambda d: _firewall(d).mesh_sources,
             lambda d, v: _with_firewall(d, mesh_sources=v), lambda s: s,
             lambda s: ["a floor admits every node of the mesh"]),
    _Section("grant", lambda d: d.grants, lambda d, v: attrs.evolve(d, grants=v),
             lambda g: f"{g.kind} {g.login} on {g.provider} for {g.consumer}", _grant_why,
             sort_key=lambda g: (g.provider, g.consumer, g.provision)),
    _Section("provider", lambda d: d.providers, lambda d, v: attrs.evolve(d, providers=v),
             lambda p: f"{p.instance} {p.provision}",
             lambda p: [f"{p.instance} serves {p.provision} on {p.listen} ({p.port})"]),
    _Section("binding", lambda d: d.bindings, lambda d, v: attrs.evolve(d, bindings=v),
             lambda b: f"{b.consumer} {b.requirement}",
             lambda b: [f"binding {b.consumer} → {b.provider}"] if not b.each else
             [f"binding {b.consumer} → every {b.provision} provider ({len(b.entries)}): "
              + (", ".join(e.provider for e in b.entries) or "none")]),
    _Section("instance", lambda d: d.instances, lambda d, v: attrs.evolve(d, instances=v),
             lambda name: name, lambda name: [f"{name} declared on this node"]),
    _Section("held", lambda d: d.held, lambda d, v: attrs.evolve(d, held=v),
             lambda h: f"{h.instance} [{h.code}]", _held_why),
    _Section("file", lambda d: d.files, lambda d, v: attrs.evolve(d, files=v),
             lambda f: f.path, lambda f: [f"mode {f.mode}"] + _reason(f)),
    _Section("registry-login", lambda d: d.registry_logins,
             lambda d, v: attrs.evolve(d, registry_logins=v),
             lambda r: f"{r.user}@{r.registry}",
             lambda r: [f"pull account {r.user}, generation {_generation(r.secret)}"]),
    _Section("transfer", lambda d: d.transfers, lambda d, v: attrs.evolve(d, transfers=v),
             lambda t: f"{t.instance} {t.role}",
             lambda t: [f"state of {t.instance} carried from {t.source} to {t.target}"
                        + (f" (waits: {t.waits})" if t.waits else "")],
             sort_key=lambda t: (t.instance, t.role)),
    _Section("upgrade", lambda d: d.upgrades, lambda d, v: attrs.evolve(d, upgrades=v),
             lambda u: u.instance,
             lambda u: [f"snapshot of {u.instance} into {u.repository} on {u.target_node} "
                        f"before its image changes"]),
)
SECTION_NAMES: tuple[str, ...] = (
    ("node", "mesh", "address", "certificate", "firewall-address")
    + tuple(s.name for s in SECTIONS) + ("container-order",))
"""Every section, in the order changes are listed."""
_RANK = {name: i for i, name in enumerate(SECTION_NAMES)}

_SCALARS: dict[str, Callable[[Declaration], Optional[str]]] = {
    "mesh": lambda d: d.mesh,
    "address": lambda d: d.address,
    "certificate": lambda d: d.certificate,
    "firewall-address": lambda d: d.firewall.address if d.firewall is not None else None,
}


def _keyed(section: _Section, d: Optional[Declaration]) -> dict[str, Any]:
    """The section's elements by key; a key written twice gets `#2`, `#3`, … after it (the
    resolver writes none twice, a declaration read from a file might)."""
    found: dict[str, Any] = {}
    for element in (section.read(d) if d is not None else ()):
        key, n = section.key(element), 1
        while (key if n == 1 else f"{key} #{n}") in found:
            n += 1
        found[key if n == 1 else f"{key} #{n}"] = element
    return found


def _container_change(node: str, old: Optional[Declaration], new: Optional[Declaration],
                      key: str, b: Optional[ContainerDecl],
                      a: Optional[ContainerDecl]) -> Optional[DeclarationChange]:
    """A container's change, as resolver/_plan.container_change classifies it (the plan's
    create, remove, recreate or in-place); a container equal in all but what that ignores
    (nothing, today) still lists its differing fields."""
    if a == b:
        return None
    decided = container_change(node, old, new, b, a)
    if b is None:
        assert a is not None and new is not None
        return DeclarationChange(node, "container", key, ADD, pvector(SECTIONS[0].added(a)),
                                 "create", new.containers.index(a), None, a)
    if a is None:
        return DeclarationChange(node, "container", key, REMOVE,
                                 pvector(SECTIONS[0].added(b)), "remove", None, b, None)
    if decided is None:  # not a change the plan names: its fields say what differs
        return DeclarationChange(node, "container", key, CHANGE, pvector(_fields(b, a)),
                                 "in-place", None, b, a)
    return DeclarationChange(node, "container", key, CHANGE, decided.causes, decided.action,
                             None, b, a)


def _node_changes(node: str, old: Optional[Declaration],
                  new: Optional[Declaration]) -> list[DeclarationChange]:
    changes: list[DeclarationChange] = []
    if old is None or new is None:
        changes.append(DeclarationChange(
            node, "node", node, ADD if old is None else REMOVE,
            pvector([f"node {node} {'joins' if old is None else 'leaves'} the mesh"]),
            before=None if old is None else node, after=node if old is None else None))
    for name, read in _SCALARS.items():
        before = read(old) if old is not None else None
        after = read(new) if new is not None else None
        if before == after:
            continue
        action = ADD if before is None else REMOVE if after is None else CHANGE
        why = (["certificate issued or renewed" if after else "certificate gone"]
               if name == "certificate" else [f"{before} → {after}"] if before and after
               else [f"{after or before}"])
        changes.append(DeclarationChange(node, name, name, action, pvector(why),
                                         before=before, after=after))
    for section in SECTIONS:
        before_map, after_map = _keyed(section, old), _keyed(section, new)
        for key in sorted(set(before_map) | set(after_map)):
            b, a = before_map.get(key), after_map.get(key)
            if section.name == "container":
                change = _container_change(node, old, new, key, b, a)
                if change is not None:
                    changes.append(change)
            elif b is None:
                changes.append(DeclarationChange(node, section.name, key, ADD,
                                                 pvector(section.added(a)), after=a))
            elif a is None:
                changes.append(DeclarationChange(node, section.name, key, REMOVE,
                                                 pvector(section.added(b)), before=b))
            elif a != b:
                why = _fields(b, a) if attrs.has(type(b)) else []
                changes.append(DeclarationChange(node, section.name, key, CHANGE,
                                                 pvector(why), before=b, after=a))
    if new is not None and old is not None:  # the containers kept, run in another order
        now = [c.name for c in new.containers]
        was = [c.name for c in old.containers]
        if [n for n in was if n in set(now)] != [n for n in now if n in set(was)]:
            changes.append(DeclarationChange(
                node, "container-order", "containers", CHANGE,
                pvector([f"they run in the order {', '.join(now)}"]), before=tuple(was),
                after=tuple(now)))
    return sorted(changes, key=lambda c: (_RANK[c.section], c.subject))


def declaration_changes(old: Mapping[str, Declaration],
                        new: Mapping[str, Declaration]) -> list[DeclarationChange]:
    """Every change, section by section, from the declarations `old` to `new` (node →
    Declaration), sorted by node, section and subject; nothing when they are equal (serials
    and digests aside)."""
    changes: list[DeclarationChange] = []
    for node in sorted(set(old) | set(new)):
        changes.extend(_node_changes(node, old.get(node), new.get(node)))
    return changes


def _apply_node(old: Optional[Declaration], node: str,
                changes: Sequence[DeclarationChange]) -> Optional[Declaration]:
    d = old
    for change in changes:
        if change.section == "node":
            if change.action == REMOVE:
                return None
            d = Declaration(mesh="", node=node, address="")
    if d is None:
        return None
    for section in SECTIONS:
        mine = [c for c in changes if c.section == section.name]
        if not mine:
            continue
        elements = _keyed(section, d)
        for change in mine:
            if change.action == REMOVE:
                elements.pop(change.subject, None)
            else:
                elements[change.subject] = change.after
        if section.ordered:  # the kept in their order, each new one at its place
            order = [section.key(e) for e in section.read(d)]
            listed = [elements[k] for k in order if k in elements]
            for change in sorted((c for c in mine if c.action == ADD),
                                 key=lambda c: c.position or 0):
                listed.insert(change.position or 0, change.after)
            d = section.write(d, pvector(listed))
        else:
            d = section.write(d, pvector(sorted(elements.values(), key=section.sort_key)))
    for change in changes:
        if change.section == "container-order":
            by_name = {c.name: c for c in d.containers}
            d = attrs.evolve(d, containers=pvector(by_name[n] for n in change.after))
        elif change.section == "mesh":
            d = attrs.evolve(d, mesh=change.after or "")
        elif change.section == "address":
            d = attrs.evolve(d, address=change.after or "")
        elif change.section == "certificate":
            d = attrs.evolve(d, certificate=change.after)
    for change in changes:  # last: the sections above may have made a firewall to hold them
        if change.section == "firewall-address":
            d = attrs.evolve(d, firewall=None if change.after is None else attrs.evolve(
                _firewall(d), address=change.after))
    return d


def apply_changes(old: Mapping[str, Declaration],
                  changes: Sequence[DeclarationChange]) -> dict[str, Declaration]:
    """The declarations `old` with every change applied: the new declarations, serials and
    digests aside (the inverse of declaration_changes, which the properties hold it to)."""
    result: dict[str, Declaration] = {}
    for node in sorted(set(old) | {c.node for c in changes}):
        mine = [c for c in changes if c.node == node]
        applied = _apply_node(old.get(node), node, mine)
        if applied is not None:
            result[node] = applied
    return result


def change_counts(changes: Sequence[DeclarationChange]) -> tuple[int, int, int]:
    """(added, changed, removed): the plan's summary line."""
    return (sum(c.action == ADD for c in changes), sum(c.action == CHANGE for c in changes),
            sum(c.action == REMOVE for c in changes))


# What the package's root takes from this module (resolver/__init__.py joins these lists).
__all__ = [
    "declaration_changes", "apply_changes", "change_counts", "DeclarationChange", "SECTION_NAMES",
]
