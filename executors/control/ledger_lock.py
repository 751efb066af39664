"""One writer of a mesh's ledger at a time.

Invariants:
- Every ledger write happens under the ledger's lock: an flock on the directory that holds the
  ledger (no lock file is left beside it; two ledgers in one directory share the lock). Writers
  that read, compute and write (plan, rotate, applied, renew, pin, mirror, build, the control
  loop) hold it around the whole read → compute → write through the one transaction
  (control/ledger_transaction.transact), so a `mesh rotate` typed while `mesh control` records
  a report never loses either change; `write_ledger` takes it itself when its caller did not.
  The control state's files (control/control_state.py) are written under the same lock.
- Re-entrant within a process: a holder that writes (or calls a function that locks again)
  does not wait on itself. flock is per open file, so a second open in the same process would
  deadlock; the hold is counted here instead.
- Waiting is announced once, never silent.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Iterator, Optional, Union

_guard = threading.Lock()
_held: dict[str, list[int]] = {}  # lock path → [fd, depth]

PathLike = Union[str, os.PathLike[str]]


def lock_path_for(ledger_path: PathLike) -> Path:
    """What is locked: the directory holding the ledger."""
    return Path(ledger_path).parent


def held(ledger_path: PathLike) -> bool:
    with _guard:
        return str(lock_path_for(ledger_path).resolve()) in _held


@contextlib.contextmanager
def locked(ledger_path: PathLike, say: Optional[Callable[[str], None]] = None) -> Iterator[None]:
    """Hold the lock of the ledger at `ledger_path` for the duration of the block."""
    path = lock_path_for(ledger_path)
    path.mkdir(parents=True, exist_ok=True)
    key = str(path.resolve())
    with _guard:
        entry = _held.get(key)
        if entry is not None:
            entry[1] += 1
    if entry is None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        announced = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not announced:
                    (say or _stderr)(f"waiting for another writer of the ledger in {path} "
                                     f"(mesh plan, rotate, applied, control…) to finish")
                    announced = True
                time.sleep(0.1)
        with _guard:
            _held[key] = [fd, 1]
    try:
        yield
    finally:
        with _guard:
            entry = _held[key]
            entry[1] -= 1
            release = entry[1] == 0
            if release:
                del _held[key]
        if release:
            os.close(entry[0])  # closing the file releases the flock


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
