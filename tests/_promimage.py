"""A Prometheus and node-exporter image for the real Docker Engine, built from Debian's own
packages without pulling a base image.

No public image registry is reachable, but the Debian package mirror is: the packages are
fetched with `apt-get download prometheus prometheus-node-exporter` (into a cache directory
kept between runs), unpacked with `dpkg-deb -x`, and their two Go binaries put into a root
filesystem with busybox (a shell and wget), the host's libc they load, the catalogue's own
Prometheus configuration (catalogue/prometheus/image/prometheus.yml, the file its Dockerfile
copies) and the user `nobody` both images run as; then `docker import`. One image carries
both programs: the modules' commands name which one runs.

The image is imported once per package version and configuration, then kept
(`mesh-test/prometheus:<fingerprint>`).
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

import pytest

from _locks import built, kept_image

REPO = Path(__file__).resolve().parent.parent
CONFIG = REPO / "catalogue" / "prometheus" / "image" / "prometheus.yml"
PACKAGES = ("prometheus", "prometheus-node-exporter")
BINARIES = ("prometheus", "prometheus-node-exporter")
CACHE = Path(os.environ.get("MESH_TEST_DEB_CACHE", "/var/cache/mesh-test/debs"))
BUSYBOX = Path("/bin/busybox")
REPOSITORY = "mesh-test/prometheus"
NOBODY = 65534
APPLETS = ["sh", "cat", "echo", "ls", "sleep", "wget", "id", "env", "test", "["]


def _debs() -> list[Path]:
    """The packages' .deb files in CACHE, downloaded by the first worker that asks."""
    with built("prometheus-debs"):
        found = [next(iter(sorted(CACHE.glob(f"{name}_*.deb"))), None) for name in PACKAGES]
        if all(found):
            return [p for p in found if p is not None]
        CACHE.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="mesh-debs-") as scratch:
            # into a fresh directory first, so a download cut short leaves no partial .deb
            result = subprocess.run(["apt-get", "download", *PACKAGES], cwd=scratch,
                                    capture_output=True, text=True, timeout=300)
            if result.returncode != 0:
                pytest.skip("cannot download Debian's prometheus packages "
                            f"(apt-get download): {result.stderr.strip()[-300:]}")
            for deb in Path(scratch).glob("*.deb"):
                shutil.move(str(deb), CACHE / deb.name)
        return [sorted(CACHE.glob(f"{name}_*.deb"))[0] for name in PACKAGES]


def available() -> str:
    """Why the image cannot be made here ("" when it can)."""
    if not BUSYBOX.exists():
        return "busybox is not installed (busybox-static; scripts/services.sh installs it)"
    for tool in ("apt-get", "dpkg-deb"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    return ""


def _rootfs(debs: list[Path]) -> bytes:
    with tempfile.TemporaryDirectory(prefix="mesh-prom-") as scratch:
        unpacked = Path(scratch)
        for deb in debs:
            subprocess.run(["dpkg-deb", "-x", str(deb), str(unpacked)], check=True)
        binaries = [unpacked / "usr" / "bin" / name for name in BINARIES]
        loader = Path("/lib64/ld-linux-x86-64.so.2").resolve()
        libraries = _libraries(binaries)
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            added: set[str] = set()

            def directory(name: str, mode: int = 0o755, uid: int = 0) -> None:
                parts = name.strip("/").split("/")
                for i in range(1, len(parts) + 1):
                    sub = "/".join(parts[:i])
                    if sub in added:
                        continue
                    info = tarfile.TarInfo(sub)
                    info.type = tarfile.DIRTYPE
                    info.mode, info.uid, info.gid = (mode, uid, uid) if i == len(parts) \
                        else (0o755, 0, 0)
                    tar.addfile(info)
                    added.add(sub)

            def regular(name: str, data: bytes, mode: int = 0o755) -> None:
                name = name.strip("/")
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

            directory("tmp", 0o1777)
            directory("var/lib/prometheus", 0o755, NOBODY)
            directory("host/proc")
            directory("host/sys")
            regular("bin/busybox", BUSYBOX.read_bytes())
            for applet in APPLETS:
                symlink(f"bin/{applet}", "busybox")
            for binary in binaries:
                regular(f"usr/bin/{binary.name}", binary.read_bytes())
            regular("etc/prometheus/prometheus.yml", CONFIG.read_bytes(), 0o644)
            regular("etc/passwd", b"root:x:0:0:root:/:/bin/sh\n"
                    b"nobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n", 0o644)
            regular("etc/group", b"root:x:0:\nnogroup:x:65534:\n", 0o644)
            for name, library in sorted(libraries.items()):
                regular(f"lib/x86_64-linux-gnu/{name}", library.read_bytes())
            regular(f"lib/x86_64-linux-gnu/{loader.name}", loader.read_bytes())
            symlink("lib64/ld-linux-x86-64.so.2", f"/lib/x86_64-linux-gnu/{loader.name}")
        return buffer.getvalue()


def _libraries(paths: list[Path]) -> dict[str, Path]:
    """Every shared library the given ELF files load (ldd): the name it is loaded by → path."""
    found: dict[str, Path] = {}
    output = subprocess.run(["ldd", *map(str, paths)], capture_output=True, text=True).stdout
    for line in output.splitlines():
        for part in line.split():
            if part.startswith("/") and ".so" in part and "ld-linux" not in part \
                    and Path(part).exists():
                found[Path(part).name] = Path(part)
    return found


def prometheus_image(api) -> str:
    """`mesh-test/prometheus:<fingerprint>` with both programs on its PATH, running as nobody
    (imported once per package version and configuration, then kept)."""
    why = available()
    if why:
        pytest.skip(why)
    debs = _debs()
    digest = hashlib.sha256(CONFIG.read_bytes())
    for deb in debs:
        digest.update(deb.name.encode())
    return kept_image(api, REPOSITORY, digest.hexdigest()[:12], lambda: _rootfs(debs),
                      ["ENV PATH=/usr/bin:/bin", f"USER {NOBODY}:{NOBODY}",
                       'CMD ["prometheus", "--config.file=/etc/prometheus/prometheus.yml"]'])
