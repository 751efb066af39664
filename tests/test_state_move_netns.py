"""A move that carries its data, for real: two network namespaces, each its own dockerd and
its own /var/lib/mesh (a mount namespace per node, so the two nodes' state directories are
two directories, as on two machines), the mesh firewall on, real PostgreSQL.

db@main (postgres) runs on n1 with app@n1 bound to it; 10,000 rows are written through the
app's binding. mesh.yaml moves db@main to n2 with `state-from: n1` (`mesh plan --issue`
signs both nodes' transfer certificates). n1's apply stops the server, writes its transfer
certificate and opens its transfer port to n2's address alone; `mesh serve-state` on n1
serves the state over mutual TLS. The first copy runs over a throttled link and n1's server is SIGKILLed mid-way:
n2's apply fails before changing anything (db@main runs on neither node, nothing is recorded
as arrived, the half copy is only in staging). The second attempt copies from the
beginning, verifies and starts db@main on n2: the rows are there, the app (recreated with the
new host) reads them across nodes, the copy on n1 is kept. Removing `state-from` closes the
transfer port, and `mesh forget-state db@main@n1` lets n1's copy go.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

try:
    from . import _netns
except ImportError:
    import _netns

from _machines import UPSTREAM, machines, mesh_host  # noqa: E402

pytestmark = pytest.mark.integration

_why = _netns.have_tools()
for tool, package in (("dockerd", "docker.io"), ("busybox", "busybox-static"),
                      ("docker-registry", "docker-registry"), ("tc", "iproute2"),
                      ("unshare", "util-linux")):
    if not _why and shutil.which(tool) is None:
        _why = f"{tool} is not installed ({package}; scripts/services.sh installs it)"
if _why:
    pytest.skip(f"two-namespace state move test: {_why}", allow_module_level=True)

from _pgimage import available, postgres_image  # noqa: E402

if not available():
    pytest.skip("PostgreSQL 15 server binaries are not installed (run scripts/services.sh)",
                allow_module_level=True)

REPO = Path(__file__).resolve().parent.parent
IMAGE = f"{UPSTREAM}/mesh-test-move/postgres"
STATE = "/var/lib/mesh"  # resolver.rendering.STATE_ROOT: each node's own, by mount namespace
PROVISIONS = (REPO / "catalogue" / "provisions.yaml").read_text()
POSTGRES = f"""\
name: postgres
artifacts:
  postgres: {{repository: {IMAGE}, tag: "1"}}
listens:
  postgres: {{port: 5432}}
provides:
  - {{provision: postgres-database, listen: postgres, admin: admin}}
secrets: [admin]
state:
  data: {{path: data, owner: "999:999", mode: "0700"}}
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
"""
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
"""
ROWS = 10_000


