"""`mesh verify` against the real PostgreSQL and RabbitMQ of scripts/services.sh.

Each binding gets exactly one result: ok, unreachable, auth-failed, missing-resource or
not-yet-provisioned; an instance with no binding "requires nothing". The frozen-password case
(the server holds a password set earlier, not the credential's generation) is auth-failed and
names the credential and its generation. The command reads the same --secrets/--key pair as
`mesh apply`, exits 1 when any binding is not ok, and prints no secret.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from psycopg import sql
from pyrsistent import pmap, pvector

from resolver import (
    BindingDecl,
    Credential,
    Declaration,
    GrantDecl,
    Generation,
    Ledger,
    SecretRef,
)
from resolver.documents import (
    dump_ledger,
    unstructure,
)
from resolver.rendering import secret_token

import _pg
import _rabbit
from executors.cli import main as cli
from executors.common import keys
from executors.node.provisioners import Endpoint, provision_grants
from executors.common.report import Report
from executors.node.verify.check import verify_declaration

pytestmark = pytest.mark.integration

PG = "postgres@anchor"
MQ = "lavinmq@anchor"
PG_ADMIN = SecretRef("secret/postgres@anchor/admin", 1)
MQ_ADMIN = SecretRef("secret/lavinmq@anchor/admin", 1)


@pytest.fixture
def world():
    """Both providers provisioned for one consumer `app@lab`: (prefix, values, grants)."""
    pg_admin = _pg.require_pg()
    _, mq_user, mq_admin = _rabbit.rabbit_admin()
    prefix = _pg.unique_prefix()
    pg_host, pg_port = _pg.pg_address()
    api_host, api_port = _rabbit.api_address()
    values = {PG_ADMIN: pg_admin, MQ_ADMIN: mq_admin}
    login = f"{prefix}app"
    pg_grant = GrantDecl(provision="postgres-database", kind="database+login", provider=PG,
                         consumer="app@lab", consumer_node="lab", login=login, resource=login,
                         credential=SecretRef(f"postgres-database/{PG}/app@lab", 3), slot="b",
                         admin=PG_ADMIN)
    mq_grant = GrantDecl(provision="amqp", kind="vhost+account", provider=MQ, consumer="app@lab",
                         consumer_node="lab", login=login, resource=login,
                         credential=SecretRef(f"amqp/{MQ}/app@lab", 2), admin=MQ_ADMIN)
    values[pg_grant.credential] = "pg-" + prefix
    values[mq_grant.credential] = "mq-" + prefix
    provider = Declaration(mesh=f"mesh-{prefix}", node="anchor", address="127.0.0.1",
                           grants=pvector([pg_grant, mq_grant]))
    report = Report()
    provision_grants(provider, values.__getitem__, report, ready_timeout=30, endpoints={
        PG: Endpoint(pg_host, pg_port, _pg.ADMIN), MQ: Endpoint(api_host, api_port, mq_user)})
    assert not report.failed, report.to_json()
    yield prefix, values, pg_grant, mq_grant
    _pg.cleanup(pg_admin, prefix)
    _rabbit.cleanup(prefix)


def pg_binding(grant: GrantDecl, port: int | None = None, database: str | None = None,
               generation: int | None = -1, requirement: str = "db") -> BindingDecl:
    host, pg_port = _pg.pg_address()
    secret = grant.credential if generation == -1 else SecretRef(grant.credential.credential,
                                                                 generation)
    values = {"host": host, "port": str(port or pg_port), "user": f"{grant.login}_{grant.slot}",
              "database": database or grant.resource,
              "password": secret_token(grant.credential.credential)}
    return BindingDecl(consumer="app@lab", requirement=requirement, provider=PG,
                       provision="postgres-database", values=pmap(values), secret=secret,
                       kind="database+login")


def mq_binding(grant: GrantDecl, vhost: str | None = None,
               requirement: str = "events") -> BindingDecl:
    host, port = _rabbit.amqp_address()
    values = {"host": host, "port": str(port), "user": grant.login,
              "vhost": vhost or grant.resource, "password": secret_token(grant.credential.credential)}
    return BindingDecl(consumer="app@lab", requirement=requirement, provider=MQ, provision="amqp",
                       values=pmap(values), secret=grant.credential, kind="vhost+account")


def consumer_node(prefix: str, bindings, instances=("app@lab",)) -> Declaration:
    return Declaration(mesh=f"mesh-{prefix}", node="lab", address="127.0.0.1",
                       bindings=pvector(bindings), instances=pvector(instances))


def by_requirement(results):
    return {r.requirement or r.consumer: r for r in results}


def test_every_binding_gets_one_result_an_operator_can_act_on(world):
    prefix, values, pg_grant, mq_grant = world
    decl = consumer_node(prefix, [
        pg_binding(pg_grant),
        mq_binding(mq_grant),
        pg_binding(pg_grant, port=9, requirement="db-closed-port"),
        pg_binding(pg_grant, database=f"{prefix}gone", requirement="db-no-database"),
        pg_binding(pg_grant, generation=None, requirement="db-not-issued"),
        mq_binding(mq_grant, vhost=f"{prefix}nowhere", requirement="events-no-vhost"),
    ], instances=("app@lab", "static-site@lab"))
    results = by_requirement(verify_declaration(decl, values.__getitem__, timeout=3))

    assert results["db"].status == "ok", results["db"].message
    assert results["events"].status == "ok", results["events"].message
    assert "reply queue declared" in results["events"].message
    assert results["db-closed-port"].status == "unreachable"
    assert "firewall" in results["db-closed-port"].message
    assert results["db-no-database"].status == "missing-resource"
    assert f"database {prefix}gone does not exist" in results["db-no-database"].message
    assert results["db-not-issued"].status == "not-yet-provisioned"
    assert "mesh plan --issue" in results["db-not-issued"].message
    assert results["events-no-vhost"].status == "missing-resource"
    nothing = results["static-site@lab"]
    assert nothing.status == "requires-nothing" and nothing.ok
    assert nothing.message.startswith("requires nothing")
    for result in results.values():
        for value in values.values():
            assert value not in result.message


def test_frozen_password_is_auth_failed_naming_the_credential_and_its_generation(world):
    """A data directory initialised earlier with another password: the server keeps the old
    password, the consumer holds generation 3. verify says so; provisioning heals it."""
    prefix, values, pg_grant, _ = world
    with _pg.admin_connect(values[PG_ADMIN]) as conn:
        conn.execute(sql.SQL("ALTER ROLE {} PASSWORD 'initialised-earlier'").format(
            sql.Identifier(f"{pg_grant.login}_b")))
    decl = consumer_node(prefix, [pg_binding(pg_grant)])
    (result,) = verify_declaration(decl, values.__getitem__, timeout=3)
    assert result.status == "auth-failed"
    assert f"credential postgres-database/{PG}/app@lab generation 3" in result.message
    assert result.credential == f"postgres-database/{PG}/app@lab" and result.generation == 3
    assert "mesh apply" in result.message

    host, port = _pg.pg_address()
    report = Report()
    provision_grants(Declaration(mesh=f"mesh-{prefix}", node="anchor", address="127.0.0.1",
                                 grants=pvector([pg_grant])), values.__getitem__, report,
                     endpoints={PG: Endpoint(host, port, _pg.ADMIN)})
    assert [op.op for op in report.ops if op.op != "wait-ready"] == ["alter-role"]
    (healed,) = verify_declaration(decl, values.__getitem__, timeout=3)
    assert healed.status == "ok", healed.message


def test_command_reads_sealed_secrets_exits_one_when_a_binding_is_not_ok(world, tmp_path):
    prefix, values, pg_grant, mq_grant = world
    public = keys.create_node_key(tmp_path / "lab.key")
    credentials = {}
    for grant in (pg_grant, mq_grant):
        ref = grant.credential
        credentials[ref.credential] = Credential(active=Generation(
            generation=ref.generation, slot=grant.slot,
            sealed=pmap({"lab": keys.seal(public, values[ref], "lab")})))
    (tmp_path / "ledger.yaml").write_text(dump_ledger(Ledger(credentials=pmap(credentials))))
    good = consumer_node(prefix, [pg_binding(pg_grant), mq_binding(mq_grant)])
    (tmp_path / "good.json").write_text(json.dumps(unstructure(good)))
    bad = consumer_node(prefix, [pg_binding(pg_grant), pg_binding(pg_grant, port=9,
                                                                  requirement="db2")])
    (tmp_path / "bad.json").write_text(json.dumps(unstructure(bad)))
    flags = ["--secrets", str(tmp_path / "ledger.yaml"), "--key", str(tmp_path / "lab.key")]

    out = io.StringIO()
    args = cli.build_parser().parse_args(["verify", str(tmp_path / "good.json"), "--json", *flags])
    assert args.func(args, out=out) == 0
    document = json.loads(out.getvalue())
    assert document["ok"] and [r["status"] for r in document["results"]] == ["ok", "ok"]

    out = io.StringIO()
    args = cli.build_parser().parse_args(["verify", str(tmp_path / "bad.json"), *flags])
    assert args.func(args, out=out) == 1
    text = out.getvalue()
    assert "unreachable" in text and "1 ok, 1 not ok" in text
    for value in values.values():
        assert value not in text


def test_a_node_whose_instances_require_nothing_says_so_and_passes(tmp_path):
    decl = Declaration(mesh="m", node="lab", address="127.0.0.1",
                       instances=pvector(["static-site@lab"]))
    (tmp_path / "d.json").write_text(json.dumps(unstructure(decl)))
    out = io.StringIO()
    args = cli.build_parser().parse_args(["verify", str(tmp_path / "d.json")])
    assert args.func(args, out=out) == 0
    assert "requires-nothing" in out.getvalue() and "requires nothing" in out.getvalue()


def test_anchor_fixture_end_to_end_nine_databases_on_one_server(tmp_path):
    """The `anchor` fixture (eight applications plus the control plane on one postgres server,
    the control plane also on the broker): plan --issue seals real credentials, the provider
    side provisions from the resolved declaration with the values unsealed by the node's key,
    and verify on the consumer side says ok for every binding.

    The fixture's broker is the catalogue's lavinmq, which serves TLS only with the certificate
    the mesh CA issued it: its stand-in is a RabbitMQ of the test's own serving AMQP and its
    management API over TLS only, with a certificate the fixture copy's CA issues for
    127.0.0.1 (`mesh ca issue-server`), and the consumer's amqps binding is verified against
    that CA where `mesh apply` puts it on the node (under the test's file root). The shared
    PostgreSQL forces two adaptations, both stated: names get this test's prefix (the server
    outlives the test) and the mesh's addresses point at the loopback services."""
    import attrs

    import resolver
    from _meshdir import FIXTURES, prepare, run_cli
    from _private_rabbit import PrivateRabbit, available
    from executors.node.apply.runner import secret_source_from
    from executors.node.verify.check import node_ca_file
    from executors.control.loading import load_mesh_dir

    why = available()
    if why:
        pytest.skip(f"a TLS broker of the test's own: {why}")
    pg_admin = _pg.require_pg()
    prefix = _pg.unique_prefix()
    mesh_dir, node_keys, _ = prepare(FIXTURES / "anchor", tmp_path)
    code, output = run_cli("ca", "init", mesh_dir)
    assert code == 0, output
    code, output = run_cli("plan", "--issue", mesh_dir)
    assert code == 0, output
    tls_out = tmp_path / "broker-tls"
    code, output = run_cli("ca", "issue-server", mesh_dir, "broker", "--address", "127.0.0.1",
                           "--out", tls_out)
    assert code == 0, output
    # the node's copy of the mesh CA, where `mesh apply` writes it (the test's file root)
    file_root = tmp_path / "root"
    ca_file = Path(node_ca_file(str(file_root)))
    ca_file.parent.mkdir(parents=True)
    ca_file.write_text((mesh_dir / "ca" / "mesh-ca.crt").read_text())
    inputs = load_mesh_dir(mesh_dir)
    declaration = resolver.resolve(inputs.catalogue, inputs.mesh, inputs.ledger).declarations[
        "anchor"]
    unsealed = secret_source_from(str(mesh_dir / "ledger.yaml"), str(node_keys["anchor"]), "anchor")
    test_admins = {PG_ADMIN.credential: pg_admin}

    def secret_source(ref: SecretRef) -> str:  # the servers here have the tests' admins
        return test_admins.get(ref.credential) or unsealed(ref)

    kinds = ("database+login", "vhost+account")
    grants = [attrs.evolve(g, login=prefix + g.login, resource=prefix + g.resource)
              for g in declaration.grants if g.kind in kinds]
    assert sum(g.kind == "database+login" for g in grants) == 9
    assert all(g.credential.generation == 1 for g in grants)
    provider = attrs.evolve(declaration, mesh=f"mesh-{prefix}", grants=pvector(grants))
    rabbit = PrivateRabbit(tls=(tls_out / "broker.crt", tls_out / "broker.key",
                                tls_out / "ca.crt")).start()
    test_admins[MQ_ADMIN.credential] = rabbit.password
    pg_host, pg_port = _pg.pg_address()
    # the broker's management API over TLS, verified against its certificate (as
    # derive_endpoint pins the one a TLS broker's declaration gives it)
    mq_api = Endpoint("127.0.0.1", rabbit.api_port, "admin", scheme="https",
                      pinned_pem=(tls_out / "broker.crt").read_text(), server_name="127.0.0.1")
    endpoints = {PG: Endpoint(pg_host, pg_port, _pg.ADMIN), MQ: mq_api}
    try:
        report = Report()
        result = provision_grants(provider, secret_source, report, endpoints=endpoints)
        assert not report.failed, report.to_json()
        assert [o.status for o in result.outcomes] == ["in-force"] * 10
        again = provision_grants(provider, secret_source, Report(), endpoints=endpoints)
        assert again.statements == 0

        amqp_host, amqp_port = "127.0.0.1", rabbit.port
        bindings = []
        for b in declaration.bindings:
            if b.kind not in kinds:
                continue
            values = dict(b.values)
            values["user"] = prefix + values["user"]
            key = "database" if b.kind == "database+login" else "vhost"
            values[key] = prefix + values[key]
            values["host"], values["port"] = ((pg_host, str(pg_port)) if b.kind == kinds[0]
                                              else (amqp_host, str(amqp_port)))
            bindings.append(attrs.evolve(b, values=pmap(values)))
        # the consumer's side: the fixture's providers (their admins at the fixture's
        # addresses) are not this test's servers
        consumer = attrs.evolve(declaration, bindings=pvector(bindings), providers=pvector())
        assert [b.values["url"].startswith("amqps://") for b in bindings
                if b.kind == "vhost+account"] == [True]
        results = verify_declaration(consumer, secret_source, timeout=5,
                                     file_root=str(file_root))
        checked = [r for r in results if r.status != "requires-nothing"]
        assert len(checked) == 10
        assert all(r.status == "ok" for r in checked), [r.message for r in checked if not r.ok]
    finally:
        _pg.cleanup(pg_admin, prefix)
        rabbit.remove()
