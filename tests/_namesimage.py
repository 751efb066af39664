"""A local image for the web-names tests, built from Debian's packages with no base image pull.

`apt-get download caddy dnsmasq-base` (the package mirror), `dpkg-deb -x`, then the binaries
with the shared libraries `ldd` lists, the static busybox (`sh`, `httpd`, `nslookup`…) and the
catalogue's own `mesh-caddy` script, in one root filesystem for `docker import`: the ingress,
the name server and the web apps all run it. Built once per test run (cached by process id).
"""

from __future__ import annotations

import atexit
import io
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("caddy", "dnsmasq-base")
BINARIES = ("usr/bin/caddy", "usr/sbin/dnsmasq")
APPLETS = ("sh", "httpd", "sleep", "cat", "echo", "mkdir", "nslookup", "wget", "ls")
_CACHE = Path(tempfile.gettempdir()) / f"mesh-names-image-{os.getpid()}"
atexit.register(shutil.rmtree, _CACHE, True)  # the cache lives as long as the test run


def unavailable() -> Optional[str]:
    """Why the image cannot be built here, or None."""
    for tool in ("apt-get", "dpkg-deb", "ldd", "busybox", "docker"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    return None


def _libraries(binary: Path) -> list[str]:
    """The shared libraries `ldd` lists for `binary` (host paths), the loader included."""
    listed = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=False)
    found: list[str] = []
    for line in listed.stdout.splitlines():
        parts = line.split()
        path = parts[2] if "=>" in parts and len(parts) > 2 else parts[0]
        if path.startswith("/"):
            found.append(path)
    return found


def rootfs_tar() -> Path:
    """The image's root filesystem as a tar (built once per process)."""
    tar_path = _CACHE / "rootfs.tar"
    if tar_path.exists():
        return tar_path
    _CACHE.mkdir(parents=True, exist_ok=True)
    debs = _CACHE / "debs"
    debs.mkdir(exist_ok=True)
    subprocess.run(["apt-get", "download", *PACKAGES], cwd=debs, check=True,
                   capture_output=True)
    tree = _CACHE / "tree"
    for deb in sorted(debs.glob("*.deb")):
        subprocess.run(["dpkg-deb", "-x", str(deb), str(tree)], check=True)
    busybox = shutil.which("busybox") or "/bin/busybox"
    building = tar_path.with_suffix(".part")
    with tarfile.open(building, "w") as tar:
        for directory in ("tmp", "www", "etc", "usr/local/bin", "run"):
            info = tarfile.TarInfo(directory)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if directory == "tmp" else 0o755
            tar.addfile(info)
        tar.add(busybox, arcname="bin/busybox")
        for applet in APPLETS:
            link = tarfile.TarInfo(f"bin/{applet}")
            link.type, link.linkname = tarfile.SYMTYPE, "/bin/busybox"
            tar.addfile(link)
        libraries: set[str] = set()
        for binary in BINARIES:
            tar.add(str(tree / binary), arcname=binary)
            libraries.update(_libraries(tree / binary))
        for library in sorted(libraries):
            tar.add(os.path.realpath(library), arcname=library.lstrip("/"))
        tar.add(str(REPO / "catalogue" / "caddy" / "image" / "mesh-caddy"),
                arcname="usr/local/bin/mesh-caddy")
        for name, text in (("etc/passwd", "root:x:0:0:root:/root:/bin/sh\n"),
                           ("etc/group", "root:x:0:\n")):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    building.rename(tar_path)
    return tar_path
