#!/usr/bin/env python3
"""Fuzz `mesh check` with mutated documents; every outcome is classified.

    python3 scripts/fuzz.py --count 100000 --seed N [--workers 2] [--timeout 20] [--memory 1024]
    python3 scripts/fuzz.py --seed N --index I [--save FILE]   # one document, shown in full

Every fixture and catalogue document (mesh.yaml, module.yaml, ledger.yaml, provisions.yaml) is
a seed; document I of a run is seed document and mutators drawn from random.Random("N:I")
(deleted keys, wrong types, unknown and duplicated keys, tabs, deep nesting, huge numbers and
strings, non-UTF-8 bytes, alias chains and billion laughs, truncation, broken rules between
entries, ...; scripts/fuzz_mutators.py has them all), so a run is the same on any machine and with any number of workers. Each is
checked in-process (`mesh check` of the mesh that reads it) under a time guard (--timeout
seconds, a hang past it) and a memory guard (--memory MiB of address space over the worker's
own; a MemoryError is a traceback). The outcome classes: ok (loaded and resolved), located
fault, position-less fault, unformatted fault, traceback, hang. Exit 0 only when there was no
position-less or unformatted fault, traceback or hang. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import resource
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import NamedTuple, NoReturn, Optional, TypedDict

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fuzzlib  # noqa: E402


class Hang(BaseException):
    """Raised by the time guard; a BaseException so no `except Exception` can swallow it."""


def _alarm(signum: int, frame: Optional[FrameType]) -> NoReturn:
    raise Hang()


class _State(TypedDict, total=False):
    """What this worker (or the only process) checks with: every key set by _setup()."""

    seeds: list[fuzzlib.Seed]
    seed: int
    timeout: float
    checker: fuzzlib.Checker
    memo: contextlib.AbstractContextManager[None]  # entered for the life of the worker


class Checked(NamedTuple):
    """One document checked: what it was, its outcome, and the worker's peak memory after."""

    number: int  # the document's index in the run (`index` is a tuple's method)
    outcome: str
    line: str
    elapsed: float
    path: str
    names: list[str]
    size: int
    peak_kib: int = 0


_STATE: _State = {}


def _setup(seed: int, timeout: float, memory_mib: int, root: str) -> None:
    """Per worker (or the only process): seeds, a private copy of the documents, the guards."""
    _STATE["seeds"] = fuzzlib.load_seeds()
    _STATE["seed"] = seed
    _STATE["timeout"] = timeout
    _STATE["checker"] = fuzzlib.Checker(Path(tempfile.mkdtemp(dir=root)))
    memo = fuzzlib.memoized_loaders()
    memo.__enter__()  # for the life of the worker
    _STATE["memo"] = memo
    for seed_document in {s.mesh_dir: s for s in _STATE["seeds"]}.values():  # warm the memo
        _STATE["checker"].check(seed_document, seed_document.text.encode())
    signal.signal(signal.SIGALRM, _alarm)
    if memory_mib:
        with open("/proc/self/statm") as statm:
            base = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        limit = base + memory_mib * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _one(index: int) -> Checked:
    seeds, checker = _STATE["seeds"], _STATE["checker"]
    document, names, data = fuzzlib.mutation(seeds, _STATE["seed"], index)
    started = time.perf_counter()
    signal.setitimer(signal.ITIMER_REAL, _STATE["timeout"])
    try:
        code, output, trace = checker.check(document, data)
        signal.setitimer(signal.ITIMER_REAL, 0)
        outcome, line = fuzzlib.classify(code, output, trace)
    except Hang:
        outcome, line = "hang", f"still running after {_STATE['timeout']} s"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    elapsed = time.perf_counter() - started
    return Checked(index, outcome, line[:300], elapsed, document.path, names, len(data))


def _chunk(indices: list[int]) -> list[Checked]:
    results = [_one(i) for i in indices]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    return [r._replace(peak_kib=peak) for r in results]


def _worker_init(seed: int, timeout: float, memory_mib: int, root: str) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _setup(seed, timeout, memory_mib, root)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 2)[2])
    parser.add_argument("--count", type=int, default=1000, help="documents to check (1000)")
    parser.add_argument("--seed", type=int, default=0, help="the run's seed (0)")
    parser.add_argument("--start", type=int, default=0, help="first document index (0)")
    parser.add_argument("--workers", type=int, default=max(1, os.cpu_count() or 1),
                        help="processes (all cores; 1 runs in this process)")
    parser.add_argument("--timeout", type=float, default=20.0,
                        help="seconds one document may take before it counts as a hang (20)")
    parser.add_argument("--memory", type=int, default=1024,
                        help="MiB of address space one worker may add (1024; 0: no guard)")
    parser.add_argument("--show", type=int, default=5, help="examples shown per failing class")
    parser.add_argument("--index", type=int, help="check this one document and show it all")
    parser.add_argument("--save", help="with --index: write the mutated document here")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="mesh-fuzz-") as root:
        if args.index is not None:
            return _show_one(args, root)
        return _run(args, root)


