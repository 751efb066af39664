"""Benchmark: from nothing to a fleet, timed as an operator lives it.

Two network namespaces as machines, each with its own dockerd and the mesh firewall on (the
setup of tests/test_init_netns.py, which this runs: the same walk, asserted the same way).
Prints, per repetition and as medians:
- `mesh init` on machine 1 until `mesh status` shows it converged (key, CA, mesh.yaml, pins,
  this project's wheel staged and the control image built into machine 1's Engine, issue,
  apply of the substrate and of control@n1, whose container is the control loop, the agent
  as a service, enrolment);
- `mesh join` on machine 2 until the first app assigned to it runs there (its image pinned,
  published, applied by the joined agent).
The substrate's broker and registry are stubs there and the broker a RabbitMQ on the host
side (no LavinMQ image, no public registry here), and the control image's python base one
made from this host's interpreter: what is timed is the mesh's own work, not pulling upstream
images. Needs root and scripts/services.sh (docker.io, docker-registry,
busybox-static, rabbitmq-server).

    python3 benchmarks/bench_genesis.py [--repetitions 1]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

# the test's machines and walk; tests/ is outside mypy's files
from test_init_netns import machines_in, scenario  # type: ignore[import-not-found]  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repetitions", type=int, default=1)
    args = parser.parse_args()
    inits, joins = [], []
    for repetition in range(1, args.repetitions + 1):
        with tempfile.TemporaryDirectory(prefix="bench-genesis-") as scratch:
            with machines_in(Path(scratch)) as machines:
                init_seconds, app_seconds = scenario(machines)
        inits.append(init_seconds)
        joins.append(app_seconds)
        print(f"run {repetition}: mesh init → converged {init_seconds:6.1f} s; "
              f"mesh join → first app running {app_seconds:6.1f} s", flush=True)
    print(f"median of {len(inits)}: mesh init → converged {statistics.median(inits):.1f} s; "
          f"mesh join → first app running {statistics.median(joins):.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
