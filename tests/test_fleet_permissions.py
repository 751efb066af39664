"""A node's broker account may read only its own queue and speak only in its own name: asserted
against a real RabbitMQ (a private one serving AMQP over TLS only, its certificate from the
mesh's CA, as the mesh's broker serves it), with accounts made by real enrolment.

Nodes `a` and `b` are enrolled through `mesh enrol token`, `mesh agent enrol` and `mesh enrol
accept`; the test then logs in as `a` (its password unsealed with a's own key, as a's agent does)
and tries what a stolen node key would let an attacker try.
"""

from __future__ import annotations

import json

import pika
import pika.exceptions
import pytest

from _fleet import FleetMesh
from _private_rabbit import available
from executors.common import amqp, messages
from executors.common.amqp import FleetNames
from executors.common.keys import load_private_key, unseal
from executors.node.agent.config import load_config

pytestmark = pytest.mark.integration

_why = available()
if _why:
    pytest.skip(f"private RabbitMQ: {_why}", allow_module_level=True)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    fleet = FleetMesh(tmp_path_factory.mktemp("perm"), {}, nodes=("a", "b"))
    rabbit = None
    try:
        fleet.setup()
        rabbit = fleet.tls_rabbit()
        fleet.enrol("a")
        fleet.enrol("b")
        for node in ("a", "b"):  # the agent takes its answer at its first start
            fleet.start_agent(node)
            fleet.stop_agent(node)
        yield fleet
    finally:
        fleet.close()
        if rabbit is not None:
            rabbit.remove()


def login(fleet, node):
    config = load_config(fleet.config(node))
    password = unseal(load_private_key(config.key), config.login.password_sealed)
    # as a's agent connects: TLS, the broker verified against the CA a's token carried
    return amqp.connect(amqp.parameters(
        amqp.BrokerAddress(config.login.host, config.login.port), config.login.vhost,
        config.login.user, password, tls=config.tls())), config


def report(fleet, node, **fields):
    return messages.plain({"format": messages.REPORT_FORMAT, "mesh": fleet.name, "node": node,
                           "at": "2026-01-01T00:00:00Z", "trigger": "message",
                           "result": "failed", "reason": "a test", **fields})


def refused(action) -> pika.exceptions.ChannelClosedByBroker:
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        action()
    return closed.value


def test_a_node_cannot_consume_another_nodes_queue(fleet):
    connection, _ = login(fleet, "a")
    try:
        channel = connection.channel()
        error = refused(lambda: channel.basic_consume("node.b", lambda *a: None))
        assert error.reply_code == 403 and "node.b" in error.reply_text
        channel = connection.channel()
        error = refused(lambda: channel.basic_get("node.b"))
        assert error.reply_code == 403
        own = connection.channel()
        own.basic_consume("node.a", lambda *a: None)  # its own queue: allowed
    finally:
        connection.close()


def test_a_node_cannot_report_in_another_nodes_name_the_broker_refuses_it(fleet):
    connection, config = login(fleet, "a")
    names = FleetNames(fleet.name)
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        error = refused(lambda: channel.basic_publish(
            "reports", "reports", report(fleet, "b"),
            pika.BasicProperties(user_id=names.node_user("b"), delivery_mode=2)))
        assert error.reply_code == 406 and "user_id" in error.reply_text
    finally:
        connection.close()


def test_a_node_can_neither_publish_declarations_nor_use_the_default_exchange_nor_declare(
        fleet):
    connection, _ = login(fleet, "a")
    try:
        for action in (
            lambda ch: ch.basic_publish("declarations", "b", b"{}"),
            lambda ch: ch.basic_publish("", "node.b", b"{}"),
            lambda ch: ch.queue_declare("node.a.mine"),
            lambda ch: ch.queue_bind("node.a", "declarations", "b"),
        ):
            channel = connection.channel()
            channel.confirm_delivery()
            assert refused(lambda: action(channel)).reply_code == 403
    finally:
        connection.close()


def test_control_takes_a_report_only_in_the_name_of_the_account_that_sent_it(fleet):
    connection, config = login(fleet, "a")
    names = FleetNames(fleet.name)
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        # the broker lets a node publish without user_id, or with a body naming another node:
        channel.basic_publish("reports", "reports", report(fleet, "b", reason="forged"),
                              pika.BasicProperties(user_id=names.node_user("a")))
        channel.basic_publish("reports", "reports", report(fleet, "a", reason="anonymous"),
                              pika.BasicProperties())
        channel.basic_publish("reports", "reports", report(fleet, "a", reason="honest"),
                              pika.BasicProperties(user_id=names.node_user("a")))
    finally:
        connection.close()
    collected = fleet.collect(wait=0, check=False)
    text = collected.stdout + collected.stderr
    assert "speaks for node b" in text and "no user_id" in text
    kept_b = fleet.reports("b")
    assert not kept_b, "a report in b's name was kept"
    assert fleet.reports("a")["last"]["reason"] == "honest"


def test_the_node_keeps_only_sealed_values_and_the_answer_was_taken(fleet):
    text = fleet.config("a").read_text()
    connection, config = login(fleet, "a")
    connection.close()
    password = unseal(load_private_key(config.key), config.login.password_sealed)
    assert password not in text and password not in fleet.everything_printed()
    status = json.loads(fleet.mesh("status", ".", "--json").stdout)
    assert [n["enrolled"] for n in status["nodes"]] == [True, True]
    tokens = json.loads(fleet.mesh(*fleet.control_args("enrol", "list", ".", "--json")).stdout)
    assert {t["state"] for t in tokens} == {"closed"}, tokens
    users = {u["name"] for u in __import__("requests").get(
        f"{fleet.broker.api}/api/users", auth=(fleet.broker.admin, fleet.broker.password),
        verify=fleet.broker.verify,
        timeout=10).json()}
    assert not any(".enrol." in u for u in users if u.startswith(f"mesh.{fleet.name}."))
