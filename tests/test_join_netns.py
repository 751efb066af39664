"""`mesh join TOKEN` the way an operator runs it: two network namespaces as machines, each with
its own dockerd and the mesh firewall on; the broker and the control loop on the host side.
The broker serves AMQP over TLS only, with a certificate the mesh's CA issued for the address
the machines dial (`mesh ca issue-server`): `mesh join` verifies it against the CA the token
carries before the token's secret is sent, and every agent and the control loop after it.

The control node makes each token with `mesh enrol token DIR NODE --auto-accept` (n2's also
with `--address`, which admits n2 into mesh.yaml before it dials) and does nothing else: on
each machine `mesh join TOKEN` creates the key, asks, installs the agent as a service (no
systemd here: `mesh supervise`, detached) and returns once the control loop accepted it. Then
app@n2, bound to postgres@n1 across the namespaces, is assigned in mesh.yaml: it runs and its
binding verifies from inside its container. n2's agent process is killed: its supervisor
starts it again, and the restarted agent applies the next change (note@n2).
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

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parent.parent

_why = _netns.fleet_unavailable()
if _why:
    pytest.skip(f"join namespace test: {_why}", allow_module_level=True)

from _fleet import Broker  # noqa: E402
from _manifests import APP, POSTGRES, PROVISIONS  # noqa: E402
from _pgimage import postgres_image  # noqa: E402
from test_fleet_netns import NOTE, REGISTRY, Fleet, _registry  # noqa: E402

from executors.common.service import child_pid, supervisor_pid  # noqa: E402


def write_mesh(fleet: Fleet, instances: dict[str, str]) -> None:
    """The catalogue, and mesh.yaml's instances (its nodes as enrolment wrote them)."""
    catalogue = fleet.dir / "catalogue"
    for module, text in (("postgres", POSTGRES), ("app", APP), ("note", NOTE)):
        (catalogue / module).mkdir(parents=True, exist_ok=True)
        (catalogue / module / "module.yaml").write_text(text.format(
            repository=f"{REGISTRY}/mesh-test-join/{module}", registry=REGISTRY,
            tag=fleet.name, tmp=fleet.tmp, note="after").replace("mesh-test-e2e",
                                                                   "mesh-test-join"))
    (catalogue / "provisions.yaml").write_text(PROVISIONS)
    path = fleet.dir / "mesh.yaml"
    if path.exists():
        text = path.read_text().split("instances:")[0]
    else:
        text = (f"mesh: {fleet.name}\ncatalogue: catalogue\nnodes:\n"
                f"  n1: {{address: {fleet.topology.addresses['n1']}}}\n"
                "host-ports: {first: 21100, last: 21149}\n")
    lines = ["instances:"] + [f"  {name}: {{module: {module}, node: {name.split('@')[1]}}}"
                              for name, module in instances.items()]
    path.write_text(text + "\n".join(lines) + "\n")


def join(fleet: Fleet, node: str, *token_options: str) -> subprocess.CompletedProcess:
    token = fleet.mesh("enrol", "token", ".", node, "--auto-accept", *token_options,
                       *fleet.broker.options(fleet.for_nodes)).stdout.strip()
    home = fleet.node_dir(node)
    return fleet.mesh("join", token, "--config", home / "agent.yaml", "--key",
                      home / "node.key", "--state-root", home / "state", "--docker-host",
                      fleet.dockerd[node].host, "--drift-minutes", "0.25", "--run-dir", home,
                      "--wait", "120", node=node)


