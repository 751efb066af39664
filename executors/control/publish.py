"""Publishing: each node's declaration, with only that node's sealed values, signed, over the
broker to that node's queue.

Invariants:
- A node is published to when its declaration's digest differs from the last one published to
  it (`published.json`), or when asked by name (a republish of the same declaration).
- What is published is exactly what was written: the mesh is resolved under the ledger lock
  (serials from the ledger and the declarations already written, never backwards; requests
  issued when asked), the declarations written to the state's `out/` and recorded in the
  ledger (resolver.rendering.record_declared) before any message leaves; a crash between writing and
  publishing leaves a digest not yet published, so the next run publishes it.
- The body carries the node's declaration and an extract of the ledger holding, for each
  credential sealed to that node, each generation's box for that node alone: never the whole
  ledger, never another node's box, never the control node's escrow.
- Requests are issued when asked; what cannot be issued yet (a node without its key: not
  enrolled) is said, and everything else is published all the same (its credentials pending).
- The body carries the mesh's revocation list too (public; control/revocations.py), when it
  has an entry.
- `published.json` changes only after the broker confirmed the message (publisher confirms),
  under the ledger lock.
- Sending costs each message's own work: nothing done per message grows with the mesh (each
  node's sealed extract is made in one pass over the ledger's credentials, not by scanning
  them all once per node).
- A node whose declaration's digest did not change is not touched: its file is not written,
  nothing is signed or sent to it, the ledger records nothing new for it.
- A long-lived publisher (the control loop) hands `prepare` a Memory kept between rounds: the
  documents parsed last time (loading.MemoLoader), the declarations written last time
  (declarations.WrittenMemo) and the last resolution's reuse (declarations.ResolveMemo); what
  `prepare` computes with it equals what it computes without it. One-shot verbs keep none.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Callable, Iterable, Mapping, Optional, Sequence

import attrs
from nacl.public import PrivateKey
from pyrsistent import pmap

import resolver
from resolver import Credential, Declaration, Generation, Inputs, Ledger, Resolution
from resolver.documents import unstructure

from executors.common import amqp, messages, revocation
from executors.common.message_formats import DECLARATION
from executors.common.revocation import Revocation
from executors.control.declarations import (
    Document,
    ResolveMemo,
    WrittenMemo,
    read_written,
    resolve_for_writing,
    write_and_record,
)
from executors.control.control_state import ControlState
from executors.control.delivery_key import DeliveryKey
from executors.control.issuer import IssueError
from executors.control.ledger_transaction import transact
from executors.control.loading import (
    Fingerprint,
    MemoLoader,
    PathLike,
    inputs_fingerprint,
    mesh_lock,
)

if TYPE_CHECKING:  # pika ships no types: its channel is named for the reader
    from pika.adapters.blocking_connection import BlockingChannel


@attrs.frozen
class Prepared:
    """The declarations to publish, and the ledger their sealed values come from."""

    mesh: str
    declarations: tuple[Declaration, ...]
    ledger: Ledger
    nodes: tuple[str, ...]  # every node of the mesh (their queues must exist)
    problems: tuple[str, ...]  # refusals of the resolution, one line each
    inputs: Inputs  # the mesh as loaded, with the ledger as written
    resolution: Resolution  # its resolution, with the ledger as written
    fingerprint: Fingerprint  # loading.inputs_fingerprint once written, under the lock
    documents: Mapping[str, Document]  # node → its declaration, unstructured


@attrs.frozen
class _Written:
    """What `prepare` resolved and wrote, inside its transaction."""

    resolution: Resolution
    targets: tuple[str, ...]
    documents: dict[str, Document]


@attrs.define
class Memory:
    """What a long-lived publisher keeps between rounds (one per process and mesh
    directory); see the module's invariants."""

    loader: MemoLoader = attrs.field(factory=MemoLoader)
    written: WrittenMemo = attrs.field(factory=WrittenMemo)
    resolved: ResolveMemo = attrs.field(factory=ResolveMemo)


@attrs.frozen
class Published:
    node: str
    serial: int
    digest: str
    message_id: str


def _only(generation: Optional[Generation], node: str) -> Optional[Generation]:
    """`generation` holding `node`'s box alone (None when it has none for `node`)."""
    if generation is None or node not in generation.sealed:
        return None
    return Generation(generation=generation.generation, slot=generation.slot,
                      sealed=pmap({node: generation.sealed[node]}))


def sealed_extract(ledger: Ledger, node: str) -> Ledger:
    """The credentials sealed to `node`, each generation holding `node`'s box alone."""
    return sealed_extracts(ledger, (node,))[node]


def sealed_extracts(ledger: Ledger, nodes: Iterable[str]) -> dict[str, Ledger]:
    """node → sealed_extract(ledger, node) for each of `nodes`, in one pass over the ledger's
    credentials (only the nodes a credential is sealed to are visited for it): publishing
    to every node costs the size of the ledger once, not once per node."""
    wanted = set(nodes)
    credentials: dict[str, dict[str, Credential]] = {node: {} for node in wanted}
    for credential_id, credential in sorted(ledger.credentials.items()):
        holders: set[str] = set()
        for generation in (credential.active, credential.retiring, credential.pending):
            if generation is not None:
                holders.update(generation.sealed)
        for node in sorted(holders & wanted):
            credentials[node][credential_id] = Credential(
                active=_only(credential.active, node), retiring=_only(credential.retiring, node),
                pending=_only(credential.pending, node))
    return {node: Ledger(credentials=pmap(kept)) for node, kept in credentials.items()}


def message_id(declaration: Declaration) -> str:
    return f"{declaration.node}/{declaration.serial}/{declaration.digest.split(':')[-1][:12]}"


