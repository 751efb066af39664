"""PostgreSQL provisioner against the real server of scripts/services.sh.

Covers: eight consumers on one server with logins that cannot read each other's databases;
idempotence (a second run issues no statement); the two-login rotation with a client that
connects through the whole rotation without one authentication failure; a removed grant's
logins dropped while its database and data are kept (still owned by its NOLOGIN group role)
and reported orphaned, and a re-grant finding every table usable; the bounded,
reported readiness wait; no password in any report.
"""

from __future__ import annotations

import string

import io
import threading
import time

import attrs
import psycopg
import pytest
from pyrsistent import pvector

from resolver import (ContainerDecl, Declaration, GrantDecl, ProviderDecl, PublishedPort,
                      SecretRef)

import _pg
from executors.node.provisioners import postgres as provision_postgres
from executors.node.provisioners import Endpoint, ProvisionError, provision_grants, wait_ready
from executors.common.report import LivePrinter, Report

pytestmark = pytest.mark.integration

PROVIDER = "postgres@anchor"
ADMIN_REF = SecretRef("secret/postgres@anchor/admin", 1)


class Secrets:
    """A dict-backed secret source: {(credential, generation): value}."""

    def __init__(self, admin_password: str):
        self.values = {(ADMIN_REF.credential, 1): admin_password}

    def set(self, credential: str, generation: int, value: str) -> None:
        self.values[(credential, generation)] = value

    def __call__(self, ref: SecretRef) -> str:
        return self.values[(ref.credential, ref.generation)]


@pytest.fixture
def pg():
    password = _pg.require_pg()
    prefix = _pg.unique_prefix()
    host, port = _pg.pg_address()
    yield password, prefix, {PROVIDER: Endpoint(host, port, _pg.ADMIN)}
    _pg.cleanup(password, prefix)


def grant(prefix: str, consumer: str, generation: int = 1, slot: str = "a",
          retiring: int | None = None, retiring_slot: str | None = None) -> GrantDecl:
    login = f"{prefix}{consumer}"
    credential = f"postgres-database/{PROVIDER}/{consumer}@anchor"
    return GrantDecl(provision="postgres-database", kind="database+login", provider=PROVIDER,
                     consumer=f"{consumer}@anchor", consumer_node="anchor", login=login,
                     resource=login, credential=SecretRef(credential, generation), slot=slot,
                     retiring=SecretRef(credential, retiring) if retiring else None,
                     retiring_slot=retiring_slot, admin=ADMIN_REF)


def declaration(prefix: str, grants) -> Declaration:
    # the mesh name carries the prefix, so the managed-object marker is this test's alone
    return Declaration(mesh=f"mesh-{prefix}", node="anchor", address="127.0.0.1",
                       grants=pvector(grants))


def run(decl, secrets, endpoints, stream=None):
    report = Report(printer=LivePrinter(stream=stream or io.StringIO()))
    result = provision_grants(decl, secrets, report, endpoints=endpoints, ready_timeout=30)
    return result, report


def login(password: str, user: str, dbname: str) -> psycopg.Connection:
    host, port = _pg.pg_address()
    return psycopg.connect(host=host, port=port, user=user, password=password, dbname=dbname,
                           autocommit=True, connect_timeout=5)


def test_eight_consumers_on_one_server_are_isolated_and_a_second_run_changes_nothing(pg):
    admin_password, prefix, endpoints = pg
    secrets = Secrets(admin_password)
    consumers = [f"app{i}" for i in range(8)]
    grants = [grant(prefix, c) for c in consumers]
    for g in grants:
        secrets.set(g.credential.credential, 1, f"pw-{g.login}-{time.time_ns()}")
    decl = declaration(prefix, grants)
    stream = io.StringIO()

    first, report = run(decl, secrets, endpoints, stream)
    assert not report.failed, report.to_json()
    assert [o.status for o in first.outcomes] == ["in-force"] * 8
    assert first.statements > 0

    second, report2 = run(decl, secrets, endpoints)
    assert second.statements == 0, [op.to_json() for op in report2.ops]

    for g in grants:
        password = secrets(g.credential)
        with login(password, f"{g.login}_a", g.resource) as conn:
            conn.execute("CREATE TABLE notes (body text)")
            conn.execute("INSERT INTO notes VALUES ('mine')")
            owner = conn.execute("SELECT tableowner FROM pg_tables WHERE tablename = 'notes'"
                                 ).fetchone()[0]
            assert owner == g.login  # the group role owns it, so either slot may use it
        other = grants[(grants.index(g) + 1) % len(grants)]
        with pytest.raises(psycopg.OperationalError, match="permission denied for database"):
            login(password, f"{g.login}_a", other.resource)
        with pytest.raises(psycopg.OperationalError, match="authentication failed"):
            login(password, f"{g.login}_b", g.resource)  # the idle slot is disabled

    everything = stream.getvalue() + repr(report.to_json()) + repr(first.to_json())
    for value in secrets.values.values():
        assert value not in everything


