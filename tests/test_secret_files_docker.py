"""Secrets as files, on the real Docker Engine, driven by the `mesh` command as an operator runs
it: PostgreSQL (tests/_pgimage.py) initialised from POSTGRES_PASSWORD_FILE, read as its
postgres user, and an app told its database password as a file.

What is checked: the server accepts the admin password it only ever read from the file (so
the file was there, 0400 and owned by 999:999, before it started); `docker inspect` of every
container and `/proc/<pid>/environ` of every process in them hold no issued secret; each file
on the node is 0400, owned by the container's user, in a 0711 directory; a second apply does
nothing; a rotation of the provider rewrites both files, recreates the app (its config digest
changed) and leaves the server running (its admin is changed in place by the provisioner).
"""

from __future__ import annotations

import json
import os
import stat

import pytest

from _docker import env_image
from _meshop import Operator
from _manifests import APP, POSTGRES, PROVISIONS
from _pgimage import postgres_image

pytestmark = pytest.mark.integration

ADMIN = "secret/postgres@solo/admin"
LOGIN = "postgres-database/postgres@solo/app1@solo"

POSTGRES_FILES = POSTGRES.replace('''      POSTGRES_PASSWORD: "${{self.admin.password}}"
''', "").replace('''    mounts: [{{state: data''', '''    secret-files:
      - {{path: /run/secrets/postgres-password, content: "${{self.admin.password}}",
         env: POSTGRES_PASSWORD_FILE, owner: "999:999"}}
    mounts: [{{state: data''')
APP_FILES = APP.replace('''      DB_PASSWORD: "${{db.password}}"
''', '''    secret-files:
      - {{path: /run/secrets/db-password, content: "${{db.password}}", env: DB_PASSWORD_FILE,
         owner: "1234:1234"}}
''')


@pytest.fixture
def operator(tmp_path):
    assert POSTGRES_FILES != POSTGRES and APP_FILES != APP  # the manifests were rewritten
    from _docker import engine

    api = engine()
    op = Operator(tmp_path, PROVISIONS,
                  {"postgres": (POSTGRES_FILES, postgres_image(api)),
                   "app": (APP_FILES, env_image(api))},
                  {"postgres@solo": "postgres", "app1@solo": "app"})
    try:
        op.setup()
        op.applied()
        yield op
    finally:
        op.cleanup()


def _issued(op) -> set[str]:
    return {value for generations in op.values().values() for value in generations.values()}


def _containers(op) -> list[dict]:
    return [op.api.inspect_container(c["Id"])
            for c in op.api.containers(all=True, filters={"label": f"mesh.mesh={op.name}"})]


def _environs(op, inspected: dict) -> dict[int, bytes]:
    """/proc/<pid>/environ of every process of a running container (host pids)."""
    found = {}
    for row in op.api.top(inspected["Id"], ps_args="-eo pid")["Processes"] or []:
        pid = int(row[0])
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                found[pid] = handle.read()
        except (FileNotFoundError, ProcessLookupError):
            pass  # gone since it was listed
    return found


def assert_no_secret_in_containers(op) -> None:
    """The plaintext scan, extended to what the runtime shows of each container and to its
    processes' environments: no issued value in either."""
    issued = _issued(op)
    assert issued
    inspected = _containers(op)
    assert len(inspected) == 2
    for container in inspected:
        text = json.dumps(container)
        for value in issued:
            assert value not in text, f"an issued secret in docker inspect of {container['Name']}"
        environs = _environs(op, container)
        assert environs, f"no process of {container['Name']} was read"
        for pid, environ in environs.items():
            for value in issued:
                assert value.encode() not in environ, \
                    f"an issued secret in /proc/{pid}/environ ({container['Name']})"


def _file(op, container: str, name: str) -> tuple[os.stat_result, os.stat_result, bytes]:
    directory = op.state / ".mesh" / "secrets" / f"{op.name}-{container}"
    path = directory / name
    return os.stat(directory), os.stat(path), path.read_bytes()