def stop_supervisors(fleet: Fleet) -> None:
    for node in fleet.topology.nodes:
        pid = supervisor_pid("agent", fleet.node_dir(node))
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 60
            while supervisor_pid("agent", fleet.node_dir(node)) is not None \
                    and time.monotonic() < deadline:
                time.sleep(0.2)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    from _private_rabbit import PrivateRabbit

    from executors.node import docker_engine

    tmp = tmp_path_factory.mktemp("join")
    subnet = f"10.79.{20 + os.getpid() % 200}"
    registries, rabbit, fleet = [], None, None
    with _netns.Topology("j", count=2, subnet=subnet) as topology:
        try:
            hub = topology.attach_host()
            # the broker is made once the mesh's CA exists (below), which issues its certificate
            fleet = Fleet(topology, tmp, None, hub, f"jn{os.getpid() % 100000}", 0)
            for node in topology.nodes:
                fleet.dockerd[node] = _netns.NamespacedDockerd(topology, node)
                fleet.dockerd[node].start(timeout=120)
            storage = Path(tempfile.mkdtemp(prefix="join-registry-", dir=tmp))
            for node in topology.nodes:
                registries.append(_registry(topology, node, storage, tmp / "registry"))
            n1 = docker_engine.connect(fleet.dockerd["n1"].host)
            n1.tag(postgres_image(n1), f"{REGISTRY}/mesh-test-join/postgres", fleet.name)
            fleet.dockerd["n1"].docker("push", f"{REGISTRY}/mesh-test-join/postgres:{fleet.name}")
            from _docker import _rootfs

            n1.import_image_from_data(
                _rootfs(), repository=f"{REGISTRY}/mesh-test-join/app", tag=fleet.name,
                changes=['CMD ["httpd", "-f", "-p", "8080", "-h", "/www"]', "ENV PATH=/bin"])
            fleet.dockerd["n1"].docker("push", f"{REGISTRY}/mesh-test-join/app:{fleet.name}")
            write_mesh(fleet, {"postgres@n1": "postgres"})
            fleet.mesh("ca", "init", ".")
            issued = tmp / "broker-tls"
            fleet.mesh("ca", "issue-server", ".", "broker", "--address", hub, "--out", issued)
            # its management API is https with the same certificate: served where it names
            rabbit = PrivateRabbit(listen=("127.0.0.1", hub), management=hub, tls=(
                issued / "broker.crt", issued / "broker.key", issued / "ca.crt")).start()
            fleet.for_nodes = f"{hub}:{rabbit.port}"  # what the control loop dials too
            fleet.broker = Broker.private(rabbit, fleet.for_nodes)  # TLS, API https
            fleet.mesh("pin", ".", node="n1")
            fleet.start_control()
            yield fleet
        finally:
            if fleet is not None:
                stop_supervisors(fleet)
                fleet.close()
                for dockerd in fleet.dockerd.values():
                    dockerd.stop()
            for process in registries:
                process.kill()
                process.wait()
            if rabbit is not None:
                rabbit.remove()


