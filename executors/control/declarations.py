"""Resolving a mesh directory for writing, and writing its declarations: one library for
`mesh plan --out` and the control loop (`mesh control`, `mesh publish`).

Invariants:
- Serials never go backwards: the ledger's record of what was written is taken together with
  the declarations already in the output directory (the newer of the two wins), so a
  declaration written later always supersedes one written before, even with a ledger that lags.
- Declarations are written whole or not at all (write_atomic), one file per node,
  `<node>.declaration.json`, the JSON of resolver.documents.unstructure(declaration).
- One path for both writers: resolve_for_writing → write_and_record (the declarations
  written, then recorded: serials, each declared instance's rendering,
  resolver.rendering.record_declared) → the ledger written by the caller's transaction
  (control/ledger_transaction.transact), which holds the ledger lock around the whole
  load → resolve → write.
- Issuing (secrets from the OS CSPRNG, certificates from the CA) happens only when asked, and
  the mesh is resolved again with what was issued (the second resolution requests nothing);
  when issuing left the ledger as it was, the first resolution is kept (resolving again with
  its own ledger gives the same declarations: a fixed point).
- What is taken from the declarations already written is their mesh, node, serial and digest
  only (Written); a long-lived writer (the control loop) keeps them in a WrittenMemo, which
  reads a file again only when its inode, size or mtime changed, so a round does not re-read
  every node's declaration.
- Every resolution here goes through `resolve_round`: resolver.incremental.resolve_from, with
  the Reuse a long-lived writer keeps (ResolveMemo) or none; the Resolution is resolve()'s
  either way.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Optional, Union

import attrs

from resolver import Declaration, Inputs, Ledger, NodeSerial, Resolution, rendering
from resolver.documents import structure, unstructure
from resolver.incremental import Reuse, resolve_from

from executors.common.atomic import write_atomic
from executors.common.runtime import resolving
from executors.control.control_state import ControlState
from executors.control.loading import PathLike

if TYPE_CHECKING:  # the control extra (PyNaCl): `mesh plan` without --issue runs without it
    from nacl.public import PrivateKey

DECLARATION_SUFFIX = ".declaration.json"

#: A declaration as JSON data (resolver.documents.unstructure of it): what a declaration file holds.
Document = dict[str, Any]


def read_declarations(directory: PathLike) -> dict[str, Declaration]:
    """The declarations already in `directory`, by node; unreadable ones are skipped (they are
    only compared against)."""
    found: dict[str, Declaration] = {}
    directory = Path(directory)
    if not directory.is_dir():
        return found
    for path in sorted(directory.glob(f"*{DECLARATION_SUFFIX}")):
        try:
            decl = structure(json.loads(path.read_text(encoding="utf-8")), Declaration)
        except Exception:  # noqa: BLE001 - an unreadable old declaration is not compared against
            continue
        found[decl.node] = decl
    return found


@attrs.frozen
class Written:
    """What a declaration already written says of itself that the next round needs."""

    mesh: str
    node: str
    serial: int
    digest: str


def _written(data: Any) -> Written:
    if not isinstance(data, dict):
        raise ValueError("not a declaration")
    mesh, node, serial, digest = (data.get(k) for k in ("mesh", "node", "serial", "digest"))
    if not (isinstance(mesh, str) and isinstance(node, str) and isinstance(digest, str)
            and isinstance(serial, int) and not isinstance(serial, bool)):
        raise ValueError("not a declaration")
    return Written(mesh, node, serial, digest)


@attrs.define
class WrittenMemo:
    """The declarations in one directory as Written, each file read again only when its
    (inode, size, mtime) changed; unreadable ones are skipped (only compared against)."""

    # path → ((inode, size, mtime_ns), what it holds or None when unreadable)
    _seen: dict[str, tuple[tuple[int, int, int], Optional[Written]]] = attrs.field(
        factory=dict)
    reads: int = 0  # files read (for tests, benches)

    def read(self, directory: PathLike) -> dict[str, Written]:
        found: dict[str, Written] = {}
        directory = Path(directory)
        seen: dict[str, tuple[tuple[int, int, int], Optional[Written]]] = {}
        if directory.is_dir():
            for entry in sorted(os.scandir(directory), key=lambda e: e.name):
                if not entry.name.endswith(DECLARATION_SUFFIX):
                    continue
                try:
                    facts = entry.stat()
                except OSError:
                    continue
                stamp = (facts.st_ino, facts.st_size, facts.st_mtime_ns)
                kept = self._seen.get(entry.path)
                if kept is None or kept[0] != stamp:
                    self.reads += 1
                    try:
                        held: Optional[Written] = _written(json.loads(
                            Path(entry.path).read_bytes()))
                    except (OSError, ValueError, RecursionError):
                        held = None  # an unreadable old declaration is not compared against
                    kept = (stamp, held)
                seen[entry.path] = kept
                if kept[1] is not None:
                    found[kept[1].node] = kept[1]
        self._seen = seen
        return found


def read_written(directory: PathLike, memo: Optional[WrittenMemo] = None) -> dict[str, Written]:
    """The Written of each declaration in `directory` (through `memo` when kept)."""
    return (memo or WrittenMemo()).read(directory)


def previous_declarations(mesh_dir: PathLike, out: Optional[PathLike] = None,
                          against: Optional[PathLike] = None,
                          in_out: Optional[dict[str, Declaration]] = None
                          ) -> tuple[Optional[dict[str, Declaration]], str]:
    """(the declarations a plan compares with, where they are): `against` when named, else
    the output directory `out` (`in_out`: those the caller read there already), else the
    control plane's copies of what it last published (`DIR/.control/out`); (None, why) when
    there is nothing to compare with."""
    if against is not None:
        return read_declarations(against), f"the declarations in {against} (--against)"
    if out is not None:
        found = read_declarations(out) if in_out is None else in_out
        return found, f"the declarations in {out} (--out)"
    published = ControlState(mesh_dir).out
    if published.is_dir():
        return read_declarations(published), f"the declarations last published ({published})"
    return None, (f"no earlier declarations to compare with (none published in {published}; "
                  "name them with --against DIR or --out DIR)")


def declaration_json(decl: Declaration, document: Optional[Document] = None,
                     compact: bool = False) -> str:
    """The declaration file's text: indented for people (`mesh plan --out`), or compact
    (the control plane's own copies: json's C encoder, many times faster on a large mesh)."""
    document = unstructure(decl) if document is None else document
    if compact:
        return json.dumps(document, sort_keys=True, separators=(",", ":")) + "\n"
    return json.dumps(document, indent=2, sort_keys=True) + "\n"


def declaration_path(directory: PathLike, node: str) -> Path:
    return Path(directory) / f"{node}{DECLARATION_SUFFIX}"


def write_declarations(directory: PathLike, resolution: Resolution, nodes: Iterable[str],
                       documents: Optional[Mapping[str, Document]] = None,
                       compact: bool = False) -> None:
    """Each node's declaration file; `documents` (node → unstructured declaration) spares
    unstructuring again what the caller already has."""
    Path(directory).mkdir(parents=True, exist_ok=True)
    for node in nodes:
        write_atomic(declaration_path(directory, node),
                     declaration_json(resolution.declarations[node],
                                      (documents or {}).get(node), compact=compact))


def with_written_serials(inputs: Inputs,
                         previous: Mapping[str, Union[Declaration, Written]]) -> Ledger:
    """The ledger whose record of written declarations is the newer of its own and the
    declarations in the output directory (serials never go backwards)."""
    return rendering.newest_written(inputs.ledger, {
        node: NodeSerial(d.serial, d.digest) for node, d in previous.items()
        if d.mesh == inputs.mesh.mesh})


@attrs.define
class ResolveMemo:
    """What a long-lived writer keeps of its last resolution for the next (the control loop:
    one per process): the incremental resolver's Reuse (resolver.incremental)."""

    reuse: Optional[Reuse] = None


