"""Publishing: each node's declaration, with only that node's sealed values, signed, over the
broker to that node's queue.

Invariants:
- A node is published to when its declaration's digest differs from the last one published to
  it (`published.json`), or when asked by name (a republish of the same declaration).
- What is published is exactly what was written: the mesh is resolved under the ledger lock
  (serials from the ledger and the declarations already written, never backwards; requests
  issued when asked), the declarations written to the state's `out/` and recorded in the
  ledger (resolver.record_declared) before any message leaves; a crash between writing and
  publishing leaves a digest not yet published, so the next run publishes it.
- The body carries the node's declaration and an extract of the ledger holding, for each
  credential sealed to that node, each generation's box for that node alone: never the whole
  ledger, never another node's box, never the control node's escrow.
- Requests are issued when asked; what cannot be issued yet (a node without its key: not
  enrolled) is said, and everything else is published all the same (its credentials pending).
- `published.json` changes only after the broker confirmed the message (publisher confirms),
  under the ledger lock.
"""

from __future__ import annotations

import datetime
from typing import Callable, Iterable, Optional, Sequence

import attrs
from pyrsistent import pmap

import resolver
from resolver import Credential, Declaration, Generation, Ledger, unstructure

from executors.common import amqp, messages
from executors.control.declarations import (
    read_declarations,
    resolve_for_writing,
    write_and_record,
)
from executors.control.control_state import ControlState
from executors.control.delivery_key import DeliveryKey
from executors.control.issuer import IssueError
from executors.control.loading import inputs_fingerprint, load_mesh_dir, mesh_lock


@attrs.frozen
class Prepared:
    """The declarations to publish, and the ledger their sealed values come from."""

    mesh: str
    declarations: tuple[Declaration, ...]
    ledger: Ledger
    nodes: tuple[str, ...]  # every node of the mesh (their queues must exist)
    problems: tuple[str, ...] = ()  # refusals of the resolution, one line each
    inputs: object = None  # the mesh as loaded, with the ledger as written
    resolution: object = None  # its resolution, with the ledger as written
    fingerprint: tuple = ()  # loading.inputs_fingerprint once written, under the lock
    documents: dict = attrs.field(factory=dict)  # node → its declaration, unstructured


@attrs.frozen
class Published:
    node: str
    serial: int
    digest: str
    message_id: str


def sealed_extract(ledger: Ledger, node: str) -> Ledger:
    """The credentials sealed to `node`, each generation holding `node`'s box alone."""

    def only(generation: Optional[Generation]) -> Optional[Generation]:
        if generation is None or node not in generation.sealed:
            return None
        return Generation(generation=generation.generation, slot=generation.slot,
                          sealed=pmap({node: generation.sealed[node]}))

    credentials = {}
    for credential_id, credential in sorted(ledger.credentials.items()):
        kept = Credential(active=only(credential.active), retiring=only(credential.retiring),
                          pending=only(credential.pending))
        if (kept.active, kept.retiring, kept.pending) != (None, None, None):
            credentials[credential_id] = kept
    return Ledger(credentials=pmap(credentials))


def message_id(declaration: Declaration) -> str:
    return f"{declaration.node}/{declaration.serial}/{declaration.digest.split(':')[-1][:12]}"


def declaration_body(declaration: Declaration, ledger: Ledger, published_at: str,
                     document: Optional[dict] = None) -> dict:
    return {"mesh": declaration.mesh, "node": declaration.node, "serial": declaration.serial,
            "digest": declaration.digest, "published": published_at,
            "declaration": unstructure(declaration) if document is None else document,
            "secrets": unstructure(sealed_extract(ledger, declaration.node))}


def prepare(mesh_dir, state: ControlState, *, now: str, issue: bool = True,
            control_key=None, force: Iterable[str] = (), only: Optional[Iterable[str]] = None,
            notes: Optional[list] = None) -> Prepared:
    """Resolve, write and record the declarations that must be published: those whose digest
    changed since last published, plus `force` (republished as they are). `only` limits it."""
    force = set(force)
    with mesh_lock(mesh_dir):
        inputs = load_mesh_dir(mesh_dir)
        previous = read_declarations(state.out)
        try:
            resolution = resolve_for_writing(inputs, previous, now=now, issue=issue,
                                             control_key=control_key, notes=notes)
        except IssueError as error:  # e.g. a node not enrolled yet: publish what can be
            if notes is not None:
                notes.append(f"not issued: {error}")
            resolution = resolve_for_writing(inputs, previous, now=now)
        published = state.published()
        unknown = sorted((force | set(only or ())) - set(resolution.declarations))
        if unknown:
            raise resolver.MeshError(f"no node {', '.join(unknown)} in the mesh; nodes: "
                                     f"{', '.join(sorted(resolution.declarations))}")
        targets = [n for n in sorted(resolution.declarations)
                   if (only is None or n in set(only))
                   and (n in force or (published.get(n) or {}).get("digest")
                        != resolution.declarations[n].digest)]
        documents = {n: unstructure(resolution.declarations[n]) for n in targets}
        ledger = write_and_record(inputs, resolution,
                                  state.ensure().out if targets else state.out, targets,
                                  documents, compact=True)
        fingerprint = inputs_fingerprint(mesh_dir)
    problems = tuple(f"{p.where}: [{p.code}] {p.message}" for p in resolution.problems
                     if p.severity == "error")
    # resolving again with the ledger as written gives the same declarations (a fixed point)
    return Prepared(inputs.mesh.mesh, tuple(resolution.declarations[n] for n in targets),
                    ledger, tuple(sorted(resolution.declarations)), problems,
                    inputs=attrs.evolve(inputs, ledger=ledger),
                    resolution=attrs.evolve(resolution, ledger=ledger), fingerprint=fingerprint,
                    documents=documents)


def send(channel, key: DeliveryKey, prepared: Prepared,
         now: Optional[datetime.datetime] = None,
         say: Callable[[str], None] = lambda line: None,
         declared: Optional[set] = None) -> list[Published]:
    """Sign and publish each prepared declaration, each confirmed by the broker before the
    next; returns what was confirmed (BrokerError stops at the first that was not). A node's
    queue is declared first unless `declared` (kept by the caller across calls) names it."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    done: list[Published] = []
    declared = set() if declared is None else declared
    for declaration in prepared.declarations:
        if declaration.node not in declared:
            amqp.declare_node_queue(channel, declaration.node)
            declared.add(declaration.node)
        body = declaration_body(declaration, prepared.ledger, stamp,
                                prepared.documents.get(declaration.node))
        data = messages.sign(messages.DECLARATION, body, key.key, key.certificate_pem)
        ident = message_id(declaration)
        amqp.publish(channel, amqp.DECLARATIONS, declaration.node, data,
                     amqp.properties(message_id=ident, kind=messages.DECLARATION,
                                     headers={"serial": declaration.serial}))
        say(f"published {declaration.node} serial {declaration.serial} "
            f"({declaration.digest}, {len(data)} bytes)")
        done.append(Published(declaration.node, declaration.serial, declaration.digest, ident))
    return done


def record_published(mesh_dir, state: ControlState, done: Sequence[Published],
                     now: Optional[datetime.datetime] = None) -> None:
    if not done:
        return
    now = now or datetime.datetime.now(datetime.timezone.utc)
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    with mesh_lock(mesh_dir):
        published = state.published()
        for item in done:
            published[item.node] = {"serial": item.serial, "digest": item.digest,
                                    "message_id": item.message_id, "at": stamp}
        state.write_published(published)
