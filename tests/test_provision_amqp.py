"""AMQP provisioner against the real RabbitMQ of scripts/services.sh (management API + AMQP).

Covers: several consumers each with a vhost and an account of its own; an account can ask a
module its own question (RPC with a server-named reply queue and with amq.rabbitmq.reply-to,
seed 004) yet cannot enter another consumer's vhost; idempotence (no PUT on a second run);
single-credential rotation; no password in any report; a grant that disappears (its account
deleted, its vhost kept with its messages and reported orphaned on every run); objects marked
by another mesh never touched; unmarked objects of a granted name adopted; the admin account
never managed.
"""

from __future__ import annotations

import io
import time

import attrs

import pika
import pytest
import requests
from pika import exceptions
from pyrsistent import pvector

from resolver import Declaration, GrantDecl, SecretRef

import _pg
import _rabbit
from executors.node.provisioners.amqp_plan import hash_matches
from executors.node.provisioners import Endpoint, provision_grants
from executors.common.report import LivePrinter, Report

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


def run(prefix, grants, values, endpoints, stream=None, mesh=None):
    decl = Declaration(mesh=mesh or f"mesh-{prefix}", node="anchor", address="127.0.0.1",
                       grants=pvector(grants))
    report = Report(printer=LivePrinter(stream=stream or io.StringIO()))
    # a provider whose last grant went is named with its kind and admin credential
    result = provision_grants(decl, lambda ref: values[(ref.credential, ref.generation)], report,
                              endpoints=endpoints, ready_timeout=30,
                              provider_kinds={PROVIDER: "vhost+account"},
                              admin_refs={PROVIDER: ADMIN_REF})
    return result, report


def admin_api(method: str, api_path: str, **kwargs) -> requests.Response:
    api, admin, admin_password = _rabbit.rabbit_admin()
    return requests.request(method, api + api_path, auth=(admin, admin_password), timeout=10,
                            **kwargs)


def changes(report: Report) -> list[tuple[str, str]]:
    return [(op.op, op.subject) for op in report.ops if op.op not in ("wait-ready", "grant")]


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
    assert first.statements == 15  # for each: the vhost and the account, each marked first; permissions

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


def test_a_removed_grant_deletes_its_account_and_keeps_its_vhost_and_messages_orphaned(broker):
    prefix, values, endpoints = broker
    kept, gone = grant(prefix, "wiki"), grant(prefix, "umami")
    for g in (kept, gone):
        values[(g.credential.credential, 1)] = f"pw-{g.login}-{time.time_ns()}"
    assert not run(prefix, [kept, gone], values, endpoints)[1].failed
    old_password = values[(gone.credential.credential, 1)]
    connection = connect(gone.login, old_password, gone.resource)
    channel = connection.channel()
    channel.queue_declare("work", durable=True)
    for n in range(3):
        channel.basic_publish("", "work", f"job {n}".encode(),
                              pika.BasicProperties(delivery_mode=2))
    connection.close()

    stream = io.StringIO()
    result, report = run(prefix, [kept], values, endpoints, stream)
    assert not report.failed, report.to_json()
    assert changes(report) == [("delete-user", gone.login), ("unmark", f"user {gone.login}")]
    assert result.orphaned == [f"{PROVIDER}/{gone.resource}"]
    orphan_notice = [n for n in report.notices if gone.resource in n["subject"]]
    assert orphan_notice and "orphaned" in orphan_notice[0]["message"]
    assert f"rabbitmqctl delete_vhost {gone.resource}" in orphan_notice[0]["message"]
    assert [o.status for o in result.outcomes] == ["in-force"]

    with pytest.raises(exceptions.ProbableAuthenticationError):  # the login is gone
        connect(gone.login, old_password, gone.resource)
    assert admin_api("GET", f"/api/users/{gone.login}").status_code == 404
    assert admin_api("GET", f"/api/vhosts/{gone.resource}").status_code == 200
    messages = admin_api("POST", f"/api/queues/{gone.resource}/work/get",
                         json={"count": 10, "ackmode": "ack_requeue_true", "encoding": "auto"})
    assert sorted(m["payload"] for m in messages.json()) == ["job 0", "job 1", "job 2"]
    connect(kept.login, values[(kept.credential.credential, 1)], kept.resource).close()

    again, report2 = run(prefix, [kept], values, endpoints)
    assert again.statements == 0 and changes(report2) == []
    assert again.orphaned == result.orphaned  # still reported, still kept
    assert any(gone.resource in n["subject"] for n in report2.notices)
    everything = stream.getvalue() + repr(report.to_json()) + repr(report2.to_json())
    assert old_password not in everything

    # the grant comes back: the same vhost, with its messages, gets a new account
    values[(gone.credential.credential, 2)] = f"new-{prefix}"
    back = grant(prefix, "umami", generation=2)
    result, report3 = run(prefix, [kept, back], values, endpoints)
    assert not report3.failed and result.orphaned == []
    assert ("create-vhost", back.resource) not in changes(report3)
    connection = connect(back.login, f"new-{prefix}", back.resource)
    assert connection.channel().queue_declare("work", durable=True,
                                              passive=True).method.message_count == 3
    connection.close()