def test_join_with_an_auto_accept_token_runs_an_app_and_the_killed_agent_comes_back(fleet):
    from ruamel.yaml import YAML

    topology = fleet.topology
    # n1 is in mesh.yaml (no key yet); n2 is admitted by its token, before it dials
    joined = join(fleet, "n1")
    assert "joined: n1 is a node of mesh" in joined.stdout, joined.stdout + joined.stderr
    assert f"amqps://{fleet.for_nodes}" in joined.stderr, joined.stderr  # TLS, verified
    assert "tls: true" in (fleet.node_dir("n1") / "agent.yaml").read_text()
    fingerprint = joined.stderr.split("key fingerprint: ", 1)[1].split()[0]
    assert fingerprint.startswith("SHA256:"), joined.stderr
    assert "mesh supervise" in joined.stderr, joined.stderr
    nodes = YAML(typ="safe").load((fleet.dir / "mesh.yaml").read_text())["nodes"]
    assert "n2" not in nodes and nodes["n1"]["public-key"], nodes
    joined = join(fleet, "n2", "--address", topology.addresses["n2"])
    assert "joined: n2 is a node of mesh" in joined.stdout, joined.stdout + joined.stderr
    nodes = YAML(typ="safe").load((fleet.dir / "mesh.yaml").read_text())["nodes"]
    assert nodes["n2"]["address"] == topology.addresses["n2"] and nodes["n2"]["public-key"]
    listed = json.loads(fleet.mesh("enrol", "list", ".", "--offline", "--json").stdout)
    assert sorted(t["node"] for t in listed) == ["n1", "n2"] and all(
        t["state"] in ("accepted", "closed") for t in listed), listed
    key_file = fleet.node_dir("n2") / "node.key"
    assert key_file.stat().st_mode & 0o777 == 0o600

    # the one step for an app on the new node: assign it in mesh.yaml
    write_mesh(fleet, {"postgres@n1": "postgres", "app@n2": "app"})
    fleet.mesh("pin", ".", node="n1")  # its image's digest, from the registry n1 reaches

    def running(node: str) -> str:
        return fleet.dockerd[node].docker("ps", "--format", "{{.Names}}").stdout

    fleet.wait(lambda: f"{fleet.name}-app-n2-web" in running("n2") and fleet.converged()
               and len(fleet.status()["nodes"]) == 2, "app@n2 runs, both nodes converge", 600)
    # its binding checked from inside its container, across n1's firewall
    fleet.wait(lambda: [(n["verify"]["ok"], n["verify"]["not_ok"]) for n in
                        fleet.status()["nodes"] if n["node"] == "n2"] == [(1, [])],
               "app@n2's binding verifies from its container", 240)

    # n2's agent is killed: its supervisor starts it again, and it applies the next change
    home = fleet.node_dir("n2")
    killed = child_pid("agent", home)
    assert killed is not None and supervisor_pid("agent", home) is not None
    os.kill(killed, signal.SIGKILL)
    fleet.wait(lambda: child_pid("agent", home) not in (None, killed),
               "n2's agent is started again by its supervisor", 60)
    assert f"pid {killed} exited -9; restarting" in (home / "agent.log").read_text()
    write_mesh(fleet, {"postgres@n1": "postgres", "app@n2": "app", "note@n2": "note"})
    fleet.mesh("pin", ".", node="n1")
    fleet.wait(lambda: f"{fleet.name}-note-n2-main" in running("n2") and fleet.converged(),
        "the restarted agent applies the next change", 300)



def test_a_rejected_join_says_so_and_stops_its_agent_service(fleet):
    """A token made without --auto-accept: the operator rejects the request; `mesh join`
    exits 1 saying so, and the agent service it installed is stopped (not restarted for
    good). A second identity in n2's namespace stands for another machine."""
    token = fleet.mesh("enrol", "token", ".", "stranger", *fleet.broker.options(
        fleet.for_nodes)).stdout.strip()
    home = fleet.node_dir("stranger")
    argv = fleet.topology.argv("n2", sys.executable, "-m", "executors.cli", "join", token,
                               "--config", str(home / "agent.yaml"), "--key",
                               str(home / "node.key"), "--state-root", str(home / "state"),
                               "--no-firewall", "--run-dir", str(home), "--wait", "120")
    joining = subprocess.Popen(argv, cwd=fleet.dir, env=fleet.env(), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            listed = json.loads(fleet.mesh("enrol", "list", ".", "--offline", "--json").stdout)
            if any(t["node"] == "stranger" and t["state"] == "requested" for t in listed) \
                    and supervisor_pid("agent", home) is not None:  # the service installed
                break
            assert time.monotonic() < deadline and joining.poll() is None, listed
            time.sleep(0.5)
        fleet.mesh("enrol", "reject", ".", "stranger", "--reason", "not ours",
                   *fleet.broker.options(fleet.for_nodes))
        out, err = joining.communicate(timeout=120)
    finally:
        if joining.poll() is None:
            joining.kill()
        left = supervisor_pid("agent", home)  # what `mesh join` left running
        if left is not None:  # never left behind by a failed run
            os.kill(left, signal.SIGTERM)
    assert joining.returncode == 1, out + err
    assert "the control node rejected stranger" in err and "service is stopped" in err, err
    assert left is None
    from ruamel.yaml import YAML

    assert "stranger" not in YAML(typ="safe").load((fleet.dir / "mesh.yaml").read_text())[
        "nodes"]
