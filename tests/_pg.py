"""The real PostgreSQL server of scripts/services.sh, for provisioner and verify tests.

An admin role of the tests' own (superuser, scram password over TCP) is created once through
the local peer-authenticated `postgres` account; each test works in a namespace of its own
(role and database names carry a random prefix) and removes what it made.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

ENV_FILE = Path("/var/lib/mesh-test/env")
ADMIN = "mesh_test_admin"
ADMIN_PASSWORD_FILE = Path("/var/lib/mesh-test/pg-test-admin")


def service_env() -> dict[str, str]:
    values = {}
    if ENV_FILE.exists():
        for line in ENV_FILE.read_text().splitlines():
            key, sep, value = line.partition("=")
            if sep:
                values[key.strip()] = value.strip()
    return values


def pg_address() -> tuple[str, int]:
    env = service_env()
    return env.get("MESH_TEST_PG_HOST", "127.0.0.1"), int(env.get("MESH_TEST_PG_PORT", "5432"))


def _psql_as_postgres(statement: str) -> None:
    subprocess.run(["runuser", "-u", "postgres", "--", "psql", "-v", "ON_ERROR_STOP=1", "-qAtc",
                    statement], check=True, capture_output=True, timeout=30)


def admin_password() -> str:
    """The tests' admin password: created once (mode 0600), set on the role every session."""
    if not ADMIN_PASSWORD_FILE.exists():
        ADMIN_PASSWORD_FILE.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(ADMIN_PASSWORD_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_urlsafe(24))
    return ADMIN_PASSWORD_FILE.read_text().strip()


def require_pg() -> str:
    """Ensure the server answers and the tests' admin role exists; the admin password."""
    host, port = pg_address()
    if shutil.which("runuser") is None or not Path("/usr/lib/postgresql").exists():
        pytest.skip("PostgreSQL is not installed (run scripts/services.sh)")
    password = admin_password()
    try:
        with psycopg.connect(host=host, port=port, user=ADMIN, password=password,
                             dbname="postgres", connect_timeout=3):
            return password
    except psycopg.OperationalError as error:
        if "Connection refused" in str(error) or "timeout" in str(error):
            pytest.skip(f"PostgreSQL is not running on {host}:{port} (run scripts/services.sh)")
    # the role is missing or has another password: (re)create it through peer auth
    literal = password.replace("'", "''")
    _psql_as_postgres(
        f"DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{ADMIN}') "
        f"THEN CREATE ROLE {ADMIN} SUPERUSER LOGIN; END IF; END $$; "
        f"ALTER ROLE {ADMIN} SUPERUSER LOGIN PASSWORD '{literal}'")
    return password


def admin_connect(password: str, dbname: str = "postgres") -> psycopg.Connection:
    host, port = pg_address()
    return psycopg.connect(host=host, port=port, user=ADMIN, password=password, dbname=dbname,
                           autocommit=True, connect_timeout=5)


def cleanup(password: str, prefix: str) -> None:
    """Drop every database and role whose name starts with `prefix` (test objects only)."""
    with admin_connect(password) as conn:
        dbs = [r[0] for r in conn.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE %s", (prefix + "%",))]
        for db in dbs:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(db)))
        roles = [r[0] for r in conn.execute(
            "SELECT rolname FROM pg_roles WHERE rolname LIKE %s ORDER BY length(rolname) DESC",
            (prefix + "%",))]
        for role in roles:
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


def unique_prefix() -> str:
    return "t" + secrets.token_hex(3) + "_"
