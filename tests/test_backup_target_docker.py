"""Backups into the mesh's own backup store, for real: two network namespaces, each with its own
dockerd and the mesh firewall on; postgres@n1 and notes@n1 (a stateful module without a dump)
on n1, the backup store store@n2 (the catalogue's backup-store: Debian's rclone serving
restic's REST protocol over TLS from the mesh CA) on n2; mesh.yaml says `backups: target:
store@n2`.

What is checked, as an operator runs it: the plan gives each stateful instance on n1 its
backup duty (its own login, the repository under it, the tokens of its sealed passwords),
the store's node a login grant for each and an opening of its port to n1 alone; `mesh apply`
on both nodes; `mesh backup postgres@n1` run inside n1 (restic on the node's host, no
password file) writes a snapshot through the store over TLS verified against the mesh CA;
another instance's login cannot read that repository (rclone refuses it); the table dropped,
`mesh restore` brings the rows back; `mesh backups` lists the snapshot. Neither the ledger,
the declarations nor anything printed holds a password.

Images come from a registry on each node's loopback (one storage behind both), pinned by
`mesh pin` inside n1: postgres from the host's binaries (tests/_pgimage.py), rclone from
Debian's package (tests/_rcloneimage.py; the catalogue's Dockerfile installs the same one).
"""

from __future__ import annotations

import json
import os
import re
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
                      ("docker-registry", "docker-registry"), ("restic", "restic")):
    if not _why and shutil.which(tool) is None:
        _why = f"{tool} is not installed ({package}; scripts/services.sh installs it)"
if _why:
    pytest.skip(f"backup store test: {_why}", allow_module_level=True)

from _pgimage import available, postgres_image  # noqa: E402
from _rcloneimage import available as rclone_available, rclone_image  # noqa: E402

if not available():
    pytest.skip("PostgreSQL server binaries are not installed (run scripts/services.sh)",
                allow_module_level=True)
if rclone_available():
    pytest.skip(rclone_available(), allow_module_level=True)

REPO = Path(__file__).resolve().parent.parent
PG_IMAGE = f"{UPSTREAM}/mesh-test-backup/postgres"
RCLONE_IMAGE = f"{UPSTREAM}/mesh-test-backup/rclone"
PROVISIONS = (REPO / "catalogue" / "provisions.yaml").read_text()
ROWS = 2_000

POSTGRES = f"""\
name: postgres
artifacts:
  postgres: {{repository: {PG_IMAGE}, tag: "1"}}
listens:
  postgres: {{port: 5432}}
provides:
  - {{provision: postgres-database, listen: postgres, admin: admin}}
secrets: [admin]
state:
  data: {{path: "@TMP@/pgdata", owner: "999:999", mode: "0700"}}
containers:
  - name: server
    artifact: postgres
    env:
      POSTGRES_USER: postgres
      POSTGRES_PASSWORD: "${{self.admin.password}}"
      PGDATA: /var/lib/postgresql/data
    mounts: [{{state: data, target: /var/lib/postgresql/data}}]
    health:
      command: [pg_isready, --username, postgres, --host, 127.0.0.1]
      timeout: 180
backup:
  container: server
  dump: [pg_dumpall, --username, postgres, --clean, --if-exists]
  restore: [psql, -X, -q, --username, postgres, --dbname, postgres]
"""
# a stateful module without a dump (stop-copy), on the rclone image (it has a shell)
NOTES = f"""\
name: notes
artifacts:
  image: {{repository: {RCLONE_IMAGE}, tag: "1"}}
state:
  notes: {{path: "@TMP@/notes", owner: "0:0", mode: "0700"}}
containers:
  - name: keeper
    artifact: image
    command: [sleep, "36000"]
    mounts: [{{state: notes, target: /notes}}]
"""


def _store_module() -> str:
    """The catalogue's backup-store, its built artifact replaced by the test's image."""
    text = (REPO / "catalogue" / "backup-store" / "module.yaml").read_text()
    artifacts = re.search(r"\nartifacts:\n(?:  .*\n|\n)*?(?=\n\S)", text)
    assert artifacts, text
    return text.replace(artifacts.group(0), f"\nartifacts:\n  rclone: {{repository: "
                        f"{RCLONE_IMAGE}, tag: \"1\", tls: true}}\n")


