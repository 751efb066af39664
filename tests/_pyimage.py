"""A python base image for the real Docker Engine, made from this host's interpreter.

No public registry is reachable, so `docker.io/library/python:3.11-slim` cannot be pulled. The
stand-in is a `docker import` of a root filesystem laid out like that image where it matters:
the interpreter at /usr/local/bin/python3 with its standard library under /usr/local/lib, pip,
and only the distributions the control extra of this project needs (found from their installed
metadata: mesh-resolver's requirements and theirs, transitively), the shared libraries all of
it loads, and busybox as /bin/sh (a Dockerfile's RUN needs a shell). Nothing of this project
is in it: a build installs its wheel, as a build from the real base does (pip finds the
dependencies already satisfied, so no package index is asked).

The image is imported once per interpreter and set of distributions and kept
(`mesh-test/python:<fingerprint>`).
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import subprocess
import sys
import sysconfig
import tarfile
from importlib import metadata
from pathlib import Path

import pytest

from _locks import kept_image

REPOSITORY = "mesh-test/python"
BUSYBOX = Path("/bin/busybox")
APPLETS = ["sh", "grep", "echo", "rm", "mkdir", "ls", "cat", "id", "env", "sleep", "test", "["]
TOP = ["mesh-resolver", "pip"]
EXTRAS = {"mesh-resolver": {"control"}}
STDLIB_SKIP = {"test", "idlelib", "tkinter", "turtledemo", "site-packages", "__pycache__",
               "ensurepip", "lib2to3", "pydoc_data"}
VERSION = f"{sys.version_info.major}.{sys.version_info.minor}"


def _name(requirement: str) -> str:
    return re.split(r"[\s;\[<>=!~(]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _wanted(requirement: str, extras: set[str]) -> bool:
    if ";" not in requirement:
        return True
    from packaging.markers import Marker  # pip's dependency, installed with it

    marker = Marker(requirement.split(";", 1)[1])
    return any(marker.evaluate({"extra": extra}) for extra in (extras or {""}))


def distributions(also: tuple[str, ...] = ()) -> list[metadata.Distribution]:
    """The installed distributions the control extra needs, and pip (never mesh-resolver:
    the image gets it from the wheel a build installs), and those `also` names (e.g. `mcp`,
    for the catalogue's tool servers) with theirs."""
    found: dict[str, metadata.Distribution] = {}
    todo = [(name, EXTRAS.get(name, set())) for name in (*TOP, *also)]
    while todo:
        name, extras = todo.pop()
        key = name.lower().replace("_", "-")
        if key in found:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            pytest.skip(f"{name} is not installed (scripts/test.sh installs the control extra)")
        found[key] = dist
        for requirement in dist.requires or ():
            if _wanted(requirement, extras):
                todo.append((_name(requirement), set()))
    found.pop("mesh-resolver", None)
    return sorted(found.values(), key=lambda d: d.metadata["Name"].lower())


def _files(dists) -> list[Path]:
    files = []
    for dist in dists:
        for entry in dist.files or ():
            path = Path(dist.locate_file(entry)).resolve()
            if path.is_file() and "__pycache__" not in path.parts:
                files.append(path)
    return files


def _libraries(paths: list[Path]) -> dict[str, Path]:
    found: dict[str, Path] = {}
    elf = [p for p in paths if p.suffix == ".so" or ".so." in p.name or p.name.startswith("python")]
    for start in range(0, len(elf), 200):
        output = subprocess.run(["ldd", *map(str, elf[start:start + 200])], capture_output=True,
                                text=True).stdout
        for line in output.splitlines():
            if "=>" not in line:
                continue
            target = line.split("=>", 1)[1].split("(")[0].strip()
            if target.startswith("/") and Path(target).exists():
                found[Path(target).name] = Path(target).resolve()
    return found


def _stdlib() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def _site() -> Path:
    return Path(sysconfig.get_paths()["purelib"])


def fingerprint(also: tuple[str, ...] = ()) -> str:
    digest = hashlib.sha256(sys.version.encode() + Path(__file__).read_bytes())
    for dist in distributions(also):
        digest.update(f"{dist.metadata['Name']}=={dist.version}".encode())
    return digest.hexdigest()[:12]


def _rootfs(also: tuple[str, ...] = ()) -> bytes:
    buffer = io.BytesIO()
    added: set[str] = set()
    stdlib, site = _stdlib(), _site()
    target_lib = f"usr/local/lib/python{VERSION}"
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        def directory(name: str, mode: int = 0o755) -> None:
            parts = name.strip("/").split("/")
            for i in range(1, len(parts) + 1):
                sub = "/".join(parts[:i])
                if sub in added:
                    continue
                info = tarfile.TarInfo(sub)
                info.type, info.mode = tarfile.DIRTYPE, (mode if i == len(parts) else 0o755)
                tar.addfile(info)
                added.add(sub)

        def regular(name: str, source: Path, mode: int = 0) -> None:
            name = name.strip("/")
            if name in added:
                return
            directory(os.path.dirname(name))
            data = source.read_bytes()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode or (source.stat().st_mode & 0o755) | 0o644
            tar.addfile(info, io.BytesIO(data))
            added.add(name)

        def symlink(name: str, target: str) -> None:
            name = name.strip("/")
            directory(os.path.dirname(name))
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
            added.add(name)

        for name in ("bin", "etc", "lib/x86_64-linux-gnu", "lib64", "usr/local/bin", "root"):
            directory(name)
        directory("tmp", 0o1777)
        regular("bin/busybox", BUSYBOX, 0o755)
        for applet in APPLETS:
            symlink(f"bin/{applet}", "busybox")
        for name, text in (("etc/passwd", "root:x:0:0:root:/root:/bin/sh\n"),
                           ("etc/group", "root:x:0:\n")):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(text), 0o644
            tar.addfile(info, io.BytesIO(text.encode()))
            added.add(name)
        interpreter = Path(sys.executable).resolve()
        regular(f"usr/local/bin/python{VERSION}", interpreter, 0o755)
        symlink("usr/local/bin/python3", f"python{VERSION}")
        symlink("usr/local/bin/python", f"python{VERSION}")
        copied = [interpreter]
        for path in sorted(stdlib.rglob("*")):
            relative = path.relative_to(stdlib)
            if relative.parts and (relative.parts[0] in STDLIB_SKIP or "__pycache__"
                                   in relative.parts or relative.parts[0].startswith("config-")):
                continue
            if path.is_file() and not path.is_symlink():
                regular(f"{target_lib}/{relative}", path)
                copied.append(path)
        for path in _files(distributions(also)):
            try:
                relative = path.relative_to(site)
            except ValueError:
                continue  # a script in bin/: pip is run as `python3 -m pip`
            regular(f"{target_lib}/site-packages/{relative}", path)
            copied.append(path)
        libraries = _libraries(copied)
        for name, library in sorted(libraries.items()):
            regular(f"lib/x86_64-linux-gnu/{name}", library, 0o755)
        loader = Path("/lib64/ld-linux-x86-64.so.2").resolve()
        regular(f"lib/x86_64-linux-gnu/{loader.name}", loader, 0o755)
        symlink("lib64/ld-linux-x86-64.so.2", f"/lib/x86_64-linux-gnu/{loader.name}")
        symlink("usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu")
    return buffer.getvalue()


def python_image(api, also: tuple[str, ...] = ()) -> str:
    """`mesh-test/python:<fingerprint>` (imported once, then kept), with the distributions
    `also` names installed too."""
    if not BUSYBOX.exists():
        pytest.skip("busybox is not installed (run scripts/services.sh)")
    return kept_image(api, REPOSITORY, fingerprint(also), lambda: _rootfs(also),
                      ["ENV PATH=/usr/local/bin:/bin", "ENV PYTHONHOME=/usr/local",
                       "ENV LANG=C.UTF-8", 'CMD ["python3"]'])
