"""A node leaves a running fleet (`mesh node remove`), against a real RabbitMQ (a private one
serving AMQP over TLS only, its certificate from the mesh's CA) and real `mesh agent` processes: refused while it runs an instance; once
removed, the next `mesh publish` deletes its broker account (its login is refused by the
broker) and its queue, a report it sent is refused, its key cannot enrol again; and an agent
refuses a declaration signed by a delivery certificate on the mesh's revocation list."""

from __future__ import annotations

import time

import pika
import pytest
from cryptography import x509

from _fleet import FleetMesh
from _private_rabbit import available
from executors.common import amqp, messages
from executors.common.amqp import FleetNames
from executors.common.keys import load_private_key, unseal
from executors.common.revocation import Revocation
from executors.control import revocations
from executors.control.control_state import ControlState
from executors.control.delivery_key import ensure_delivery_key, paths
from executors.control.loading import load_mesh_dir, mesh_lock
from executors.node.agent.config import load_config

pytestmark = pytest.mark.integration

_why = available()
if _why:
    pytest.skip(f"private RabbitMQ: {_why}", allow_module_level=True)


def load_ca_pem(fleet) -> str:
    """The mesh CA's certificate, as the control plane verifies its broker against it."""
    from executors.control.ca import ca_cert_path

    inputs = load_mesh_dir(fleet.dir)
    return ca_cert_path(inputs.mesh_dir, inputs.mesh).read_text()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    fleet = FleetMesh(tmp_path_factory.mktemp("leave"), {"app@b": ("app", "b")},
                      nodes=("a", "b"))
    rabbit = None
    try:
        fleet.setup()
        rabbit = fleet.tls_rabbit()
        fleet.enrol("a")
        fleet.enrol("b")
        fleet.start_agent("a")
        fleet.start_agent("b")
        fleet.publish()
        fleet.collect(wait=120)
        yield fleet
    finally:
        fleet.close()
        if rabbit is not None:
            rabbit.remove()


def login(fleet, node, config_path=None):
    config = load_config(config_path or fleet.config(node))
    password = unseal(load_private_key(config.key), config.login.password_sealed)
    # as the node's agent connects: TLS, the broker verified against the CA its token carried
    return amqp.connect(amqp.parameters(
        amqp.BrokerAddress(config.login.host, config.login.port), config.login.vhost,
        config.login.user, password, tls=config.tls()))


