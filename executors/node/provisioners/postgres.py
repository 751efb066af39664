"""PostgreSQL grants, the shell: read the catalog, run the plan's statements, log in.

Invariants:
- What the server must hold and the statements that make it so are postgres_plan.py's (pure);
  this module reads the catalog (`query`, plain rows), runs the statements in order, stopping
  at the first failure, and reports each as it runs.
- A password is only ever a statement parameter, and the server receives a verifier made by
  libpq, never the password itself: not in a description, report, error or statement log.
- The admin's own password (a rotation of the provider's admin secret) is changed on the
  running server with ALTER ROLE, sent as a SCRAM verifier, by `set_admin_password`, logged in
  with the generation in force; the server's data directory and container are left alone.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import psycopg
from psycopg import sql

from resolver import BindingDecl, GrantDecl

from executors.common.report import Report

from executors.node.extensions import SecretSource

from executors.node.provisioners.base import (
    AUTH_FAILED,
    MISSING,
    OK,
    POSTGRES_KIND,
    UNREACHABLE,
    BindingCheck,
    Endpoint,
    GrantOutcome,
    ProvisionError,
    ProvisionResult,
    _one_line,
    binding_address,
    credential_name,
    wait_ready,
)
from executors.node.provisioners.postgres_plan import after, diff, parse  # the protocol's pure methods, re-exported
from executors.node.provisioners.postgres_plan import (
    Observed,
    Statement,
    _ident,
    desired_grant,
)

KIND = POSTGRES_KIND
DESCRIPTION = "postgres"
CONNECT_TIMEOUT = 5


# --------------------------------------------------------------------------- observe (I/O)


ROLES_QUERY = """
SELECT r.rolname, r.rolcanlogin, a.rolpassword,
       shobj_description(r.oid, 'pg_authid'),
       ARRAY(SELECT g.rolname FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.roleid
             WHERE m.member = r.oid),
       coalesce(r.rolconfig, '{}')
FROM pg_roles r LEFT JOIN pg_authid a ON a.oid = r.oid
"""
ROLES_QUERY_UNPRIVILEGED = ROLES_QUERY.replace("a.rolpassword", "NULL").replace(
    "LEFT JOIN pg_authid a ON a.oid = r.oid", "")
DATABASES_QUERY = """
SELECT d.datname, pg_get_userbyid(d.datdba), shobj_description(d.oid, 'pg_database'),
       EXISTS (SELECT 1 FROM aclexplode(coalesce(d.datacl, acldefault('d', d.datdba))) x
               WHERE x.grantee = 0 AND x.privilege_type = 'CONNECT')
FROM pg_database d WHERE NOT d.datistemplate
"""


def query(conn: psycopg.Connection) -> dict[str, Any]:
    """The catalog rows the diff needs (I/O): who the admin is, every role (with its password
    verifier when the admin may read pg_authid) and every database, as plain lists."""
    with conn.cursor() as cur:
        cur.execute("SELECT current_user")
        admin = cur.fetchone()[0]
        try:
            cur.execute(ROLES_QUERY)
        except psycopg.errors.InsufficientPrivilege:
            cur.execute(ROLES_QUERY_UNPRIVILEGED)
        roles = [list(row) for row in cur.fetchall()]
        cur.execute(DATABASES_QUERY)
        databases = [list(row) for row in cur.fetchall()]
    return {"admin": admin, "roles": roles, "databases": databases}


def observe(conn: psycopg.Connection) -> Observed:
    """Read the server's roles and databases: parse(query(conn))."""
    return parse(query(conn))


# --------------------------------------------------------------------------- apply (shell)


def connect(endpoint: Endpoint, password: str, database: Optional[str] = None,
            user: Optional[str] = None, timeout: float = CONNECT_TIMEOUT) -> psycopg.Connection:
    return psycopg.connect(host=endpoint.host, port=endpoint.port, user=user or endpoint.user,
                           password=password, dbname=database or endpoint.database,
                           connect_timeout=max(1, int(timeout)), autocommit=True,
                           application_name="mesh-provisioner")


