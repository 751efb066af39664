"""Benchmark: render and apply 5,000 (port, source) pairs in one nftables transaction.

Runs itself inside a fresh network namespace (`unshare -n`), never against the host's
ruleset. Prints, for a few shapes of 5,000 pairs: the render time, the first apply (observe,
diff, dry-run check, one transaction, read back), and a second apply with nothing to change
(target: no transaction at all). Targets: apply < 0.2 s.

    python3 benchmarks/bench_firewall.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MARKER = "MESH_BENCH_FIREWALL_IN_NETNS"

if os.environ.get(MARKER) != "1":
    env = dict(os.environ, **{MARKER: "1"})
    sys.exit(subprocess.call(["unshare", "-n", sys.executable, __file__, *sys.argv[1:]], env=env))

sys.path.insert(0, str(REPO))

from pyrsistent import pvector  # noqa: E402

from executors.firewall import apply_firewall, open_nftables  # noqa: E402
from executors.firewall_render import read_back, render  # noqa: E402
from resolver import FirewallAllow, FirewallFloor, FirewallIntent  # noqa: E402

PAIRS = 5000


def sources(count: int, offset: int = 0) -> list:
    return [f"10.{78 + (i + offset) // 65536}.{(i + offset) // 256 % 256}.{(i + offset) % 256}"
            for i in range(count)]


def intent(ports: int, per_port: int, shift: int = 0) -> FirewallIntent:
    allow = [FirewallAllow(10000 + p, "tcp", pvector(sources(per_port, p + shift)),
                           f"provider{p}@bench for consumers") for p in range(ports)]
    return FirewallIntent(
        address="10.77.0.1", allow=pvector(allow),
        floors=pvector([FirewallFloor(22, "tcp", pvector(), "ssh"),
                        FirewallFloor(5672, "tcp", pvector(sources(3)), "broker enrolment")]),
        mesh_sources=pvector(sources(3)),
    )


def timed(function, *args, **kw):
    started = time.perf_counter()
    result = function(*args, **kw)
    return result, time.perf_counter() - started


def run_shape(ports: int, per_port: int, rounds: int = 3) -> None:
    nft = open_nftables()
    with tempfile.TemporaryDirectory() as state:
        firsts, seconds, changes, renders = [], [], [], []
        for round_ in range(rounds):
            nft.cmd("delete table inet mesh")  # start from nothing each round (error if absent)
            wanted = intent(ports, per_port)
            rendered, render_time = timed(render, wanted)
            renders.append(render_time)
            assert len(read_back(rendered.document).input) == PAIRS + 1 + 3
            first, first_time = timed(apply_firewall, wanted, state, nft=nft)
            assert first.ok and first.transactions == 1, first.lines()
            firsts.append(first_time)
            second, second_time = timed(apply_firewall, wanted, state, nft=nft)
            assert second.ok and second.transactions == 0 and not second.steps, second.lines()
            seconds.append(second_time)
            changed, change_time = timed(apply_firewall, intent(ports, per_port, shift=1), state,
                                         nft=nft)
            assert changed.ok and changed.transactions == 1
            changes.append(change_time)
        commands = len(rendered.document["nftables"])
        print(f"{ports:>5} ports x {per_port:>4} sources = {ports * per_port} pairs "
              f"({commands} commands in the transaction)")
        print(f"    render                      {min(renders) * 1000:8.1f} ms")
        print(f"    first apply (1 transaction) {min(firsts) * 1000:8.1f} ms   "
              f"(includes render, observe, dry-run check, commit, read back)")
        print(f"    apply after a change        {min(changes) * 1000:8.1f} ms")
        print(f"    second apply, no change     {min(seconds) * 1000:8.1f} ms   "
              f"(transactions: 0)")
        print(f"    best of {rounds}; target < 200 ms per apply: "
              f"{'met' if max(min(firsts), min(changes)) < 0.2 else 'NOT met'}")


def main() -> int:
    print(f"firewall benchmark: {PAIRS} (port, source) pairs, inside unshare -n "
          f"(pid {os.getpid()})")
    for ports, per_port in ((250, 20), (50, 100), (1000, 5)):
        run_shape(ports, per_port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
