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
from resolver.rotation import SLOTS

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
    ProvisionError,
    ProvisionResult,
    StepRunner,
    _one_line,
    binding_address,
    carry_out,
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
        admin = _scalar(cur.fetchone())
        try:
            cur.execute(ROLES_QUERY)
        except psycopg.errors.InsufficientPrivilege:
            cur.execute(ROLES_QUERY_UNPRIVILEGED)
        roles = [list(row) for row in cur.fetchall()]
        cur.execute(DATABASES_QUERY)
        databases = [list(row) for row in cur.fetchall()]
    return {"admin": admin, "roles": roles, "databases": databases}


def _scalar(row: Optional[tuple[Any, ...]]) -> str:
    """The one value of a query that always answers one row (current_user, a setting)."""
    if row is None:
        raise ProvisionError("the server answered no row where one is always given")
    return str(row[0])


def observe(conn: psycopg.Connection) -> Observed:
    """Read the server's roles and databases: parse(query(conn))."""
    return parse(query(conn))


# --------------------------------------------------------------------------- apply (shell)


#: A server serving TLS with a certificate from the mesh CA (Ed25519-signed) offers SCRAM with
#: channel binding, whose tls-server-end-point hash is undefined for Ed25519 (RFC 5929 names
#: none): libpq would fail ("could not find digest for NID UNDEF"), so it is not attempted;
#: the connection is still encrypted when the server offers TLS (sslmode prefer).
NO_CHANNEL_BINDING = "disable"


def connect(endpoint: Endpoint, password: str, database: Optional[str] = None,
            user: Optional[str] = None, timeout: float = CONNECT_TIMEOUT) -> psycopg.Connection:
    return psycopg.connect(host=endpoint.host, port=endpoint.port, user=user or endpoint.user,
                           password=password, dbname=database or endpoint.database,
                           connect_timeout=max(1, int(timeout)), autocommit=True,
                           application_name="mesh-provisioner",
                           channel_binding=NO_CHANNEL_BINDING)


def auth_refused(error: Exception) -> bool:
    """Whether a failed login is the server refusing the credential (not a server starting)."""
    text = str(error)
    return "authentication failed" in text or "no pg_hba.conf entry" in text or (
        "role" in text and "does not exist" in text)


def login(endpoint: Endpoint, password: str, timeout: float = CONNECT_TIMEOUT) -> str:
    """Log in as the admin; the server's self-description. Raises on any failure."""
    with connect(endpoint, password, timeout=timeout) as conn:
        version = _scalar(conn.execute("SHOW server_version").fetchone())
    return f"PostgreSQL {version} at {endpoint.host}:{endpoint.port}"


def set_admin_password(endpoint: Endpoint, password: str, new_password: str) -> None:
    """ALTER ROLE <admin> PASSWORD, logged in as the admin with its password in force; the
    server receives a SCRAM verifier made here by libpq, never the password itself."""
    with connect(endpoint, password) as conn:
        role = _scalar(conn.execute("SELECT current_user").fetchone())
        verifier = _verifier(conn, new_password, role)
        with psycopg.ClientCursor(conn) as cursor:
            try:
                cursor.execute(sql.SQL("ALTER ROLE {} PASSWORD %s").format(_ident(role)),
                               (verifier,))
            except psycopg.Error as error:  # the server's message names the role, not a value
                raise ProvisionError(f"ALTER ROLE {role}: {_server_said(error)}") from None


def wait_for_server(endpoint: Endpoint, admin_password: str, report: Report, subject: str,
                    timeout: float) -> None:
    wait_ready(report, subject, lambda: login(endpoint, admin_password), timeout=timeout,
               fatal=auth_refused)


def _verifier(conn: psycopg.Connection, password: str, role: str) -> str:
    return conn.pgconn.encrypt_password(password.encode("utf-8"), role.encode("utf-8")).decode()


