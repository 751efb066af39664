"""Benchmark: `mesh apply` vs `docker-compose up -d`, 40 containers running, nothing to change.

Both tools manage their own 40 containers of the same workload (same local image, command,
three env values, one port published on 127.0.0.1 each) side by side on one engine; each
repetition times, in turn, one no-op of: `mesh apply DECLARATION ...` as an operator runs it
(the installed `mesh` console script, a fresh process: its quick no-op check answers), the
same with `--no-fast` (the full path: render, one list call, diff), apply_declaration() in
this process (no interpreter start, no imports) and `docker-compose up -d` (Debian's
docker-compose), beside the floor of any Python command: this interpreter starting and
doing nothing (`python3 -c pass`, with its site-packages' .pth files, as `mesh` starts), and
the same without the site module (`python3 -S -c pass`: no .pth files run; what the
difference costs is paid by every Python command here before its first line, `mesh` too,
and depends on what the environment's .pth files import, not on this project). Each
CLI run's --json report is checked for zero operations, and the default run for having been
answered by the quick check. Prints every timing, the best and the median of each, and each
one's ratio to docker-compose against the target (mesh apply >= 20x faster on the median).
The commands run without PYTHONDONTWRITEBYTECODE (which a test environment may set): an
operator's Python writes each module's bytecode on its first run (a regular install compiles
it at install time), so the setting-up runs leave it written and no timed run compiles a
module that changed since the last one. Needs the Docker Engine (scripts/services.sh), docker-compose and the package
installed (`pip install -e .`: the `mesh` command beside this interpreter); cleans up its
containers.

    python3 benchmarks/bench_apply.py [--containers 40] [--repetitions 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Mapping

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

# the tests' image helper (busybox-static via docker import); tests/ is outside mypy's files
import _docker  # type: ignore[import-not-found]  # noqa: E402

from executors.node import docker_engine  # noqa: E402
from executors.node.apply.pipeline import apply_declaration  # noqa: E402
from resolver import Declaration  # noqa: E402
from resolver.documents import structure  # noqa: E402

COMMAND = ["sh", "-c", "trap 'exit 0' TERM; sleep 86400 & wait"]
LABELS = {"mesh": "mesh apply", "full": "mesh apply --no-fast",
          "start": "python3 -c pass (start only)", "bare": "python3 -S -c pass (no site)",
          "library": "apply_declaration (in-process)", "compose": "docker-compose up -d"}
TARGET = 20.0  # mesh apply (the installed command) at least this many times faster, median


def distinct_ports(count: int) -> list[int]:
    """`count` different free ports on 127.0.0.1 (each held open until all are chosen, so the
    kernel cannot hand one out twice)."""
    held = [socket.socket() for _ in range(count)]
    try:
        for sock in held:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in held]
    finally:
        for sock in held:
            sock.close()


def timed(command: list[str], *, cwd: Path, env: Mapping[str, str],
          ) -> tuple[float, subprocess.CompletedProcess[str]]:
    began = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=cwd, env=env)
    elapsed = time.perf_counter() - began
    if done.returncode != 0:
        sys.exit(f"{' '.join(command[:4])}… failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return elapsed, done


def compose_file(project: str, image_tag: str, ports: list[int]) -> str:
    lines = ["version: '2.4'", "services:"]
    for i, port in enumerate(ports):
        lines += [f"  c{i:02d}:",
                  f"    image: {image_tag}",
                  f"    command: {json.dumps(COMMAND)}",
                  "    environment:",
                  f"      SERVICE: c{i:02d}",
                  "      DB_HOST: db.example",
                  "      MODE: production",
                  "    ports:",
                  f"      - 127.0.0.1:{port}:{_docker.HTTP_PORT}",
                  "    restart: unless-stopped"]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--containers", type=int, default=40)
    parser.add_argument("--repetitions", type=int, default=5)
    args = parser.parse_args()
    script = shutil.which("mesh", path=os.path.dirname(sys.executable))
    if script is None:
        sys.exit(f"no `mesh` command beside {sys.executable}: install the package "
                 "(pip install -e .) to time what an operator runs")

    api = docker_engine.connect(_docker.docker_host())
    api.ping()
    image = _docker.env_image(api)
    tag = f"{_docker.ENV_IMAGE_REPOSITORY}:bench"
    api.tag(image, _docker.ENV_IMAGE_REPOSITORY, "bench")
    mesh = _docker.unique_mesh("b")
    project = f"{mesh}compose"
    n = args.containers
    ports = distinct_ports(2 * n)
    mesh_ports, compose_ports = ports[:n], ports[n:]
    env = {**os.environ}
    env.setdefault("DOCKER_HOST", _docker.docker_host())
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # bytecode written as an operator's runs write it

    with tempfile.TemporaryDirectory(prefix="bench-apply-") as work:
        work_path = Path(work)
        containers = [_docker.container(mesh, f"c{i:02d}", image, command=COMMAND, port=port,
                                        env={"SERVICE": f"c{i:02d}", "DB_HOST": "db.example",
                                             "MODE": "production"})
                      for i, port in enumerate(mesh_ports)]
        declaration = _docker.write_declaration(work_path / "node.json",
                                                _docker.declaration(mesh, 1, containers))
        (work_path / "docker-compose.yml").write_text(compose_file(project, tag, compose_ports))
        mesh_command = [script, "apply", declaration, "--state-root", str(work_path / "state"),
                        "--json", "--no-firewall"]
        full_command = [*mesh_command, "--no-fast"]
        compose_command = ["docker-compose", "-p", project, "-f",
                           str(work_path / "docker-compose.yml"), "up", "-d"]
        try:
            print(f"setting up: {n} containers through mesh apply, {n} through docker-compose")
            first, _ = timed(mesh_command, cwd=work_path, env=env)
            print(f"  mesh apply (creating {n}): {first:.2f}s")
            first, _ = timed(compose_command, cwd=work_path, env=env)
            print(f"  docker-compose up -d (creating {n}): {first:.2f}s")
            decl = structure(json.loads(Path(declaration).read_text()), Declaration)
            commands = {"mesh": mesh_command, "full": full_command}
            times: dict[str, list[float]] = {
                key: [] for key in (*commands, "start", "bare", "library", "compose")}
            print(f"  (mesh apply = `{script} apply …`, the installed command, in a fresh "
                  "process, answered by the quick no-op check; --no-fast = the same, full path; "
                  "library = apply_declaration() in this process, i.e. render + one list call "
                  "+ diff, no interpreter start or imports)")
            for repetition in range(1, args.repetitions + 1):
                for key, command in commands.items():
                    elapsed, done = timed(command, cwd=work_path, env=env)
                    operations = len(json.loads(done.stdout)["ops"])
                    if operations:
                        sys.exit(f"{key} wanted {operations} operation(s) on a converged node")
                    if (key == "full") == ("no-op check:" in done.stderr):
                        sys.exit(f"{key}: the quick no-op check "
                                 f"{'answered' if key == 'full' else 'did not answer'}:\n"
                                 f"{done.stderr[-2000:]}")
                    times[key].append(elapsed)
                elapsed, done = timed([sys.executable, "-c", "pass"], cwd=work_path, env=env)
                times["start"].append(elapsed)
                elapsed, done = timed([sys.executable, "-S", "-c", "pass"], cwd=work_path,
                                      env=env)
                times["bare"].append(elapsed)
                began = time.perf_counter()
                report = apply_declaration(decl, api=api, state_root=work_path / "state")
                times["library"].append(time.perf_counter() - began)
                if report.ops:
                    sys.exit("apply_declaration wanted operations on a converged node")
                elapsed, done = timed(compose_command, cwd=work_path, env=env)
                times["compose"].append(elapsed)
                print(f"  repetition {repetition}: "
                      + "   ".join(f"{LABELS[key]} {values[-1] * 1000:5.0f} ms"
                                   for key, values in times.items()))
            best = {key: min(values) for key, values in times.items()}
            median = {key: statistics.median(values) for key, values in times.items()}
            print(f"\n{n} containers running, nothing to change, {args.repetitions} "
                  "repetitions (best / median; ratio = docker-compose's time over each):")
            print(f"  {LABELS['compose']:32} {best['compose'] * 1000:6.0f} / "
                  f"{median['compose'] * 1000:6.0f} ms")
            for key in (k for k in times if k != "compose"):
                print(f"  {LABELS[key]:32} {best[key] * 1000:6.0f} / {median[key] * 1000:6.0f} ms"
                      f"   {best['compose'] / best[key]:5.1f}x / "
                      f"{median['compose'] / median[key]:5.1f}x faster than docker-compose")
            print(f"  of mesh apply's median: python3's start {median['start'] * 1000:.0f} ms "
                  f"(the site module's .pth files {1000 * (median['start'] - median['bare']):.0f}"
                  f" ms of it), the rest {1000 * (median['mesh'] - median['start']):.0f} ms "
                  "(its imports and its check, less the interpreter's teardown it skips)")
            ratio = median["compose"] / median["mesh"]
            print(f"  target: mesh apply >= {TARGET:.0f}x faster than docker-compose up -d "
                  f"(median): {ratio:.1f}x, {'met' if ratio >= TARGET else 'NOT met'}")
        finally:
            subprocess.run(["docker-compose", "-p", project, "-f",
                            str(work_path / "docker-compose.yml"), "down", "-t", "1"],
                           capture_output=True, cwd=work_path, env=env)
            _docker.cleanup(api, mesh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
