"""The one place the resolver touches CPython's cyclic garbage collector.

A resolution makes hundreds of thousands of small objects that all stay alive until it
returns, so every collection the default thresholds trigger while it runs walks them again and
frees nothing: on a 10,000-instance mesh that was 40 % of resolve()'s time. `collector_paused`
turns the collector off while a resolution runs and gives the caller back its own setting.

Invariants:
- A resolution creates no reference cycle (tests/test_resolver_collector.py resolves a large
  mesh with the collector off and finds nothing for it to free), so pausing the collector
  cannot make memory grow: everything a resolution drops is freed by reference counting, at
  once, exactly as with the collector on.
- The caller's setting is restored on every exit (returned or raised): enabled stays enabled,
  disabled stays disabled, and thresholds, frozen objects and callbacks are never touched.
  Nothing is collected on exit either: the objects the result holds are counted towards the
  caller's next collection, as any allocation of theirs would be.
- The switch is process-wide (CPython has one collector): a thread that disables the
  collector while another thread's resolve() runs finds it enabled again when that resolve()
  returns, if it was enabled when that resolve() began.
- This is not I/O and reads nothing ambient that changes a result: the Resolution is the same
  with the collector on or off. tests/test_purity.py forbids `gc` everywhere else in resolver/.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic collector off for the block, the caller's setting back after it."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
