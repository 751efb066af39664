"""A thin layer over the Docker Engine API (docker SDK, low-level client) for `mesh apply`.

Invariants:
- Observation is one label-filtered list call; nothing is inspected per container, so an apply
  with nothing to change costs one round trip to the engine.
- Only containers labelled `mesh.mesh=<mesh>` are listed, stopped or removed; a name taken by a
  container the mesh does not manage is reported, never removed.
- Published ports are bound to an explicit address, never 0.0.0.0 (the caller refuses that).
- Waiting is bounded and never silent: `wait_*` calls `tick(seconds)` every few seconds.
"""

from __future__ import annotations

import socket
import time
import urllib.request
from typing import Any, Callable, Mapping, Optional, Sequence

import attrs
import docker
from docker.errors import APIError, ImageNotFound, NotFound
from docker.types import LogConfig

from resolver import MeshError

from executors.common.marks import (  # noqa: F401  (the labels are part of this module's API)
    ENGINE_API_VERSION as API_VERSION,
    ENGINE_SOCKET,
    LABEL_CONTAINER,
    LABEL_DIGEST,
    LABEL_INSTANCE,
    LABEL_MESH,
    LABEL_RUN_ONCE,
    LABEL_SUMMARY,
)

TICK_SECONDS = 5


class EngineError(MeshError):
    """A Docker Engine call failed in a way the operator must hear about."""


@attrs.frozen
class ContainerSpec:
    name: str
    image: str
    command: Optional[tuple[str, ...]]
    environment: tuple[str, ...]  # KEY=value, exactly the env file's lines
    labels: tuple[tuple[str, str], ...]
    ports: tuple[tuple[str, str, int], ...]  # ("80/tcp", host_ip, host_port)
    binds: tuple[tuple[str, str, str], ...]  # (source, target, "ro" | "rw")
    restart: str  # unless-stopped | no
    mac: Optional[str] = None  # fixed MAC on the default bridge (same-node consumers)
    # (user, password) the node pulls its image with (its own account on the mesh's registry)
    pull_auth: Optional[tuple[str, str]] = attrs.field(default=None, repr=False, eq=False)
    # files a bind mount needs before the container starts: created empty when absent, never
    # overwritten (the registry's htpasswd, which its provisioner fills)
    placeholders: tuple[str, ...] = ()
    # (driver, its options): the output the runtime keeps, rotated (the declaration's logs)
    log_config: Optional[tuple[str, tuple[tuple[str, str], ...]]] = None


def connect(base_url: Optional[str] = None, timeout: Optional[int] = 120) -> docker.APIClient:
    """A client of the Engine at `base_url` (the local socket by default); `timeout` None:
    reads wait as long as the Engine takes (following a container's output)."""
    # the SDK hands `timeout` to requests, where None means no read timeout; its stub says int
    return docker.APIClient(base_url=base_url or ENGINE_SOCKET, version=API_VERSION,
                            timeout=timeout)  # type: ignore[arg-type]


def managed_rows(api: docker.APIClient, mesh: str) -> list[Mapping[str, object]]:
    """The Engine's rows (GET /containers/json) of every container of `mesh`, running or not:
    one label-filtered list call (apply/reads.py turns them into facts)."""
    rows: list[Mapping[str, object]] = api.containers(
        all=True, filters={"label": f"{LABEL_MESH}={mesh}"})
    return rows


def _is_ours(api: docker.APIClient, name: str, mesh: str) -> Optional[bool]:
    """True if `name` is ours, False if someone else's, None if there is no such container."""
    try:
        info = api.inspect_container(name)
    except NotFound:
        return None
    return (info.get("Config", {}).get("Labels") or {}).get(LABEL_MESH) == mesh


def remove(api: docker.APIClient, name: str, mesh: str, stop_timeout: int) -> None:
    ours = _is_ours(api, name, mesh)
    if ours is None:
        return
    if not ours:
        raise EngineError(f"container {name} is not managed by mesh {mesh}; not touched")
    try:
        api.stop(name, timeout=stop_timeout)
        api.remove_container(name, force=True)
    except NotFound:
        pass


def _create_container(api: docker.APIClient, spec: ContainerSpec) -> str:
    """One create call for `spec`: the container's ID."""
    host_config = api.create_host_config(
        port_bindings={port: (ip, host_port) for port, ip, host_port in spec.ports},
        binds={source: {"bind": target, "mode": mode} for source, target, mode in spec.binds},
        restart_policy={"Name": spec.restart} if spec.restart != "no" else None,
        log_config=(LogConfig(type=spec.log_config[0], config=dict(spec.log_config[1]))
                    if spec.log_config is not None else None),
    )
    ports: Sequence[Any] = [(int(port.split("/")[0]), port.split("/")[1])
                            for port, _, _ in spec.ports]
    created = api.create_container(
        image=spec.image, command=list(spec.command) if spec.command is not None else None,
        name=spec.name, environment=list(spec.environment), labels=dict(spec.labels),
        ports=list(ports), host_config=host_config,
        # API 1.41: the container's MAC on the default network (None: the Engine derives it)
        mac_address=spec.mac)
    return str(created["Id"])


