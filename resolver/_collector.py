"""The one place the resolver touches CPython's cyclic garbage collector.

A resolution makes hundreds of thousands of small objects that all stay alive until it
returns, so every collection the default thresholds trigger while it runs walks them again and
frees nothing: on a 10,000-instance mesh that was 40 % of resolve()'s time. `collector_paused`
turns the collector off while a resolution runs and gives the caller back its own setting.

Left at that, the objects the result holds are all young when the collector comes back on, and
the caller's next allocation starts a collection that walks every one of them (0.05 s at
10,000 instances, 0.13 s at 20,000: it grew faster than the mesh) to free nothing, then walks
them again in the middle generation. So when the caller has the collector on and has frozen
nothing, the block is entered by collecting the young generations (the caller's young objects
are freed or moved to the oldest generation and counted there, as the collector does on its
own), and left, when it returns, by moving everything young, which is then only what the block
made and kept, straight to the oldest generation (`gc.freeze()` then `gc.unfreeze()`); when it
raises, nothing is moved (the traceback's frames stay young, for the collector to free soon).

Invariants:
- A resolution creates no reference cycle (tests/test_resolver_collector.py resolves large and
  refused meshes with the collector off and finds nothing for it to free), so pausing the
  collector cannot make memory grow: everything a resolution drops is freed by reference
  counting, at once, exactly as with the collector on. For the same reason the objects the
  result holds lose nothing by skipping the young generations: they are freed when the caller
  drops the result, whichever generation they are in.
- The caller's young objects are never moved to the oldest generation unseen: they are
  collected on entry (the collector's own callbacks are told, as for any collection), so a
  cycle the caller dropped before calling is freed then, not left for a full collection.
- The caller's setting is restored on every exit (returned or raised): enabled stays enabled,
  disabled stays disabled, and thresholds and callbacks are never touched. A caller with the
  collector off is left exactly as it was (nothing collected, nothing moved). A caller that
  has frozen objects (`gc.get_freeze_count()`) keeps them frozen: its young objects are left
  alone and the result's objects stay young, as with a plain pause. (`gc.get_freeze_count()`
  walks the frozen list: it is asked only with the collector on, once on entry and, if that
  found nothing frozen, once on exit.)
- The switch is process-wide (CPython has one collector): a thread that disables the
  collector while another thread's resolve() runs finds it enabled again when that resolve()
  returns, if it was enabled when that resolve() began; what other threads allocate while a
  resolve() runs is moved to the oldest generation with its result.
- This is not I/O and reads nothing ambient that changes a result: the Resolution is the same
  with the collector on or off. tests/test_purity.py forbids `gc` everywhere else in resolver/.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic collector off for the block, the caller's setting back after it; what the
    block made and kept goes to the oldest generation when the caller froze nothing."""
    enabled = gc.isenabled()
    promote = enabled and gc.get_freeze_count() == 0
    if promote:
        gc.collect(1)
    gc.disable()
    try:
        yield
        # (returned, not raised: what a raise carries, its traceback's frames, stays young)
        if promote and gc.get_freeze_count() == 0:
            gc.freeze()
            gc.unfreeze()
    finally:
        if enabled:
            gc.enable()
