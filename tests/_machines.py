"""Machines for the namespace tests: each a network namespace with its own dockerd and a plain
registry on its loopback standing in for the upstream registry an operator's network offers
(no public registry is reachable here), and the `mesh` command run on the host or in one of
them.

Invariants:
- `machines` starts every node's dockerd and its upstream registry before it yields, and stops
  every dockerd however the body ends (the registries are the topology's processes: they end
  with it).
- `mesh_host` and `mesh_in` return the command's output and fail the test, with that output,
  on an exit code the caller did not allow.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import _netns

REPO = Path(__file__).resolve().parent.parent
UPSTREAM = "127.0.0.1:5000"  # each machine's loopback registry (docker.io's stand-in)


def mesh_host(*args: str) -> str:
    """`mesh ARGS` on the host (the control side); exit 0 or 1 (a plan with problems)."""
    result = subprocess.run([sys.executable, "-m", "executors.cli", *args], cwd=str(REPO),
                            env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True,
                            text=True, timeout=600)
    output = result.stdout + result.stderr
    assert result.returncode in (0, 1), f"mesh {' '.join(args)}:\n{output}"
    return output


def mesh_in(topology: Any, node: str, *args: str, codes: tuple[int, ...] = (0,)) -> str:
    """`mesh ARGS` inside machine `node`; its exit code one of `codes`."""
    result: subprocess.CompletedProcess[str] = topology.mesh(node, *args)
    output = result.stdout + result.stderr
    assert result.returncode in codes, f"mesh {' '.join(args)} in {node}:\n{output}"
    return output


def upstream_registry(topology: Any, node: str, storage: Path, log: Path) -> "subprocess.Popen[bytes]":
    """A plain registry on `node`'s loopback (UPSTREAM) over `storage`, answering when this
    returns; the topology stops it."""
    config = storage.parent / f"upstream-{node}.yml"
    config.write_text(f"version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n"
                      f"    rootdirectory: {storage}\nhttp:\n  addr: {UPSTREAM}\n")
    with open(log, "ab") as out:
        process = subprocess.Popen(topology.argv(node, shutil.which("docker-registry"), "serve",
                                                 str(config)),
                                   stdout=out, stderr=subprocess.STDOUT)
    topology._processes.append(process)
    code = "import socket; socket.create_connection(('127.0.0.1', 5000), 1)"
    deadline = time.monotonic() + 20
    while topology.python(node, code, check=False).returncode != 0:
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.2)
    return process


@contextlib.contextmanager
def machines(topology: Any, tmp: Path, nodes: Iterable[str],
             dockerd: Callable[[Any, str], Any] = _netns.NamespacedDockerd,
             timeout: float = 120) -> Iterator[dict[str, Any]]:
    """node → its started dockerd (made by `dockerd(topology, node)`), each machine with its
    upstream registry over one shared `<tmp>/upstream` storage."""
    daemons = {node: dockerd(topology, node) for node in nodes}
    try:
        for daemon in daemons.values():
            daemon.start(timeout=timeout)
        storage = tmp / "upstream"
        storage.mkdir()
        for node in daemons:
            upstream_registry(topology, node, storage, tmp / f"upstream-{node}.log")
        yield daemons
    finally:
        for daemon in daemons.values():
            daemon.stop()
