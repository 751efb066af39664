"""The ledger as every `mesh` command reads it, with and without the record of what was
declared (issue 11: `declared` holds each instance's last written rendering).

On the synthetic meshes of bench_resolve.py: the ledger after a resolve, and the same ledger
after `mesh plan --out` recorded its declarations (resolver.rendering.record_declared). Prints, per
size: the YAML size, CPU seconds to write it (dump_ledger) and to read it back (load_ledger),
the ratio of reading with records to reading without, and a resolve with the recorded
ledger against one without (the record is read for held instances and kept ports).
No target is asserted; renderings are written as one JSON text each because as nested YAML
they made a 100-instance ledger ten times slower to read.

    python3 benchmarks/bench_ledger.py [SIZES...]
"""

from __future__ import annotations

import gc
import sys
import time
from pathlib import Path
from typing import Callable, ParamSpec, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_resolve import synthetic  # noqa: E402

from resolver import resolve  # noqa: E402
from resolver.documents import dump_ledger, load_ledger  # noqa: E402
from resolver.rendering import record_declared  # noqa: E402


P = ParamSpec("P")
T = TypeVar("T")


def cpu(function: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> tuple[float, T]:
    """The best of 3 CPU seconds of function(*args), and what it returned."""
    spent: list[float] = []
    for _ in range(3):
        gc.collect()
        started = time.process_time()
        result = function(*args, **kwargs)
        spent.append(time.process_time() - started)
    return min(spent), result


def main(argv: list[str]) -> int:
    sizes = [int(a) for a in argv] or [100, 500, 2000]
    print(f"{'instances':>9} {'records':>8} {'MB':>6} {'dump s':>7} {'load s':>7} "
          f"{'ratio':>6} {'resolve s':>10}")
    for size in sizes:
        catalogue, mesh, ledger = synthetic(size)
        first = resolve(catalogue, mesh, ledger)
        plain: float | None = None
        for label, written in (("no", first.ledger), ("yes", record_declared(first))):
            dump_s, text = cpu(dump_ledger, written)
            load_s, (loaded, _) = cpu(load_ledger, text, "ledger.yaml")
            assert loaded == written, "the ledger does not read back as written"
            resolve_s, _ = cpu(resolve, catalogue, mesh, written)
            ratio = f"{load_s / plain:.2f}" if plain else "-"
            plain = plain or load_s
            print(f"{size:>9} {label:>8} {len(text) / 1e6:>6.2f} {dump_s:>7.3f} {load_s:>7.3f} "
                  f"{ratio:>6} {resolve_s:>10.3f}", flush=True)
    print("best of 3, CPU seconds of this process")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
