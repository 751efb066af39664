"""TLS for a cross-node binding, for real: two network namespaces, each with its own dockerd
and the mesh firewall on.

postgres@n1 serves TLS with the server certificate the mesh CA issued it for n1's address
(its listen says `tls: true`, as the catalogue's postgres does; the key written 0600 and owned
by the postgres user, which refuses any other); app@n2 is bound to it across nodes and told
`sslmode=verify-full` and the mesh CA's path, which the mesh mounts into its container. The
app's `psql`, run with exactly its binding's values (its environment), connects over TLS. The
same app, unchanged, is refused once postgres@n1 serves a certificate from another CA (the
verification is real), while the same server still answers a client that does not verify (it
is the certificate that is refused, not the connection). Images come from a registry on each node's loopback (one storage behind
both), pinned by `mesh pin` inside n1.
"""

from __future__ import annotations

import json
import re
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

try:
    from . import _netns
except ImportError:
    import _netns

from _machines import UPSTREAM, machines, mesh_host, mesh_in  # noqa: E402

pytestmark = pytest.mark.integration

_why = _netns.have_tools()
for tool, package in (("dockerd", "docker.io"), ("busybox", "busybox-static"),
                      ("docker-registry", "docker-registry")):
    if not _why and shutil.which(tool) is None:
        _why = f"{tool} is not installed ({package}; scripts/services.sh installs it)"
if _why:
    pytest.skip(f"two-namespace postgres TLS test: {_why}", allow_module_level=True)

from _pgimage import available, postgres_image  # noqa: E402

if not available():
    pytest.skip("PostgreSQL 15 server binaries are not installed (run scripts/services.sh)",
                allow_module_level=True)

REPO = Path(__file__).resolve().parent.parent
IMAGE = f"{UPSTREAM}/mesh-test-tls/postgres"

# the catalogue's postgres-database definition, TLS included, as the catalogue says it
PROVISIONS = (REPO / "catalogue" / "provisions.yaml").read_text()
# the catalogue's postgres, reduced to its server (no backups part), on the test image
POSTGRES = f"""\
name: postgres
artifacts:
  postgres: {{repository: {IMAGE}, tag: "1", tls: true, tls-key-owner: "999:999"}}
listens:
  postgres: {{port: 5432, tls: true, plain-same-node: true}}
provides:
  - {{provision: postgres-database, listen: postgres, admin: admin}}
secrets: [admin]
state:
  data: {{path: "@TMP@/pgdata", owner: "999:999", mode: "0700"}}
containers:
  - name: server
    artifact: postgres
    command: [postgres, -c, ssl=on, -c, ssl_cert_file=/etc/mesh/tls/server.crt,
              -c, ssl_key_file=/etc/mesh/tls/server.key]
    env:
      POSTGRES_USER: postgres
      POSTGRES_PASSWORD: "${{self.admin.password}}"
      PGDATA: /var/lib/postgresql/data
    mounts: [{{state: data, target: /var/lib/postgresql/data}}]
    health:
      command: [pg_isready, --username, postgres, --host, 127.0.0.1]
      timeout: 180
"""
# the app: libpq reads its connection from PG* variables, filled from its binding's values
APP = f"""\
name: app
artifacts:
  image: {{repository: {IMAGE}, tag: "1"}}
requires:
  - {{as: db, provision: postgres-database}}
containers:
  - name: client
    artifact: image
    command: [sleep, "3600"]
    env:
      PGHOST: "${{db.host}}"
      PGPORT: "${{db.port}}"
      PGUSER: "${{db.user}}"
      PGPASSWORD: "${{db.password}}"
      PGDATABASE: "${{db.database}}"
      PGSSLMODE: "${{db.sslmode}}"
      PGSSLROOTCERT: "${{db.sslrootcert}}"
      PGCHANNELBINDING: "${{db.channel_binding}}"
      DATABASE_URL: "${{db.url}}"
"""
CONNINFO = r"\conninfo"  # psql says "SSL connection (protocol: …)" when TLS is in use