def create(api: docker.APIClient, spec: ContainerSpec, mesh: str,
           say: Callable[[str], None]) -> str:
    """Create (not start) the container; pulls a `repo@sha256:` image only when it is missing."""
    try:
        return _create_container(api, spec)
    except ImageNotFound:
        if "@" not in spec.image:
            raise EngineError(f"image {spec.image} is not present on this node (an image ID "
                              "cannot be pulled: a local build (`mesh build DIR --local`) runs "
                              "only where it was built; build it here, or push it to the "
                              "mesh's registry with `mesh build DIR`)") from None
        say(f"pulling {spec.image} (not present on this node)")
        try:
            repository, digest = spec.image.split("@", 1)
            next_tick = time.monotonic() + TICK_SECONDS
            auth = ({"username": spec.pull_auth[0], "password": spec.pull_auth[1]}
                    if spec.pull_auth is not None else None)
            for event in api.pull(repository, tag=digest, stream=True, decode=True,
                                  auth_config=auth):
                if "error" in event:
                    raise EngineError(f"pulling {spec.image} failed: {event['error']}")
                if time.monotonic() >= next_tick:  # a long pull is never silent
                    say(f"pulling {spec.image}: {event.get('status', '')} "
                        f"{event.get('progress', '')}".rstrip())
                    next_tick = time.monotonic() + TICK_SECONDS
        except APIError as exc:
            raise EngineError(f"pulling {spec.image} failed: {exc.explanation or exc}") from None
        return _create_container(api, spec)
    except APIError as exc:
        if exc.status_code == 409:
            if _is_ours(api, spec.name, mesh) is False:
                raise EngineError(f"the name {spec.name} is taken by a container the mesh does "
                                  "not manage; it was not touched (rename or remove it)") from None
            # ours: left over by an interrupted apply; replace it
            api.remove_container(spec.name, force=True)
            return _create_container(api, spec)
        raise EngineError(f"creating {spec.name} failed: {exc.explanation or exc}") from None


def start(api: docker.APIClient, name: str) -> None:
    try:
        api.start(name)
    except APIError as exc:
        raise EngineError(f"starting {name} failed: {exc.explanation or exc}") from None


def run_to_completion(api: docker.APIClient, name: str,
                      tick: Callable[[float], None]) -> tuple[int, list[str]]:
    """Start a created container and wait for it to exit: (exit code, last log lines)."""
    start(api, name)
    began = time.monotonic()
    while True:
        try:
            status = api.wait(name, timeout=TICK_SECONDS)
            break
        except Exception as exc:  # requests' ReadTimeout / ConnectionError: still running
            if "timed out" not in str(exc).lower() and "timeout" not in type(exc).__name__.lower():
                raise
            tick(time.monotonic() - began)
    code = int(status.get("StatusCode", -1))
    logs = api.logs(name, stdout=True, stderr=True, tail=20).decode("utf-8", "replace")
    return code, logs.splitlines()[-20:]


DEFAULT_NETWORK = "bridge"  # where containers created without a network setting are attached
BRIDGE_NAME_OPTION = "com.docker.network.bridge.name"


def default_bridge(api: docker.APIClient) -> str:
    """The Linux interface of the Engine's default network (`docker0` unless the daemon was
    started with another `bridge`): where the mesh's containers' traffic arrives."""
    try:
        network = api.inspect_network(DEFAULT_NETWORK)
    except (APIError, NotFound) as exc:
        raise EngineError(f"cannot inspect the default network: {exc}") from None
    name = (network.get("Options") or {}).get(BRIDGE_NAME_OPTION)
    if not name:
        raise EngineError(f"the default network names no bridge interface ({BRIDGE_NAME_OPTION})")
    return str(name)


def container_pid(api: docker.APIClient, name: str) -> tuple[Optional[int], str]:
    """(pid of a running container's first process, its state); pid None unless running."""
    try:
        state = api.inspect_container(name)["State"]
    except NotFound:
        return None, "absent"
    if not state.get("Running") or not state.get("Pid"):
        return None, state.get("Status", "not running")
    return int(state["Pid"]), "running"


def container_id(api: docker.APIClient, name: str) -> Optional[str]:
    """The full ID of the container called `name`, None when there is none."""
    try:
        return str(api.inspect_container(name)["Id"])
    except NotFound:
        return None


def container_ip(api: docker.APIClient, name: str) -> Optional[str]:
    try:
        networks = api.inspect_container(name)["NetworkSettings"].get("Networks") or {}
    except NotFound:
        return None
    for network in networks.values():
        if network.get("IPAddress"):
            return str(network["IPAddress"])
    return None


def probe(api: docker.APIClient, name: str, kind: str, *,
          command: Optional[Sequence[str]] = None, host: Optional[str] = None,
          port: Optional[int] = None, path: str = "/") -> bool:
    """One attempt of a health check; True when it answers."""
    try:
        if kind == "command":
            exec_id = str(api.exec_create(name, list(command or ["true"]), stdout=False,
                                          stderr=False)["Id"])
            api.exec_start(exec_id)
            return bool(api.exec_inspect(exec_id).get("ExitCode") == 0)
        if kind == "tcp":
            with socket.create_connection((host, port), timeout=2):
                return True
        if kind == "http":
            with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=3) as reply:
                status: int = reply.status
                return 200 <= status < 500
    except (OSError, APIError, ValueError):
        return False
    raise EngineError(f"unknown health check kind {kind!r}")


def wait_answering(check: Callable[[], bool], timeout: float,
                   tick: Callable[[float], None]) -> Optional[float]:
    """Poll `check` until it answers or `timeout` passes: seconds taken, or None."""
    began = time.monotonic()
    next_tick = began + TICK_SECONDS
    while True:
        if check():
            return time.monotonic() - began
        now = time.monotonic()
        if now - began >= timeout:
            return None
        if now >= next_tick:
            tick(now - began)
            next_tick = now + TICK_SECONDS
        time.sleep(0.25)
