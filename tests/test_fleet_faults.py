"""Faults on the way from the control plane to a node, against a real RabbitMQ serving AMQP
over TLS with a certificate from each test mesh's CA (one broker for the file:
tests/_fleet.SharedTlsBroker) and the real Docker Engine: nothing lost, nothing applied half,
nothing applied that did not verify.

One node `solo` (enrolled for real, its agent a `mesh agent` process) runs `app@solo`, whose
one container echoes its environment; each change of the mesh is a change of its GREETING.
"""

from __future__ import annotations

import json
import re
import signal
import time

import pika
import pytest

from _fleet import APP, FleetMesh, SharedTlsBroker
from _private_rabbit import available
from executors.common import amqp, messages
from executors.control.ca import init_ca
from executors.control.delivery_key import ensure_delivery_key

pytestmark = pytest.mark.integration

_why = available()
if _why:
    pytest.skip(f"private RabbitMQ: {_why}", allow_module_level=True)

SLOW = """\
name: slow
artifacts:
  image: {{repository: {repository}, tag: "{tag}"}}
containers:
  - name: prepare
    artifact: image
    run-once: true
    command: [sleep, "6"]
    env: {{STEP: "1"}}
  - name: main
    artifact: image
    env: {{AFTER: prepared}}
"""


@pytest.fixture(scope="module")
def shared_broker():
    broker = SharedTlsBroker()
    try:
        yield broker
    finally:
        broker.remove()


@pytest.fixture
def fleet(tmp_path, shared_broker):
    fleet = FleetMesh(tmp_path, {"app@solo": ("app", "solo")},
                      modules={"app": (APP, None), "slow": (SLOW, None)})
    try:
        fleet.setup()
        fleet.tls_rabbit(shared=shared_broker)
        fleet.enrol("solo")
        yield fleet
    finally:
        fleet.close()


def greet(fleet, text: str) -> None:
    fleet.write_module("app", APP.replace("GREETING: hello", f"GREETING: {text}"))


def history(fleet) -> list[dict]:
    return list(reversed(fleet.reports("solo").get("history") or []))


def control_channel(fleet):
    """A connection as the control account (the test speaks as the control plane)."""
    password = (fleet.dir / ".control" / "broker-control.secret").read_text().strip()
    connection = pika.BlockingConnection(fleet.broker.connection_parameters(
        f"mesh.{fleet.name}", f"mesh.{fleet.name}.control", password))
    channel = connection.channel()
    channel.confirm_delivery()
    return connection, channel


def queued(fleet) -> int:
    """Messages ready in solo's queue, asked over AMQP (the management API's figures lag)."""
    connection, channel = control_channel(fleet)
    try:
        return channel.queue_declare("node.solo", passive=True).method.message_count
    finally:
        connection.close()


def send_raw(fleet, data: bytes, message_id: str) -> None:
    connection, channel = control_channel(fleet)
    try:
        amqp.publish(channel, amqp.DECLARATIONS, "solo", data,
                     amqp.properties(message_id=message_id, kind="declaration"))
    finally:
        connection.close()


def test_five_declarations_published_while_the_agent_is_down_one_applied_four_superseded(
        fleet):
    fleet.start_agent("solo")
    fleet.publish()
    assert fleet.collect().returncode == 0
    fleet.stop_agent("solo")
    first = fleet.applied("solo")["serial"]
    for index in range(1, 6):
        greet(fleet, f"hello{index}")
        fleet.publish()
    assert queued(fleet) == 5
    fleet.start_agent("solo")
    fleet.wait_log("solo", f"reported applied for serial {first + 5}", timeout=120)
    assert fleet.collect().returncode == 0
    reports = [h for h in history(fleet) if h["serial"] and h["serial"] > first]
    assert sorted((h["serial"], h["result"], h["superseded_by"]) for h in reports) == \
        [(first + i, "superseded", first + 5) for i in range(1, 5)] + \
        [(first + 5, "applied", None)]
    log = fleet.log("solo").read_text()
    assert "5 declarations waiting" in log
    assert fleet.env_of("app@solo")["GREETING"] == "hello5"
    assert log.count("→ recreate-container") == 1, "only the newest was applied"