def test_rotation_keeps_a_client_connected_without_one_authentication_failure(pg):
    admin_password, prefix, endpoints = pg
    secrets = Secrets(admin_password)
    g1 = grant(prefix, "forge")
    credential = g1.credential.credential
    secrets.set(credential, 1, "generation-one-" + prefix)
    secrets.set(credential, 2, "generation-two-" + prefix)
    assert not run(declaration(prefix, [g1]), secrets, endpoints)[1].failed

    # what the holder currently uses; switched when the holder applies the new generation
    told = {"user": f"{g1.login}_a", "password": secrets(g1.credential)}
    failures: list[str] = []
    attempts = [0]
    stop = threading.Event()

    def client() -> None:
        persistent = login(told["password"], told["user"], g1.resource)
        persistent.execute("CREATE TABLE IF NOT EXISTS beats (n int)")
        while not stop.is_set():
            user, password = told["user"], told["password"]
            try:
                with login(password, user, g1.resource) as conn:  # a fresh login each time
                    conn.execute("INSERT INTO beats VALUES (1)")
                persistent.execute("SELECT count(*) FROM beats").fetchone()
            except psycopg.Error as error:
                failures.append(f"{user}: {error}")
            attempts[0] += 1
            time.sleep(0.02)
        persistent.close()

    thread = threading.Thread(target=client)
    thread.start()
    try:
        time.sleep(0.3)
        # 1. the provider puts generation 2 in the idle slot b; slot a keeps generation 1
        rotating = grant(prefix, "forge", generation=2, slot="b", retiring=1, retiring_slot="a")
        result, report = run(declaration(prefix, [rotating]), secrets, endpoints)
        assert not report.failed and result.outcomes[0].generation == 2
        assert run(declaration(prefix, [rotating]), secrets, endpoints)[0].statements == 0
        time.sleep(0.3)
        # 2. the holder applies generation 2 (slot b)
        told.update(user=f"{g1.login}_b", password=secrets.values[(credential, 2)])
        time.sleep(0.3)
        # 3. every holder applied: generation 1 retires, slot a is disabled
        settled = grant(prefix, "forge", generation=2, slot="b")
        assert not run(declaration(prefix, [settled]), secrets, endpoints)[1].failed
        assert run(declaration(prefix, [settled]), secrets, endpoints)[0].statements == 0
        time.sleep(0.3)
    finally:
        stop.set()
        thread.join(timeout=30)
    assert attempts[0] > 20
    assert failures == []
    with pytest.raises(psycopg.OperationalError, match="authentication failed"):
        login(secrets.values[(credential, 1)], f"{g1.login}_a", g1.resource)  # never again


def test_removed_grant_drops_its_logins_and_keeps_its_database_reported_orphaned(pg):
    admin_password, prefix, endpoints = pg
    secrets = Secrets(admin_password)
    kept, gone = grant(prefix, "wiki"), grant(prefix, "umami")
    for g in (kept, gone):
        secrets.set(g.credential.credential, 1, f"pw-{g.login}")
    assert not run(declaration(prefix, [kept, gone]), secrets, endpoints)[1].failed
    with login(f"pw-{gone.login}", f"{gone.login}_a", gone.resource) as conn:
        conn.execute("CREATE TABLE visits (n int)")
        conn.execute("INSERT INTO visits VALUES (42)")

    result, report = run(declaration(prefix, [kept]), secrets, endpoints)
    assert not report.failed, report.to_json()
    assert result.orphaned == [f"{PROVIDER}/{gone.resource}"]
    assert any(gone.resource in n["subject"] and "orphaned" in n["message"]
               for n in report.notices)
    with _pg.admin_connect(admin_password) as conn:
        roles = {r[0] for r in conn.execute("SELECT rolname FROM pg_roles WHERE rolname LIKE %s",
                                            (prefix + "%",))}
        # the logins are gone; the group role stays, NOLOGIN, owning the database it made
        assert roles == {kept.login, f"{kept.login}_a", f"{kept.login}_b", gone.login}
        assert conn.execute("SELECT rolcanlogin FROM pg_roles WHERE rolname = %s",
                            (gone.login,)).fetchone() == (False,)
    with _pg.admin_connect(admin_password, gone.resource) as conn:  # the data is all there
        assert conn.execute("SELECT n FROM visits").fetchone() == (42,)
        assert conn.execute("SELECT tableowner FROM pg_tables WHERE tablename = 'visits'"
                            ).fetchone() == (gone.login,)

    again, report = run(declaration(prefix, [kept]), secrets, endpoints)
    assert again.statements == 0
    assert again.orphaned == result.orphaned  # still reported, still kept
    with pytest.raises(psycopg.OperationalError, match="authentication failed"):
        login(f"pw-{gone.login}", f"{gone.login}_a", gone.resource)