class OwnMountDockerd(_netns.NamespacedDockerd):
    """A namespaced dockerd in a mount namespace of its own, where /var/lib/mesh is this
    node's directory: its containers' state mounts and the node's `mesh` commands (entered
    into the same namespaces) see this node's state, not the other's."""

    def __init__(self, topology, node: str, state: Path):
        super().__init__(topology, node)
        self.state = state

    def start(self, timeout: float = 120) -> None:
        os.makedirs(self.data_root, exist_ok=True)
        os.makedirs(self.exec_root, exist_ok=True)
        self.state.mkdir(parents=True, exist_ok=True)
        script = 'mount --bind "$1" /var/lib/mesh && shift && exec "$@"'
        with open(self.log, "w") as log:
            self.process = subprocess.Popen(
                ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh",
                 str(self.state),
                 *self.topology.argv(self.node, "dockerd", "--host", self.host,
                                     "--data-root", self.data_root, "--exec-root",
                                     self.exec_root, "--pidfile", self.pidfile,
                                     "--storage-driver", _netns.STORAGE_DRIVER)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True)
        deadline = time.monotonic() + timeout
        while _netns.sh("docker", "-H", self.host, "info", check=False).returncode != 0:
            if self.process.poll() is not None or time.monotonic() > deadline:
                tail = Path(self.log).read_text()[-2000:]
                self.stop()
                raise RuntimeError(f"dockerd in {self.node} did not answer:\n{tail}")
            time.sleep(0.5)

    def argv(self, *argv: str) -> list[str]:
        """`argv` inside this node: its network and its mount namespace."""
        return ["nsenter", f"--mount=/proc/{self.process.pid}/ns/mnt",
                f"--net={self.topology.netns_path(self.node)}", f"--wd={REPO}", *argv]

    def mesh(self, *args: str, check: bool = True) -> str:
        result = subprocess.run(self.argv(sys.executable, "-m", "executors.cli", *args),
                                env=dict(os.environ, PYTHONPATH=str(REPO)),
                                capture_output=True, text=True, timeout=900)
        output = result.stdout + result.stderr
        if check:
            assert result.returncode == 0, f"mesh {' '.join(args)} in {self.node}:\n{output}"
        return output

    def popen(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen(self.argv(sys.executable, "-m", "executors.cli", *args),
                                env=dict(os.environ, PYTHONPATH=str(REPO)),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)



def test_a_move_carries_postgres_state_and_survives_a_killed_copy():
    with tempfile.TemporaryDirectory(prefix="mesh-move-") as scratch, \
            _netns.Topology("mv", count=2,
                            subnet=f"10.83.{20 + os.getpid() % 200}") as topology:
        tmp = Path(scratch)
        with machines(topology, tmp, ("n1", "n2"),
                      dockerd=lambda topology, node: OwnMountDockerd(topology, node, tmp / f"{node}-var")) as daemons:
            _walk(topology, daemons, tmp)


def _walk(topology, daemons: dict, tmp: Path) -> None:
    from executors.node import docker_engine

    n1, n2 = daemons["n1"], daemons["n2"]
    engine = docker_engine.connect(n1.host)
    engine.tag(postgres_image(engine), IMAGE, "1")
    n1.docker("push", f"{IMAGE}:1")

    directory, out = tmp / "mesh", tmp / "out"
    directory.mkdir()
    keys = {node: mesh_host("node-key", node, "--path", str(tmp / f"{node}.key"))
            .split("public-key:")[1].split()[0] for node in ("n1", "n2")}
    for name, text in (("postgres", POSTGRES), ("app", APP)):
        (directory / "catalogue" / name).mkdir(parents=True)
        (directory / "catalogue" / name / "module.yaml").write_text(text)
    (directory / "catalogue" / "provisions.yaml").write_text(PROVISIONS)
    nodes = "".join(f"  {node}:\n    address: {topology.addresses[node]}\n"
                    f"    public-key: {keys[node]}\n" + ("    control: true\n" if node == "n1"
                                                         else "")
                    for node in ("n1", "n2"))
    mesh_yaml = directory / "mesh.yaml"
    mesh_yaml.write_text(
        f"mesh: mv{os.getpid()}\ncatalogue: catalogue\nledger: ledger.yaml\nnodes:\n{nodes}"
        "instances:\n  db@main:\n    module: postgres\n    node: n1\n"
        "  app@n1:\n    module: app\n    node: n1\n")
    mesh_host("ca", "init", str(directory))
    topology_pin = topology.mesh("n1", "pin", str(directory))
    assert topology_pin.returncode == 0, topology_pin.stdout + topology_pin.stderr
    mesh_host("plan", str(directory), "--issue", "--out", str(out))

    def apply(daemon, check: bool = True) -> str:
        node = daemon.node
        return daemon.mesh("apply", str(out / f"{node}.declaration.json"), "--secrets",
                           str(directory / "ledger.yaml"), "--key", str(tmp / f"{node}.key"),
                           "--docker-host", daemon.host, "--state-root",
                           str(tmp / f"{node}-root"), "--file-root",
                           str(tmp / f"{node}-root"), "--no-fast", check=check)

    def declaration(node: str) -> dict:
        return json.loads((out / f"{node}.declaration.json").read_text())

    def containers(daemon, instance: str) -> list[str]:
        listed = daemon.docker("ps", "-a", "--filter", f"label=mesh.instance={instance}",
                               "--format", "{{.Names}} {{.State}}").stdout
        return listed.split("\n")[:-1]

    apply(n1)
    apply(n2)
    (client,) = [c["name"] for c in declaration("n1")["containers"] if c["instance"] == "app@n1"]

    def psql(sql: str) -> str:
        result = n1.docker("exec", client, "psql", "-tAc", sql, check=False)
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout.strip()

    psql("CREATE TABLE kept (i integer PRIMARY KEY, s text)")
    psql(f"INSERT INTO kept SELECT i, md5(i::text) FROM generate_series(1, {ROWS}) AS i")
    checksum = psql("SELECT count(*), md5(string_agg(s, ',' ORDER BY i)) FROM kept")
    assert checksum.startswith(f"{ROWS}|")
    old_copy = tmp / "n1-var" / "db@main" / "data"
    assert (old_copy / "PG_VERSION").exists(), "n1's state is in n1's own /var/lib/mesh"
    assert not (tmp / "n2-var" / "db@main").exists()

    # the move: state-from says the mesh carries the data
    text = mesh_yaml.read_text()
    mesh_yaml.write_text(text.replace("  db@main:\n    module: postgres\n    node: n1\n",
                                      "  db@main:\n    module: postgres\n    node: n2\n"
                                      "    state-from: n1\n"))
    planned = mesh_host("plan", str(directory), "--issue", "--out", str(out), "--key",
                        str(tmp / "n1.key"))
    assert "state-left-behind" in planned and "mesh forget-state" in planned, planned
    (leave,) = declaration("n1")["transfers"]
    assert leave["role"] == "leave" and leave["target"] == "n2"
    assert "waits" not in leave, "both nodes' transfer certificates were issued"
    applied = apply(n1)  # stops db@main on n1, recreates the app with n2's address
    assert containers(n1, "db@main") == [], applied
    # the transfer port is open to n2 alone
    port = leave["port"]
    topology.listen("n1", port + 1)  # a control: the firewall drops what is not declared
    assert not topology.connects("n2", "n1", port + 1)

    # first attempt: a slow link, and n1's server SIGKILLed mid-way
    topology.run("n1", "tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", "24mbit",
                 "burst", "64kb", "latency", "400ms")
    server = n1.popen("serve-state", str(out / "n1.declaration.json"), "--docker-host",
                      n1.host, "--state-root", str(tmp / "n1-root"), "--file-root",
                      str(tmp / "n1-root"))
    try:
        assert "serving the state of db@main" in server.stdout.readline()
        arriving = n2.popen("apply", str(out / "n2.declaration.json"), "--secrets",
                            str(directory / "ledger.yaml"), "--key", str(tmp / "n2.key"),
                            "--docker-host", n2.host, "--state-root", str(tmp / "n2-root"),
                            "--file-root", str(tmp / "n2-root"), "--no-fast")
        seen = []
        for line in arriving.stdout:
            seen.append(line)
            if "received" in line and "%" in line and not line.rstrip().endswith("(100%)"):
                break
        assert any("received" in line for line in seen), "".join(seen)
        os.kill(server.pid, signal.SIGKILL)  # nsenter execs python: this is the server
        server.wait(10)
        rest = arriving.communicate(timeout=120)[0]
        said = "".join(seen) + rest
        assert arriving.returncode == 1, said
        assert "the next apply copies again from the beginning" in said, said
    finally:
        if server.poll() is None:
            server.kill()
    topology.run("n1", "tc", "qdisc", "del", "dev", "eth0", "root")
    # never running on a half copy: on neither node, nothing recorded as arrived
    assert containers(n2, "db@main") == [] and containers(n1, "db@main") == []
    assert not (tmp / "n2-root" / ".mesh" / "arrived" / "db@main.json").exists()
    assert not (tmp / "n2-var" / "db@main" / "data").exists()
    assert (tmp / "n2-var" / "db@main" / "data.mesh-arriving").exists()

    # second attempt: from the beginning, verified, then started
    server = n1.popen("serve-state", str(out / "n1.declaration.json"), "--docker-host",
                      n1.host, "--state-root", str(tmp / "n1-root"), "--file-root",
                      str(tmp / "n1-root"))
    try:
        assert "serving the state of db@main" in server.stdout.readline()
        arrived = apply(n2)
        served = server.communicate(timeout=60)[0]
    finally:
        if server.poll() is None:
            server.kill()
    assert server.returncode == 0, served
    assert "n2 verified the copy" in served and "sent" in served, served
    assert "mutual TLS" in arrived, arrived
    assert "left by an interrupted copy; starting again" in arrived, arrived
    assert "verified and in place" in arrived and "MiB/s" in arrived, arrived
    assert [c.split()[1] for c in containers(n2, "db@main")] == ["running"], arrived
    assert (tmp / "n2-root" / ".mesh" / "arrived" / "db@main.json").exists()

    # the rows are there, read through the app's binding, which follows the move
    (binding,) = declaration("n1")["bindings"]
    assert binding["values"]["host"] == topology.addresses["n2"]
    assert psql("SELECT count(*), md5(string_agg(s, ',' ORDER BY i)) FROM kept") == checksum
    assert (old_copy / "PG_VERSION").exists(), "the old copy stays until forget-state"

    # a second apply on n2 copies nothing again; forget-state refuses while declared
    again = apply(n2)
    assert "arrive" not in again or "verified and in place" not in again, again
    refused = n1.mesh("forget-state", "db@main@n1", str(out / "n1.declaration.json"),
                      "--state-root", str(tmp / "n1-root"), check=False)
    assert "still carried from n1 to n2" in refused, refused

    # the operator ends the move: the transfer port closes, the old copy can go
    mesh_yaml.write_text(mesh_yaml.read_text().replace("    state-from: n1\n", ""))
    mesh_host("plan", str(directory), "--issue", "--out", str(out), "--key",
              str(tmp / "n1.key"))
    assert "transfers" not in declaration("n1")
    apply(n1)
    assert not any(a["port"] == port for a in declaration("n1")["firewall"].get("allow", []))
    forgotten = n1.mesh("forget-state", "db@main@n1", str(out / "n1.declaration.json"),
                        "--state-root", str(tmp / "n1-root"))
    assert "removed /var/lib/mesh/db@main" in forgotten
    assert not (tmp / "n1-var" / "db@main").exists()
    assert psql("SELECT count(*) FROM kept") == str(ROWS)
