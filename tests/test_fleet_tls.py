"""The broker over TLS, as an operator runs it: the mesh CA issues the broker's server
certificate (`mesh ca issue-server`, for a broker the mesh does not run: here a private RabbitMQ
that listens with TLS only, `listeners.tcp = none`), the control verbs and the node's agent
connect with amqps and verify it against the mesh CA, the node's against the CA its enrolment
token carries. Then the refusals: a broker with a certificate from another mesh's CA is refused
before any password reaches it (its own log and its connection list show no login), and plain
AMQP to the mesh's broker finds no listener that speaks it.
"""

from __future__ import annotations

import shutil
import time

import pytest
import requests

from _fleet import FleetMesh
from _private_rabbit import PrivateRabbit, available

pytestmark = pytest.mark.integration

_why = available()
if _why:
    pytest.skip(f"private RabbitMQ: {_why}", allow_module_level=True)


def rabbit_log(rabbit: PrivateRabbit) -> str:
    return "".join(path.read_text(errors="replace")
                   for path in sorted((rabbit.dir / "log").glob("*.log")))


def connections(rabbit: PrivateRabbit) -> list[dict]:
    return requests.get(f"{rabbit.api}/api/connections", auth=("admin", rabbit.password),
                        timeout=10, verify=rabbit.verify).json()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tls")
    rabbits: list[PrivateRabbit] = []
    fleet = FleetMesh(tmp / "fleet", {"app@solo": ("app", "solo")})
    try:
        fleet.setup()  # mesh ca init, mesh pin
        fleet.rabbit = fleet.tls_rabbit()  # `mesh ca issue-server`, TLS only: its broker now
        rabbits.append(fleet.rabbit)
        assert not fleet.broker.plain
        # another mesh's CA, and a broker holding a certificate from it (the impostor)
        other = tmp / "other"
        other.mkdir()
        shutil.copy(fleet.dir / "mesh.yaml", other / "mesh.yaml")
        shutil.copytree(fleet.dir / "catalogue", other / "catalogue")
        fleet.mesh("ca", "init", other)
        impostor = fleet.tls_rabbit(other, "impostor")
        rabbits.append(impostor)
        fleet.impostor = impostor
        yield fleet
    finally:
        fleet.close()
        for rabbit in rabbits:
            rabbit.remove()


def test_enrolment_and_an_agent_cycle_over_tls(fleet):
    overview = requests.get(f"{fleet.rabbit.api}/api/overview",
                            auth=("admin", fleet.rabbit.password), timeout=10,
                            verify=fleet.rabbit.verify).json()
    protocols = {listener["protocol"] for listener in overview["listeners"]}
    assert "amqp/ssl" in protocols and "amqp" not in protocols, protocols
    issued = fleet.dir.parent / "broker-tls"
    assert (issued / "broker.key").stat().st_mode & 0o777 == 0o600
    assert (issued / "broker.crt").read_text().count("BEGIN CERTIFICATE") == 2  # + the CA's

    fleet.enrol("solo")
    config = (fleet.config("solo")).read_text()
    assert "tls: true" in config and "BEGIN CERTIFICATE" in config, config
    fleet.start_agent("solo")  # takes its answer over TLS, then serves its queue
    fleet.publish()
    fleet.collect()
    assert fleet.reports("solo")["last"]["result"] == "applied"
    assert fleet.env_of("app@solo")["GREETING"] == "hello"
    # every connection of the mesh's accounts on the broker is TLS
    # (the management API lists a connection once its statistics were first collected)
    deadline = time.monotonic() + 30
    while True:
        mesh_connections = [c for c in connections(fleet.rabbit)
                            if str(c.get("user", "")).startswith(f"mesh.{fleet.name}.")]
        if mesh_connections or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert mesh_connections, connections(fleet.rabbit)
    assert all(c["ssl"] for c in mesh_connections), mesh_connections
    assert f"mesh.{fleet.name}.node.solo" in {c["user"] for c in mesh_connections}
    log = fleet.log("solo").read_text()
    assert "connected to the broker" in log, log
    # what a login looks like in the broker's log (the impostor's log is searched for it)
    assert f"user 'mesh.{fleet.name}.node.solo' authenticated" in rabbit_log(fleet.rabbit)


def test_a_broker_with_another_cas_certificate_never_sees_a_login(fleet):
    impostor = fleet.impostor
    secret_token = fleet.token("later", "--broker-for-nodes", impostor.amqp)
    config = fleet.node_dir("later") / "agent.yaml"
    enrolled = fleet.mesh("agent", "enrol", secret_token, "--config", config, "--key",
                          fleet.node_dir("later") / "node.key", "--address", fleet.address,
                          "--state-root", fleet.state("later"), "--no-firewall", "--no-wait",
                          check=False)
    assert enrolled.returncode != 0, enrolled.stdout + enrolled.stderr
    last = enrolled.stderr.strip().splitlines()[-1]
    assert "the broker's TLS certificate is not the mesh CA's for 127.0.0.1" in last, last
    assert "refused before any password was sent" in last, last
    assert "Traceback" not in enrolled.stderr

    # the control plane refuses it too, before its own account's password is sent
    published = fleet.mesh(*fleet.control_args("publish", "."), "--broker", impostor.amqp,
                           check=False)
    assert published.returncode != 0
    assert "not the mesh CA's" in published.stderr, published.stderr
    assert "Traceback" not in published.stderr

    time.sleep(1)  # the broker logs a closed handshake after the client hung up
    log = rabbit_log(impostor)
    assert f"mesh.{fleet.name}" not in log, log[-3000:]  # no account ever named, nor
    assert "authenticated" not in log, log[-3000:]  # a login of any account
    assert connections(impostor) == []


def test_plain_amqp_to_the_mesh_broker_logs_nobody_in(fleet):
    """The control account's real password, sent as plain AMQP to the broker's port: no
    listener speaks it (the port speaks TLS only), so nobody is logged in; and a control verb
    told the broker is plain says so in one line."""
    import pika
    import pika.exceptions

    fleet.token("probe")  # the control account made as an operator's first command makes it
    password = (fleet.dir / ".control" / "broker-control.secret").read_text().strip()
    control_user = f"mesh.{fleet.name}.control"
    before = {c["name"] for c in connections(fleet.rabbit)}
    host, port = fleet.rabbit.amqp.split(":")
    params = pika.ConnectionParameters(
        host=host, port=int(port), virtual_host=f"mesh.{fleet.name}",
        credentials=pika.PlainCredentials(control_user, password),
        connection_attempts=1, socket_timeout=5, stack_timeout=10)
    with pytest.raises(pika.exceptions.AMQPError):
        pika.BlockingConnection(params).close()

    published = fleet.mesh(*fleet.control_args("publish", "."), "--broker-plain", check=False)
    assert published.returncode != 0
    assert "Traceback" not in published.stderr, published.stderr
    last = published.stderr.strip().splitlines()[-1]
    assert f"127.0.0.1:{port}" in last, last
    new = [c for c in connections(fleet.rabbit) if c["name"] not in before]
    assert not [c for c in new if not c["ssl"]], new  # no plain connection was ever made