def test_refused_messages_are_reported_with_the_reason_and_never_touch_the_node(
        fleet, tmp_path):
    fleet.start_agent("solo")
    fleet.publish()
    assert fleet.collect().returncode == 0
    record, container = fleet.applied("solo"), fleet.container("app@solo")
    container_id = fleet.api.inspect_container(container)["Id"]
    good = json.loads((fleet.dir / ".control" / "out" / "solo.declaration.json").read_text())
    key = ensure_delivery_key(fleet.dir, _mesh(fleet))
    body = {"mesh": fleet.name, "node": "solo", "serial": good["serial"] + 1,
            "digest": good["digest"], "published": "2026-01-01T00:00:00Z",
            "declaration": dict(good, serial=good["serial"] + 1, containers=[]),
            "secrets": {}}
    signed = messages.sign(messages.DECLARATION, body, key.key, key.certificate_pem)
    tampered = json.loads(signed)
    tampered["body"] = tampered["body"].replace('"containers":[]', '"containers": []')
    other_dir = tmp_path / "other-ca"
    other_dir.mkdir()
    other_mesh = _mesh(fleet)
    init_ca(other_dir, other_mesh)
    other_key = ensure_delivery_key(other_dir, other_mesh)
    other_node = dict(body, node="elsewhere", declaration=dict(body["declaration"],
                                                               node="elsewhere"))
    cases = {
        "bad-signature": (json.dumps(tampered).encode(), "bad signature"),
        "another-key": (messages.sign(messages.DECLARATION, body, other_key.key,
                                      other_key.certificate_pem), "did not certify"),
        "another-node": (messages.sign(messages.DECLARATION, other_node, key.key,
                                       key.certificate_pem), "not this node"),
        "truncated": (signed[: len(signed) // 3], "not JSON"),
        "not-json": (b"\x00 rm -rf /", "not JSON"),
    }
    for name, (data, _) in cases.items():
        send_raw(fleet, data, f"test/{name}")
    fleet.wait_log("solo", "reported rejected", timeout=60)
    deadline = time.monotonic() + 60
    while fleet.log("solo").read_text().count("reported rejected") < 5:
        assert time.monotonic() < deadline, fleet.log("solo").read_text()[-3000:]
        time.sleep(0.3)
    fleet.collect(wait=0)
    kept = {h["message_id"]: h for h in fleet.reports("solo")["history"]}
    log = fleet.log("solo").read_text()
    for name, (_, reason) in cases.items():
        assert kept[f"test/{name}"]["result"] == "rejected"
        assert reason in kept[f"test/{name}"]["reason"], kept[f"test/{name}"]
        assert re.search(rf"refused message test/{name}: .*{re.escape(reason)}", log), name
    assert fleet.applied("solo") == record, "the applied record changed"
    assert fleet.api.inspect_container(container)["Id"] == container_id
    assert queued(fleet) == 0, "every refused message is acknowledged once reported"


def test_an_older_serial_than_the_one_applied_is_superseded_never_applied(fleet):
    fleet.start_agent("solo")
    fleet.publish()
    assert fleet.collect().returncode == 0
    old = (fleet.dir / ".control" / "out" / "solo.declaration.json").read_text()
    greet(fleet, "newer")
    fleet.publish()
    assert fleet.collect().returncode == 0
    newer = fleet.applied("solo")["serial"]
    key = ensure_delivery_key(fleet.dir, _mesh(fleet))
    declaration = json.loads(old)
    body = {"mesh": fleet.name, "node": "solo", "serial": declaration["serial"],
            "digest": declaration["digest"], "published": "2026-01-01T00:00:00Z",
            "declaration": declaration, "secrets": {}}
    send_raw(fleet, messages.sign(messages.DECLARATION, body, key.key, key.certificate_pem),
             "test/late")
    fleet.wait_log("solo", f"superseded by serial {newer}", timeout=60)
    fleet.collect(wait=0)
    late = {h["message_id"]: h for h in fleet.reports("solo")["history"]}["test/late"]
    assert (late["result"], late["superseded_by"]) == ("superseded", newer)
    assert fleet.env_of("app@solo")["GREETING"] == "newer"
    assert fleet.applied("solo")["serial"] == newer


def test_an_agent_killed_mid_apply_gets_the_message_again_and_converges_a_duplicate_is_a_noop(
        fleet):
    fleet.start_agent("solo")
    fleet.publish()
    assert fleet.collect().returncode == 0
    fleet.instances["slow@solo"] = ("slow", "solo")
    fleet.write_mesh()
    fleet.mesh("pin", ".")
    size = fleet.log_size("solo")
    fleet.publish()
    serial = json.loads((fleet.dir / ".control" / "out" / "solo.declaration.json")
                        .read_text())["serial"]
    fleet.wait_log("solo", "run-step", timeout=60, after=size)
    fleet.stop_agent("solo", signal.SIGKILL)  # mid-apply: the run-once step sleeps 6 s
    assert fleet.applied("solo")["serial"] < serial
    fleet.start_agent("solo")
    fleet.wait_log("solo", f"reported applied for serial {serial}", timeout=120)
    assert fleet.collect().returncode == 0
    assert fleet.env_of("slow@solo")["AFTER"] == "prepared"
    assert fleet.applied("solo")["serial"] == serial
    size = fleet.log_size("solo")
    fleet.publish("--node", "solo")  # the same declaration again: a duplicate delivery
    fleet.wait_log("solo", f"reported applied for serial {serial}", timeout=60, after=size)
    fleet.collect(wait=0)
    last = fleet.reports("solo")["last"]
    assert (last["serial"], last["result"]) == (serial, "applied")
    assert last["operations"] == [], last["operations"]


def _mesh(fleet):
    from executors.control.loading import load_mesh_dir

    return load_mesh_dir(fleet.dir).mesh