def declaration_body(declaration: Declaration, ledger: Ledger, published_at: str,
                     document: Optional[Document] = None,
                     revoked: Sequence[Revocation] = (), *,
                     secrets: Optional[Ledger] = None) -> Document:
    """The body of `declaration`'s message. `secrets`: its node's sealed_extract of `ledger`
    when the caller made it already (send makes every node's in one pass)."""
    extract = sealed_extract(ledger, declaration.node) if secrets is None else secrets
    body: Document = {
        "mesh": declaration.mesh, "node": declaration.node, "serial": declaration.serial,
        "digest": declaration.digest, "published": published_at,
        "declaration": unstructure(declaration) if document is None else document,
        "secrets": unstructure(extract)}
    if revoked:  # the mesh's revocation list, public: the agent refuses a revoked signer
        body["revoked"] = revocation.as_list(revoked)
    return body


def prepare(mesh_dir: PathLike, state: ControlState, *, now: str, issue: bool = True,
            control_key: Optional[PrivateKey] = None, force: Iterable[str] = (),
            only: Optional[Iterable[str]] = None,
            notes: Optional[list[str]] = None, memory: Optional[Memory] = None) -> Prepared:
    """Resolve, write and record the declarations that must be published: those whose digest
    changed since last published, plus `force` (republished as they are). `only` limits it.
    `memory`: what the last round of this process left (the control loop's), else nothing."""
    forced = set(force)
    chosen = None if only is None else set(only)
    kept = memory or Memory()

    def write(inputs: Inputs) -> tuple[Ledger, _Written]:
        previous = read_written(state.out, kept.written)
        try:
            resolution = resolve_for_writing(inputs, previous, now=now, issue=issue,
                                             control_key=control_key, notes=notes,
                                             memo=kept.resolved)
        except IssueError as error:  # e.g. a node not enrolled yet: publish what can be
            if notes is not None:
                notes.append(f"not issued: {error}")
            resolution = resolve_for_writing(inputs, previous, now=now, memo=kept.resolved)
        published = state.published()
        unknown = sorted((forced | (chosen or set())) - set(resolution.declarations))
        if unknown:
            raise resolver.MeshError(f"no node {', '.join(unknown)} in the mesh; nodes: "
                                     f"{', '.join(sorted(resolution.declarations))}")
        targets = tuple(n for n in sorted(resolution.declarations)
                        if (chosen is None or n in chosen)
                        and (n in forced or (published.get(n) or {}).get("digest")
                             != resolution.declarations[n].digest))
        documents = {n: unstructure(resolution.declarations[n]) for n in targets}
        ledger = write_and_record(resolution, state.ensure().out if targets else state.out,
                                  targets, documents, compact=True)
        return ledger, _Written(resolution, targets, documents)

    with mesh_lock(mesh_dir):  # one hold: the fingerprint is of what this transaction wrote
        done = transact(mesh_dir, write, load=lambda: kept.loader.load(mesh_dir),
                        memo=kept.loader)
        fingerprint = inputs_fingerprint(mesh_dir)
    inputs, ledger, written = done.inputs, done.ledger, done.result
    resolution, targets = written.resolution, written.targets
    problems = tuple(f"{p.seen_at}: [{p.code}] {p.message}" for p in resolution.problems
                     if p.severity == "error")
    # resolving again with the ledger as written gives the same declarations (a fixed point)
    return Prepared(inputs.mesh.mesh, tuple(resolution.declarations[n] for n in targets),
                    ledger, tuple(sorted(resolution.declarations)), problems,
                    inputs=attrs.evolve(inputs, ledger=ledger),
                    resolution=attrs.evolve(resolution, ledger=ledger), fingerprint=fingerprint,
                    documents=written.documents)


def send(channel: BlockingChannel, key: DeliveryKey, prepared: Prepared,
         now: Optional[datetime.datetime] = None,
         say: Callable[[str], None] = lambda line: None,
         declared: Optional[set[str]] = None,
         revoked: Sequence[Revocation] = ()) -> list[Published]:
    """Sign and publish each prepared declaration, each confirmed by the broker before the
    next; returns what was confirmed (BrokerError stops at the first that was not). A node's
    queue is declared first unless `declared` (kept by the caller across calls) names it."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    done: list[Published] = []
    declared = set() if declared is None else declared
    extracts = sealed_extracts(prepared.ledger, (d.node for d in prepared.declarations))
    for declaration in prepared.declarations:
        if declaration.node not in declared:
            amqp.declare_node_queue(channel, declaration.node)
            declared.add(declaration.node)
        body = declaration_body(declaration, prepared.ledger, stamp,
                                prepared.documents.get(declaration.node), revoked,
                                secrets=extracts[declaration.node])
        data = messages.sign(DECLARATION, body, key.key, key.certificate_pem)
        ident = message_id(declaration)
        amqp.publish(channel, amqp.DECLARATIONS, declaration.node, data,
                     amqp.properties(message_id=ident, kind=DECLARATION,
                                     headers={"serial": declaration.serial}))
        say(f"published {declaration.node} serial {declaration.serial} "
            f"({declaration.digest}, {len(data)} bytes)")
        done.append(Published(declaration.node, declaration.serial, declaration.digest, ident))
    return done


def record_published(mesh_dir: PathLike, state: ControlState, done: Sequence[Published],
                     now: Optional[datetime.datetime] = None) -> None:
    if not done:
        return
    now = now or datetime.datetime.now(datetime.timezone.utc)
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    with mesh_lock(mesh_dir):  # the control state is written under the ledger's lock
        published = state.published()
        for item in done:
            published[item.node] = {"serial": item.serial, "digest": item.digest,
                                    "message_id": item.message_id, "at": stamp}
        state.write_published(published)
