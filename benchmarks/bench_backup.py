"""Benchmark: backup throughput of `mesh backup` (node/backup.py), against the dump alone.

A PostgreSQL server (tests/_pgimage.py, the real Debian server in a container on the real
Docker Engine) is filled with ROWS rows (about 100 bytes each). Then, each timed:
- raw: the dump alone (`pg_dumpall` run through the Engine's exec, read and thrown away): the
  ceiling, since a backup cannot read faster than the dump is written;
- first backup: the dump streamed into `restic backup --stdin` (Debian's restic, a local
  repository), as `mesh backup` does it: bytes read, bytes added, MiB/s, and the ratio to raw;
- second backup of unchanged data: what deduplication leaves to add (should be almost 0);
- restore: `restic dump` streamed into `psql` in the container, as `mesh restore` does it.

Needs scripts/services.sh (Docker) and restic. Cleans up its container and repository.

    python3 benchmarks/bench_backup.py [--rows 1000000] [--repetitions 2]
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from _docker import engine  # type: ignore[import-not-found]  # noqa: E402
from _pgimage import postgres_image  # type: ignore[import-not-found]  # noqa: E402
from pyrsistent import pvector  # noqa: E402

from resolver import BackupMethod  # noqa: E402
from resolver.backups import BackupJob  # noqa: E402

from executors.common.marks import LABEL_CONTAINER, LABEL_INSTANCE, LABEL_MESH  # noqa: E402
from executors.node.backup import backup, restore  # noqa: E402
from executors.node.restic import Repository  # noqa: E402

INSTANCE = "postgres@bench"
MESH = "bench-backup"
DUMP = ["pg_dumpall", "--username", "postgres", "--clean", "--if-exists",
        "--restrict-key=benchkey"]
RESTORE = ["psql", "-X", "-q", "--username", "postgres", "--dbname", "postgres"]


def _psql(api: Any, container: str, sql: str) -> bytes:
    exec_id = api.exec_create(container, ["psql", "-X", "-q", "-U", "postgres", "-c", sql])
    out: bytes = api.exec_start(exec_id)
    assert api.exec_inspect(exec_id)["ExitCode"] == 0, out
    return out


def _mib(count: float) -> str:
    return f"{count / (1 << 20):.1f} MiB"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repetitions", type=int, default=2)
    args = parser.parse_args()
    api = engine()
    name = f"bench-backup-{secrets.token_hex(3)}"
    container = api.create_container(
        postgres_image(api), command=["postgres"], name=name,
        environment=["POSTGRES_PASSWORD=bench"],
        labels={LABEL_MESH: MESH, LABEL_INSTANCE: INSTANCE, LABEL_CONTAINER: "server"})["Id"]
    api.start(container)
    try:
        for _ in range(120):
            exec_id = api.exec_create(container, ["pg_isready", "-U", "postgres", "-h",
                                                  "127.0.0.1"])
            api.exec_start(exec_id)
            if api.exec_inspect(exec_id)["ExitCode"] == 0:
                break
            time.sleep(0.5)
        _psql(api, container, "CREATE TABLE rows (id int PRIMARY KEY, payload text)")
        _psql(api, container, "INSERT INTO rows SELECT g, md5(g::text) || md5((g * 7)::text) "
              f"|| md5((g * 13)::text) FROM generate_series(1, {args.rows}) g")
        with tempfile.TemporaryDirectory(prefix="bench-backup-") as scratch:
            password = Path(scratch) / "password"
            password.write_text(secrets.token_urlsafe(24))
            password.chmod(0o600)
            repository = Repository(f"{scratch}/repo", str(password))
            job = BackupJob(instance=INSTANCE, module="postgres", node="bench",
                            repository=repository.location, mesh=MESH, target_node="shelf",
                            method=BackupMethod(container="server", dump=pvector(DUMP),
                                                restore=pvector(RESTORE)),
                            state=())
            raw = []
            for _ in range(args.repetitions):
                started = time.monotonic()
                exec_id = api.exec_create(container, DUMP)
                size = sum(len(chunk) for chunk in api.exec_start(exec_id, stream=True))
                raw.append((size, time.monotonic() - started))
            raw_rate = statistics.median(s / t for s, t in raw)
            print(f"rows {args.rows:,}; dump {_mib(raw[0][0])}")
            print(f"raw dump (pg_dumpall through the Engine, thrown away): "
                  f"{_mib(raw_rate)}/s")
            first = backup(api, job, repository, (), lambda line: None)
            rate = first.read / first.seconds
            print(f"first backup: read {_mib(first.read)}, added {_mib(first.added)} in "
                  f"{first.seconds:.2f}s: {_mib(rate)}/s ({rate / raw_rate:.0%} of raw)")
            seconds = []
            for _ in range(args.repetitions):
                again = backup(api, job, repository, (), lambda line: None)
                seconds.append(again.seconds)
            print(f"backup of unchanged data: added {again.added:,} bytes "
                  f"({again.added / max(first.added, 1):.2%} of the first) in "
                  f"{statistics.median(seconds):.2f}s: "
                  f"{_mib(again.read / statistics.median(seconds))}/s")
            print(f"repository on disk: {_mib(repository.stored_bytes())} for "
                  f"{1 + args.repetitions} snapshots")
            started = time.monotonic()
            restore(api, job, repository, first.snapshot, (), lambda line: None)
            took = time.monotonic() - started
            print(f"restore (restic dump into psql): {took:.2f}s: {_mib(first.read / took)}/s")
            count = _psql(api, container, "SELECT count(*) FROM rows").split()
            assert str(args.rows).encode() in count, count
    finally:
        api.remove_container(container, force=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
