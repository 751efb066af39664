"""The floor under resolve(): what it costs only to make the objects a resolution returns.

Resolves bench_resolve's synthetic mesh, walks the Resolution it returns and counts its
distinct objects by class (model records, vectors, maps). Then it makes as many objects of each
class again, from one middle-sized sample of the class, in a plain loop that keeps every one
alive (as a resolution keeps its output): no placement, selection, ports, logins, rendering or
digests, only the allocations and `__init__`s the output's shape takes. Prints, per size, the
resolve beside that floor, with CPython's default garbage collector and with it off; the ratio
floor / resolve says how much of a resolve no change inside the stages can remove while the
output keeps its shape (issue 14's target: 10,000 instances under 1 s, default collector).

    python3 benchmarks/bench_output_floor.py [SIZES...]
"""

from __future__ import annotations

import gc
import sys
import time
from collections import defaultdict
from typing import Any, Callable

import attrs
from pyrsistent import PMap, PVector, pmap, pvector

from bench_resolve import synthetic
from resolver import FrozenMap, resolve

Maker = tuple[Callable[..., Any], tuple[Any, ...], int]


def census(root: Any) -> dict[type, list[Any]]:
    """The distinct objects (by identity) reachable from `root`, by class: attrs records,
    vectors and maps (what the collector tracks), each once however often it is shared."""
    found: dict[type, list[Any]] = defaultdict(list)
    seen: set[int] = set()
    pending = [root]
    while pending:
        value = pending.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        kind = type(value)
        if attrs.has(kind):
            found[kind].append(value)
            pending.extend(getattr(value, field.name) for field in attrs.fields(kind))
        elif isinstance(value, (PVector, list, tuple)):
            if isinstance(value, PVector):
                found[PVector].append(value)
            pending.extend(value)
        elif isinstance(value, (FrozenMap, PMap, dict)):
            if isinstance(value, (FrozenMap, PMap)):
                found[FrozenMap if isinstance(value, FrozenMap) else PMap].append(value)
            pending.extend(value.values())
    return found


def makers(found: dict[type, list[Any]]) -> list[Maker]:
    """(how to make one, from what, how many) per class: the sample is the class's object of
    middle size, so a class of mostly small vectors is not made from its one large one."""
    plan: list[Maker] = []
    for kind, objects in found.items():
        sample = sorted(objects, key=lambda o: len(o) if hasattr(o, "__len__") else 0)[
            len(objects) // 2]
        if kind is PVector:
            plan.append((pvector, (list(sample),), len(objects)))
        elif kind is FrozenMap:
            plan.append((FrozenMap, (dict(sample),), len(objects)))
        elif kind is PMap:
            plan.append((pmap, (dict(sample),), len(objects)))
        else:
            plan.append((kind, tuple(getattr(sample, f.name) for f in attrs.fields(kind)),
                         len(objects)))
    return plan


def make_all(plan: list[Maker]) -> float:
    """CPU seconds to make every object of `plan`, all kept alive until the end."""
    kept: list[Any] = []
    start = time.process_time()
    for make, args, count in plan:
        for _ in range(count):
            kept.append(make(*args))
    spent = time.process_time() - start
    del kept
    return spent


def best(runs: int, measure: Callable[[], float], collector: bool) -> float:
    times = []
    for _ in range(runs):
        gc.collect()
        if not collector:
            gc.disable()
        try:
            times.append(measure())
        finally:
            gc.enable()
    return min(times)


def main(argv: list[str]) -> int:
    sizes = [int(a) for a in argv] or [2500, 5000, 10000]
    print(f"{'instances':>9} {'objects':>8} {'collector':>9} {'resolve s':>10} "
          f"{'floor s':>8} {'floor/resolve':>13}")
    for size in sizes:
        catalogue, mesh, ledger = synthetic(size)
        found = census(resolve(catalogue, mesh, ledger))
        plan = makers(found)
        del found
        objects = sum(count for _, _, count in plan)

        def resolving() -> float:
            start = time.process_time()
            resolve(catalogue, mesh, ledger)
            return time.process_time() - start

        for collector in (True, False):
            resolved = best(3, resolving, collector)
            floor = best(3, lambda: make_all(plan), collector)
            print(f"{size:>9} {objects:>8} {'default' if collector else 'off':>9} "
                  f"{resolved:>10.3f} {floor:>8.3f} {floor / resolved:>13.2f}")
    print("best of 3, CPU seconds of this process; floor: making the output's objects alone")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