def test_a_dropped_grant_granted_again_gets_its_database_back_with_every_table_usable(pg):
    """Issue 11: a typo dropped a consumer's grant, the fix granted it again; the consumer
    must find its tables as it left them, readable and writable by either login."""
    admin_password, prefix, endpoints = pg
    secrets = Secrets(admin_password)
    app = grant(prefix, "gitea")
    secrets.set(app.credential.credential, 1, f"pw-{app.login}")
    assert not run(declaration(prefix, [app]), secrets, endpoints)[1].failed
    with login(f"pw-{app.login}", f"{app.login}_a", app.resource) as conn:
        conn.execute("CREATE TABLE issues (n int)")
        conn.execute("CREATE SEQUENCE issue_numbers")
        conn.execute("INSERT INTO issues VALUES (1)")

    # the provider is still declared (what it provides), its grant for gitea is not
    provider = ProviderDecl(instance=PROVIDER, provision="postgres-database",
                            kind="database+login", listen="postgres", port=20010,
                            container_port=5432, admin=ADMIN_REF)
    idle = attrs.evolve(declaration(prefix, []), providers=pvector([provider]))
    dropped, report = run(idle, secrets, endpoints)
    assert not report.failed, report.to_json()
    assert dropped.orphaned == [f"{PROVIDER}/{app.resource}"]
    with pytest.raises(psycopg.OperationalError, match="authentication failed"):
        login(f"pw-{app.login}", f"{app.login}_a", app.resource)  # its logins are gone
    with _pg.admin_connect(admin_password) as conn:
        members = conn.execute(
            "SELECT count(*) FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.roleid "
            "WHERE g.rolname = %s", (app.login,)).fetchone()[0]
        can_login = conn.execute("SELECT rolcanlogin FROM pg_roles WHERE rolname = %s",
                                 (app.login,)).fetchone()
    assert members == 0 and can_login == (False,), "nobody can act as the kept owner"
    assert run(idle, secrets, endpoints)[0].statements == 0

    again, report = run(declaration(prefix, [app]), secrets, endpoints)
    assert not report.failed, report.to_json()
    for slot_login in (f"{app.login}_a",):
        with login(f"pw-{app.login}", slot_login, app.resource) as conn:
            assert conn.execute("SELECT n FROM issues").fetchall() == [(1,)]
            conn.execute("INSERT INTO issues VALUES (nextval('issue_numbers'))")
            conn.execute("UPDATE issues SET n = n + 10")
            conn.execute("ALTER TABLE issues ADD COLUMN title text")
            assert conn.execute("SELECT count(*) FROM issues").fetchone() == (2,)
    assert run(declaration(prefix, [app]), secrets, endpoints)[0].statements == 0


def test_a_grant_whose_credential_is_not_issued_is_skipped_and_said_so(pg):
    admin_password, prefix, endpoints = pg
    issued = grant(prefix, "late")
    pending = attrs.evolve(issued, credential=SecretRef(issued.credential.credential, None))
    result, report = run(declaration(prefix, [pending]), Secrets(admin_password), endpoints)
    assert [o.status for o in result.outcomes] == ["pending-credential"]
    assert any("not issued yet" in n["message"] for n in report.notices)
    assert report.ops == []  # nothing done, nothing listed as done


def test_unreachable_provider_fails_after_a_bounded_wait_with_its_reason():
    report = Report(printer=LivePrinter(stream=io.StringIO()))
    endpoint = Endpoint("127.0.0.1", 9, "postgres")  # discard port: nothing listens
    started = time.monotonic()
    with pytest.raises(ProvisionError, match="not ready after 2s"):
        provision_postgres.wait_for_server(endpoint, "x", report, PROVIDER, timeout=2)
    assert time.monotonic() - started < 15
    # waiting is an observation, not an operation
    assert report.ops == [] and report.checks[-1].op == "wait-ready"
    assert not report.checks[-1].ok and report.failed


