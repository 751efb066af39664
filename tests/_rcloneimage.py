"""The backup store's image (catalogue/backup-store) for the real Docker Engine, built from
Debian's own `rclone` package without pulling a base image.

No public image registry is reachable, but the Debian package mirror is: the package is
fetched with `apt-get download rclone` (into a cache directory kept between runs), unpacked
with `dpkg-deb -x`, and its binary put into a root filesystem with busybox (a shell) and the
host's libc it loads; then `docker import`. The catalogue's Dockerfile installs the same
package into debian:bookworm-slim; the command is the module's, not the image's.

The image is imported once per package version, then kept (`mesh-test/rclone:<fingerprint>`).
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

CACHE = Path(os.environ.get("MESH_TEST_DEB_CACHE", "/var/cache/mesh-test/debs"))
BUSYBOX = Path("/bin/busybox")
REPOSITORY = "mesh-test/rclone"
APPLETS = ["sh", "cat", "echo", "ls", "sleep", "id", "env", "test", "["]


def available() -> str:
    """Why the image cannot be made here ("" when it can)."""
    if not BUSYBOX.exists():
        return "busybox is not installed (busybox-static; scripts/services.sh installs it)"
    for tool in ("apt-get", "dpkg-deb", "ldd"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    return ""


def _deb() -> Path:
    with built("rclone-deb"):
        found = sorted(CACHE.glob("rclone_*.deb"))
        if found:
            return found[0]
        CACHE.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="mesh-debs-") as scratch:
            result = subprocess.run(["apt-get", "download", "rclone"], cwd=scratch,
                                    capture_output=True, text=True, timeout=300)
            if result.returncode != 0:
                pytest.skip("cannot download Debian's rclone package (apt-get download): "
                            + result.stderr.strip()[-300:])
            for deb in Path(scratch).glob("*.deb"):
                shutil.move(str(deb), CACHE / deb.name)
        return sorted(CACHE.glob("rclone_*.deb"))[0]


def _rootfs(deb: Path) -> bytes:
    with tempfile.TemporaryDirectory(prefix="mesh-rclone-") as scratch:
        subprocess.run(["dpkg-deb", "-x", str(deb), scratch], check=True)
        binary = Path(scratch) / "usr" / "bin" / "rclone"
        loader = Path("/lib64/ld-linux-x86-64.so.2").resolve()
        libraries: dict[str, Path] = {}
        ldd = subprocess.run(["ldd", str(binary)], capture_output=True, text=True).stdout
        for line in ldd.splitlines():
            for part in line.split():
                if part.startswith("/") and ".so" in part and "ld-linux" not in part:
                    libraries[Path(part).name] = Path(part)
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            def add(name: str, data: bytes = b"", mode: int = 0o755, kind: bytes = tarfile.REGTYPE,
                    link: str = "") -> None:
                info = tarfile.TarInfo(name)
                info.type, info.mode, info.linkname = kind, mode, link
                info.size = len(data) if kind == tarfile.REGTYPE else 0
                tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)

            for directory, mode in (("bin", 0o755), ("usr", 0o755), ("usr/bin", 0o755),
                                    ("lib", 0o755), ("lib/x86_64-linux-gnu", 0o755),
                                    ("lib64", 0o755), ("etc", 0o755), ("tmp", 0o1777),
                                    ("root", 0o700), ("var", 0o755), ("var/lib", 0o755)):
                add(directory, mode=mode, kind=tarfile.DIRTYPE)
            add("bin/busybox", BUSYBOX.read_bytes())
            for applet in APPLETS:
                add(f"bin/{applet}", kind=tarfile.SYMTYPE, link="busybox")
            add("usr/bin/rclone", binary.read_bytes())
            add("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n", 0o644)
            add("etc/group", b"root:x:0:\n", 0o644)
            for name, library in sorted(libraries.items()):
                add(f"lib/x86_64-linux-gnu/{name}", library.read_bytes())
            add(f"lib/x86_64-linux-gnu/{loader.name}", loader.read_bytes())
            add("lib64/ld-linux-x86-64.so.2", kind=tarfile.SYMTYPE,
                link=f"/lib/x86_64-linux-gnu/{loader.name}")
        return buffer.getvalue()


def rclone_image(api) -> str:
    """`mesh-test/rclone:<fingerprint>` with Debian's rclone on its PATH (imported once per
    package version, then kept)."""
    why = available()
    if why:
        pytest.skip(why)
    deb = _deb()
    tag = hashlib.sha256(deb.name.encode()).hexdigest()[:12]
    return kept_image(api, REPOSITORY, tag, lambda: _rootfs(deb),
                      ["ENV PATH=/usr/bin:/bin", "ENV HOME=/root", 'CMD ["rclone", "version"]'])