def resolve_round(inputs: Inputs, ledger: Ledger, *, now: str,
                  memo: Optional[ResolveMemo] = None) -> Resolution:
    """The one place a round resolves: resolver.incremental.resolve_from, handed what the last
    round left (`memo`; None for one-shot verbs: nothing reused). Its Resolution is the one
    resolve() gives, whatever is reused."""
    with resolving():
        resolution, reuse = resolve_from(memo.reuse if memo is not None else None,
                                         inputs.catalogue, inputs.mesh, ledger,
                                         sources=inputs.sources, now=now)
    if memo is not None:
        memo.reuse = reuse
    return resolution


def resolve_for_writing(inputs: Inputs, previous: Mapping[str, Union[Declaration, Written]], *,
                        now: str, issue: bool = False, control_key: Optional[PrivateKey] = None,
                        notes: Optional[list[str]] = None,
                        memo: Optional[ResolveMemo] = None) -> Resolution:
    """The mesh resolved against the serials written so far; with `issue`, every request
    issued (sealed secrets, certificates) and the mesh resolved again with them (not when
    issuing changed nothing: the first resolution is that fixed point already)."""
    ledger = with_written_serials(inputs, previous)
    resolution = resolve_round(inputs, ledger, now=now, memo=memo)
    if issue:
        # the control extra (PyNaCl, cryptography): `mesh plan` without --issue runs without it
        from executors.control.issuer import issue_requests

        issued = issue_requests(inputs, resolution, control_key=control_key, notes=notes)
        if issued is not resolution.ledger and issued != resolution.ledger:
            resolution = resolve_round(inputs, issued, now=now, memo=memo)
    return resolution


def write_and_record(resolution: Resolution, directory: PathLike, nodes: Iterable[str],
                     documents: Optional[Mapping[str, Document]] = None,
                     compact: bool = False) -> Ledger:
    """Write `nodes`' declarations into `directory`; the ledger recording that they were
    written (serials, each declared instance's rendering), for the caller's transaction to
    keep (control/ledger_transaction.transact writes it when it changed). One path for
    `mesh plan --out` and the control loop; called inside the transaction that loaded the
    inputs `resolution` was resolved from."""
    chosen = list(nodes)
    if chosen:
        write_declarations(directory, resolution, chosen, documents, compact=compact)
    return rendering.record_declared(resolution, chosen)