def write_mesh(directory: Path, topology, keys: dict) -> None:
    catalogue = directory / "catalogue"
    for name, text in (("postgres", POSTGRES.replace("@TMP@", str(directory.parent))), ("app", APP)):
        (catalogue / name).mkdir(parents=True, exist_ok=True)
        (catalogue / name / "module.yaml").write_text(text)
    (catalogue / "provisions.yaml").write_text(PROVISIONS)
    nodes = "".join(f"  {node}:\n    address: {topology.addresses[node]}\n"
                    f"    public-key: {keys[node]}\n" + ("    control: true\n" if node == "n1"
                                                         else "")
                    for node in ("n1", "n2"))
    (directory / "mesh.yaml").write_text(
        f"mesh: pgtls{os.getpid()}\ncatalogue: catalogue\nledger: ledger.yaml\nnodes:\n{nodes}"
        "instances:\n  postgres@n1:\n    module: postgres\n    node: n1\n"
        "  app@n2:\n    module: app\n    node: n2\n")


def test_an_app_on_another_node_verifies_postgres_against_the_mesh_ca():
    with tempfile.TemporaryDirectory(prefix="mesh-pgtls-") as scratch, \
            _netns.Topology("q", count=2,
                            subnet=f"10.82.{20 + os.getpid() % 200}") as topology:
        tmp = Path(scratch)
        with machines(topology, tmp, ("n1", "n2")) as daemons:
            _walk(topology, daemons, tmp)


