"""A picture of a resolved mesh, as plain data: what `mesh graph` draws, before any syntax.

Invariants:
- Pure: a Resolution, the Mesh it came from and plain tuples of names in; frozen views out.
  The written order of nodes and instances is an argument (tuples of names), never a parser
  object; names it does not list follow in sorted order, so any mesh has one picture.
- Every binding of the resolution is exactly one EdgeView and every problem exactly one
  ProblemView; nothing is merged, dropped or repeated (a property test holds this). A
  requirement that takes every provider is one edge per provider (each marked `each`) and one
  mark on its consumer naming the requirement and its list, an empty one included.
- Every request and every rotation in progress is shown once per thing it concerns: on the
  binding edges that carry the credential, on the instance that owns a secret, on the node
  a certificate is for; what concerns nothing drawn is a note of the picture, never lost.
- Held instances (refused, kept at their last good declaration) are read from the
  declarations' `held` lists; a node's exposures (ports opened to named sources outside the
  mesh) from its firewall intent, in `_openings` alone.
"""

from __future__ import annotations

import hashlib
from typing import Iterable, Mapping, Optional

import attrs

from ._declaration import FirewallIntent, Problem
from ._resolution import Resolution
from ._model import Mesh
from ._names import fqdns, public_url
from ._rotation import OWN_SECRET_PREFIX, in_progress

LIVE, REFUSED, HELD = "live", "refused", "held"


@attrs.frozen
class Opening:
    """A port open on a node: a floor, an allow for bindings, or an exposure."""

    port: int
    protocol: str
    sources: tuple[str, ...]  # node addresses or networks; empty means from anywhere
    reason: str


@attrs.frozen
class NodeView:
    """A node as drawn: its address, the ports open on it (floors, allows for bindings,
    exposures) and its marks (e.g. a certificate to issue)."""

    name: str
    address: Optional[str]  # None: a node instances name that the mesh does not list
    floors: tuple[Opening, ...] = ()
    allows: tuple[Opening, ...] = ()
    exposures: tuple[Opening, ...] = ()
    mesh_sources: tuple[str, ...] = ()  # every node address: sources equal to it read "mesh"
    marks: tuple[str, ...] = ()  # e.g. a certificate to issue
    context: bool = False  # shown only because a focused node's binding reaches it


@attrs.frozen
class InstanceView:
    """An instance as drawn: its module, node, state (live, refused or held) with the codes
    why, and marks for its own secrets pending or rotating."""

    name: str
    module: str
    node: str
    state: str = LIVE  # live | refused | held
    codes: tuple[str, ...] = ()  # why it is refused (or held), problem codes
    marks: tuple[str, ...] = ()  # its own secrets pending or rotating
    context: bool = False
    # per requirement taking every provider: `as: every <provision> (n): providers`
    lists: tuple[str, ...] = ()
    url: Optional[str] = None  # its public URL when it has a web name (resolver/_names)


@attrs.frozen
class EdgeView:
    """A binding as drawn: consumer to provider, what it is for, the rule that chose the
    provider, the address the consumer is told, and marks for its credential."""

    consumer: str
    requirement: str
    provider: str
    what: str  # the provision, or `module NAME` for a requirement of a module
    chosen_by: str
    cross: bool  # consumer and provider on different nodes
    target: str  # host:port the consumer is told
    login: Optional[str] = None
    marks: tuple[str, ...] = ()  # credential pending, rotation in progress
    details: tuple[str, ...] = ()  # the long form of each mark, for a tooltip
    each: bool = False  # one entry of a requirement that takes every provider

    @property
    def key(self) -> str:
        """The binding's key, `consumer/requirement` (binding_key); an entry of a requirement
        that takes every provider adds `/provider`, so each entry is one edge."""
        key = binding_key(self.consumer, self.requirement)
        return f"{key}/{self.provider}" if self.each else key


@attrs.frozen
class ProblemView:
    """A problem as drawn: its key (a stable name, problem_key), code, severity, message,
    where in the input it points, and the instance it concerns."""

    key: str
    code: str
    severity: str
    message: str
    where: str
    instance: Optional[str]


@attrs.frozen
class MeshPicture:
    """The whole picture of a resolved mesh: its nodes, instances, binding edges and problems,
    with notes for pending things that concern nothing drawn."""

    mesh: str
    nodes: tuple[NodeView, ...]
    instances: tuple[InstanceView, ...]
    edges: tuple[EdgeView, ...]
    problems: tuple[ProblemView, ...]
    notes: tuple[str, ...] = ()  # pending things that concern nothing drawn
    focus: tuple[str, ...] = ()  # the nodes asked for, when the picture is of some only


def binding_key(consumer: str, requirement: str) -> str:
    """The key of a binding in a picture: `consumer/requirement`."""
    return f"{consumer}/{requirement}"


