"""AMQP provisioner against the real RabbitMQ of scripts/services.sh (management API + AMQP).

Covers: several consumers each with a vhost and an account of its own; an account can ask a
module its own question (RPC with a server-named reply queue and with amq.rabbitmq.reply-to,
seed 004) yet cannot enter another consumer's vhost; idempotence (no PUT on a second run);
single-credential rotation; no password in any report.
"""

from __future__ import annotations

import io
import time

import pika
import pytest
import requests
from pika import exceptions
from pyrsistent import pvector

from resolver import Declaration, GrantDecl, SecretRef

import _pg
import _rabbit
from executors.provision_amqp import hash_matches
from executors.provisioners import Endpoint, provision_grants
from executors.report import LivePrinter, Report

pytestmark = pytest.mark.integration

PROVIDER = "lavinmq@anchor"
ADMIN_REF = SecretRef("secret/lavinmq@anchor/admin", 1)


@pytest.fixture
def broker():
    api, user, password = _rabbit.rabbit_admin()
    prefix = _pg.unique_prefix()
    host, port = _rabbit.api_address()
    values = {(ADMIN_REF.credential, 1): password}
    yield prefix, values, {PROVIDER: Endpoint(host, port, user)}
    _rabbit.cleanup(prefix)


def grant(prefix: str, consumer: str, generation: int = 1) -> GrantDecl:
    login = f"{prefix}{consumer}"
    return GrantDecl(provision="amqp", kind="vhost+account", provider=PROVIDER,
                     consumer=f"{consumer}@anchor", consumer_node="anchor", login=login,
                     resource=login, credential=SecretRef(f"amqp/{PROVIDER}/{consumer}@anchor",
                                                          generation), admin=ADMIN_REF)


def run(prefix, grants, values, endpoints, stream=None):
    decl = Declaration(mesh=f"mesh-{prefix}", node="anchor", address="127.0.0.1",
                       grants=pvector(grants))
    report = Report(printer=LivePrinter(stream=stream or io.StringIO()))
    result = provision_grants(decl, lambda ref: values[(ref.credential, ref.generation)], report,
                              endpoints=endpoints, ready_timeout=30)
    return result, report


def connect(user: str, password: str, vhost: str) -> pika.BlockingConnection:
    host, port = _rabbit.amqp_address()
    return pika.BlockingConnection(pika.ConnectionParameters(
        host=host, port=port, virtual_host=vhost, credentials=pika.PlainCredentials(user, password),
        connection_attempts=1, socket_timeout=5))


def ask(caller: pika.BlockingConnection, module: pika.BlockingConnection, reply_to: str) -> bytes:
    """The module serves queue `tools`; the caller asks it and waits for the reply."""
    serve = module.channel()
    serve.queue_declare("tools", auto_delete=True)
    channel = caller.channel()
    if reply_to == "server-named":
        reply_queue = channel.queue_declare("", exclusive=True, auto_delete=True).method.queue
    else:
        reply_queue = "amq.rabbitmq.reply-to"
    replies: list[bytes] = []
    channel.basic_consume(reply_queue, lambda ch, m, p, body: replies.append(body),
                          auto_ack=True)
    channel.basic_publish("", "tools", b"what do you provide?",
                          pika.BasicProperties(reply_to=reply_queue, correlation_id="1"))
    deadline = time.monotonic() + 10
    while not replies and time.monotonic() < deadline:
        method, props, body = serve.basic_get("tools", auto_ack=True)
        if method is not None:
            serve.basic_publish("", props.reply_to, b"answer to: " + body,
                                pika.BasicProperties(correlation_id=props.correlation_id))
        caller.process_data_events(time_limit=0.1)
    return replies[0] if replies else b""


def test_consumers_get_isolated_vhosts_and_can_ask_their_own_questions(broker):
    prefix, values, endpoints = broker
    grants = [grant(prefix, c) for c in ("events", "control", "catalogue")]
    for g in grants:
        values[(g.credential.credential, 1)] = f"pw-{g.login}-{time.time_ns()}"
    stream = io.StringIO()
    first, report = run(prefix, grants, values, endpoints, stream)
    assert not report.failed, report.to_json()
    assert [o.status for o in first.outcomes] == ["in-force"] * 3
    assert first.statements == 9  # vhost, account, permissions for each

    second, report2 = run(prefix, grants, values, endpoints)
    assert second.statements == 0, [op.to_json() for op in report2.ops]

    api, admin, admin_password = _rabbit.rabbit_admin()
    for g in grants:
        password = values[(g.credential.credential, 1)]
        account = requests.get(f"{api}/api/users/{g.login}", auth=(admin, admin_password),
                               timeout=5).json()
        assert account["tags"] in ([], "")  # no management rights
        for reply_to in ("server-named", "direct"):
            caller = connect(g.login, password, g.resource)
            module = connect(g.login, password, g.resource)
            try:
                assert ask(caller, module, reply_to) == b"answer to: what do you provide?"
            finally:
                caller.close()
                module.close()
        other = grants[(grants.index(g) + 1) % len(grants)]
        with pytest.raises(exceptions.ProbableAccessDeniedError):
            connect(g.login, password, other.resource)

    everything = stream.getvalue() + repr(report.to_json())
    for value in values.values():
        assert value not in everything


def test_rotation_replaces_the_password_on_the_broker_first(broker):
    prefix, values, endpoints = broker
    g1 = grant(prefix, "gitea")
    credential = g1.credential.credential
    values[(credential, 1)] = "one-" + prefix
    values[(credential, 2)] = "two-" + prefix
    assert not run(prefix, [g1], values, endpoints)[1].failed
    connect(g1.login, "one-" + prefix, g1.resource).close()

    g2 = grant(prefix, "gitea", generation=2)
    result, report = run(prefix, [g2], values, endpoints)
    assert result.statements == 1 and result.outcomes[0].generation == 2
    assert [op.op for op in report.ops if op.op != "wait-ready"] == ["update-user"]
    connect(g1.login, "two-" + prefix, g1.resource).close()
    with pytest.raises(exceptions.ProbableAuthenticationError):
        connect(g1.login, "one-" + prefix, g1.resource)
    assert run(prefix, [g2], values, endpoints)[0].statements == 0


def test_broker_password_hash_is_compared_with_the_brokers_own_scheme():
    import base64
    import hashlib

    salt = b"\x01\x02\x03\x04"
    stored = base64.b64encode(salt + hashlib.sha256(salt + b"secret").digest()).decode()
    assert hash_matches(stored, "rabbit_password_hashing_sha256", "secret")
    assert not hash_matches(stored, "rabbit_password_hashing_sha256", "Secret")
    assert not hash_matches(stored, "an-unknown-scheme", "secret")
    assert not hash_matches(None, "rabbit_password_hashing_sha256", "secret")