def test_readiness_wait_reports_progress_and_accepts_a_server_that_comes_up_late():
    """A just-started server refuses connections for a while: that is waited for, with
    progress lines, and not mistaken for a broken one (clock and sleep are injected)."""
    now = [0.0]
    calls = [0]

    def probe():
        calls[0] += 1
        if now[0] < 12:
            raise ConnectionRefusedError("connection refused")
        return "up"

    stream = io.StringIO()
    report = Report(printer=LivePrinter(stream=stream, clock=lambda: now[0]))
    wait_ready(report, PROVIDER, probe, timeout=60, fatal=lambda e: False,
               clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))
    assert report.checks[-1].ok and "ready after 12.0s" in report.checks[-1].result
    assert stream.getvalue().count("not ready yet") == 2  # at 5s and 10s


def test_a_refused_admin_password_ends_the_wait_at_once(pg):
    admin_password, prefix, endpoints = pg
    report = Report(printer=LivePrinter(stream=io.StringIO()))
    started = time.monotonic()
    with pytest.raises(ProvisionError, match="authentication failed"):
        provision_postgres.wait_for_server(endpoints[PROVIDER], "wrong-" + prefix, report,
                                           PROVIDER, timeout=30)
    assert time.monotonic() - started < 10



def test_a_providers_last_grant_gone_is_still_swept(pg):
    """No grant names the provider any more; its container (the catalogue's postgres shape:
    port 5432 published, its own admin secret) is still declared, so its orphans are found."""
    admin_password, prefix, endpoints = pg
    secrets = Secrets(admin_password)
    only = grant(prefix, "solo")
    secrets.set(only.credential.credential, 1, f"pw-{only.login}")
    assert not run(declaration(prefix, [only]), secrets, endpoints)[1].failed
    server = ContainerDecl(
        name="postgres-server", instance=PROVIDER, container="server",
        image="docker.io/library/postgres@sha256:" + "0" * 64, secrets=pvector([ADMIN_REF]),
        ports=pvector([PublishedPort("127.0.0.1", 20010, 5432, "tcp", "postgres")]))
    empty = attrs.evolve(declaration(prefix, []), containers=pvector([server]))
    result, report = run(empty, secrets, endpoints)
    assert not report.failed, report.to_json()
    assert result.orphaned == [f"{PROVIDER}/{only.resource}"]
    assert [op.op for op in report.ops].count("drop-role") == 2  # the logins; the owner stays
    assert run(empty, secrets, endpoints)[0].statements == 0


# --------------------------------------------------------------------------- pure diff properties

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from executors.node.provisioners.postgres_plan import (  # noqa: E402
    SLOTS,
    DatabaseFacts,
    DesiredGrant,
    Observed,
    RoleFacts,
    SlotWant,
    diff,
    marker,
)

NAMES = st.from_regex(r"[a-z][a-z0-9]{0,6}", fullmatch=True)
# shaped like what the issuer issues (secrets.token_urlsafe(32): 43 URL-safe characters); a
# short printable string can be an SQL keyword ("DATABASE") and appear in any statement
PASSWORDS = st.text(st.sampled_from(string.ascii_letters + string.digits + "-_"),
                    min_size=32, max_size=43)


@st.composite
def desired_grants(draw):
    groups = draw(st.lists(NAMES, min_size=1, max_size=4, unique=True))
    grants = []
    for group in groups:
        slots = {s: None for s in SLOTS}
        for slot in draw(st.sampled_from([("a",), ("b",), ("a", "b")])):
            slots[slot] = SlotWant(draw(st.integers(1, 9)), draw(PASSWORDS))
        grants.append(DesiredGrant(group=group, database=group + "_db",
                                   credential=f"postgres-database/p/{group}", slots=slots))
    return grants


def exact_state(grants, mark: str) -> Observed:
    """The catalog a server holds once `grants` are in force (md5 verifiers: cheap to make)."""
    import hashlib

    roles, dbs = {}, {}
    for g in grants:
        roles[g.group] = RoleFacts(g.group, False, None, mark)
        for slot in SLOTS:
            name, want = g.login(slot), g.slots[slot]
            verifier = ("md5" + hashlib.md5((want.password + name).encode()).hexdigest()
                        if want else None)
            roles[name] = RoleFacts(name, want is not None, verifier, mark,
                                    frozenset({g.group}), (f"role={g.group}",))
        dbs[g.database] = DatabaseFacts(g.database, g.group, mark, public_connect=False)
    return Observed("admin", roles, dbs)


