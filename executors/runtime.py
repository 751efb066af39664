"""Process settings for the commands that resolve whole meshes.

CPython's cyclic garbage collector rescans every live object at each full collection; a
resolution allocates hundreds of thousands of small immutable objects and no cycles, so with
the default thresholds the collector, not the resolver, dominates large meshes (measured in
benchmarks/bench_resolve.py). `resolving()` freezes what exists (the loaded inputs) and raises
the first threshold while it runs, then restores the settings.
"""

from __future__ import annotations

import contextlib
import gc


@contextlib.contextmanager
def resolving():
    thresholds = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()