def test_a_node_leaves_its_account_queue_reports_and_key_are_refused(fleet):
    mesh_file = fleet.dir / "mesh.yaml"
    before = mesh_file.read_text()
    refused = fleet.mesh("node", "remove", ".", "b", check=False)
    line = next(i for i, text in enumerate(before.splitlines(), 1) if "app@b:" in text)
    assert refused.returncode == 1 and f"mesh.yaml:{line}: app@b" in refused.stderr
    assert mesh_file.read_text() == before

    fleet.instances = {}  # the operator moves the app away; b applies a declaration without it
    fleet.write_mesh()
    fleet.publish()
    fleet.collect(wait=120)
    login(fleet, "b").close()  # its account works
    before = mesh_file.read_text()

    removed = fleet.mesh("node", "remove", ".", "b")
    assert "removed node b" in removed.stdout and "left on b's machine" in removed.stdout
    assert "warning" not in removed.stdout, removed.stdout  # b applied its last declaration
    assert mesh_file.read_text().splitlines() == [
        text for text in before.splitlines() if not text.startswith("  b: ")]

    # b speaks once more, before the next publish deletes its account
    names = FleetNames(fleet.name)
    connection = login(fleet, "b")
    channel = connection.channel()
    channel.confirm_delivery()
    channel.basic_publish(amqp.REPORTS, amqp.REPORT_QUEUE, messages.plain({
        "format": messages.REPORT_FORMAT, "mesh": fleet.name, "node": "b",
        "at": "2026-01-01T00:00:00Z", "trigger": "drift", "result": "applied"}),
        pika.BasicProperties(user_id=names.node_user("b"), delivery_mode=2))
    connection.close()
    fleet.stop_agent("b")

    published = fleet.publish()
    said = published.stdout + published.stderr
    assert f"delete-user {names.node_user('b')}" in said, said
    assert "deleted the queue node.b" in said, said
    with pytest.raises(amqp.BrokerError, match="refused the account"):
        login(fleet, "b")
    assert fleet.broker.queue(fleet.name, "node.b") == {}
    assert fleet.broker.queue(fleet.name, "node.a") != {}

    collected = fleet.collect(wait=0, check=False)
    said = collected.stdout + collected.stderr
    assert "report from b refused: the node was removed from the mesh" in said, said

    # b's key cannot enrol again
    token = fleet.token("b")
    again = fleet.node_dir("b") / "again.yaml"
    fleet.mesh("agent", "enrol", token, "--config", again, "--key",
               fleet.node_dir("b") / "node.key", "--address", fleet.address,
               "--state-root", fleet.state("b"), "--no-firewall", "--no-wait")
    listed = fleet.mesh(*fleet.control_args("enrol", "list", "."))
    assert "its public key is revoked" in listed.stdout + listed.stderr
    accept = fleet.mesh(*fleet.control_args("enrol", "accept", ".", "b"), check=False)
    assert accept.returncode != 0 and "no enrolment request from b" in accept.stderr

    status = fleet.status()
    assert [n["node"] for n in status["nodes"]] == ["a"]


def test_an_agent_refuses_a_declaration_signed_by_a_revoked_delivery_certificate(fleet):
    mesh = load_mesh_dir(fleet.dir).mesh
    old = ensure_delivery_key(fleet.dir, mesh)
    serial = format(x509.load_pem_x509_certificate(old.certificate_pem.encode())
                    .serial_number, "x")
    state = ControlState(fleet.dir)
    with mesh_lock(fleet.dir):  # as a revocation of the delivery certificate would
        revocations.add(state, Revocation(at="2026-01-01T00:00:00Z", reason="a test revokes "
                                          "the delivery certificate", serials=(serial,)))
    for path in paths(fleet.dir, mesh):
        path.unlink()  # the next publish signs with a new delivery key

    mark = fleet.log_size("a")
    fleet.publish("--node", "a")  # signed by the new key, carrying the list
    fleet.wait_log("a", "revocation list: ", after=mark)  # b's removal too, if it ran first
    kept = (fleet.state("a") / ".mesh" / "agent" / "revoked.json").read_text()
    assert f'"{serial}"' in kept
    fleet.collect(wait=120)

    mark = fleet.log_size("a")
    forged = messages.sign(messages.DECLARATION, {"mesh": fleet.name, "node": "a"},
                           old.key, old.certificate_pem)
    names = FleetNames(fleet.name)
    connection = amqp.connect(amqp.parameters(
        amqp.BrokerAddress.parse(fleet.broker.amqp), names.vhost, names.control_user,
        state.control_password(), tls=amqp.BrokerTls(load_ca_pem(fleet))))
    channel = connection.channel()
    channel.confirm_delivery()
    channel.basic_publish(amqp.DECLARATIONS, "a", forged, pika.BasicProperties(
        message_id="old-key/1", delivery_mode=2))
    connection.close()
    fleet.wait_log("a", f"refused message old-key/1: the signer's certificate (serial "
                        f"{serial}) is on the mesh's revocation list", after=mark)
    # the agent logs the refusal before its report reaches the broker: collect until the
    # report arrives (each collect takes what waits, so the line is in whichever took it)
    said, deadline = "", time.monotonic() + 60
    while "rejected: the signer's certificate" not in said and time.monotonic() < deadline:
        collected = fleet.collect(wait=2, check=False)
        said += collected.stdout + collected.stderr
    assert "rejected: the signer's certificate" in said