def _auth_refused(error: Exception) -> bool:
    text = str(error)
    return "authentication failed" in text or "no pg_hba.conf entry" in text or (
        "role" in text and "does not exist" in text)


def auth_refused(error: Exception) -> bool:
    """Whether a failed login is the server refusing the credential (not a server starting)."""
    return _auth_refused(error)


def login(endpoint: Endpoint, password: str, timeout: float = CONNECT_TIMEOUT) -> str:
    """Log in as the admin; the server's self-description. Raises on any failure."""
    with connect(endpoint, password, timeout=timeout) as conn:
        version = conn.execute("SHOW server_version").fetchone()[0]
    return f"PostgreSQL {version} at {endpoint.host}:{endpoint.port}"


def set_admin_password(endpoint: Endpoint, password: str, new_password: str) -> None:
    """ALTER ROLE <admin> PASSWORD, logged in as the admin with its password in force; the
    server receives a SCRAM verifier made here by libpq, never the password itself."""
    with connect(endpoint, password) as conn:
        role = conn.execute("SELECT current_user").fetchone()[0]
        verifier = _verifier(conn, new_password, role)
        with psycopg.ClientCursor(conn) as cursor:
            try:
                cursor.execute(sql.SQL("ALTER ROLE {} PASSWORD %s").format(_ident(role)),
                               (verifier,))
            except psycopg.Error as error:  # the server's message names the role, not a value
                raise ProvisionError(f"ALTER ROLE {role}: {' '.join(str(error).split())[:300]}"
                                     ) from None


def wait_for_server(endpoint: Endpoint, admin_password: str, report: Report, subject: str,
                    timeout: float) -> None:
    wait_ready(report, subject, lambda: login(endpoint, admin_password), timeout=timeout,
               fatal=_auth_refused)


def _verifier(conn: psycopg.Connection, password: str, role: str) -> str:
    return conn.pgconn.encrypt_password(password.encode("utf-8"), role.encode("utf-8")).decode()


def run_statements(endpoint: Endpoint, admin_password: str, statements: Sequence[Statement],
                   report: Report, conn: psycopg.Connection) -> int:
    """Execute in order, stopping at the first failure (a REASSIGN that failed must not be
    followed by its DROP OWNED). Returns how many ran."""
    others: dict[str, psycopg.Connection] = {}
    ran = 0
    try:
        for statement in statements:
            op = report.begin(statement.op, statement.subject, statement.cause)
            try:
                target = conn
                if statement.database is not None:
                    if statement.database not in others:
                        others[statement.database] = connect(endpoint, admin_password,
                                                             statement.database)
                    target = others[statement.database]
                params = None
                if statement.params:
                    # the server receives a verifier made by libpq, never the password itself,
                    # so not even a server's statement log can hold it (what psql's \password does)
                    params = tuple(_verifier(target, p, statement.subject) for p in statement.params)
                with psycopg.ClientCursor(target) as cursor:  # utility statements take no $1
                    cursor.execute(statement.query, params)
            except psycopg.Error as error:
                # the server's message names objects, never a parameter's value
                message = " ".join(str(error).split())[:300]
                report.end(op, f"failed: {message}", ok=False, detail=[statement.text])
                raise ProvisionError(f"{statement.op} {statement.subject}: {message}") from None
            report.end(op, "done")
            ran += 1
    finally:
        for other in others.values():
            other.close()
    return ran


