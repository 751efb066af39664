"""A provider's own admin secret, rotated on a running mesh: PostgreSQL in a container on the
real Docker Engine, driven by the `mesh` command as an operator runs it.

The server image initialises from POSTGRES_PASSWORD only on an empty data directory (as the
official image does), so the only way a new admin generation reaches a running server is the
provisioner changing it there. The walk: apply → rotate the admin → apply (the password changes
on the running server, authenticated with the generation in force; nothing is recreated) →
applied → apply (its containers are told the new generation, the server is not recreated) →
applied (the old generation is retired) → a new consumer is provisioned with the new admin, and
the old admin password is refused. Then the mistakes: a server whose admin password was changed
by hand is reported by `mesh verify` as auth-failed naming the credential and the generations
tried, and `mesh apply` stops with that message before recreating any container; its record
says the apply failed, and `mesh applied` refuses to advance a rotation on it.
"""

from __future__ import annotations

import json

import psycopg
import pytest

from _docker import env_image
from _meshop import Operator
from _manifests import APP, POSTGRES, PROVISIONS
from _pgimage import postgres_image

pytestmark = pytest.mark.integration

ADMIN = "secret/postgres@solo/admin"


@pytest.fixture
def operator(tmp_path):
    from _docker import engine

    api = engine()
    op = Operator(tmp_path, PROVISIONS,
                  {"postgres": (POSTGRES, postgres_image(api)), "app": (APP, env_image(api))},
                  {"postgres@solo": "postgres", "app1@solo": "app"})
    op.app_module = op.modules["app"]
    try:
        op.setup()
        op.applied()
        yield op
    finally:
        op.cleanup()


def test_rotating_the_postgres_admin_changes_it_on_the_running_server(operator):
    op = operator
    server = op.container_id("postgres-solo-server")
    app = op.container_id("app1-solo-web")
    first = op.values()[ADMIN][1]
    op.pg_login("postgres@solo", first).close()

    rotated = op.mesh("rotate", ".", ADMIN).stdout
    assert "no container is recreated" in rotated.split("once the provider")[0], rotated
    op.mesh("plan", ".", "--out", "out")
    report = op.apply_json()  # the server changes its admin password in place
    assert report["result"] == "applied"
    assert any(o["op"] == "set-admin-password" for o in report["ops"]), report["ops"]
    assert op.container_id("postgres-solo-server") == server, "the server was recreated"
    second = op.values()[ADMIN][2]
    op.pg_login("postgres@solo", second).close()
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        op.pg_login("postgres@solo", first)

    op.applied()  # the provider reported generation 2 in force: it becomes active
    state = op.credential(ADMIN)
    assert state.active.generation == 2 and state.pending is None
    assert state.retiring is not None and state.retiring.generation == 1
    op.mesh("plan", ".", "--out", "out")
    report = op.apply_json()  # its containers are told generation 2
    assert report["result"] == "applied"
    assert not [o for o in report["ops"] if o["op"].endswith("container")], report["ops"]
    assert op.container_id("postgres-solo-server") == server
    assert op.container_id("app1-solo-web") == app
    op.applied()
    state = op.credential(ADMIN)
    assert state.retiring is None and list(state.retired) == [1]

    # a new consumer, provisioned with the new admin
    op.write_mesh({"postgres@solo": "postgres", "app1@solo": "app", "app2@solo": "app"})
    op.mesh("plan", ".", "--issue", "--out", "out")
    report = op.apply_json()
    assert report["result"] == "applied", report
    results = json.loads(op.verify().stdout)["results"]
    statuses = {(r["consumer"], r["requirement"]): r for r in results}
    assert statuses[("app1@solo", "db")]["status"] == "ok"
    assert statuses[("app2@solo", "db")]["status"] == "ok"
    admin = statuses[("postgres@solo", "admin")]
    assert admin["status"] == "ok" and admin["generation"] == 2, admin
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        op.pg_login("postgres@solo", first)

    # a second apply right after performs no operation; its readiness and admin checks are
    # observations, listed apart (as the README says)
    report = op.apply_json()
    assert report["result"] == "applied" and report["ops"] == [], report["ops"]
    assert {c["op"] for c in report["checks"]} == {"check-admin", "wait-ready"}
    text = op.apply().stdout
    assert "nothing to change" in text and "checked wait-ready" in text
    op.assert_no_secret_printed()


