"""A rotation's fan-out completes by itself under `mesh control`, even when the control plane is
killed in the middle of it; a client logging in with what the consumer holds never fails.

PostgreSQL in a container on the real Docker Engine (postgres@solo) and its consumer app1@solo,
on one enrolled node whose agent is a `mesh agent` process; the broker is a RabbitMQ of the
test's own serving AMQP over TLS with a certificate from the mesh CA. `mesh rotate` is the only thing the operator types: the provider puts the
new generation in force on its idle login, reports, the consumer moves, reports, the old
generation is retired — published, applied and recorded with no manual step. The control
plane is SIGKILLed right after the provider's report was recorded and started again.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time

import psycopg
import pytest

from _fleet import REPO, FleetMesh
from _manifests import APP, POSTGRES, PROVISIONS
from _pgimage import postgres_image
from _private_rabbit import available

pytestmark = pytest.mark.integration

_why = available()
if _why:
    pytest.skip(f"private RabbitMQ: {_why}", allow_module_level=True)

CREDENTIAL = "postgres-database/postgres@solo/app1@solo"

class Client(threading.Thread):
    """Logs in again and again with what the consumer holds now (its binding file)."""

    def __init__(self, binding):
        super().__init__(daemon=True)
        self.binding, self.stop = binding, threading.Event()
        self.logins, self.failures, self.passwords = 0, [], set()

    def values(self) -> dict:
        return dict(line.split("=", 1) for line in self.binding.read_text().splitlines()
                    if "=" in line)

    def run(self):
        while not self.stop.is_set():
            values = self.values()
            try:
                with psycopg.connect(host=values["host"], port=values["port"],
                                     user=values["user"], password=values["password"],
                                     dbname=values["database"], connect_timeout=5) as c:
                    c.execute("select 1")
                self.logins += 1
                self.passwords.add((values["user"], values["password"]))
            except psycopg.Error as error:
                self.failures.append(f"{values['user']}: {error}".strip())
            time.sleep(0.05)


def test_control_completes_a_rotation_by_itself_across_its_own_restart(tmp_path):
    from _docker import engine

    fleet = FleetMesh(tmp_path, {"postgres@solo": ("postgres", "solo"),
                                 "app1@solo": ("app", "solo")},
                      modules={"postgres": (POSTGRES, postgres_image(engine())),
                               "app": (APP, None)}, provisions=PROVISIONS)
    control = None
    control_log = tmp_path / "control.log"

    def start_control():
        handle = open(control_log, "a")
        process = subprocess.Popen(
            [sys.executable, "-m", "executors.cli", "control", ".", "--interval", "0.5",
             "--key", str(fleet.node_dir("solo") / "node.key"), *fleet.broker.options()],
            cwd=fleet.dir, stdout=handle, stderr=subprocess.STDOUT,
            env={"PYTHONPATH": str(REPO), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
        handle.close()
        return process

    def credential():
        return fleet.ledger().credentials.get(CREDENTIAL)

    def wait(condition, what, timeout=240):
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: not within {timeout}s\n--- control:\n"
                                     f"{control_log.read_text()[-4000:]}\n--- agent:\n"
                                     f"{fleet.log('solo').read_text()[-4000:]}")
            if control is not None and control.poll() is not None:
                raise AssertionError(f"control exited:\n{control_log.read_text()[-4000:]}")
            time.sleep(0.1)

    def converged():
        published = fleet.status()["nodes"][0]
        return published["serial_published"] is not None and not published["behind"] \
            and published["last_result"] == "applied"

    client = rabbit = None
    try:
        fleet.setup()
        rabbit = fleet.tls_rabbit()
        fleet.enrol("solo")
        fleet.start_agent("solo")
        control = start_control()
        wait(lambda: credential() is not None and credential().applied.get("solo") == 1
             and converged(), "the mesh converges, the credential issued and applied")
        binding = fleet.state("solo") / ".mesh" / "bindings" / "app1@solo--db.env"
        client = Client(binding)
        client.start()
        first = client.values()
        wait(lambda: client.logins >= 5, "the client logs in")

        rotated = fleet.mesh("rotate", ".", CREDENTIAL).stdout
        assert "no window" in rotated
        wait(lambda: credential().active.generation == 2, "the provider's report recorded")
        control.send_signal(signal.SIGKILL)  # mid-rotation: the old generation still retiring
        control.wait()
        assert credential().retiring is not None and credential().retiring.generation == 1
        control = start_control()
        wait(lambda: credential().retiring is None and 1 in credential().retired
             and credential().applied.get("solo") == 2 and converged(),
             "the rotation completes after the restart")
        time.sleep(2)  # the client keeps going on the settled mesh
        client.stop.set()
        client.join(30)
        assert client.failures == [], client.failures[:5]
        assert client.logins > 20
        assert len({password for _, password in client.passwords}) == 2, \
            "the client logged in with both generations"
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(host=first["host"], port=first["port"], user=first["user"],
                            password=first["password"], dbname=first["database"],
                            connect_timeout=5).close()
        log = control_log.read_text()
        assert "recorded in the ledger" in log and log.count("published solo serial") >= 3
        assert fleet.status()["rotations"] == []
        everything = fleet.everything_printed() + log
        assert first["password"] not in everything and client.values()["password"] not in \
            everything, "a secret value was printed"
    finally:
        if client is not None:
            client.stop.set()
        if control is not None and control.poll() is None:
            control.send_signal(signal.SIGTERM)
            try:
                control.wait(30)
            except subprocess.TimeoutExpired:
                control.kill()
        fleet.close()
        if rabbit is not None:
            rabbit.remove()
