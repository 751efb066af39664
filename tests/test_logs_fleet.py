"""`mesh logs DIR INSTANCE` from the control node: the request goes, signed, to the node's queue;
its agent (a `mesh agent` process) reads the containers' output from its Docker Engine and
answers on a queue only that request has, with every secret value the node holds replaced by
its `${secret:…}` token; a node that is not running answers nothing, which is said (exit 1),
and a request signed by another key is refused by the agent and never answered.

`--follow` through the agent: the container writes a new line holding its secret; it arrives
within seconds, scrubbed like the rest; Ctrl-C (SIGINT) ends the command (exit 130) and the
agent's follower finds nobody listens any more and stops.

The broker is a RabbitMQ of the test's own serving TLS with a certificate from the mesh CA
(tests/_fleet.py tls_rabbit), the node one enrolled `mesh agent`
(tests/_fleet.py); everything printed is searched for the secret's value.
"""

from __future__ import annotations

import datetime
import os
import queue
import signal
import subprocess
import sys
import threading
import time

import pytest
from cryptography.hazmat.primitives.asymmetric import ed25519

from pathlib import Path

from executors.common import amqp, messages
from executors.common.keys import load_private_key, unseal_for_node
from executors.control.remote_logs import LogsQuery, request_body

from _fleet import FleetMesh

pytestmark = pytest.mark.integration

CHATTY = """\
name: chatty
artifacts:
  image: {{repository: {repository}, tag: "{tag}"}}
secrets: [token]
containers:
  - name: main
    artifact: image
    env: {{TOKEN: "${{self.token.password}}"}}
    command: [sh, -c, "trap 'exit 0' TERM; echo hello from chatty; echo the token is $TOKEN; while true; do sleep 1; done"]
"""
CREDENTIAL = "secret/chatty@solo/token"


def token_value(fleet) -> str:
    ledger = fleet.ledger()
    values = unseal_for_node(ledger, "solo", load_private_key(fleet.node_dir("solo") / "node.key"))
    return max(values[CREDENTIAL].items())[1]


def test_logs_through_the_agent_arrive_with_the_nodes_secrets_taken_out(tmp_path):
    fleet = FleetMesh(tmp_path, {"chatty@solo": ("chatty", "solo")},
                      modules={"chatty": (CHATTY, None)})
    rabbit = None
    try:
        fleet.setup()
        rabbit = fleet.tls_rabbit()  # AMQP and its management API over TLS, the mesh CA's
        fleet.enrol("solo")
        fleet.start_agent("solo")
        fleet.publish()
        fleet.wait_log("solo", "reported applied", timeout=120)
        secret = token_value(fleet)
        assert len(secret) >= 16

        asked = fleet.mesh(*fleet.control_args("logs", ".", "chatty@solo", "--timeout", "60"))
        assert asked.stdout.splitlines()[:2] == [
            "hello from chatty", "the token is ${secret:" + CREDENTIAL + "}"], asked.stdout
        assert "asked node solo's agent for the logs of chatty@solo" in asked.stderr
        fleet.wait_log("solo", "answered logs request")

        one = fleet.mesh(*fleet.control_args("logs", ".", "chatty@solo", "--tail", "1",
                                             "--container", "main"))
        assert one.stdout == "the token is ${secret:" + CREDENTIAL + "}\n"
        missing = fleet.mesh(*fleet.control_args("logs", ".", "chatty@solo", "--container",
                                                 "nope"), check=False)
        assert missing.returncode == 1
        assert "node solo: instance chatty@solo has no container 'nope'" in missing.stderr
        unknown = fleet.mesh(*fleet.control_args("logs", ".", "ghost@solo"), check=False)
        assert unknown.returncode == 2 and "names no instance ghost@solo" in unknown.stderr

        # a request signed by a key the mesh CA never certified: refused, never answered
        forged = messages.sign(
            messages.LOGS_REQUEST,
            request_body(fleet.name, LogsQuery("solo", "chatty@solo"), "forged",
                         datetime.datetime.now(datetime.timezone.utc)
                         + datetime.timedelta(minutes=5)),
            ed25519.Ed25519PrivateKey.generate(),
            (fleet.dir / "ca" / "mesh-ca.crt").read_text())
        publish_as_control(fleet, forged)
        fleet.wait_log("solo", "refused logs request logs/solo/forged")

        follow_through_the_agent(fleet, secret)

        fleet.stop_agent("solo")
        silent = fleet.mesh(*fleet.control_args("logs", ".", "chatty@solo", "--timeout", "3"),
                            check=False)
        assert silent.returncode == 1
        assert "no answer from node solo's agent within 3s" in silent.stderr
        assert secret not in fleet.everything_printed()
        assert secret not in fleet.log("solo").read_text()
    finally:
        fleet.close()
        if rabbit is not None:
            rabbit.remove()


def publish_as_control(fleet, envelope: bytes) -> None:
    from executors.control.control_state import ControlState

    names = amqp.FleetNames(fleet.name)
    host, port = fleet.broker.amqp.rsplit(":", 1)
    connection = amqp.connect(amqp.parameters(
        amqp.BrokerAddress(host, int(port)), names.vhost, names.control_user,
        ControlState(fleet.dir, None).control_password(), tls=amqp.BrokerTls.plain()
        if fleet.broker.plain else amqp.BrokerTls((fleet.dir / "ca" / "mesh-ca.crt").read_text())))
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        amqp.publish(channel, amqp.DECLARATIONS, "solo", envelope,
                     amqp.properties(message_id="logs/solo/forged", kind=messages.LOGS_REQUEST))
    finally:
        connection.close()


def follow_through_the_agent(fleet, secret: str) -> None:
    """`mesh logs DIR INSTANCE --follow --tail 0` from the control side; a line written after
    it started arrives, scrubbed; SIGINT ends it and the agent's follower."""
    process = subprocess.Popen(
        [sys.executable, "-m", "executors.cli",
         *map(str, fleet.control_args("logs", ".", "chatty@solo", "--follow", "--tail", "0",
                                      "--timeout", "60"))],
        cwd=fleet.dir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)})
    lines: "queue.Queue[str]" = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in process.stdout],
                     daemon=True).start()
    try:
        fleet.wait_log("solo", "following chatty@solo for request", timeout=60)
        container = fleet.container("chatty@solo")
        exec_id = fleet.api.exec_create(
            container, ["sh", "-c", "echo fresh line $TOKEN > /proc/1/fd/1"])["Id"]
        written = time.monotonic()
        fleet.api.exec_start(exec_id)
        got = lines.get(timeout=15)
        took = time.monotonic() - written
        assert got == "fresh line ${secret:" + CREDENTIAL + "}\n", got
        assert took < 10, f"the new line took {took:.1f}s"
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
        assert process.returncode == 130, err
        assert "following the logs of chatty@solo through node solo's agent" in err, err
        fleet.printed.append(out + err)
        fleet.wait_log("solo", "nobody follows any more", timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
