"""A move that carries its data, the way an operator runs it across machines: the agents do it.

Three network namespaces on one segment. n0 is the control machine: the control loop (`mesh
control --key`), every control verb, and the broker (a RabbitMQ of the test's own, TLS only,
its certificate from the mesh CA by `mesh ca issue-server`). n1 and n2 each run their own
dockerd in a mount namespace of their own (so /var/lib/mesh is each machine's own directory,
tests/test_state_move_netns.OwnMountDockerd), their own `mesh agent` (enrolled with real
tokens, its files under its own MESH_FILE_ROOT) and the mesh firewall.

db@main (postgres) runs on n1 and app@n1 writes 10,000 rows through its binding. The operator
edits mesh.yaml (db@main to n2 with `state-from: n1`) and runs `mesh publish`; nothing else
is done by hand. n1's agent stops db@main and serves its state; n2's agent fetches it, and
while it copies (n1's link throttled with tc so there is time) its progress (bytes, percent,
rate) reaches the control node: `mesh status` shows the move copying with it.

n1's agent is SIGKILLed mid-copy: n2's apply fails before changing anything (db@main runs on
neither node, nothing recorded as arrived, the half copy only in staging) and n2's agent says
it tries again. n1's agent comes back (as `mesh supervise` would restart it) and serves again
what its declaration in force says; n2's agent's next attempt copies from the beginning, and
while it does, n1's link is cut (link down) for a few seconds and comes back: the copy goes on
(or starts again) and ends verified. db@main then runs on n2 with the rows; the app (on n1,
bound across machines) reads them; the old copy stays on n1 and `mesh status` says so, until
`state-from` is removed, published, and `mesh forget-state` on n1 lets it go.
"""

from __future__ import annotations

import json
import os
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

pytestmark = pytest.mark.integration

_why = _netns.fleet_unavailable()
if _why:
    pytest.skip(f"agent-driven state move test: {_why}", allow_module_level=True)

from _fleet import Broker  # noqa: E402
from _machines import UPSTREAM, machines  # noqa: E402
from _pgimage import available, postgres_image  # noqa: E402
from test_fleet_netns import Fleet  # noqa: E402
from test_state_move_netns import APP, POSTGRES, PROVISIONS, OwnMountDockerd  # noqa: E402

if not available():
    pytest.skip("PostgreSQL 15 server binaries are not installed (run scripts/services.sh)",
                allow_module_level=True)

REPO = Path(__file__).resolve().parent.parent
CONTROL, NODES = "n0", ("n1", "n2")
IMAGE = f"{UPSTREAM}/mesh-test-move/postgres"
ROWS = 10_000
RATE = "12mbit"  # n1's link while the copy runs: some 40 MiB take half a minute


class MoveFleet(Fleet):
    """test_fleet_netns's Fleet with the control machine n0 in the segment and each node's
    agent inside its machine's mount namespace."""

    control_key: Path

    def mesh(self, *args, node=CONTROL, check=True) -> subprocess.CompletedProcess:
        return super().mesh(*args, node=node, check=check)

    def start_control(self) -> None:
        log = open(self.tmp / "control.log", "a")
        self.control = subprocess.Popen(
            self.topology.argv(CONTROL, sys.executable, "-m", "executors.cli", "control", ".",
                               "--interval", "0.5", "--key", str(self.control_key),
                               *map(str, self.broker.options(self.for_nodes))),
            cwd=self.dir, stdout=log, stderr=subprocess.STDOUT, env=self.env())
        log.close()

    def start_agent(self, node: str) -> None:
        files = self.node_dir(node) / "files"
        files.mkdir(exist_ok=True)
        log = open(self.node_dir(node) / "agent.log", "a")
        self.agents[node] = subprocess.Popen(
            self.dockerd[node].argv(sys.executable, "-m", "executors.cli", "agent",
                                    "--config", str(self.node_dir(node) / "agent.yaml")),
            cwd=self.dir, stdout=log, stderr=subprocess.STDOUT,
            env=dict(self.env(), MESH_FILE_ROOT=str(files)))
        log.close()

    def log(self, node: str) -> str:
        return (self.node_dir(node) / "agent.log").read_text()

    def converged(self) -> bool:
        nodes = {n["node"]: n for n in self.status()["nodes"] if n["node"] in NODES}
        return sorted(nodes) == sorted(NODES) and all(
            n["enrolled"] and n["serial_published"] is not None and not n["behind"]
            and n["last_result"] == "applied" for n in nodes.values())

    def publish(self) -> None:
        self.mesh("publish", ".", "--key", self.control_key,
                  *self.broker.options(self.for_nodes))

    def move(self) -> dict:
        """The one move `mesh status` shows ({} when none)."""
        found = self.status()["moves"]
        assert len(found) <= 1, found
        return found[0] if found else {}