class _Sessions:
    """Runs statements as the admin: on the admin's connection, or on one opened to the
    statement's database (kept for the statements after it, closed with the run)."""

    def __init__(self, endpoint: Endpoint, admin_password: str, conn: psycopg.Connection[Any]):
        self.endpoint, self.admin_password, self.conn = endpoint, admin_password, conn
        self.others: dict[str, psycopg.Connection[Any]] = {}

    def run(self, statement: Statement) -> None:
        target = self.conn
        if statement.database is not None:
            if statement.database not in self.others:
                self.others[statement.database] = connect(self.endpoint, self.admin_password,
                                                          statement.database)
            target = self.others[statement.database]
        params = None
        if statement.params:
            # the server receives a verifier made by libpq, never the password itself, so not
            # even a server's statement log can hold it (what psql's \password does)
            params = tuple(_verifier(target, p, statement.subject) for p in statement.params)
        with psycopg.ClientCursor(target) as cursor:  # utility statements take no $1
            cursor.execute(statement.query, params)

    def close(self) -> None:
        for other in self.others.values():
            other.close()


def _server_said(error: Exception) -> str:
    """The server's message on one line: it names objects, never a parameter's value."""
    return " ".join(str(error).split())[:300]


def provision_provider(mesh: str, provider: str, endpoint: Endpoint, admin_password: str,
                       grants: Sequence[GrantDecl], secret_source: SecretSource, report: Report,
                       result: ProvisionResult, *, dry_run: bool = False) -> None:
    """Make `grants` true on the PostgreSQL server of `provider` (answering, its admin
    accepted: provisioners waited for it), drop the logins of managed grants that are gone,
    and record the outcome of each grant in `result`."""
    desired = [desired_grant(g, secret_source) for g in grants]
    with connect(endpoint, admin_password) as conn:
        plan = diff(mesh, provider, desired, observe(conn))
        sessions = _Sessions(endpoint, admin_password, conn)
        try:  # statements run in order, up to the first failure (a REASSIGN that failed must
            # not be followed by its DROP OWNED)
            carry_out(plan.statements,
                      StepRunner(sessions.run, errors=(psycopg.Error,), describe=_server_said,
                                 detail=lambda statement: [statement.text]),
                      grants, report, result, refusals=plan.refusals,
                      refusal_key=lambda grant: grant.login, in_force=_in_force,
                      provider=provider, dry_run=dry_run)
        finally:
            sessions.close()
    if dry_run:
        return
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


def _in_force(grant: GrantDecl) -> str:
    """What holds a grant in force on the server (its outcome's message)."""
    return f"database {grant.resource}, login {grant.login}_{grant.slot or SLOTS[0]}"


# --------------------------------------------------------------------------- verify


def check_binding(binding: BindingDecl, password: str, timeout: float) -> BindingCheck:
    """Log in as the binding's user to its database at the host and port it announces."""
    host, port = binding_address(binding)
    user, database = binding.values.get("user", ""), binding.values.get("database", "")
    name = credential_name(binding.secret) if binding.secret is not None else "its credential"
    provider = binding.provider
    # as the consumer connects: a TLS binding's values say verify-full and the CA file
    sslmode = binding.values.get("sslmode") or "prefer"
    sslrootcert = binding.values.get("sslrootcert") or None
    try:
        with psycopg.connect(host=host, port=port, user=user, password=password,
                             dbname=database, connect_timeout=max(1, int(timeout)),
                             application_name="mesh-verify",
                             channel_binding=NO_CHANNEL_BINDING, sslmode=sslmode,
                             sslrootcert=sslrootcert) as conn:
            conn.execute("SELECT 1").fetchone()
    except psycopg.OperationalError as error:
        text = _one_line(error)
        if "certificate verify failed" in text or "server certificate for" in text \
                or "root certificate file" in text:
            return BindingCheck(UNREACHABLE,
                                f"{provider}'s TLS certificate at {host}:{port} does not verify "
                                f"against the mesh CA ({sslrootcert or 'no CA file'}, sslmode "
                                f"{sslmode}): {text}; nothing was "
                                f"sent. Run `mesh apply` on {provider}'s node (its certificate) "
                                f"and on this one (the CA file)", untrusted=True)
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
