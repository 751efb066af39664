"""Process settings for the commands that resolve whole meshes.

CPython's cyclic garbage collector rescans every live object at each full collection; a
resolution allocates hundreds of thousands of small immutable objects and no cycles, so with
the default thresholds the collector, not the resolver, dominates large meshes (measured in
benchmarks/bench_resolve.py). `resolving()` freezes what exists (the loaded inputs) and raises
the first threshold while it runs, then restores the settings. `now_iso()` is the clock the
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
    thresholds = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()
