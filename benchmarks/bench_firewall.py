"""Benchmark: apply 5,000 (port, source) pairs, against `nft -f` loading the same pairs.

Runs itself inside a fresh network namespace (`unshare -n`), never against the host's
ruleset. For each shape of 5,000 pairs (1,000 ports x 5 sources, 250 x 20, 50 x 100) and in
the same run, round by round so both see the same machine:

- raw: `nft -f` loading the same pairs as one concatenated set (`ipv4_addr . inet_service`,
  no interval flag) into a table of its own: the floor any firewall of these pairs pays;
- first apply: `apply_firewall` on a node without our table: render, observe, read the script
  back (every line, the ssh floor), the dry-run check with the kernel, one transaction, and
  the read back of the running table's digest, and the digest recorded on disk;
- the ratio first apply / raw (target: at most 2), an apply after a change (one source moved
  on every port), and a second apply with nothing to change (target: no transaction).

Figures are wall clock, best and median of the rounds, and CPU time (the process's, kernel
work on its behalf included; for `nft -f` the child's), which other load on this shared
machine does not inflate. Ratios are given for each. The wall clock of an apply also holds
two waits no CPU figure shows: the dry-run check ends in an RCU grace period (the kernel's
abort path waits for one), and the digest is fsynced to disk. Breakdown lines show where a
first apply's time goes.

    python3 benchmarks/bench_firewall.py [--rounds N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, ParamSpec, TypeVar

REPO = Path(__file__).resolve().parent.parent
MARKER = "MESH_BENCH_FIREWALL_IN_NETNS"

if os.environ.get(MARKER) != "1":
    env = dict(os.environ, **{MARKER: "1"})
    sys.exit(subprocess.call(["unshare", "-n", sys.executable, __file__, *sys.argv[1:]], env=env))

sys.path.insert(0, str(REPO))

from pyrsistent import pvector  # noqa: E402

from executors.node.firewall import executor as fw  # noqa: E402
from executors.node.firewall.readback import keeps_ssh_floor, read_back  # noqa: E402
from executors.node.firewall.render import render  # noqa: E402
from resolver import FirewallAllow, FirewallFloor, FirewallIntent  # noqa: E402

PAIRS = 5000
SHAPES = ((1000, 5), (250, 20), (50, 100))
TARGET = 2.0

P = ParamSpec("P")
T = TypeVar("T")


def sources(count: int, offset: int = 0) -> list[str]:
    return [f"10.{78 + (i + offset) // 65536}.{(i + offset) // 256 % 256}.{(i + offset) % 256}"
            for i in range(count)]


def pairs(ports: int, per_port: int, shift: int = 0) -> list[tuple[str, int]]:
    return [(source, 10000 + p) for p in range(ports) for source in sources(per_port, p + shift)]


def intent(ports: int, per_port: int, shift: int = 0) -> FirewallIntent:
    allow = [FirewallAllow(10000 + p, "tcp", pvector(sources(per_port, p + shift)),
                           f"provider{p}@bench for consumers") for p in range(ports)]
    return FirewallIntent(
        address="10.77.0.1", allow=pvector(allow),
        floors=pvector([FirewallFloor(22, "tcp", pvector(), "ssh")]),
        mesh_sources=pvector(sources(3)),
    )


def raw_script(ports: int, per_port: int) -> str:
    elements = ", ".join(f"{a} . {p}" for a, p in pairs(ports, per_port))
    return ("table inet bench {\n  set pairs {\n    type ipv4_addr . inet_service\n"
            f"    elements = {{ {elements} }}\n  }}\n}}\n")


def timed(function: Callable[P, T], *args: P.args, **kw: P.kwargs) -> tuple[T, float]:
    started = time.perf_counter()
    result = function(*args, **kw)
    return result, time.perf_counter() - started


def ms(values: list[float]) -> str:
    return f"{min(values) * 1000:7.1f} ms (median {statistics.median(values) * 1000:6.1f})"


def run_nft(script: Path) -> tuple[float, float]:
    """(wall, CPU) seconds of `nft -f script`."""
    started = time.perf_counter()
    child = subprocess.Popen(["nft", "-f", str(script)], stderr=subprocess.PIPE)
    assert child.stderr is not None  # stderr=PIPE
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - started
    error = child.stderr.read().decode()
    child.stderr.close()
    child.returncode = os.waitstatus_to_exitcode(status)
    assert child.returncode == 0, error
    return wall, usage.ru_utime + usage.ru_stime


def apply_timed(intent_: FirewallIntent, state: str, nft: fw.Nftables,
                ) -> tuple[fw.FirewallReport, float, float]:
    """(report, wall, CPU) of one apply_firewall."""
    cpu, started = time.process_time(), time.perf_counter()
    report = fw.apply_firewall(intent_, state, nft=nft)
    return report, time.perf_counter() - started, time.process_time() - cpu


def run_shape(ports: int, per_port: int, rounds: int, nft: fw.Nftables, scratch: Path,
              ) -> tuple[float, float, float]:
    script = scratch / f"raw-{ports}x{per_port}.nft"
    script.write_text(raw_script(ports, per_port))
    wanted, moved = intent(ports, per_port), intent(ports, per_port, shift=1)
    rendered = render(wanted)
    back = read_back(rendered.text)
    assert len(back.input) == PAIRS + 1, len(back.input)  # the pairs and the ssh floor
    assert {(p, "tcp", a) for a, p in pairs(ports, per_port)} <= back.forward
    raw: list[float] = []
    raw_cpu: list[float] = []
    firsts: list[float] = []
    first_cpu: list[float] = []
    changes: list[float] = []
    seconds: list[float] = []
    parts: dict[str, list[float]] = {"render": [], "read back (ssh floor)": [], "dry-run check": [],
                   "commit": [], "read back (running digest)": []}
    for _ in range(rounds):
        nft.cmd("delete table inet bench")  # (fails harmlessly when there is none)
        wall, cpu = run_nft(script)
        raw.append(wall)
        raw_cpu.append(cpu)
        nft.cmd("delete table inet bench")
        with tempfile.TemporaryDirectory(dir=scratch) as state:
            nft.cmd("delete table inet mesh")  # a node without our table: a first apply
            first, wall, cpu = apply_timed(wanted, state, nft)
            assert first.ok and first.transactions == 1, first.lines()
            firsts.append(wall)
            first_cpu.append(cpu)
            second, wall, _ = apply_timed(wanted, state, nft)
            assert second.ok and second.transactions == 0 and not second.steps, second.lines()
            seconds.append(wall)
            changed, wall, _ = apply_timed(moved, state, nft)
            assert changed.ok and changed.transactions == 1, changed.lines()
            changes.append(wall)
        # where a first apply's time goes, step by step, on a node without our table
        nft.cmd("delete table inet mesh")
        again, took = timed(render, wanted)
        parts["render"].append(took)
        parts["read back (ssh floor)"].append(
            timed(keeps_ssh_floor, again.text, again.ssh_triples)[1])
        previous = nft.set_dry_run(True)
        parts["dry-run check"].append(timed(fw._run_document, nft, again.text)[1])
        nft.set_dry_run(previous)
        parts["commit"].append(timed(fw._run_document, nft, again.text)[1])
        parts["read back (running digest)"].append(timed(fw._running_table, nft)[1])
    lines = [line for line in rendered.text.splitlines() if line.startswith("add rule")]
    ratio = min(firsts) / min(raw)
    median_ratio = statistics.median(firsts) / statistics.median(raw)
    cpu_ratio = min(first_cpu) / min(raw_cpu)
    print(f"{ports:>5} ports x {per_port:>3} sources = {ports * per_port} pairs "
          f"({len(lines)} rules, {len(rendered.text) // 1024} KiB script)")
    print(f"    nft -f, one concatenated set   {ms(raw)}   CPU {min(raw_cpu) * 1000:5.1f} ms")
    print(f"    first apply                    {ms(firsts)}   CPU {min(first_cpu) * 1000:5.1f} ms")
    print(f"      ratio: best {ratio:4.2f}, median {median_ratio:4.2f}, CPU {cpu_ratio:4.2f} "
          f"(target <= {TARGET:.0f})")
    for name, values in parts.items():
        print(f"      {name:<28} {ms(values)}")
    print(f"    apply after a change           {ms(changes)}   ratio "
          f"{min(changes) / min(raw):4.2f}")
    print(f"    second apply, no change        {ms(seconds)}   (transactions: 0)")
    return ratio, median_ratio, cpu_ratio


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    print(f"firewall benchmark: {PAIRS} (port, source) pairs, inside unshare -n "
          f"(pid {os.getpid()}), best of {args.rounds} rounds")
    nft = fw.open_nftables()
    ratios = []
    with tempfile.TemporaryDirectory() as scratch:
        for ports, per_port in SHAPES:
            ratios.append(run_shape(ports, per_port, args.rounds, nft, Path(scratch)))
    best, median, cpu = (max(r[i] for r in ratios) for i in range(3))
    print(f"worst ratio over the shapes: best {best:.2f}, median {median:.2f}, CPU {cpu:.2f} "
          f"(target <= {TARGET:.0f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