def test_agents_carry_a_move_through_a_killed_agent_and_a_cut_link():
    from _private_rabbit import PrivateRabbit

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mesh-amove-") as scratch, \
            _netns.Topology("am", count=2, subnet=f"10.89.{20 + os.getpid() % 200}",
                            more={CONTROL: 100}) as topology:
        tmp = Path(scratch)
        with machines(topology, tmp, NODES, dockerd=lambda topology, node: OwnMountDockerd(
                topology, node, tmp / f"{node}-var")) as daemons:
            fleet = MoveFleet(topology, tmp, None, topology.addresses[CONTROL],
                              f"am{os.getpid() % 100000}", 0)
            fleet.dockerd = daemons
            fleet.dir.mkdir()
            rabbit = None
            try:
                rabbit = _setup(fleet, tmp, PrivateRabbit)
                _walk(fleet, tmp)
            finally:
                fleet.close()
                for node in NODES:
                    topology.run(node, "tc", "qdisc", "del", "dev", "eth0", "root", check=False)
                if rabbit is not None:
                    rabbit.remove()
    print(f"seconds: {time.monotonic() - started:.0f}")


def _setup(fleet: MoveFleet, tmp: Path, PrivateRabbit):
    """mesh.yaml, the CA, the TLS broker in n0, the pinned image, the control loop, both
    nodes enrolled and their agents running; db@main and app@n1 applied on n1."""
    from executors.node import docker_engine

    topology, addresses = fleet.topology, fleet.topology.addresses
    n1 = fleet.dockerd["n1"]
    engine = docker_engine.connect(n1.host)
    engine.tag(postgres_image(engine), IMAGE, "1")
    n1.docker("push", f"{IMAGE}:1")

    fleet.control_key = fleet.node_dir(CONTROL) / "node.key"
    made = fleet.mesh("node-key", CONTROL, "--path", fleet.control_key)
    control_key = made.stdout.split("public-key:", 1)[1].split()[0]
    catalogue = fleet.dir / "catalogue"
    for name, text in (("postgres", POSTGRES),
                       ("app", APP)):
        (catalogue / name).mkdir(parents=True)
        (catalogue / name / "module.yaml").write_text(text)
    (catalogue / "provisions.yaml").write_text(PROVISIONS)
    nodes = "".join(f"  {node}: {{address: {addresses[node]}"
                    + (f", control: true, public-key: {control_key}" if node == CONTROL else "")
                    + "}\n" for node in (CONTROL, *NODES))
    (fleet.dir / "mesh.yaml").write_text(
        f"mesh: {fleet.name}\ncatalogue: catalogue\nnodes:\n{nodes}instances:\n"
        "  db@main:\n    module: postgres\n    node: n1\n"
        "  app@n1:\n    module: app\n    node: n1\n")
    fleet.mesh("ca", "init", ".")
    issued = tmp / "broker-tls"
    fleet.mesh("ca", "issue-server", ".", "broker", "--address", addresses[CONTROL],
               "--out", issued)
    rabbit = PrivateRabbit(listen=("127.0.0.1", addresses[CONTROL]),
                           management=addresses[CONTROL], netns=topology.netns_path(CONTROL),
                           tls=(issued / "broker.crt", issued / "broker.key",
                                issued / "ca.crt")).start()
    fleet.for_nodes = f"{addresses[CONTROL]}:{rabbit.port}"
    fleet.broker = Broker.private(rabbit, fleet.for_nodes)
    assert not fleet.broker.plain
    fleet.mesh("pin", ".", node="n1")
    fleet.start_control()
    for node in NODES:
        fleet.enrol(node)
        fleet.start_agent(node)
    fleet.publish()
    fleet.wait(fleet.converged, "both nodes apply the first declaration", 600)
    return rabbit