def _walk(topology, daemons: dict, tmp: Path) -> None:
    from executors.node import docker_engine

    n1, n2 = daemons["n1"], daemons["n2"]
    engine = docker_engine.connect(n1.host)
    engine.tag(postgres_image(engine), IMAGE, "1")
    n1.docker("push", f"{IMAGE}:1")

    directory, out, other_out = tmp / "mesh", tmp / "out", tmp / "other-out"
    directory.mkdir()
    keys = {}
    for node in ("n1", "n2"):
        made = mesh_host("node-key", node, "--path", str(tmp / f"{node}.key"))
        keys[node] = made.split("public-key:")[1].split()[0]
    write_mesh(directory, topology, keys)
    mesh_host("ca", "init", str(directory))
    mesh_in(topology, "n1", "pin", str(directory))
    planned = mesh_host("plan", str(directory), "--issue", "--out", str(out))
    assert "signed postgres@n1's server certificate" in planned, planned

    def declaration(where: Path, node: str) -> dict:
        return json.loads((where / f"{node}.declaration.json").read_text())

    def apply(node: str, where: Path = out) -> str:
        return mesh_in(topology, node, "apply", str(where / f"{node}.declaration.json"),
                       "--secrets", str(directory / "ledger.yaml"), "--key",
                       str(tmp / f"{node}.key"), "--docker-host", daemons[node].host,
                       "--state-root", str(tmp / f"{node}-state"), "--file-root",
                       str(tmp / f"{node}-root"), "--no-fast")

    # what the app is told: TLS required and verified against the CA mounted into it
    decl2 = declaration(out, "n2")
    (binding,) = decl2["bindings"]
    values = binding["values"]
    assert values["sslmode"] == "verify-full" and values["sslrootcert"] == "/etc/mesh/ca.crt"
    assert values["url"].endswith("?sslmode=verify-full&sslrootcert=/etc/mesh/ca.crt"
                                  "&channel_binding=disable")
    assert values["host"] == topology.addresses["n1"]
    (client,) = decl2["containers"]
    assert {"kind": "ca", "source": "/etc/mesh/ca/ca.crt", "target": "/etc/mesh/ca.crt",
            "read_only": True} in client["mounts"]
    ca_pem = (directory / "ca" / "mesh-ca.crt").read_text()
    assert [f["content"] for f in decl2["files"] if f["path"] == "/etc/mesh/ca/ca.crt"] == [
        ca_pem]

    apply("n1")
    key_file = tmp / "n1-root" / "etc/mesh/tls/postgres@n1/server.key"
    facts = key_file.stat()
    assert (oct(facts.st_mode & 0o777), facts.st_uid, facts.st_gid) == ("0o600", 999, 999)
    apply("n2")
    (server,) = declaration(out, "n1")["containers"]

    def psql(*extra: str, env: tuple = ()) -> subprocess.CompletedProcess:
        """psql in the app's container on n2, with its environment (its binding's values)."""
        return n2.docker("exec", *[f"--env={e}" for e in env], client["name"], "psql",
                         "-c", CONNINFO, *extra, check=False)

    def over_tls(result: subprocess.CompletedProcess) -> bool:
        return result.returncode == 0 and "SSL connection (protocol: TLS" in result.stdout

    def verify(node: str = "n2") -> tuple[int, str]:
        """`mesh verify` of the node's declaration, from inside the app's container, checking
        the binding as the app connects: verify-full against the CA the node holds."""
        done = topology.mesh(node, "verify", str(out / f"{node}.declaration.json"),
                             "--secrets", str(directory / "ledger.yaml"), "--key",
                             str(tmp / f"{node}.key"), "--docker-host", daemons[node].host,
                             "--file-root", str(tmp / f"{node}-root"))
        return done.returncode, done.stdout + done.stderr

    connected = psql()
    assert over_tls(connected), connected.stdout + connected.stderr
    code, said = verify()
    assert code == 0, said
    assert re.search(r"^ok +app@n2 db → postgres@n1: database ", said, re.M), said
    assert f'as user "{values["user"]}"' in connected.stdout
    # the url the binding gives says the same: TLS, verified
    by_url = n2.docker("exec", client["name"], "sh", "-c", 'psql "$DATABASE_URL" -c "'
                       + CONNINFO.replace("\\", "\\\\") + '"', check=False)
    assert over_tls(by_url), by_url.stdout + by_url.stderr

    # postgres@n1 with a certificate from another CA: the same app is refused
    other = tmp / "other"
    other.mkdir()
    shutil.copytree(directory / "catalogue", other / "catalogue")
    shutil.copy(directory / "mesh.yaml", other / "mesh.yaml")
    shutil.copy(directory / "ledger.yaml", other / "ledger.yaml")
    mesh_host("ca", "init", str(other))  # another CA, same mesh
    assert "postgres@n1" in mesh_host("renew", str(other), "n1")
    mesh_host("plan", str(other), "--out", str(other_out))
    assert declaration(other_out, "n1")["containers"][0]["labels"]["mesh.tls-serial"] != \
        server["labels"]["mesh.tls-serial"]
    mesh_in(topology, "n1", "apply", str(other_out / "n1.declaration.json"), "--secrets",
            str(other / "ledger.yaml"), "--key", str(tmp / "n1.key"), "--docker-host",
            n1.host, "--state-root", str(tmp / "n1-state"), "--file-root",
            str(tmp / "n1-root"), "--no-fast")
    refused = psql()
    said = refused.stdout + refused.stderr
    assert refused.returncode != 0 and "certificate verify failed" in said, said
    # and `mesh verify` of the app's binding fails the same way, saying why
    code, said = verify()
    assert code == 1, said
    assert re.search(r"^unreachable +app@n2 db → postgres@n1: postgres@n1's TLS certificate at "
                     r"\S+ does not verify against the mesh CA \(\S+/etc/mesh/ca/ca\.crt, "
                     r"sslmode verify-full\)", said, re.M), said
    # the server answers: a client that does not verify gets in, so it is the certificate
    unverified = psql(env=("PGSSLMODE=require", "PGSSLROOTCERT="))  # no CA: no verifying
    assert over_tls(unverified), unverified.stdout + unverified.stderr