@settings(max_examples=60, deadline=None)
@given(desired_grants(), st.data())
def test_diff_is_empty_exactly_when_the_server_holds_the_grants(grants, data):
    mark = marker("m", "postgres@n")
    exact = exact_state(grants, mark)
    assert diff("m", "postgres@n", grants, exact).statements == ()
    # one fact off (a password, a login flag, a membership, an owner, PUBLIC's CONNECT,
    # an orphaned role) and there is something to do
    g = data.draw(st.sampled_from(grants))
    slot = data.draw(st.sampled_from(SLOTS))
    name = g.login(slot)
    change = data.draw(st.sampled_from(["password", "login", "member", "owner", "public",
                                        "orphan"]))
    roles, dbs = dict(exact.roles), dict(exact.databases)
    import attrs as _attrs
    if change == "password":
        # a wrong password on a live slot, or any password left on a disabled one
        roles[name] = _attrs.evolve(roles[name], verifier="md5" + "0" * 32)
        expected = True
    elif change == "login":
        roles[name] = _attrs.evolve(roles[name], can_login=not roles[name].can_login)
        expected = True
    elif change == "member":
        roles[name] = _attrs.evolve(roles[name], member_of=frozenset())
        expected = True
    elif change == "owner":
        dbs[g.database] = _attrs.evolve(dbs[g.database], owner="admin")
        expected = True
    elif change == "public":
        dbs[g.database] = _attrs.evolve(dbs[g.database], public_connect=True)
        expected = True
    else:
        roles["zz_orphan"] = RoleFacts("zz_orphan", True, None, mark)
        expected = True
    plan = diff("m", "postgres@n", grants, Observed("admin", roles, dbs))
    assert bool(plan.statements) == expected


@settings(max_examples=60, deadline=None)
@given(desired_grants(), st.booleans())
def test_no_statement_text_cause_or_subject_holds_a_password(grants, from_scratch):
    observed = (Observed("admin", {}, {}) if from_scratch
                else exact_state([DesiredGrant(g.group, g.database, g.credential,
                                               {s: (SlotWant(1, "old-password-x") if w else None)
                                                for s, w in g.slots.items()}) for g in grants],
                                 marker("m", "postgres@n")))
    plan = diff("m", "postgres@n", grants, observed)
    shown = " ".join(f"{s.text} {s.cause} {s.subject} {s!r}" for s in plan.statements)
    for g in grants:
        for want in g.slots.values():
            if want is not None:
                assert want.password not in shown
    assert any(s.params for s in plan.statements)  # the passwords travel as parameters


@settings(max_examples=60, deadline=None)
@given(desired_grants(), st.data())
def test_a_dropped_grant_keeps_its_owner_so_granting_it_again_changes_no_ownership(grants, data):
    """Whatever grants go: their logins are dropped with their objects handed to their group
    role, the group role owning the kept database stays, and granting them again from that
    state neither changes a database's owner nor reassigns anything."""
    mark = marker("m", "postgres@n")
    exact = exact_state(grants, mark)
    gone = data.draw(st.lists(st.sampled_from(grants), min_size=1, unique_by=lambda g: g.group))
    plan = diff("m", "postgres@n", [g for g in grants if g not in gone], exact)
    dropped = {s.subject for s in plan.statements if s.op == "drop-role"}
    for g in gone:
        assert g.group not in dropped, "the owner of a kept database was dropped"
        assert {g.login(slot) for slot in SLOTS} <= dropped
        assert g.database in plan.orphaned and plan.owners[g.database] == g.group
    for s in plan.statements:
        if s.op == "reassign-owned":
            heir = next(g.group for g in gone if g.login(SLOTS[0]) in s.subject.split(", "))
            assert s.cause.endswith(f"go to {heir}, data kept") and "CURRENT_USER" not in s.text
    after = {n: r for n, r in exact.roles.items() if n not in dropped}
    again = diff("m", "postgres@n", grants, Observed("admin", after, exact.databases))
    assert not [s for s in again.statements if s.op in ("alter-database", "reassign-owned",
                                                         "drop-role", "create-database")]
    assert {s.subject for s in again.statements if s.op == "create-role"} == {
        g.login(slot) for g in gone for slot in SLOTS}