def test_a_server_holding_neither_generation_stops_the_apply_before_any_container(operator):
    op = operator
    first = op.values()[ADMIN][1]
    with op.pg_login("postgres@solo", first) as conn:  # changed by hand, behind the mesh's back
        conn.execute("ALTER ROLE postgres PASSWORD 'changed-by-hand'")
    verified = op.verify(check=False)
    assert verified.returncode == 1
    admin = [r for r in json.loads(verified.stdout)["results"] if r["credential"] == ADMIN]
    assert admin and admin[0]["status"] == "auth-failed", admin
    assert "generation 1" in admin[0]["message"] and ADMIN in admin[0]["message"]

    # a change that would recreate the consumer's container, and a rotation of its login
    op.app_module.write_text(op.app_module.read_text().replace(
        "DB_HOST:", "GREETING: hello\n      DB_HOST:"))
    op.mesh("rotate", ".", "postgres-database/postgres@solo/app1@solo")
    op.mesh("plan", ".", "--out", "out")
    app = op.container_id("app1-solo-web")
    before = json.loads(op.record.read_text())
    applied = op.apply("--json", check=False)
    assert applied.returncode == 1
    report = json.loads(applied.stdout)
    assert report["result"] == "failed"
    assert ADMIN in json.dumps(report) and "generation 1" in json.dumps(report)
    assert op.container_id("app1-solo-web") == app, "a container was recreated"
    container_ops = [o for o in report["ops"] if o["op"].endswith("container")]
    assert container_ops and all(o["result"].startswith("skipped") for o in container_ops)
    (check,) = [c for c in report["checks"] if c["op"] == "check-admin"]
    assert check["result"].startswith("auth-failed") and ADMIN in check["result"]

    record = json.loads(op.record.read_text())
    assert record["result"] == "failed"
    assert (record["serial"], record["digest"]) == (before["serial"], before["digest"])
    assert record["failed"]["serial"] > before["serial"]
    refused = op.applied(check=False)
    assert refused.returncode == 1
    assert "failed" in refused.stdout + refused.stderr and ADMIN in refused.stdout + refused.stderr
    cred = op.credential("postgres-database/postgres@solo/app1@solo")
    assert cred.pending is not None and cred.active.generation == 1, "the rotation advanced"
    op.assert_no_secret_printed()


def test_rotating_the_whole_provider_moves_its_admin_and_every_login_with_no_outage(operator):
    """`mesh rotate --provider`: the admin and every consumer's login at once. The admin changes
    on the running server first and the new logins are made with it; the consumer's container
    moves once the provider reported; the server is never recreated."""
    op = operator
    server = op.container_id("postgres-solo-server")
    first = op.values()[ADMIN][1]
    login = "postgres-database/postgres@solo/app1@solo"
    op.mesh("rotate", ".", "--provider", "postgres@solo")
    op.mesh("plan", ".", "--out", "out")
    report = op.apply_json()
    assert report["result"] == "applied", report
    ops = [o["op"] for o in report["ops"]]
    assert ops[0] == "set-admin-password" and "alter-role" in ops[1:], ops  # admin first
    op.applied()
    assert op.credential(ADMIN).active.generation == 2
    assert op.credential(login).active.generation == 2
    op.mesh("plan", ".", "--out", "out")
    report = op.apply_json()
    assert [o["op"] for o in report["ops"] if o["op"].endswith("container")] == \
        ["recreate-container"]  # the consumer, told its new login; not the server
    assert op.container_id("postgres-solo-server") == server
    results = json.loads(op.verify().stdout)["results"]
    assert {(r["consumer"], r["status"], r["generation"]) for r in results} == \
        {("app1@solo", "ok", 2), ("postgres@solo", "ok", 2)}
    op.applied()
    assert list(op.credential(ADMIN).retired) == [1]
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        op.pg_login("postgres@solo", first)
    op.assert_no_secret_printed()