def write_mesh(directory: Path, topology, keys: dict) -> None:
    catalogue = directory / "catalogue"
    # state at absolute paths of the test's own directory (relative ones are under the
    # declarations' state root, /var/lib/mesh, shared by every test of this machine)
    for name, text in (("postgres", POSTGRES), ("notes", NOTES),
                       ("backup-store", _store_module().replace(
                           "path: repositories", f"path: {directory.parent}/repositories"))):
        (catalogue / name).mkdir(parents=True, exist_ok=True)
        (catalogue / name / "module.yaml").write_text(text.replace("@TMP@",
                                                                   str(directory.parent)))
    (catalogue / "provisions.yaml").write_text(PROVISIONS)
    nodes = "".join(f"  {node}:\n    address: {topology.addresses[node]}\n"
                    f"    public-key: {keys[node]}\n" + ("    control: true\n" if node == "n1"
                                                         else "")
                    for node in ("n1", "n2"))
    (directory / "mesh.yaml").write_text(
        f"mesh: bkst{os.getpid()}\ncatalogue: catalogue\nledger: ledger.yaml\nnodes:\n{nodes}"
        "instances:\n  postgres@n1: {module: postgres, node: n1}\n"
        "  notes@n1: {module: notes, node: n1}\n"
        "  store@n2: {module: backup-store, node: n2}\n"
        "backups:\n  target: store@n2\n")


def test_a_backup_into_the_mesh_store_restores_and_logins_stay_apart():
    with tempfile.TemporaryDirectory(prefix="mesh-bkst-") as scratch, \
            _netns.Topology("k", count=2,
                            subnet=f"10.83.{20 + os.getpid() % 200}") as topology:
        tmp = Path(scratch)
        with machines(topology, tmp, ("n1", "n2")) as daemons:
            _walk(topology, daemons, tmp)


