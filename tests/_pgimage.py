"""A PostgreSQL server image for the real Docker Engine, built from the host's PostgreSQL 15.

No public registry is reachable, so the image is made by `docker import` of a root filesystem
holding the Debian server binaries (`/usr/lib/postgresql/15`, `/usr/share/postgresql/15`), the
shared libraries they load, busybox for a shell, and an entrypoint that behaves like the
official image's in the one way that matters here: `POSTGRES_USER` / `POSTGRES_PASSWORD` (or
`POSTGRES_PASSWORD_FILE`, read as the postgres user) are read only when the data directory is
empty (initdb); a server started on an initialised data
directory keeps whatever password it holds. It listens on every address inside the container
and asks for SCRAM passwords over TCP; the local socket trusts (as the official image does).
A command `postgres -c name=value ...` passes its options to the server, as the official
image's does; Debian's server is built with OpenSSL, so `-c ssl=on` serves TLS.

The image is imported once per PostgreSQL build and kept (`mesh-test/postgres:<fingerprint>`).
"""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from _locks import kept_image

PG_VERSION = "15"
BIN = Path(f"/usr/lib/postgresql/{PG_VERSION}/bin")
LIB = Path(f"/usr/lib/postgresql/{PG_VERSION}/lib")
SHARE = Path(f"/usr/share/postgresql/{PG_VERSION}")
ZONEINFO = Path("/usr/share/zoneinfo")
BUSYBOX = Path("/bin/busybox")
UID = 999  # the catalogue's postgres module owns its state as 999:999, like the official image
REPOSITORY = "mesh-test/postgres"
TOOLS = ["postgres", "initdb", "pg_ctl", "pg_isready", "psql", "pg_dump", "pg_dumpall"]
APPLETS = ["sh", "su", "cat", "printf", "echo", "rm", "mkdir", "ls", "id", "env", "sleep",
           "test", "[", "sha256sum", "cut", "grep"]  # the last three: the catalogue's dump command

ENTRYPOINT = b"""#!/bin/sh
# like the official image: initialise only an empty data directory, from the environment
set -e
# like the official image: a command other than the server's runs as it is (a client of the
# same image: psql, sleep)
if [ "$#" -gt 0 ] && [ "$1" != postgres ]; then exec "$@"; fi
: "${PGDATA:=/var/lib/postgresql/data}"
: "${POSTGRES_USER:=postgres}"
if [ -n "$POSTGRES_PASSWORD" ] && [ -n "$POSTGRES_PASSWORD_FILE" ]; then
    echo "both POSTGRES_PASSWORD and POSTGRES_PASSWORD_FILE are set (but are exclusive)" >&2
    exit 1
fi
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    if [ -n "$POSTGRES_PASSWORD_FILE" ]; then
        # read as the server's user, as the official image's re-executed entrypoint does; the
        # value stays in this shell, never exported to a process
        POSTGRES_PASSWORD="$(su postgres -s /bin/sh -c "cat '$POSTGRES_PASSWORD_FILE'")" || {
            echo "cannot read $POSTGRES_PASSWORD_FILE as postgres" >&2; exit 1; }
    fi
    if [ -z "$POSTGRES_PASSWORD" ]; then echo "POSTGRES_PASSWORD is not set" >&2; exit 1; fi
    printf '%s' "$POSTGRES_PASSWORD" > /tmp/pwfile
    chown postgres /tmp/pwfile
    chmod 0600 /tmp/pwfile
    su postgres -s /bin/sh -c "initdb -D '$PGDATA' -U '$POSTGRES_USER' --pwfile=/tmp/pwfile \
        --auth-local=trust --auth-host=scram-sha-256 --encoding=UTF8 --locale=C >/tmp/initdb.log"
    rm -f /tmp/pwfile
    echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
    echo "listen_addresses = '*'" >> "$PGDATA/postgresql.conf"
    echo "initialised $PGDATA for $POSTGRES_USER"
fi
# like the official image: `postgres -c name=value ...` as the command passes its options on
# (the catalogue's module turns TLS on this way); the options have no spaces
if [ "$1" = postgres ]; then shift; fi
exec su postgres -s /bin/sh -c "exec postgres -D '$PGDATA' $*"
"""