def test_the_last_grant_of_a_provider_gone_is_still_swept(broker):
    prefix, values, endpoints = broker
    only = grant(prefix, "solo")
    values[(only.credential.credential, 1)] = f"pw-{prefix}"
    assert not run(prefix, [only], values, endpoints)[1].failed
    result, report = run(prefix, [], values, endpoints)
    assert not report.failed, report.to_json()
    assert changes(report) == [("delete-user", only.login), ("unmark", f"user {only.login}")]
    assert result.orphaned == [f"{PROVIDER}/{only.resource}"]
    assert run(prefix, [], values, endpoints)[0].statements == 0


def test_objects_marked_by_another_mesh_are_never_touched(broker):
    prefix, values, endpoints = broker
    theirs, ours = grant(prefix, "shared"), grant(prefix, "mine")
    values[(theirs.credential.credential, 1)] = f"theirs-{prefix}"
    values[(ours.credential.credential, 1)] = f"ours-{prefix}"
    other_mesh = f"other-{prefix}"
    assert not run(prefix, [theirs], values, endpoints, mesh=other_mesh)[1].failed

    # this mesh grants its own account: the other mesh's account is not swept as an orphan
    result, report = run(prefix, [ours], values, endpoints)
    assert not report.failed, report.to_json()
    assert all(theirs.login not in subject for _, subject in changes(report))
    assert result.orphaned == []

    # this mesh claims the same names: refused by name, nothing changed
    values[(theirs.credential.credential, 2)] = f"hijack-{prefix}"
    claim = grant(prefix, "shared", generation=2)
    result, report = run(prefix, [ours, claim], values, endpoints)
    refusal = [op for op in report.ops if op.op == "grant" and op.subject == claim.login]
    assert refusal and not refusal[0].ok
    assert f"user {claim.login}" in refusal[0].result and f"vhost {claim.resource}" in \
        refusal[0].result and f"mesh:{other_mesh}:{PROVIDER}" in refusal[0].result
    assert {o.consumer: o.status for o in result.outcomes} == {
        ours.consumer: "in-force", claim.consumer: "failed"}
    assert result.statements == 0
    connect(theirs.login, f"theirs-{prefix}", theirs.resource).close()
    with pytest.raises(exceptions.ProbableAuthenticationError):
        connect(theirs.login, f"hijack-{prefix}", theirs.resource)
    assert f"hijack-{prefix}" not in repr(report.to_json())


def test_an_unmarked_account_and_vhost_of_a_granted_name_are_adopted(broker):
    prefix, values, endpoints = broker
    g = grant(prefix, "legacy")
    values[(g.credential.credential, 1)] = f"pw-{prefix}"
    assert admin_api("PUT", f"/api/vhosts/{g.resource}", json={}).status_code in (201, 204)
    assert admin_api("PUT", f"/api/users/{g.login}",
                     json={"password": f"pw-{prefix}", "tags": ""}).status_code in (201, 204)
    result, report = run(prefix, [g], values, endpoints)
    assert not report.failed, report.to_json()
    marks = [op for op in report.ops if op.op == "mark"]
    assert [op.subject for op in marks] == [f"vhost {g.resource}", f"user {g.login}"]
    assert all(op.cause.startswith("adopted") for op in marks)
    assert changes(report) == [("mark", f"vhost {g.resource}"), ("mark", f"user {g.login}"),
                               ("set-permissions", f"{g.login} on {g.resource}")]
    assert run(prefix, [g], values, endpoints)[0].statements == 0
    # adopted means managed: its grant gone, its account goes like any other
    result, report = run(prefix, [], values, endpoints)
    assert ("delete-user", g.login) in changes(report)
    assert result.orphaned == [f"{PROVIDER}/{g.resource}"]