def _walk(topology, daemons: dict, tmp: Path) -> None:
    from executors.common import keys as node_keys
    from executors.node import docker_engine
    from resolver.documents import load_ledger

    n1, n2 = daemons["n1"], daemons["n2"]
    engine = docker_engine.connect(n1.host)
    engine.tag(postgres_image(engine), PG_IMAGE, "1")
    n1.docker("push", f"{PG_IMAGE}:1")
    engine.tag(rclone_image(engine), RCLONE_IMAGE, "1")
    n1.docker("push", f"{RCLONE_IMAGE}:1")

    directory, out = tmp / "mesh", tmp / "out"
    directory.mkdir()
    keys = {}
    for node in ("n1", "n2"):
        made = mesh_host("node-key", node, "--path", str(tmp / f"{node}.key"))
        keys[node] = made.split("public-key:")[1].split()[0]
    write_mesh(directory, topology, keys)
    mesh_host("ca", "init", str(directory))
    mesh_in(topology, "n1", "pin", str(directory))
    printed = [mesh_host("plan", str(directory), "--issue", "--out", str(out))]

    def declaration(node: str) -> dict:
        return json.loads((out / f"{node}.declaration.json").read_text())

    def node_args(node: str) -> list[str]:
        return ["--secrets", str(directory / "ledger.yaml"), "--key", str(tmp / f"{node}.key"),
                "--docker-host", daemons[node].host, "--state-root", str(tmp / f"{node}-state"),
                "--file-root", str(tmp / f"{node}-root")]

    # the plan: a duty per stateful instance of n1, a login grant and an opening on n2
    d1, d2 = declaration("n1"), declaration("n2")
    duties = {d["instance"]: d for d in d1["backups"]}
    assert sorted(duties) == ["notes@n1", "postgres@n1"], d1["backups"]
    port = next(p["port"] for p in d2["providers"] if p["provision"] == "backup-target")
    duty = duties["postgres@n1"]
    assert duty["repository"] == \
        f"rest:https://{topology.addresses['n2']}:{port}/postgres@n1/", duty
    assert duty["login"] == "postgres@n1" and duty["target_node"] == "n2"
    assert duty["password"] == "${secret:backup-login/store@n2/postgres@n1}"
    assert duty["key"] == "${secret:backup-key/postgres@n1}"
    assert duty["ca"] == "/etc/mesh/ca/ca.crt"
    logins = sorted(g["login"] for g in d2["grants"] if g["kind"] == "backup-login")
    assert logins == ["notes@n1", "postgres@n1"], d2["grants"]
    (opening,) = [a for a in d2["firewall"]["allow"]
                  if a["reason"] == "store@n2/backup-target for notes@n1, postgres@n1"]
    assert opening["port"] == port and opening["sources"] == [topology.addresses["n1"]]
    assert not [d for d in d2.get("backups", ())], "the store backs nothing up itself"
    # the plan says it: each duty, the store's logins and its opening
    assert f"backs up postgres@n1 into {duty['repository']} on n2 as login postgres@n1" \
        in printed[0], printed[0]
    assert "grant backup-login postgres@n1 login postgres@n1 for postgres@n1 (gen 1)" \
        in printed[0], printed[0]
    assert f"firewall allow {port}/tcp from {topology.addresses['n1']} " \
        "(store@n2/backup-target for notes@n1, postgres@n1)" in printed[0], printed[0]

    for node in ("n2", "n1"):
        printed.append(mesh_in(topology, node, "apply", str(out / f"{node}.declaration.json"),
                               *node_args(node), "--no-fast"))
    (server,) = [c["name"] for c in d1["containers"] if c["instance"] == "postgres@n1"]

    def sql(statement: str, check: bool = True) -> str:
        done = n1.docker("exec", server, "psql", "-X", "-q", "-t", "-A", "--username",
                         "postgres", "-c", statement, check=False)
        assert done.returncode == 0 or not check, done.stdout + done.stderr
        return done.stdout.strip()

    sql("CREATE TABLE orders (id int PRIMARY KEY, item text)")
    sql(f"INSERT INTO orders SELECT g, 'item ' || g FROM generate_series(1, {ROWS}) g")

    def backup_verb(verb: str, *args: str, codes: tuple[int, ...] = (0,)) -> str:
        said = mesh_in(topology, "n1", verb, str(directory), *args, "--declaration",
                       str(out / "n1.declaration.json"), *node_args("n1"), codes=codes)
        printed.append(said)
        return said

    (store,) = [c["name"] for c in d2["containers"] if c["instance"] == "store@n2"]
    try:
        written = backup_verb("backup", "postgres@n1")
    except AssertionError:
        logs = n2.docker("logs", store, check=False)
        raise AssertionError(f"the store said:\n{logs.stdout}{logs.stderr}") from None
    found = re.search(r"snapshot ([0-9a-f]{8}) of postgres@n1: read .* to "
                      r"rest:https://\S+/postgres@n1/ on n2", written)
    assert found, written
    snapshot = found.group(1)
    listed = backup_verb("backups", "postgres@n1")
    assert re.search(rf"^{snapshot} +postgres@n1", listed, re.M), listed

    # another instance's login cannot read postgres@n1's repository: rclone refuses it
    ledger, _ = load_ledger((directory / "ledger.yaml").read_text(), "ledger.yaml")
    values = node_keys.unseal_for_node(ledger, "n1", node_keys.load_private_key(tmp / "n1.key"))

    def newest(credential: str) -> str:
        return values[credential][max(values[credential])]

    secrets_dir = tmp / "restic-probe"
    secrets_dir.mkdir(mode=0o700)
    (secrets_dir / "key").write_text(newest("backup-key/postgres@n1"))
    ca = tmp / "n1-root" / "etc" / "mesh" / "ca" / "ca.crt"
    address = f"{topology.addresses['n2']}:{port}"

    def restic_as(login: str, password: str, repository: str) -> subprocess.CompletedProcess:
        (secrets_dir / "repo").write_text(f"rest:https://{login.replace('@', '%40')}:"
                                          f"{password}@{address}/{repository}/")
        return topology.run("n1", "restic", "--repository-file", str(secrets_dir / "repo"),
                            "--password-file", str(secrets_dir / "key"), "--cacert", str(ca),
                            "snapshots", "--json", check=False, timeout=120)

    own = restic_as("postgres@n1", newest("backup-login/store@n2/postgres@n1"), "postgres@n1")
    assert own.returncode == 0 and snapshot in own.stdout, own.stderr
    other = restic_as("notes@n1", newest("backup-login/store@n2/notes@n1"), "postgres@n1")
    assert other.returncode != 0, other.stdout
    assert snapshot not in other.stdout

    # dropped rows come back from the store
    sql("DROP TABLE orders")
    restored = backup_verb("restore", "postgres@n1", "--snapshot", snapshot)
    assert f"restored snapshot {snapshot}" in restored, restored
    assert sql("SELECT count(*) FROM orders") == str(ROWS)

    # no password in plain text: not in the ledger, the declarations or anything printed
    ledger_text = (directory / "ledger.yaml").read_text()
    everything = "".join(printed) + (out / "n1.declaration.json").read_text() \
        + (out / "n2.declaration.json").read_text()
    for credential in ("backup-login/store@n2/postgres@n1", "backup-key/postgres@n1",
                       "backup-login/store@n2/notes@n1"):
        assert newest(credential) not in ledger_text
        assert newest(credential) not in everything