def problem_key(problem: Problem) -> str:
    """A stable name for one problem: its code and instance, and a digest of the rest (two
    problems of one code on one instance differ in message or position). The file is left
    out: it is spelled relative to where the command runs."""
    body = "\0".join((problem.code, problem.instance or "", problem.requirement or "",
                      problem.message, f"{problem.line}:{problem.col}"))
    digest = hashlib.sha256(body.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{problem.code}:{problem.instance or 'mesh'}:{digest}"


def in_written_order(names: Iterable[str], order: Iterable[str]) -> tuple[str, ...]:
    """`names` in the order `order` lists them; the ones it does not list after, sorted."""
    wanted = set(names)
    first = [n for n in dict.fromkeys(order) if n in wanted]
    listed = set(first)
    return tuple(first + sorted(n for n in wanted if n not in listed))


def mesh_picture(resolution: Resolution, mesh: Mesh, *, node_order: tuple[str, ...] = (),
                 instance_order: tuple[str, ...] = (),
                 held: Optional[Mapping[str, str]] = None) -> MeshPicture:
    """The whole mesh as views. `node_order`/`instance_order` are the names as mesh.yaml writes
    them (Sources.key_order); `held` maps each instance kept on its last good declaration to
    the refusal's code, by default as the declarations list them (`held_codes`)."""
    held = dict(held_codes(resolution) if held is None else held)
    requested = _requested(resolution)
    rotating = _rotating(resolution)
    shown_credentials: set[str] = set()

    edges = []
    for b in resolution.bindings:
        marks, details = [], []
        credential = b.secret.credential if b.secret is not None else None
        if credential is not None:
            shown_credentials.add(credential)
            for short, long in requested.get(credential, ()):
                marks.append(short)
                details.append(long)
            if credential in rotating:
                marks.append(rotating[credential][0])
                details.append(rotating[credential][1])
        edges.append(EdgeView(
            consumer=b.consumer, requirement=b.requirement, provider=b.provider,
            what=b.provision if b.provision is not None else f"module {b.module}",
            chosen_by=b.chosen_by, cross=b.consumer_node != b.provider_node,
            target=f"{b.host}:{b.port}", login=b.login, marks=tuple(marks),
            details=tuple(details), each=b.each))
    position = {n: i for i, n in enumerate(in_written_order(mesh.instances, instance_order))}
    edges.sort(key=lambda e: (position.get(e.consumer, len(position)), e.consumer, e.requirement,
                              e.provider))
    listed = _lists(resolution)

    refusals: dict[str, list[str]] = {}
    for p in resolution.problems:
        if p.severity == "error":
            for name in p.blocks:
                found = refusals.setdefault(name, [])
                if p.code not in found:
                    found.append(p.code)
    names = in_written_order(mesh.instances, instance_order)
    own_secrets = _own_secrets_by_instance(names, set(requested) | set(rotating))
    instances = []
    named = fqdns(mesh)
    for name in names:
        inst = mesh.instances[name]
        own_marks: list[str] = []
        codes: tuple[str, ...]
        for credential, secret in own_secrets.get(name, ()):
            shown_credentials.add(credential)
            own_marks.extend(f"{secret}: {short}"
                             for short, _long in requested.get(credential, ()))
            if credential in rotating:
                own_marks.append(f"{secret}: {rotating[credential][0]}")
        if name in held:
            state = HELD
            codes = (held[name],) + tuple(c for c in refusals.get(name, ()) if c != held[name])
        elif name in refusals:
            state, codes = REFUSED, tuple(refusals[name])
        else:
            state, codes = LIVE, ()
        instances.append(InstanceView(name=name, module=inst.module, node=inst.node, state=state,
                                      codes=codes, marks=tuple(own_marks),
                                      lists=listed.get(name, ()),
                                      url=public_url(named[name]) if name in named else None))

    certificates = {r.id: r for r in resolution.requests if r.kind == "certificate"}
    nodes = []
    for name in in_written_order(mesh.nodes, node_order):
        declaration = resolution.declarations.get(name)
        intent = declaration.firewall if declaration is not None else None
        floors, allows, exposures = _openings(intent)
        node_marks: tuple[str, ...] = ()
        if name in certificates:
            node_marks = (f"certificate to issue ({certificates[name].reason})",)
        nodes.append(NodeView(
            name=name, address=mesh.nodes[name].address, floors=floors, allows=allows,
            exposures=exposures, mesh_sources=tuple(intent.mesh_sources) if intent else (),
            marks=node_marks))
    known = set(mesh.nodes)
    for name in dict.fromkeys(i.node for i in instances if i.node not in known):
        nodes.append(NodeView(name=name, address=None))

    notes = []
    for request in resolution.requests:
        if request.kind == "certificate" and request.id in known:
            continue
        if request.kind == "credential" and request.id in shown_credentials:
            continue
        notes.append(f"{request.kind} {request.id} to issue ({request.reason})")
    for credential, (_short, long) in sorted(rotating.items()):
        if credential not in shown_credentials:
            notes.append(f"rotating {credential}: {long}")

    problems = tuple(ProblemView(key=problem_key(p), code=p.code, severity=p.severity,
                                 message=p.message, where=p.where, instance=p.instance)
                     for p in resolution.problems)
    return MeshPicture(mesh=mesh.mesh, nodes=tuple(nodes), instances=tuple(instances),
                       edges=tuple(edges), problems=problems, notes=tuple(notes))


def _lists(resolution: Resolution) -> dict[str, tuple[str, ...]]:
    """Consumer → a mark per requirement of it that takes every provider: the requirement, its
    provision and its list of providers (the edges draw each one; an empty list is drawn only
    here)."""
    found: dict[str, list[str]] = {}
    for declaration in resolution.declarations.values():
        for b in declaration.bindings:
            if b.each:
                providers = ", ".join(e.provider for e in b.entries) or "none yet"
                found.setdefault(b.consumer, []).append(
                    f"{b.requirement}: every {b.provision} ({len(b.entries)}): {providers}")
    return {consumer: tuple(sorted(marks)) for consumer, marks in found.items()}


def focus(picture: MeshPicture, nodes: Iterable[str]) -> MeshPicture:
    """The picture of some nodes: their instances, every binding that touches one, and the
    instance at the far end of each (shown as context, in its node without its firewall).
    Problems of the instances shown and those of the mesh as a whole stay; notes stay."""
    wanted = tuple(dict.fromkeys(nodes))
    chosen = set(wanted)
    inside = {i.name for i in picture.instances if i.node in chosen}
    edges = tuple(e for e in picture.edges if e.consumer in inside or e.provider in inside)
    reached = {e.consumer for e in edges} | {e.provider for e in edges}
    instances = tuple(i if i.name in inside else attrs.evolve(i, context=True)
                      for i in picture.instances if i.name in inside or i.name in reached)
    used = {i.node for i in instances}
    node_views = tuple(n if n.name in chosen else NodeView(name=n.name, address=n.address,
                                                            context=True)
                       for n in picture.nodes if n.name in chosen or n.name in used)
    everyone = {i.name for i in picture.instances}
    problems = tuple(p for p in picture.problems
                     if p.instance in inside or p.instance is None or p.instance not in everyone)
    return attrs.evolve(picture, nodes=node_views, instances=instances, edges=edges,
                        problems=problems, focus=wanted)


# --------------------------------------------------------------------------- helpers


def _openings(intent: Optional[FirewallIntent]) -> tuple[tuple[Opening, ...],
                                                         tuple[Opening, ...],
                                                         tuple[Opening, ...]]:
    """(floors, allows, exposures) of a node's firewall intent; exposures are listens opened
    to named sources beyond the mesh (mesh.yaml `expose:`)."""
    if intent is None:
        return (), (), ()
    floors = tuple(Opening(f.port, f.protocol, tuple(f.sources), f.reason) for f in intent.floors)
    allows = tuple(Opening(a.port, a.protocol, tuple(a.sources), a.reason) for a in intent.allow)
    exposures = tuple(Opening(e.port, e.protocol, tuple(e.sources), e.reason)
                      for e in intent.expose)
    return floors, allows, exposures


def held_codes(resolution: Resolution) -> dict[str, str]:
    """instance → the code of its first refusal, for every instance a declaration holds."""
    found: dict[str, str] = {}
    for declaration in resolution.declarations.values():
        for h in sorted(declaration.held, key=lambda h: (h.file, h.line, h.col, h.code)):
            found.setdefault(h.instance, h.code)
    return found


def _requested(resolution: Resolution) -> dict[str, list[tuple[str, str]]]:
    """credential id → (short mark, long form) for each request to issue or reseal it."""
    found: dict[str, list[tuple[str, str]]] = {}
    for r in resolution.requests:
        if r.kind != "credential":
            continue
        issued = r.id in resolution.ledger.credentials and \
            resolution.ledger.credentials[r.id].active is not None
        short = "credential to reseal" if issued else "credential pending"
        found.setdefault(r.id, []).append((short, f"{short}: {r.reason}"))
    return found


def _rotating(resolution: Resolution) -> dict[str, tuple[str, str]]:
    """credential id → (short mark, why it is still under way) for each rotation in progress."""
    found = {}
    for credential_id, credential in sorted(resolution.ledger.credentials.items()):
        reason = in_progress(credential)
        if reason is None:
            continue
        if credential.pending is not None:
            short = f"rotating: generation {credential.pending.generation} pending"
        else:  # in progress and nothing pending: a generation is retiring (in_progress)
            retiring = credential.retiring
            assert retiring is not None
            short = f"rotating: generation {retiring.generation} retiring"
        found[credential_id] = (short, reason)
    return found


def _own_secrets_by_instance(names: Iterable[str],
                             credentials: Iterable[str]) -> dict[str, list[tuple[str, str]]]:
    """instance → (credential id, secret name) for each of its own secrets among `credentials`.
    An id is `secret/<instance>/<name>`; the longest instance name that prefixes it owns it."""
    known = set(names)
    found: dict[str, list[tuple[str, str]]] = {}
    for credential in sorted(credentials):
        if not credential.startswith(OWN_SECRET_PREFIX):
            continue
        rest = credential[len(OWN_SECRET_PREFIX):]
        cut = len(rest)
        while (cut := rest.rfind("/", 0, cut)) > 0:
            if rest[:cut] in known:
                found.setdefault(rest[:cut], []).append((credential, rest[cut + 1:]))
                break
    return found