def test_the_admin_account_is_never_managed_even_when_marked(broker):
    prefix, values, endpoints = broker
    _, admin, admin_password = _rabbit.rabbit_admin()
    mark = f"/api/global-parameters/mesh-mark%3Auser%3A{admin}"
    assert admin_api("GET", mark).status_code == 404
    own = f"mesh:mesh-{prefix}:{PROVIDER}"
    assert admin_api("PUT", mark, json={"value": own}).status_code in (201, 204)
    try:
        result, report = run(prefix, [], values, endpoints)
        assert changes(report) == [] and result.statements == 0
        assert any(admin in n["subject"] and "not touched" in n["message"]
                   for n in report.notices)
        as_admin = attrs.evolve(grant(prefix, "x"), login=admin)
        values[(as_admin.credential.credential, 1)] = "never-" + prefix
        result, report = run(prefix, [as_admin], values, endpoints)
        assert [o.status for o in result.outcomes] == ["failed"] and result.statements == 0
    finally:
        admin_api("DELETE", mark)
    assert _rabbit.rabbit_admin()[2] == admin_password  # still the admin, same password


# --------------------------------------------------------------------------- pure diff property

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from executors.node.provisioners.amqp_plan import (  # noqa: E402
    DesiredAccount,
    Observed,
    UserFacts,
    diff,
    mark_name,
    marker,
    path,
)

NAMES = st.sampled_from(["a", "b", "c", "d", "admin", "/"])
MARKS = st.sampled_from([marker("m", PROVIDER), marker("other", PROVIDER), marker("m", "x@y")])


@st.composite
def broker_states(draw):
    users = draw(st.sets(NAMES))
    tags = {u: draw(st.sampled_from([(), ("administrator",)])) for u in users}
    observed = Observed(
        admin="admin", users={u: UserFacts(u, None, "", tags[u]) for u in users},
        vhosts=frozenset(draw(st.sets(NAMES))), permissions={},
        marks=draw(st.dictionaries(st.tuples(st.sampled_from(["user", "vhost"]), NAMES), MARKS)))
    desired = [DesiredAccount(n, n, f"amqp/{n}", 1, "pw") for n in draw(st.sets(NAMES))]
    return desired, observed


@settings(max_examples=300, deadline=None)
@given(broker_states())
def test_the_diff_deletes_only_this_meshs_accounts_and_never_a_vhost(state):
    desired, observed = state
    mark = marker("m", PROVIDER)
    plan = diff("m", PROVIDER, desired, observed)
    untouchable = {path("users", "admin"), path("vhosts", "/"),
                   path("global-parameters", mark_name("user", "admin")),
                   path("global-parameters", mark_name("vhost", "/"))}
    untouchable |= {path("users", u.name) for u in observed.users.values()  # unmarked admins
                    if "administrator" in u.tags and observed.marks.get(("user", u.name)) != mark}
    for (kind, name), carried in observed.marks.items():
        if carried != mark:  # another mesh's object and its mark
            untouchable |= {path(kind + "s", name), path("global-parameters", mark_name(kind, name))}
    for call in plan.calls:
        assert call.path not in untouchable, call
        assert not call.path.startswith(path("permissions", "/") + "/"), call
        assert not (call.method == "DELETE" and call.path.startswith("/api/vhosts/")), call
        if call.op == "delete-user":
            assert observed.marks.get(("user", call.subject)) == mark
            assert call.subject not in {d.user for d in desired}
    wanted = {d.vhost for d in desired}
    assert set(plan.orphaned) == {n for (k, n), c in observed.marks.items()
                                  if k == "vhost" and c == mark and n not in wanted
                                  and n in observed.vhosts and n != "/"}
