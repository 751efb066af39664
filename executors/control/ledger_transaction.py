"""One ledger transaction, for every writer of a mesh's ledger: lock → load → compute → write.

Invariants:
- Every change of a mesh's ledger goes through `transact` (the verbs `plan`, `rotate`,
  `applied`, `renew`, `pin`, `mirror`, `build`, and the control loop's publishing and report
  recording): the ledger's lock (control/ledger_lock.py) is held from before the inputs are
  read until after the ledger is written, so two writers (a `mesh rotate` typed while
  `mesh control` records a report) never lose either change.
- The computation is handed the inputs as they are on disk under the lock and returns the
  ledger to keep with its result; the ledger is written (loading.write_ledger: read back
  first, atomically) only when it differs from the one loaded (or its files need tidying: an
  older ledger.yaml's record moved out, an instance in two records), and then only its parts that
  changed: the record of what was declared is one file per node beside ledger.yaml
  (resolver.documents.NodeRecord), and a node's file is written only when its record
  changed, ledger.yaml only when what it holds (ports, logins, credentials, certificates,
  pins...) changed.
- Crash safety, in the order of the writes: the declarations are written before the
  transaction records them; then the changed node records, those that gain an instance
  first; then ledger.yaml. Each file is replaced whole (write_atomic). A crash between them
  leaves a record ahead of ledger.yaml, never behind the declarations written, and never an
  instance unrecorded: an instance found in two records (a crash in the middle of a move) is
  read from the newer (each record carries the epoch of the transaction that wrote it), and
  the next transaction writes the other again. An older ledger.yaml still holding `nodes:`
  and `declared:` is read with the records winning, and written without them only after
  every record is on disk.
- Work done outside the lock (a registry asked, an image built and pushed) is merged into the
  ledger as it is under the lock (`merge_into_ledger`): a change applied to the ledger loaded
  now, never a ledger read before the lock replacing it.
- A dry run (`write=False`) takes no lock and writes nothing: what it computes is shown, not
  kept.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Generic, Optional, TypeVar

import attrs

from resolver import Inputs, Ledger

from executors.control.loading import (
    MemoLoader,
    PathLike,
    mesh_lock,
    write_ledger,
)

T = TypeVar("T")

#: What runs inside a transaction: the inputs as loaded → (the ledger to keep, a result).
Compute = Callable[[Inputs], tuple[Ledger, T]]


@attrs.frozen
class Transacted(Generic[T]):
    """What a transaction did: the inputs it loaded, the ledger it kept, whether that was
    written, and the computation's own result."""

    inputs: Inputs  # as loaded under the lock (its ledger: the one before)
    ledger: Ledger  # the ledger computed (written when `written`)
    written: bool
    result: T

    @property
    def ledger_path(self) -> str:
        return self.inputs.ledger_path


def transact(mesh_dir: PathLike, compute: Compute[T], *, write: bool = True,
             load: Optional[Callable[[], Inputs]] = None,
             say: Optional[Callable[[str], None]] = None,
             memo: Optional[MemoLoader] = None) -> Transacted[T]:
    """Hold DIR's ledger lock, load its inputs (`load`, else from disk), hand them to
    `compute`, and write the ledger it returns when that changed; `write=False` is a dry run
    (no lock, nothing written). `say` announces a wait for another writer; `memo` keeps the
    ledger written as parsed (loading.write_ledger)."""
    held = mesh_lock(mesh_dir, say=say) if write else contextlib.nullcontext()
    # one-shot verbs load through a loader of their own too: write_ledger then knows what is
    # on disk, and writes only what changed
    memo = memo if memo is not None else MemoLoader()
    with held:
        inputs = load() if load is not None else memo.load(mesh_dir)
        ledger, result = compute(inputs)
        written = write and (ledger != inputs.ledger or memo.untidy(inputs.ledger_path))
        if written:
            write_ledger(inputs.ledger_path, ledger, memo=memo)
    return Transacted(inputs, ledger, written, result)


def merge_into_ledger(mesh_dir: PathLike, change: Callable[[Ledger], Ledger]) -> Transacted[None]:
    """`change` (what was found or made outside the lock: pins, mirrored digests, a build)
    applied to the ledger as it is now, under the lock; written when it changed it."""
    return transact(mesh_dir, lambda inputs: (change(inputs.ledger), None))
