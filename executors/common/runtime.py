"""Process settings for the commands that resolve whole meshes.

CPython's cyclic garbage collector rescans every live object at each full collection; a
resolution allocates hundreds of thousands of small immutable objects and no cycles, so with
the default thresholds the collector, not the resolver, dominates large meshes (measured in
benchmarks/bench_resolve.py). `resolving()` turns it off while a mesh resolves and moves what is
alive then (the loaded inputs, the resolution) to the oldest generation; `collector_paused()` turns it
off for the control loop's loads and ledger writes, which build as many objects. `now_iso()` is the clock the
resolving commands pass in (`now`, for certificate renewal windows).
"""

from __future__ import annotations

import contextlib
import gc
from datetime import datetime, timezone
from typing import Iterator


def now_iso() -> str:
    """The current time as the resolver takes it: ISO 8601, UTC, whole seconds."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@contextlib.contextmanager
def resolving() -> Iterator[None]:
    """The collector off while a whole mesh resolves, and, when the block returns, everything
    alive moved to the oldest generation: the loaded inputs and the resolution (hundreds of
    thousands of acyclic objects) are not walked again by the young collections that follow.
    The resolver, finding the collector off, leaves it alone (resolver/_collector.py; asking
    whether anything is frozen there walks the whole frozen list, which here would be every
    object of the process). These commands freeze nothing else, so unfreezing releases only
    what this froze."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
        gc.freeze()
        gc.unfreeze()
    finally:
        if was:
            gc.enable()


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic collector paused for a load or a write, and restored as the caller had
    it: they build hundreds of thousands of small acyclic objects (parsed values, positions,
    records), and with a large mesh in memory each full collection they would trigger walks
    all of it (a third of a 10,000-instance ledger's read). They make no reference cycle of
    their own (tests/test_declared_record.py): only ruamel's pure parser, for a document it
    reads (non-ASCII text), leaves its parser objects in one, a few dozen objects freed at
    the next collection."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