def _read_inside(op, container: str, path: str) -> str:
    exec_id = op.api.exec_create(f"{op.name}-{container}", ["cat", path])
    return op.api.exec_start(exec_id).decode()


def test_postgres_and_its_consumer_read_their_secrets_from_files(operator):
    op = operator
    values = op.values()
    admin, login = values[ADMIN][1], values[LOGIN][1]
    op.pg_login("postgres@solo", admin).close()  # initialised from the file, read as postgres
    op.pg_login("postgres@solo", login, user=_login_name(op), dbname=_database(op)).close()

    server = op.api.inspect_container(f"{op.name}-postgres-solo-server")
    app = op.api.inspect_container(f"{op.name}-app1-solo-web")
    assert "POSTGRES_PASSWORD_FILE=/run/secrets/postgres-password" in server["Config"]["Env"]
    assert not [e for e in server["Config"]["Env"] if e.startswith("POSTGRES_PASSWORD=")]
    assert "DB_PASSWORD_FILE=/run/secrets/db-password" in app["Config"]["Env"]
    for inspected in (server, app):
        (mount,) = [m for m in inspected["Mounts"] if m["Destination"] == "/run/secrets"]
        assert mount["RW"] is False, mount

    for container, name, owner, value in (("postgres-solo-server", "postgres-password",
                                           (999, 999), admin),
                                          ("app1-solo-web", "db-password", (1234, 1234), login)):
        directory, st, data = _file(op, container, name)
        assert stat.S_IMODE(directory.st_mode) == 0o711 and directory.st_uid == 0
        assert stat.S_IMODE(st.st_mode) == 0o400, oct(st.st_mode)
        assert (st.st_uid, st.st_gid) == owner
        assert data == value.encode()
    assert _read_inside(op, "app1-solo-web", "/run/secrets/db-password") == login

    assert_no_secret_in_containers(op)
    report = op.apply_json()  # owners and modes as declared: nothing to do
    assert report["result"] == "applied" and report["ops"] == [], report["ops"]
    op.assert_no_secret_printed()


def test_a_rotation_rewrites_the_files_and_recreates_only_the_consumer(operator):
    op = operator
    server = op.container_id("postgres-solo-server")
    app = op.container_id("app1-solo-web")
    op.mesh("rotate", ".", "--provider", "postgres@solo")
    op.mesh("plan", ".", "--out", "out")
    assert op.apply_json()["result"] == "applied"  # the provisioner: admin, then the login
    op.applied()
    op.mesh("plan", ".", "--out", "out")
    report = op.apply_json()
    assert report["result"] == "applied", report
    written = {o["subject"] for o in report["ops"] if o["op"] == "write-file"}
    assert any(s.endswith("/postgres-password") for s in written), written
    assert any(s.endswith("/db-password") for s in written), written
    recreated = [o for o in report["ops"] if o["op"] == "recreate-container"]
    assert [o["subject"] for o in recreated] == [f"{op.name}-app1-solo-web"], report["ops"]
    assert "secret-file /run/secrets/db-password" in recreated[0]["cause"]
    assert op.container_id("postgres-solo-server") == server
    assert op.container_id("app1-solo-web") != app

    values = op.values()
    assert _file(op, "postgres-solo-server", "postgres-password")[2] == values[ADMIN][2].encode()
    assert _read_inside(op, "app1-solo-web", "/run/secrets/db-password") == values[LOGIN][2]
    op.pg_login("postgres@solo", values[ADMIN][2]).close()
    results = json.loads(op.verify().stdout)["results"]
    assert {(r["consumer"], r["status"], r["generation"]) for r in results} == \
        {("app1@solo", "ok", 2), ("postgres@solo", "ok", 2)}
    assert_no_secret_in_containers(op)
    op.assert_no_secret_printed()


def _binding(op) -> dict:
    (binding,) = op.declaration()["bindings"]
    return binding


def _login_name(op) -> str:
    return _binding(op)["values"]["user"]


def _database(op) -> str:
    return _binding(op)["values"]["database"]
