"""Benchmark: the throughput of a move's state copy (node/state_move) against a raw copy
between the same two network namespaces.

Two namespaces on one bridge (tests/_netns.py). A source tree of SIZE MiB (one large file,
plus many small files in the shape of a PostgreSQL data directory) is copied, each timed:
- raw: `tar -cf - | socat -u STDIN TCP-LISTEN` in n1, `socat -u TCP STDOUT | tar -xf -` in
  n2: no encryption, no authentication, no verification (the ceiling);
- mesh: the transfer server (`mesh serve-state`'s Server) in n1 and the arriving side's fetch
  (what `mesh apply` does) in n2: mutual TLS 1.3 on both nodes' transfer certificates from
  a mesh CA (signed as `mesh plan --issue` signs them), SHA-256 of every file on both sides,
  staging and the atomic rename.
It prints MiB/s of each and mesh as a percentage of raw (the target is at least 50 %), the
median of the runs, and the CPU seconds each copy cost per GiB (both ends, user + system: the
figure that stays put when other work shares the machine, where the wall-clock rates do not;
the copy is CPU-bound, so its rate on an idle machine follows from it). The mesh figure is
given whole (both processes, start to end, as the raw one is) and for the copy alone (each
end's CPU from the start of its side of the copy: the interpreters' start-up and imports, a
fixed ~0.4 s that `mesh apply` and the agent pay once, are left out, as the wall-clock rate
leaves them out).

Needs root (namespaces), socat and tar. Cleans up its namespaces and trees.

    python3 benchmarks/bench_move.py [--size 256] [--small 2000] [--repetitions 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pyrsistent import pmap

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

import _netns  # type: ignore[import-not-found]  # noqa: E402

from resolver import Mesh, Node  # noqa: E402

from executors.control.ca import ca_pem, init_ca, sign_server  # noqa: E402

PORT = 7470
# both sides: the transfer and the declaration holding the node's transfer files, as
# `mesh plan` declares them (its key a sealed reference; the bench hands its value over)
DECLARE = """
import sys, time
from pathlib import Path
from pyrsistent import pvector
from resolver import Declaration, FileDecl, SecretRef, StateDirDecl, StateTransfer
from executors.node.node_paths import NodePaths
role, node, path, source, target, port, work = sys.argv[1:8]
work = Path(work)
CERT, KEY, CA = "/etc/mesh/transfer/server.crt", "/etc/mesh/transfer/server.key", "/etc/mesh/ca/ca.crt"
t = StateTransfer("db@bench", role, "n1", source, "n2", target, int(port),
                  pvector([StateDirDecl(path, 0, 0, "0700", "db@bench", "data")]),
                  certificate=CERT, key=KEY, ca=CA)
files = pvector(sorted([
    FileDecl(CERT, (work / f"{node}.crt").read_text(), "0644"),
    FileDecl(KEY, "${secret:tls/transfer:" + node + "}", "0600",
             SecretRef(f"tls/transfer:{node}", 1)),
    FileDecl(CA, (work / "ca.crt").read_text(), "0644")]))
d = Declaration(mesh="bench", node=node, address=source if role == "leave" else target,
                serial=1, transfers=pvector([t]), files=files)
paths = NodePaths(work / f"{node}-root", work / f"{node}-files")
"""
SERVE = DECLARE + """
from executors.node.state_move.serve import Server
s = Server(d, paths, None, lambda line: None)
print("ready", flush=True)
cpu = time.process_time()
s.serve()
print(time.process_time() - cpu, flush=True)
s.close()
"""
FETCH = DECLARE + """
from executors.node.state_move.arrive import fetch
started, cpu = time.monotonic(), time.process_time()
fetch(d, t, lambda ref: (work / f"{node}.key").read_text(), paths, lambda line: None,
      wait=10)
print(time.monotonic() - started, time.process_time() - cpu)
"""


def identities(topology: Any, work: Path) -> None:
    """A mesh CA and both nodes' transfer certificates and keys in `work` (`<node>.crt`,
    `<node>.key`, `ca.crt`), n1's also where its apply would write them (its file root)."""
    mesh = Mesh(mesh="bench", nodes=pmap({n: Node(topology.addresses[n]) for n in ("n1", "n2")}))
    ca = init_ca(work / "mesh", mesh)
    (work / "ca.crt").write_text(ca_pem(ca))
    for node in ("n1", "n2"):
        certificate, key = sign_server(ca, mesh, f"transfer:{node}", node, client=True)
        (work / f"{node}.crt").write_text(certificate.pem)
        (work / f"{node}.key").write_text(key)
    written = work / "n1-files" / "etc" / "mesh" / "transfer"
    written.mkdir(parents=True)
    (written / "server.crt").write_text((work / "n1.crt").read_text())
    (written / "server.key").write_text((work / "n1.key").read_text())


