"""Helpers for tests against the real Docker Engine (started by scripts/services.sh).

- `engine()` connects to $MESH_TEST_DOCKER_HOST (or /var/lib/mesh-test/env, or the local
  socket) and skips the test with a clear reason only when no engine answers.
- `env_image(api)` builds, once per test run, a busybox-static image by `docker import` of a
  small root filesystem: `httpd` serves /cgi-bin/env, which replies with the container's
  environment (to prove binding values arrive and change on rotation). Tests pin it by its
  local image ID (`sha256:…`), since no registry is reachable.
- `unique_mesh()` gives each test its own mesh name; `cleanup(api, mesh)` removes every
  container labelled with it.
"""

from __future__ import annotations

import hashlib
import io
import os
import socket
import tarfile
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from _locks import kept_image, share_engine

BUSYBOX = "/bin/busybox"  # Debian busybox-static
APPLETS = ["sh", "httpd", "env", "sleep", "cat", "echo", "sort", "printf", "true", "false",
           "ls", "id", "nc", "wget", "tail"]
CGI_ENV = b"""#!/bin/sh
printf 'Content-Type: text/plain\\r\\n\\r\\n'
env | sort
"""
HTTP_PORT = 8080
ENV_IMAGE_REPOSITORY = "mesh-test/apply-env"
_IMAGE_ID: dict[str, str] = {}


def docker_host() -> str:
    if os.environ.get("MESH_TEST_DOCKER_HOST"):
        return os.environ["MESH_TEST_DOCKER_HOST"]
    env_file = Path("/var/lib/mesh-test/env")
    if env_file.exists():
        for line in env_file.read_text().splitlines():
            key, _, value = line.partition("=")
            if key == "MESH_TEST_DOCKER_HOST" and value:
                return value
    return "unix:///var/run/docker.sock"


def engine():
    """The host's Engine, shared with the other workers until this test ends (tests/_locks.py)."""
    from executors.node import docker_engine

    share_engine()
    api = docker_engine.connect(docker_host())
    try:
        api.ping()
    except Exception as exc:  # no engine: the one reason to skip
        pytest.skip(f"Docker Engine not running at {docker_host()} ({exc}); "
                    "start it with scripts/services.sh")
    return api


def _rootfs() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        def directory(name, mode=0o755):
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, mode
            tar.addfile(info)

        def regular(name, data: bytes, mode=0o755):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))

        for name in ("bin", "www", "www/cgi-bin", "etc", "data"):
            directory(name)
        directory("tmp", 0o1777)
        regular("bin/busybox", Path(BUSYBOX).read_bytes())
        for applet in APPLETS:
            info = tarfile.TarInfo(f"bin/{applet}")
            info.type, info.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(info)
        regular("www/cgi-bin/env", CGI_ENV)
        regular("www/index.html", b"ok\n", 0o644)
        regular("etc/passwd", b"root:x:0:0:root:/:/bin/sh\n", 0o644)
        regular("etc/group", b"root:x:0:\n", 0o644)
    return buffer.getvalue()


def env_image(api) -> str:
    """The local image ID (`sha256:…`) of the env-echoing busybox image: imported once, tagged
    by its content's fingerprint and kept, so the workers of a parallel run share it."""
    if "id" in _IMAGE_ID:
        return _IMAGE_ID["id"]
    rootfs = _rootfs()
    changes = [f'CMD ["httpd", "-f", "-p", "{HTTP_PORT}", "-h", "/www"]', "ENV PATH=/bin"]
    tag = "f" + hashlib.sha256(rootfs + repr(changes).encode()).hexdigest()[:12]
    reference = kept_image(api, ENV_IMAGE_REPOSITORY, tag, lambda: rootfs, changes)
    _IMAGE_ID["id"] = api.inspect_image(reference)["Id"]
    return _IMAGE_ID["id"]
    from _locks import built

    rootfs = _rootfs()
    changes = [f'CMD ["httpd", "-f", "-p", "{HTTP_PORT}", "-h", "/www"]', "ENV PATH=/bin"]
    tag = "f" + hashlib.sha256(rootfs + repr(changes).encode()).hexdigest()[:12]
    with built(ENV_IMAGE_REPOSITORY):
        try:
            _IMAGE_ID["id"] = api.inspect_image(f"{ENV_IMAGE_REPOSITORY}:{tag}")["Id"]
        except Exception:  # noqa: BLE001 - not imported yet
            api.import_image_from_data(rootfs, repository=ENV_IMAGE_REPOSITORY, tag=tag,
                                       changes=changes)
            _IMAGE_ID["id"] = api.inspect_image(f"{ENV_IMAGE_REPOSITORY}:{tag}")["Id"]
    return _IMAGE_ID["id"]


def unique_mesh(prefix: str = "t") -> str:
    return f"{prefix}{uuid.uuid4().hex[:10]}"


def cleanup(api, mesh: str) -> None:
    for row in api.containers(all=True, filters={"label": f"mesh.mesh={mesh}"}):
        api.remove_container(row["Id"], force=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url: str, timeout: float = 30.0) -> str:
    """GET with retries until `timeout` (a container's httpd takes a moment to listen, and a
    CGI reply on a loaded two-core machine can take seconds)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=10) as reply:
                return reply.read().decode()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def env_of(reply: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in reply.splitlines() if "=" in line)


# --------------------------------------------------------------------------- declarations


def declaration(mesh: str, serial: int = 1, containers=(), **fields):
    """A Declaration for node `n1` at 127.0.0.1 (tests build resolver objects directly)."""
    from pyrsistent import pvector

    from resolver import Declaration

    vectors = {k: pvector(v) if isinstance(v, (list, tuple)) else v for k, v in fields.items()}
    return Declaration(mesh=mesh, node="n1", address="127.0.0.1", serial=serial,
                       containers=pvector(containers), **vectors)


def container(mesh: str, short: str, image: str, *, env=None, secrets=(), port=None,
              command=None, run_once=False, health=None, mounts=(), labels=None):
    from pyrsistent import pmap, pvector

    from resolver import ContainerDecl, PublishedPort

    ports = [PublishedPort("127.0.0.1", port, HTTP_PORT, "tcp", "http")] if port else []
    return ContainerDecl(
        name=f"{mesh}-{short}", instance=f"app@n1", container=short, image=image,
        command=pvector(command) if command is not None else None, env=pmap(env or {}),
        secrets=pvector(secrets), ports=pvector(ports), mounts=pvector(mounts),
        run_once=run_once, health=health, labels=pmap(labels or {}))


def http_health(port: int, timeout: int = 60):  # the product default: a loaded machine is slow
    from resolver import HealthDecl

    return HealthDecl(kind="http", port=HTTP_PORT, host_port=port, path="/cgi-bin/env",
                      timeout=timeout)


def write_declaration(path, decl) -> str:
    import json

    from resolver.documents import unstructure

    Path(path).write_text(json.dumps(unstructure(decl), indent=2))
    return str(path)
