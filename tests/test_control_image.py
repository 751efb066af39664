"""The control module's image runs the real control plane: built through the Docker Engine API
from the module's declared context (catalogue/control/image, this project staged into it as a
wheel by scripts/stage-control-image.sh) on a python base made from this host's interpreter
(tests/_pyimage.py: no public registry here), then run as the image runs it (as root, its
USER: the mesh directory is shared with the operator's root commands), the mesh directory in
its state volume, the broker's address from its binding's MESH_BROKER_URL. It answers /healthz and /ca, publishes a signed declaration to the broker,
which a real `mesh agent` applies, and records the agent's report; no secret reaches its log.

The container shares the host's network: the test's broker (a private RabbitMQ serving AMQP
and its management API over TLS only, its certificate from the test mesh's CA) listens on
127.0.0.1 only, and the binding's URL says exactly that address; the control plane in the
container verifies both against the mesh CA in the mesh directory.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import requests

from _docker import engine, free_port
from _fleet import FleetMesh
from _pyimage import python_image

REPO = Path(__file__).resolve().parent.parent
CONTEXT = REPO / "catalogue" / "control" / "image"
UID = 10001  # the module's state owner


def _build(api, context: Path, base: str, tag: str) -> None:
    errors, lines = [], []
    for chunk in api.build(path=str(context), tag=tag, buildargs={"BASE_IMAGE": base}, rm=True,
                           forcerm=True, decode=True):
        lines.append(str(chunk.get("stream", "")))
        if "error" in chunk:
            errors.append(chunk["error"])
    assert not errors, "".join(lines) + "\n".join(errors)


def _chown(path: Path) -> None:
    for root, dirs, files in os.walk(path):
        for name in [root, *(os.path.join(root, n) for n in dirs + files)]:
            os.lchown(name, UID, UID)


def _wait(what: str, check, timeout: float = 120, logs=lambda: ""):
    deadline = time.monotonic() + timeout
    while True:
        try:
            found = check()
        except (requests.RequestException, OSError, ValueError, KeyError):
            found = None
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout}s\n{logs()[-4000:]}")
        time.sleep(0.5)


@pytest.mark.integration
def test_the_control_image_serves_its_contract_and_publishes_for_real(tmp_path):
    api = engine()
    base = python_image(api)
    context = tmp_path / "context"
    shutil.copytree(CONTEXT, context, ignore=shutil.ignore_patterns("dist", "__pycache__"))
    staged = subprocess.run(["sh", str(REPO / "scripts" / "stage-control-image.sh"),
                             str(context)], capture_output=True, text=True, timeout=600)
    assert staged.returncode == 0, staged.stdout + staged.stderr
    assert len(list((context / "dist").glob("*.whl"))) == 1
    tag = f"mesh-test/control:{uuid.uuid4().hex[:10]}"
    fleet = FleetMesh(tmp_path, {"web@solo": ("app", "solo")})
    container = rabbit = None
    try:
        _build(api, context, base, tag)
        fleet.setup()
        rabbit = fleet.tls_rabbit()
        assert fleet.broker.api.startswith("https://") and not fleet.broker.plain
        fleet.enrol("solo")
        secrets_dir = tmp_path / "secrets"
        secrets_dir.mkdir()
        password_file = secrets_dir / "broker-admin"
        password_file.write_text(fleet.broker.password + "\n")
        password_file.chmod(0o600)
        _chown(fleet.dir)
        _chown(secrets_dir)
        port = free_port()
        binding_password = "binding-" + uuid.uuid4().hex
        environment = {
            # what the module's container is given (module.yaml), the broker's from its binding
            "MESH_BROKER_URL": f"amqp://control_x:{binding_password}@{fleet.broker.amqp}/"
                               f"control_vhost",
            "MESH_STORE_URL": f"postgresql://control_x:{binding_password}@127.0.0.1:5432/db",
            "MESH_NODE": "solo", "MESH_INSTANCE": "control@solo",
            "MESH_DATA_DIR": "/var/lib/mesh-control", "MESH_API_PORT": str(port),
            # the test mesh has no substrate broker instance to derive its admin from
            "MESH_BROKER_API": fleet.broker.api, "MESH_BROKER_ADMIN": fleet.broker.admin,
            "MESH_BROKER_ADMIN_PASSWORD_FILE": "/run/mesh/broker-admin"}
        container = api.create_container(
            tag, environment=environment, host_config=api.create_host_config(
                network_mode="host", binds={
                    str(fleet.dir): {"bind": "/var/lib/mesh-control/mesh", "mode": "rw"},
                    str(secrets_dir): {"bind": "/run/mesh", "mode": "ro"}}),
            name=f"{fleet.name}-control")
        api.start(container)

        def logs() -> str:
            return api.logs(container, stdout=True, stderr=True).decode("utf-8", "replace")

        base_url = f"http://127.0.0.1:{port}"
        _wait("/healthz answering 200",
              lambda: requests.get(base_url + "/healthz", timeout=5).status_code == 200,
              logs=logs)
        ca = requests.get(base_url + "/ca", timeout=5)
        assert ca.status_code == 200
        assert ca.text == (fleet.dir / "ca" / "mesh-ca.crt").read_text()
        assert requests.get(base_url + "/ledger", timeout=5).status_code == 404
        _wait("the container's mesh control publishing solo's declaration",
              lambda: "published solo serial 1" in logs(), logs=logs)
        fleet.start_agent("solo")
        fleet.wait_log("solo", "reported applied for serial 1", 180)
        assert fleet.env_of("web@solo")["GREETING"] == "hello"
        # the report was recorded by the control plane in the container
        _wait("the report recorded by the container",
              lambda: fleet.reports("solo")["last"]["result"] == "applied", logs=logs)
        status = fleet.status()["nodes"][0]
        assert status["serial_published"] == 1 and status["serial_applied"] == 1
        # the image runs as root (Dockerfile): what it writes is root's, like the operator's
        assert os.stat(fleet.dir / ".control" / "reports.json").st_uid == 0
        # it stops on SIGTERM, and /healthz stops saying ok with it
        api.stop(container, timeout=30)
        assert api.inspect_container(container)["State"]["ExitCode"] == 0, logs()
        printed = logs()
        assert "starting: mesh control /var/lib/mesh-control/mesh" in printed
        for secret in (binding_password, fleet.broker.password):
            assert secret not in printed
    finally:
        fleet.stop_agent("solo")
        if container is not None:
            api.remove_container(container, force=True)
        fleet.close()
        if rabbit is not None:
            rabbit.remove()
        try:
            api.remove_image(tag, force=True)
        except Exception:  # noqa: BLE001 - never built
            pass


@pytest.mark.integration
def test_the_image_says_why_it_is_not_healthy(tmp_path):
    """No mesh directory in the volume: /healthz is 503 with mesh control's own reason, and
    the control plane is started again, never silently."""
    api = engine()
    base = python_image(api)
    context = tmp_path / "context"
    shutil.copytree(CONTEXT, context, ignore=shutil.ignore_patterns("dist", "__pycache__"))
    subprocess.run(["sh", str(REPO / "scripts" / "stage-control-image.sh"), str(context)],
                   check=True, capture_output=True, timeout=600)
    tag = f"mesh-test/control:{uuid.uuid4().hex[:10]}"
    port = free_port()
    container = None
    try:
        _build(api, context, base, tag)
        container = api.create_container(
            tag, environment={"MESH_API_PORT": str(port),
                              "MESH_BROKER_URL": "amqp://u:p@127.0.0.1:5672/v"},
            host_config=api.create_host_config(network_mode="host"))
        api.start(container)

        def logs() -> str:
            return api.logs(container, stdout=True, stderr=True).decode("utf-8", "replace")

        def unhealthy():
            reply = requests.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
            return reply.text if reply.status_code == 503 and "exited" in reply.text else None

        why = _wait("/healthz saying why", unhealthy, logs=logs)
        assert "mesh control exited 2" in why and "expected a mesh directory holding mesh.yaml" \
            in why, why
        assert requests.get(f"http://127.0.0.1:{port}/ca", timeout=5).status_code == 503
        _wait("a second start", lambda: logs().count("starting: mesh control") >= 2,
              timeout=60, logs=logs)
    finally:
        if container is not None:
            api.remove_container(container, force=True)
        try:
            api.remove_image(tag, force=True)
        except Exception:  # noqa: BLE001 - never built
            pass