def _show_one(args: argparse.Namespace, root: str) -> int:
    _setup(args.seed, args.timeout, 0, root)
    document, names, data = fuzzlib.mutation(_STATE["seeds"], args.seed, args.index)
    if args.save:
        Path(args.save).write_bytes(data)
    code, output, trace = _STATE["checker"].check(document, data)
    outcome, line = fuzzlib.classify(code, output, trace)
    print(f"document {args.index} of seed {args.seed}: {document.path} ({document.kind}), "
          f"mutators {', '.join(names)}, {len(data):,} bytes, checked in {document.mesh_dir}")
    print(f"outcome: {outcome}: {line}")
    print(f"--- exit {code}; printed:\n{output}{trace}")
    return 0 if outcome not in fuzzlib.FAILURES else 1


def _run(args: argparse.Namespace, root: str) -> int:
    indices = list(range(args.start, args.start + args.count))
    chunk = 50
    chunks = [indices[i:i + chunk] for i in range(0, len(indices), chunk)]
    counts: Counter[str] = Counter()
    by_mutator: dict[str, Counter[str]] = {}
    examples: dict[str, list[tuple[int, str, list[str], int, str]]] = {}
    slowest: tuple[float, Optional[tuple[int, str, list[str], int]]] = (0.0, None)
    peak_kib = 0
    done = 0
    started = time.perf_counter()
    last_report = started

    def take(results: list[Checked]) -> None:
        nonlocal done, slowest, peak_kib, last_report
        for index, outcome, line, elapsed, path, names, size, peak in results:
            counts[outcome] += 1
            for name in names:
                by_mutator.setdefault(name, Counter())[outcome] += 1
            if outcome in fuzzlib.FAILURES and len(examples.setdefault(outcome, [])) < args.show:
                examples[outcome].append((index, path, names, size, line))
            if elapsed > slowest[0]:
                slowest = (elapsed, (index, path, names, size))
            peak_kib = max(peak_kib, peak)
            done += 1
        now = time.perf_counter()
        if now - last_report > 30:
            last_report = now
            failures = sum(counts[c] for c in fuzzlib.FAILURES)
            print(f"fuzz: {done:,}/{len(indices):,} documents, {now - started:.0f} s, "
                  f"{failures} failures", file=sys.stderr, flush=True)

    if args.workers <= 1:
        _setup(args.seed, args.timeout, args.memory, root)
        for part in chunks:
            take(_chunk(part))
    else:
        with multiprocessing.get_context("fork").Pool(
                args.workers, initializer=_worker_init,
                initargs=(args.seed, args.timeout, args.memory, root)) as pool:
            for results in pool.imap_unordered(_chunk, chunks):
                take(results)
    seconds = time.perf_counter() - started

    print(f"fuzz: {done:,} documents, seed {args.seed} (indices {args.start}.."
          f"{args.start + args.count - 1}), {args.workers} worker(s), {seconds:.1f} s "
          f"({done / seconds:.0f} documents/s)")
    for outcome in fuzzlib.CLASSES:
        print(f"  {outcome:<20} {counts[outcome]:>8,}")
    if slowest[1] is not None:
        index, path, names, size = slowest[1]
        print(f"  slowest document: {slowest[0]:.2f} s (#{index}, {path}, "
              f"{'+'.join(names)}, {size:,} bytes)")
    print(f"  peak memory of a worker: {peak_kib / 1024:.0f} MiB")
    print("  by mutator (documents: ok / located fault / other):")
    for name in sorted(by_mutator):
        c = by_mutator[name]
        other = sum(c.values()) - c["ok"] - c["located fault"]
        print(f"    {name:<18} {c['ok']:>7,} / {c['located fault']:>7,} / {other:>3}")
    for outcome, shown in sorted(examples.items()):
        print(f"{outcome} (first {len(shown)}; rerun one with --seed {args.seed} --index I):")
        for index, path, names, size, line in shown:
            print(f"  #{index} {path} {'+'.join(names)} ({size:,} bytes): {line}")
    return 1 if any(counts[c] for c in fuzzlib.FAILURES) else 0


if __name__ == "__main__":
    sys.exit(main())