def make_tree(root: Path, size_mib: int, small: int) -> int:
    """One file of most of the size, plus `small` files of 8 KiB (a data directory's shape)."""
    (root / "base").mkdir(parents=True)
    big = max(size_mib * 1024 * 1024 - small * 8192, 0)
    with open(root / "base" / "big", "wb") as out:
        left = big
        while left:
            chunk = min(left, 1 << 22)
            out.write(os.urandom(chunk))
            left -= chunk
    for i in range(small):
        (root / "base" / f"{i:06d}").write_bytes(os.urandom(8192))
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def raw_copy(topology: Any, src: Path, dst: Path) -> float:
    dst.mkdir()
    address = topology.addresses["n1"]
    sender = subprocess.Popen(topology.argv("n1", "sh", "-c",
                                            f"tar -C {src} -cf - . | socat -u STDIN "
                                            f"TCP-LISTEN:{PORT + 1},reuseaddr"))
    time.sleep(0.5)
    started = time.monotonic()
    topology.run("n2", "sh", "-c", f"socat -u TCP:{address}:{PORT + 1} STDOUT | tar -C {dst} -xf -")
    seconds = time.monotonic() - started
    sender.wait(30)
    return seconds


def mesh_copy(topology: Any, src: Path, dst: Path, work: Path) -> tuple[float, float]:
    """(wall-clock seconds of the fetch, CPU seconds of the copy on both ends): the CPU each
    end spent from the moment its side of the copy began (the server listening, the fetch
    connecting) to its end, both threads of each; without the interpreters' start-up and
    imports, which `mesh apply` and the agent pay once, not per copy."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    a1, a2 = topology.addresses["n1"], topology.addresses["n2"]
    server = subprocess.Popen(topology.argv("n1", sys.executable, "-c", SERVE, "leave", "n1",
                                            str(src), a1, a2, str(PORT), str(work)),
                              env=env, stdout=subprocess.PIPE, text=True, cwd=str(REPO))
    assert server.stdout is not None and server.stdout.readline().strip() == "ready"
    done = subprocess.run(topology.argv("n2", sys.executable, "-c", FETCH, "arrive", "n2",
                                        str(dst), a1, a2, str(PORT), str(work)),
                          env=env, capture_output=True, text=True, cwd=str(REPO), check=True)
    served, _ = server.communicate(timeout=30)
    wall, fetched = done.stdout.strip().splitlines()[-1].split()
    return float(wall), float(fetched) + float(served.strip().splitlines()[-1])


def cpu_seconds() -> float:
    """User + system seconds of every child waited for so far (both ends of a copy)."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=256, help="MiB in the tree (default 256)")
    parser.add_argument("--small", type=int, default=2000, help="8 KiB files (default 2000)")
    parser.add_argument("--repetitions", type=int, default=3)
    args = parser.parse_args()
    why = _netns.have_tools() or (None if shutil.which("socat") else "socat is not installed")
    if why:
        print(f"bench_move: cannot run: {why}")
        return 2
    with tempfile.TemporaryDirectory(prefix="mesh-bench-move-") as scratch, \
            _netns.Topology("bm", count=2, subnet=f"10.84.{20 + os.getpid() % 200}") as topology:
        work = Path(scratch)
        identities(topology, work)
        src = work / "src"
        total = make_tree(src, args.size, args.small)
        mib = total / (1024 * 1024)
        raw, mesh, raw_cpu, mesh_cpu, copy_cpu = [], [], [], [], []
        for i in range(args.repetitions):
            target = work / f"raw{i}"
            before = cpu_seconds()
            raw.append(raw_copy(topology, src, target))
            raw_cpu.append(cpu_seconds() - before)
            shutil.rmtree(target)
            target = work / f"mesh{i}" / "data"
            target.parent.mkdir()
            before = cpu_seconds()
            wall, copying = mesh_copy(topology, src, target, work)
            mesh.append(wall)
            mesh_cpu.append(cpu_seconds() - before)
            copy_cpu.append(copying)
            shutil.rmtree(target.parent)
            shutil.rmtree(work / "n2-root", ignore_errors=True)
        raw_rate, mesh_rate = mib / statistics.median(raw), mib / statistics.median(mesh)
        print(f"tree: {mib:.1f} MiB, {args.small + 1} files; median of {args.repetitions}")
        print(f"raw  tar | socat | tar      : {raw_rate:8.1f} MiB/s")
        share = 100 * mesh_rate / raw_rate
        print(f"mesh mutual TLS + SHA-256   : {mesh_rate:8.1f} MiB/s "
              f"({share:.0f} % of raw; target >= 50 %: "
              f"{'met' if share >= 50 else 'NOT met'})")
        gib = mib / 1024
        print(f"CPU per GiB (both ends)     : raw {statistics.median(raw_cpu) / gib:.2f} s, "
              f"mesh {statistics.median(mesh_cpu) / gib:.2f} s; load average "
              f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        fixed = statistics.median(mesh_cpu) - statistics.median(copy_cpu)
        print(f"  mesh, the copy alone        : {statistics.median(copy_cpu) / gib:.2f} s "
              f"(the rest, {fixed:.2f} s a copy, is two interpreters' start-up and imports)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
