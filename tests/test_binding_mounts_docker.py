"""Binding values and the mesh CA mounted as files, on the real Docker Engine, driven by the
`mesh` command as an operator runs it: PostgreSQL provides a database to a busybox consumer
whose module mounts its binding (`binding: db`, as env and as json) and the CA (`ca: true`).

The consumer reads the values from the files inside its container (`docker exec cat`), and
they are real: the test logs in to PostgreSQL with what the file says. Its environment holds no
password. Then the binding's credential is rotated (`mesh rotate`, the provider puts it in force,
`mesh applied`, the holder is told): the file in the container holds the new password, the
container was recreated (a single-file bind mount keeps the inode it was created with), and the
old password is refused by the server."""

from __future__ import annotations

import json
import os
import stat

import psycopg
import pytest

from _docker import env_image
from _manifests import POSTGRES, PROVISIONS
from _meshop import Operator
from _pgimage import postgres_image

pytestmark = pytest.mark.integration

APP = """\
name: app
artifacts:
  image: {{repository: {repository}, tag: "{tag}"}}
listens:
  http: {{port: 8080}}
requires:
  - {{as: db, provision: postgres-database}}
containers:
  - name: web
    artifact: image
    env:
      GREETING: hello
    mounts:
      - {{binding: db, target: /etc/app/db.env}}
      - {{binding: db, target: /etc/app/db.json, format: json}}
      - {{ca: true, target: /etc/ssl/mesh-ca.crt}}
    health: {{http: {{listen: http, path: /cgi-bin/env}}}}
"""
CONSUMER = "app1@solo"


@pytest.fixture
def operator(tmp_path, monkeypatch):
    from _docker import engine

    # declared files (/etc/mesh/…) go under the test's own file root, never the host's /etc
    monkeypatch.setenv("MESH_FILE_ROOT", str(tmp_path / "files"))
    api = engine()
    op = Operator(tmp_path, PROVISIONS,
                  {"postgres": (POSTGRES, postgres_image(api)), "app": (APP, env_image(api))},
                  {"postgres@solo": "postgres", CONSUMER: "app"})
    try:
        op.setup()
        op.applied()
        yield op
    finally:
        op.cleanup()


def read_in(op: Operator, container: str, path: str) -> str:
    """`cat path` inside the running container: what the app reads."""
    name = f"{op.name}-{container}"
    run = op.api.exec_create(name, ["cat", path])
    output = op.api.exec_start(run["Id"]).decode()
    assert op.api.exec_inspect(run["Id"])["ExitCode"] == 0, output
    return output


def env_values(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines())


def login(op: Operator, values: dict[str, str]):
    return psycopg.connect(host=values["host"], port=int(values["port"]), user=values["user"],
                           password=values["password"], dbname=values["database"],
                           connect_timeout=5, autocommit=True)


def test_a_consumer_reads_its_binding_and_the_ca_from_files_and_a_rotation_rewrites_them(
        operator, tmp_path):
    op = operator
    web = "app1-solo-web"
    first = env_values(read_in(op, web, "/etc/app/db.env"))
    assert json.loads(read_in(op, web, "/etc/app/db.json")) == first
    assert set(first) == {"host", "port", "database", "user", "password", "url"}
    login(op, first).close()  # the values in the file are the ones the server accepts
    ca = read_in(op, web, "/etc/ssl/mesh-ca.crt")
    assert ca == (tmp_path / "ca" / "mesh-ca.crt").read_text()
    assert "BEGIN CERTIFICATE" in ca

    # on the node: 0444 for the container's user, in directories only root enters
    files = tmp_path / "files" / "etc" / "mesh" / "bindings"
    kept = files / CONSUMER / "db.env"
    assert stat.S_IMODE(os.stat(kept).st_mode) == 0o444
    assert stat.S_IMODE(os.stat(files).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(files / CONSUMER).st_mode) == 0o700
    inspected = json.dumps(op.api.inspect_container(f"{op.name}-{web}"))
    assert first["password"] not in inspected, "the password is in the container's config"
    declaration = op.declaration()
    assert first["password"] not in json.dumps(declaration)

    (binding,) = [b for b in declaration["bindings"] if b["consumer"] == CONSUMER]
    credential = binding["secret"]["credential"]
    before = op.container_id(web)
    op.mesh("rotate", ".", credential)
    op.mesh("plan", ".", "--out", "out")
    assert op.apply_json()["result"] == "applied"  # the provider puts the new one in force
    op.applied()
    planned = op.mesh("plan", ".", "--out", "out").stdout
    assert f"secret {credential} generation 1 → 2" in planned, planned
    report = op.apply_json()  # the holder is told: its file is rewritten, it is recreated
    assert report["result"] == "applied", report
    again = op.apply_json()  # a second apply right after changes nothing
    assert not [o for o in again["ops"] if o["op"] != "record-applied"], again["ops"]
    op.applied()

    second = env_values(read_in(op, web, "/etc/app/db.env"))
    assert second["password"] != first["password"]
    assert json.loads(read_in(op, web, "/etc/app/db.json")) == second
    assert op.container_id(web) != before, "the consumer was not recreated"
    login(op, second).close()
    values = op.values()[credential]
    assert max(values) == 2 and values[2] in {second["password"]}
    op.assert_no_secret_printed()