def _libraries(paths: list[Path]) -> dict[str, Path]:
    """Every shared library the given ELF files load (ldd): the name it is loaded by → path."""
    found: dict[str, Path] = {}
    output = subprocess.run(["ldd", *map(str, paths)], capture_output=True, text=True).stdout
    for line in output.splitlines():
        if "=>" not in line and "ld-linux" not in line:
            continue  # a file's own name heading its list
        for part in line.split():
            if part.startswith("/") and ".so" in part and Path(part).exists():
                found[Path(part).name] = Path(part)
    return found


def _files() -> list[Path]:
    lib = [p for p in LIB.glob("*.so") if not p.name.startswith("llvmjit")]
    bins = [BIN / t for t in TOOLS]
    return bins + lib


def available() -> bool:
    return all((BIN / t).exists() for t in TOOLS) and SHARE.is_dir() and BUSYBOX.exists()


def fingerprint() -> str:
    digest = hashlib.sha256(ENTRYPOINT)
    for path in sorted(_files()):
        stat = path.stat()
        digest.update(f"{path}:{stat.st_size}:{int(stat.st_mtime)}".encode())
    return digest.hexdigest()[:12]


def _rootfs() -> bytes:
    buffer = io.BytesIO()
    added: set[str] = set()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        def directory(name: str, mode: int = 0o755, uid: int = 0) -> None:
            name = name.strip("/")
            parts = name.split("/")
            for i in range(1, len(parts) + 1):
                sub = "/".join(parts[:i])
                if sub in added:
                    continue
                info = tarfile.TarInfo(sub)
                info.type = tarfile.DIRTYPE
                info.mode, info.uid, info.gid = (mode, uid, uid) if i == len(parts) else (0o755, 0, 0)
                tar.addfile(info)
                added.add(sub)

        def regular(name: str, data: bytes, mode: int = 0o755) -> None:
            name = name.strip("/")
            if name in added:
                return
            directory(os.path.dirname(name))
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
            added.add(name)

        def symlink(name: str, target: str) -> None:
            name = name.strip("/")
            directory(os.path.dirname(name))
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
            added.add(name)

        def tree(root: Path, skip=()) -> None:
            for path in sorted(root.rglob("*")):
                if any(part in skip for part in path.relative_to(root).parts):
                    continue
                if path.is_symlink():
                    symlink(str(path), os.readlink(path))
                elif path.is_dir():
                    directory(str(path))
                elif path.is_file():
                    regular(str(path), path.read_bytes(), path.stat().st_mode & 0o777)

        for name in ("bin", "etc", "lib/x86_64-linux-gnu", "lib64"):
            directory(name)
        directory("tmp", 0o1777)
        directory("var/run/postgresql", 0o2775, UID)
        directory("var/lib/postgresql", 0o755, UID)
        regular("bin/busybox", BUSYBOX.read_bytes())
        for applet in APPLETS:
            symlink(f"bin/{applet}", "busybox")
        regular("etc/passwd", f"root:x:0:0:root:/:/bin/sh\n"
                f"postgres:x:{UID}:{UID}:postgres:/var/lib/postgresql:/bin/sh\n".encode(), 0o644)
        regular("etc/group", f"root:x:0:\npostgres:x:{UID}:\n".encode(), 0o644)
        regular("docker-entrypoint.sh", ENTRYPOINT)
        tree(BIN)
        tree(LIB, skip=("bitcode",))
        tree(SHARE, skip=("man",))
        if ZONEINFO.is_dir():
            tree(ZONEINFO)
        for name, library in sorted(_libraries(_files()).items()):
            regular(f"lib/x86_64-linux-gnu/{name}", library.read_bytes())
        loader = Path("/lib64/ld-linux-x86-64.so.2").resolve()
        regular(f"lib/x86_64-linux-gnu/{loader.name}", loader.read_bytes())
        symlink("lib64/ld-linux-x86-64.so.2", f"/lib/x86_64-linux-gnu/{loader.name}")
        symlink("usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu")
    return buffer.getvalue()


def postgres_image(api) -> str:
    """`mesh-test/postgres:<fingerprint>` (imported once per PostgreSQL build, then kept)."""
    if not available():
        pytest.skip("PostgreSQL 15 server binaries are not installed (run scripts/services.sh)")
    return kept_image(api, REPOSITORY, fingerprint(), _rootfs,
                      ['ENTRYPOINT ["/docker-entrypoint.sh"]',
                       f"ENV PATH=/usr/lib/postgresql/{PG_VERSION}/bin:/bin",
                       "ENV PGDATA=/var/lib/postgresql/data"])