def _walk(fleet: MoveFleet, tmp: Path) -> None:
    topology = fleet.topology
    n1, n2 = fleet.dockerd["n1"], fleet.dockerd["n2"]
    client = f"{fleet.name}-app-n1-client"

    def psql(sql: str) -> str:
        result = n1.docker("exec", client, "psql", "-tAc", sql, check=False)
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout.strip()

    def running(daemon, instance: str = "db@main") -> list[str]:
        return daemon.docker("ps", "-a", "--filter", f"label=mesh.instance={instance}",
                             "--format", "{{.State}}").stdout.split()

    psql("CREATE TABLE kept (i integer PRIMARY KEY, s text)")
    psql(f"INSERT INTO kept SELECT i, md5(i::text) FROM generate_series(1, {ROWS}) AS i")
    checksum = psql("SELECT count(*), md5(string_agg(s, ',' ORDER BY i)) FROM kept")
    assert checksum.startswith(f"{ROWS}|")
    old_copy = tmp / "n1-var" / "db@main" / "data"
    assert (old_copy / "PG_VERSION").exists()
    arrived = fleet.node_dir("n2") / "state" / ".mesh" / "arrived" / "db@main.json"

    # -- the operator's move: mesh.yaml edited, `mesh publish`; the agents do the rest
    topology.run("n1", "tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", RATE,
                 "burst", "64kb", "latency", "400ms")
    mesh_yaml = fleet.dir / "mesh.yaml"
    mesh_yaml.write_text(mesh_yaml.read_text().replace(
        "  db@main:\n    module: postgres\n    node: n1\n",
        "  db@main:\n    module: postgres\n    node: n2\n    state-from: n1\n"))
    fleet.publish()

    # progress reaches the control node while the copy runs: `mesh status` shows it
    fleet.wait(lambda: fleet.move()["stage"] == "copying" and "received" in
               fleet.move()["progress"], "mesh status shows the copy's progress", 300)
    copying = fleet.move()
    assert copying["from"] == "n1" and copying["to"] == "n2", copying
    assert "received" in copying["progress"] and "/s" in copying["progress"], copying
    text = fleet.mesh("status", ".").stdout
    assert "move db@main: n1 → n2 copying: db@main:" in text, text
    assert "received" in fleet.log("n2")

    # n1's agent SIGKILLed mid-copy
    assert not fleet.log("n2").count("verified and in place")
    killed_at = len(fleet.log("n2"))
    agent = fleet.agents.pop("n1")
    agent.send_signal(signal.SIGKILL)  # nsenter execs python: this is the agent
    agent.wait(10)
    fleet.wait(lambda: "trying it again" in fleet.log("n2")[killed_at:], "n2's arrival fails",
               240)
    said = fleet.log("n2")[killed_at:]
    assert "the next apply copies again from the beginning" in said, said[-3000:]
    # never on a half copy: on neither node, nothing recorded as arrived
    assert running(n1) == [] and running(n2) == [], (running(n1), running(n2))
    assert not arrived.exists()
    assert not (tmp / "n2-var" / "db@main" / "data").exists()
    assert (tmp / "n2-var" / "db@main" / "data.mesh-arriving").exists()
    fleet.wait(lambda: fleet.move()["stage"] == "failed", "mesh status shows it failed", 60)

    # n1's agent comes back (as `mesh supervise` restarts it): it serves again; n2 retries.
    # The half copy is set aside by the first retry after the kill, which may come before
    # n1's agent is back (that retry then fails: n1 does not serve) or after it.
    mark, served = len(fleet.log("n2")), len(fleet.log("n1"))
    fleet.start_agent("n1")
    fleet.wait(lambda: "serving the state of db@main" in fleet.log("n1")[served:]
               and "left by an interrupted copy" in fleet.log("n2")[killed_at:]
               and "received" in fleet.log("n2")[mark:],
               "n2's agent copies again from the beginning", 240)
    # the link cut mid-copy for a few seconds, then back
    assert "verified and in place" not in fleet.log("n2")[mark:]
    topology.run("n1", "ip", "link", "set", "eth0", "down")
    time.sleep(5)
    topology.run("n1", "ip", "link", "set", "eth0", "up")
    fleet.wait(lambda: "verified and in place" in fleet.log("n2")[mark:],
               "the copy completes after the cut", 400)
    after_cut = fleet.log("n2")[mark:]
    print("after the cut the copy", "started again" if after_cut.count(
        "left by an interrupted copy") > 1 else "went on")
    topology.run("n1", "tc", "qdisc", "del", "dev", "eth0", "root", check=False)
    fleet.wait(lambda: fleet.converged() and running(n2) == ["running"],
               "db@main runs on n2 and both nodes report applied", 300)
    assert arrived.exists() and running(n1) == []

    # the rows are on n2, read by the app on n1 through its binding
    assert psql("SELECT count(*), md5(string_agg(s, ',' ORDER BY i)) FROM kept") == checksum
    assert (old_copy / "PG_VERSION").exists(), "the old copy stays until forget-state"
    fleet.wait(lambda: fleet.move()["stage"] == "arrived", "mesh status shows it arrived", 60)
    text = fleet.mesh("status", ".").stdout
    assert "move db@main: n1 → n2 arrived" in text, text
    assert "old copy kept on n1 until `mesh forget-state db@main@n1`" in text, text

    # the operator ends the move; then the old copy can go, on n1
    mesh_yaml.write_text(mesh_yaml.read_text().replace("    state-from: n1\n", ""))
    fleet.publish()
    fleet.wait(lambda: fleet.converged() and not json.loads(
        (fleet.node_dir("n1") / "state" / ".mesh" / "agent" / "current" /
         "declaration.json").read_text()).get("transfers"), "the move leaves both nodes", 300)
    assert fleet.status()["moves"] == []
    forgotten = n1.mesh("forget-state", "db@main@n1",
                        str(fleet.node_dir("n1") / "state" / ".mesh" / "agent" / "current" /
                            "declaration.json"),
                        "--state-root", str(fleet.node_dir("n1") / "state"))
    assert "removed /var/lib/mesh/db@main" in forgotten, forgotten
    assert not (tmp / "n1-var" / "db@main").exists()
    assert psql("SELECT count(*) FROM kept") == str(ROWS)