def provision_provider(mesh: str, provider: str, endpoint: Endpoint, admin_password: str,
                       grants: Sequence[GrantDecl], secret_source: SecretSource, report: Report,
                       result: ProvisionResult, *, dry_run: bool = False) -> None:
    """Make `grants` true on the PostgreSQL server of `provider` (answering, its admin
    accepted: provisioners waited for it), drop the logins of managed grants that are gone,
    and record the outcome of each grant in `result`."""
    desired = [desired_grant(g, secret_source) for g in grants]
    with connect(endpoint, admin_password) as conn:
        plan = diff(mesh, provider, desired, observe(conn))
        for group, reason in plan.refusals:
            report.record("grant", group, "refused", f"failed: {reason}", ok=False)
        if dry_run:
            for statement in plan.statements:
                report.record(statement.op, statement.subject, statement.cause, "planned")
            result.outcomes.extend(GrantOutcome(g.credential.credential, provider, g.consumer,
                                                "planned", kind=KIND) for g in grants)
            return
        try:
            result.statements += run_statements(endpoint, admin_password, plan.statements,
                                                report, conn)
        except ProvisionError as error:
            failed = str(error)
        else:
            failed = None
    refused = {group for group, _ in plan.refusals}
    for grant, want in zip(grants, desired):
        if grant.login in refused or failed:
            reason = next((r for g, r in plan.refusals if g == grant.login), failed)
            result.outcomes.append(GrantOutcome(grant.credential.credential, provider,
                                                grant.consumer, "failed", message=reason,
                                                kind=KIND))
        else:
            result.outcomes.append(GrantOutcome(
                grant.credential.credential, provider, grant.consumer, "in-force",
                generation=grant.credential.generation, kind=KIND,
                message=f"database {grant.resource}, login {want.login(grant.slot or 'a')}"))
    for database in plan.orphaned:
        group = plan.owners.get(database)  # the kept group role, when it owns the database
        owner = (f"its role {group}, which nobody can log in as; granting it again restores "
                 f"it" if group else "not a role of this grant")
        drop = f"DROP DATABASE \"{database}\"" + (f"; DROP ROLE \"{group}\"" if group else "")
        report.notice(f"database {database} on {provider}",
                      "orphaned: its grant is gone, its logins are dropped and the database is "
                      f"kept with its data (owner: {owner}). Drop it yourself when you are "
                      f"sure: {drop}")
        result.orphaned.append(f"{provider}/{database}")


# --------------------------------------------------------------------------- verify


def check_binding(binding: BindingDecl, password: str, timeout: float) -> BindingCheck:
    """Log in as the binding's user to its database at the host and port it announces."""
    host, port = binding_address(binding)
    user, database = binding.values.get("user", ""), binding.values.get("database", "")
    name = credential_name(binding.secret)
    provider = binding.provider
    try:
        with psycopg.connect(host=host, port=port, user=user, password=password,
                             dbname=database, connect_timeout=max(1, int(timeout)),
                             application_name="mesh-verify") as conn:
            conn.execute("SELECT 1").fetchone()
    except psycopg.OperationalError as error:
        text = _one_line(error)
        if "password authentication failed" in text or "authentication failed" in text:
            return BindingCheck(AUTH_FAILED,
                                f"{provider} refused login {user} with {name}: the server "
                                f"holds another password for it (a data directory initialised "
                                f"earlier with another password, or the provisioner has not run "
                                f"since this generation) or the login does not exist. Run "
                                f"`mesh apply` on {provider}'s node so its provisioner sets it")
        if "does not exist" in text and "database" in text:
            return BindingCheck(MISSING,
                                f"database {database} does not exist on {provider} (login "
                                f"{user} was accepted): the grant was removed or provisioning "
                                f"did not finish. Run `mesh apply` on {provider}'s node")
        if "permission denied for database" in text:
            return BindingCheck(MISSING,
                                f"login {user} may not connect to database {database} on "
                                f"{provider}: the grant's privileges are missing. Run "
                                f"`mesh apply` on {provider}'s node")
        if "no pg_hba.conf entry" in text:
            return BindingCheck(AUTH_FAILED,
                                f"{provider} has no pg_hba.conf rule admitting {user} from "
                                f"this node ({name}): allow the mesh network in pg_hba.conf")
        return BindingCheck(UNREACHABLE, text)
    return BindingCheck(OK, f"database {database} as {user} at {host}:{port} ({name})")


# --------------------------------------------------------------------------- the provisioner


# This module is the Provisioner of database+login grants (extensions.Provisioner): the registry
# hands out the module itself, whose functions above are the protocol's methods and these
# three names its attributes.
kind = KIND
description = DESCRIPTION
connect_timeout: float = CONNECT_TIMEOUT
