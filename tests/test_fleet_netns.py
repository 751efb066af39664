"""The mesh running itself across three machines: three network namespaces, each with its own
dockerd and the mesh firewall on, the broker and the control plane on the host side.

n1 runs postgres@n1; app@n2 and app@n3 are bound to it across nodes. Every node is enrolled
with a one-time token (`mesh agent enrol` inside its namespace, its address found on the way
to the broker), its agent a `mesh agent` process in its namespace applying to its own dockerd
with its firewall; `mesh control` on the host publishes, records and completes everything
else. Images come from a registry on each node's loopback (one storage, so one digest),
pinned by `mesh pin` inside n1. The broker is a RabbitMQ node of the test's own listening on
the host's address on the segment (the shared one listens on loopback only), with TLS only:
its certificate the mesh's CA issued for that address (`mesh ca issue-server`), verified by
every agent and by the control plane.

The walk: enrol the three nodes, publish, all converge, each consumer's binding verified from
inside its container through n1's firewall, which refuses the host (not a mesh node); rotate
app@n2's credential and watch the fan-out complete while a client in n2 logs in with what n2
holds, without one authentication failure; take n3's agent down, change the mesh twice, bring
it back: it applies only the newest, reporting the other superseded.
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

_why = _netns.fleet_unavailable()
if _why:
    pytest.skip(f"three-namespace fleet test: {_why}", allow_module_level=True)

from _fleet import Broker  # noqa: E402
from _manifests import APP, POSTGRES, PROVISIONS  # noqa: E402
from _pgimage import postgres_image  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
REGISTRY = "127.0.0.1:5000"  # on each node's loopback, one storage behind the three
CREDENTIAL = "postgres-database/postgres@n1/app@n2"
NOTE = """\
name: note
artifacts:
  image: {{repository: {registry}/mesh-test-e2e/app, tag: "{tag}"}}
containers:
  - name: main
    artifact: image
    env: {{NOTE: "{note}"}}
"""
CLIENT = r"""
import sys, time, psycopg
binding, out = sys.argv[1], sys.argv[2]
logins, failures, passwords = 0, [], set()
stop = False
import signal
def done(*_):
    global stop
    stop = True
signal.signal(signal.SIGTERM, done)
while not stop:
    values = dict(l.split("=", 1) for l in open(binding).read().splitlines() if "=" in l)
    try:
        with psycopg.connect(host=values["host"], port=values["port"], user=values["user"],
                             password=values["password"], dbname=values["database"],
                             connect_timeout=5) as c:
            c.execute("select 1")
        logins += 1
        passwords.add(values["password"])
    except psycopg.Error as e:
        failures.append(f"{values['user']}: {' '.join(str(e).split())}")
    time.sleep(0.05)
import json
json.dump({"logins": logins, "failures": failures, "passwords": len(passwords)},
          open(out, "w"))
"""


def _registry(topology, node: str, storage: Path, directory: Path) -> subprocess.Popen:
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / f"{node}.yml"
    config.write_text(f"version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n"
                      f"    rootdirectory: {storage}\nhttp:\n  addr: {REGISTRY}\n")
    process = subprocess.Popen(topology.argv(node, shutil.which("docker-registry"), "serve",
                                             str(config)),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    probe = f"import urllib.request; urllib.request.urlopen('http://{REGISTRY}/v2/', timeout=1)"
    deadline = time.monotonic() + 30
    while topology.python(node, probe, check=False).returncode != 0:
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"the registry in {node} did not answer")
        time.sleep(0.3)
    return process


class Fleet:
    """The host side: the mesh directory, the control plane, the broker; agents in nodes."""

    def __init__(self, topology, tmp: Path, broker: Broker, hub: str, name: str, port: int):
        self.topology, self.tmp, self.broker, self.hub, self.name = (topology, tmp, broker,
                                                                     hub, name)
        self.dir = tmp / "mesh"
        self.agents: dict[str, subprocess.Popen] = {}
        self.dockerd: dict[str, _netns.NamespacedDockerd] = {}
        self.control: subprocess.Popen | None = None
        self.for_nodes = f"{hub}:{port}"
        self.printed: list[str] = []

    def env(self) -> dict:
        return {**os.environ, "PYTHONPATH": str(REPO)}

    def mesh(self, *args, node=None, check=True) -> subprocess.CompletedProcess:
        argv = [sys.executable, "-m", "executors.cli", *map(str, args)]
        if node is not None:
            argv = self.topology.argv(node, *argv)
        result = subprocess.run(argv, cwd=self.dir, capture_output=True, text=True,
                                env=self.env(), timeout=600)
        self.printed.append(result.stdout + result.stderr)
        if check:
            assert result.returncode == 0, f"mesh {args}:\n{result.stdout}\n{result.stderr}"
        return result

    def node_dir(self, node: str) -> Path:
        path = self.tmp / "nodes" / node
        path.mkdir(parents=True, exist_ok=True)
        return path

    def start_control(self) -> None:
        log = open(self.tmp / "control.log", "a")
        self.control = subprocess.Popen(
            [sys.executable, "-m", "executors.cli", "control", ".", "--interval", "0.5",
             *self.broker.options(self.for_nodes)],
            cwd=self.dir, stdout=log, stderr=subprocess.STDOUT, env=self.env())
        log.close()

    def enrol(self, node: str) -> None:
        token = self.mesh("enrol", "token", ".", node, *self.broker.options(self.for_nodes)) \
            .stdout.strip()
        enrolled = self.mesh("agent", "enrol", token, "--config",
                             self.node_dir(node) / "agent.yaml", "--key",
                             self.node_dir(node) / "node.key", "--state-root",
                             self.node_dir(node) / "state", "--docker-host",
                             self.dockerd[node].host, "--drift-minutes", "0.25", "--no-wait",
                             node=node)
        fingerprint = enrolled.stderr.split("key fingerprint: ", 1)[1].split()[0]
        deadline = time.monotonic() + 60
        while True:  # the running control plane keeps the request as it comes
            listed = json.loads(self.mesh("enrol", "list", ".", "--offline", "--json").stdout)
            if any(t["node"] == node and t["state"] == "requested" for t in listed):
                assert [t["key_fingerprint"] for t in listed if t["node"] == node
                        and t["state"] == "requested"] == [fingerprint], listed
                break
            assert time.monotonic() < deadline, listed
            time.sleep(0.3)
        self.mesh("enrol", "accept", ".", node, "--fingerprint", fingerprint,
                  *self.broker.options(self.for_nodes))

    def start_agent(self, node: str) -> None:
        log = open(self.node_dir(node) / "agent.log", "a")
        self.agents[node] = subprocess.Popen(
            self.topology.argv(node, sys.executable, "-m", "executors.cli", "agent",
                               "--config", str(self.node_dir(node) / "agent.yaml")),
            cwd=self.dir, stdout=log, stderr=subprocess.STDOUT, env=self.env())
        log.close()

    def stop_agent(self, node: str) -> None:
        process = self.agents.pop(node)
        process.send_signal(signal.SIGTERM)
        process.wait(120)

    def status(self) -> dict:
        return json.loads(self.mesh("status", ".", "--json").stdout)

    def ledger(self):
        from resolver.documents import load_ledger

        return load_ledger((self.dir / "ledger.yaml").read_text(), "ledger.yaml")[0]

    def logs(self) -> str:
        parts = [f"--- control\n{(self.tmp / 'control.log').read_text()[-5000:]}"]
        for node in sorted(self.topology.nodes):
            log = self.node_dir(node) / "agent.log"
            if log.exists():
                parts.append(f"--- {node}\n{log.read_text()[-5000:]}")
        return "\n".join(parts)

    def wait(self, condition, what: str, timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if condition():
                    return
            except (KeyError, AttributeError, TypeError):
                pass
            assert self.control is None or self.control.poll() is None, self.logs()
            for node, agent in self.agents.items():
                assert agent.poll() is None, f"agent {node} exited\n{self.logs()}"
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: not within {timeout}s\n{self.logs()}")
            time.sleep(1)

    def converged(self) -> bool:
        nodes = self.status()["nodes"]
        return all(n["serial_published"] is not None and not n["behind"]
                   and n["last_result"] == "applied" for n in nodes)

    def close(self) -> None:
        for node in list(self.agents):
            process = self.agents.pop(node)
            if process.poll() is None:
                process.kill()
                process.wait()
        if self.control is not None and self.control.poll() is None:
            self.control.send_signal(signal.SIGTERM)
            try:
                self.control.wait(30)
            except subprocess.TimeoutExpired:
                self.control.kill()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    from _private_rabbit import PrivateRabbit

    from executors.node import docker_engine

    tmp = tmp_path_factory.mktemp("e2e")
    subnet = f"10.78.{20 + os.getpid() % 200}"
    registries, rabbit, fleet = [], None, None
    with _netns.Topology("e", count=3, subnet=subnet) as topology:
        try:
            hub = topology.attach_host()
            name = f"e2e{os.getpid() % 100000}"
            # the broker is made once the mesh's CA exists (below), which issues its certificate
            fleet = Fleet(topology, tmp, None, hub, name, 0)
            for node in topology.nodes:
                fleet.dockerd[node] = _netns.NamespacedDockerd(topology, node)
            for dockerd in fleet.dockerd.values():
                dockerd.start(timeout=120)
            storage = Path(tempfile.mkdtemp(prefix="e2e-registry-", dir=tmp))
            for node in topology.nodes:
                registries.append(_registry(topology, node, storage, tmp / "registry"))
            n1 = docker_engine.connect(fleet.dockerd["n1"].host)
            pg = postgres_image(n1)
            n1.tag(pg, f"{REGISTRY}/mesh-test-e2e/postgres", name)
            fleet.dockerd["n1"].docker("push", f"{REGISTRY}/mesh-test-e2e/postgres:{name}")
            from _docker import _rootfs

            n1.import_image_from_data(
                _rootfs(), repository=f"{REGISTRY}/mesh-test-e2e/app", tag=name,
                changes=['CMD ["httpd", "-f", "-p", "8080", "-h", "/www"]', "ENV PATH=/bin"])
            fleet.dockerd["n1"].docker("push", f"{REGISTRY}/mesh-test-e2e/app:{name}")
            write_mesh(fleet, {"postgres@n1": "postgres", "app@n2": "app", "app@n3": "app"})
            fleet.mesh("ca", "init", ".")
            issued = tmp / "broker-tls"
            fleet.mesh("ca", "issue-server", ".", "broker", "--address", hub, "--out", issued)
            # its management API is https with the same certificate: served where it names
            rabbit = PrivateRabbit(listen=("127.0.0.1", hub), management=hub, tls=(
                issued / "broker.crt", issued / "broker.key", issued / "ca.crt")).start()
            fleet.for_nodes = f"{hub}:{rabbit.port}"  # what the control plane dials too
            fleet.broker = Broker.private(rabbit, fleet.for_nodes)  # TLS, API https
            fleet.mesh("pin", ".", node="n1")
            fleet.start_control()
            yield fleet
        finally:
            if fleet is not None:
                fleet.close()
                for dockerd in fleet.dockerd.values():
                    dockerd.stop()
            for process in registries:
                process.kill()
                process.wait()
            if rabbit is not None:
                rabbit.remove()


def write_mesh(fleet: Fleet, instances: dict[str, str], note: str = "") -> None:
    catalogue = fleet.dir / "catalogue"
    for module, text in (("postgres", POSTGRES), ("app", APP), ("note", NOTE)):
        (catalogue / module).mkdir(parents=True, exist_ok=True)
        (catalogue / module / "module.yaml").write_text(text.format(
            repository=f"{REGISTRY}/mesh-test-e2e/{module}", registry=REGISTRY, tag=fleet.name,
            tmp=fleet.tmp, note=note))
    (catalogue / "provisions.yaml").write_text(PROVISIONS)
    path = fleet.dir / "mesh.yaml"
    keys = {}
    if path.exists():
        from ruamel.yaml import YAML

        nodes = YAML(typ="safe").load(path.read_text())["nodes"]
        keys = {n: v["public-key"] for n, v in nodes.items() if v.get("public-key")}
    lines = [f"mesh: {fleet.name}", "catalogue: catalogue", "nodes:"]
    for node, address in sorted(fleet.topology.addresses.items()):
        key = f", public-key: {keys[node]}" if node in keys else ""
        lines.append(f"  {node}: {{address: {address}{key}}}")
    lines.append("host-ports: {first: 21000, last: 21049}")
    lines.append("instances:")
    lines += [f"  {name}: {{module: {module}, node: {name.split('@')[1]}}}"
              for name, module in instances.items()]
    path.write_text("\n".join(lines) + "\n")


def test_enrol_publish_converge_rotate_and_latest_wins_across_three_namespaces(fleet):
    topology = fleet.topology
    # -- enrol the three nodes; the control plane publishes as their keys arrive
    for node in ("n1", "n2", "n3"):
        fleet.enrol(node)
        fleet.start_agent(node)
    from ruamel.yaml import YAML

    for node, address in topology.addresses.items():
        log = fleet.node_dir(node) / "agent.log"
        fleet.wait(lambda: "enrolled" in log.read_text(), f"{node} takes its answer", 120)
        described = YAML(typ="safe").load((fleet.dir / "mesh.yaml").read_text())["nodes"][node]
        assert described["address"] == address and described["public-key"], described
    fleet.wait(lambda: fleet.ledger().credentials.get(CREDENTIAL) is not None
               and fleet.converged(), "all three nodes converge")
    # each binding checked from inside its consumer's container, through n1's firewall (a
    # consumer that applied before its provider was up verifies again at its next drift check)
    fleet.wait(lambda: all(n["enrolled"] and n["verify"] is not None and not
                           n["verify"]["not_ok"] for n in fleet.status()["nodes"]),
               "every binding verifies from its consumer's container", 180)
    # -- the firewall is on in every node: n1's postgres answers n2, not the host
    declaration = json.loads((fleet.dir / ".control" / "out" / "n1.declaration.json")
                             .read_text())
    port = next(p["port"] for p in declaration["providers"] if p["instance"] == "postgres@n1")
    probe = ("import socket, sys\ntry: socket.create_connection((sys.argv[1], int(sys.argv[2])),"
             " 3); print('open')\nexcept OSError as e: print(type(e).__name__)")
    target = (topology.addresses["n1"], str(port))
    assert topology.run("n2", sys.executable, "-c", probe, *target).stdout.strip() == "open"
    from_host = subprocess.run([sys.executable, "-c", probe, *target], capture_output=True,
                               text=True).stdout.strip()
    assert from_host in ("TimeoutError", "timeout"), f"the host reached postgres: {from_host}"
    for node in topology.nodes:
        tables = topology.run(node, "nft", "list", "tables").stdout
        assert "inet mesh" in tables, node

    # -- rotate app@n2's credential; a client in n2 logs in with what n2 holds throughout
    binding = fleet.node_dir("n2") / "state" / ".mesh" / "bindings" / "app@n2--db.env"
    result = fleet.tmp / "client.json"
    client = subprocess.Popen(topology.argv("n2", sys.executable, "-c", CLIENT, str(binding),
                                            str(result)), env=fleet.env())
    time.sleep(3)
    fleet.mesh("rotate", ".", CREDENTIAL)
    fleet.wait(lambda: (lambda c: c.retiring is None and 1 in c.retired
                        and c.applied.get("n2") == 2)(fleet.ledger().credentials[CREDENTIAL])
               and fleet.converged(), "the rotation's fan-out completes by itself")
    time.sleep(2)
    client.send_signal(signal.SIGTERM)
    client.wait(60)
    logins = json.loads(result.read_text())
    assert logins["failures"] == [], logins["failures"][:5]
    assert logins["logins"] > 20 and logins["passwords"] == 2, logins
    control_log = (fleet.tmp / "control.log").read_text()
    assert "report from n1" in control_log and "report from n2" in control_log

    # -- n3's agent down, the mesh changed twice, n3 back: only the newest is applied
    fleet.stop_agent("n3")
    before = next(n for n in fleet.status()["nodes"] if n["node"] == "n3")["serial_published"]
    instances = {"postgres@n1": "postgres", "app@n2": "app", "app@n3": "app",
                 "note@n3": "note"}
    for note in ("first", "second"):
        write_mesh(fleet, instances, note=note)
        fleet.mesh("pin", ".", node="n1")
        fleet.wait(lambda: next(n for n in fleet.status()["nodes"] if n["node"] == "n3")
                   ["serial_published"] > before, f"the {note} change is published", 120)
        before = next(n for n in fleet.status()["nodes"] if n["node"] == "n3")[
            "serial_published"]
    fleet.start_agent("n3")
    fleet.wait(lambda: fleet.converged(), "n3 applies the newest")
    history = json.loads((fleet.dir / ".control" / "reports.json").read_text())["n3"][
        "history"]
    newest = [h for h in history if h["trigger"] == "message"][:2]
    assert (newest[0]["serial"], newest[0]["result"]) == (before, "applied"), history[:3]
    assert (newest[1]["serial"], newest[1]["result"], newest[1]["superseded_by"]) == \
        (before - 1, "superseded", before), history[:3]
    dockerd = fleet.dockerd["n3"]
    env = dockerd.docker("inspect", "--format", "{{json .Config.Env}}",
                         f"{fleet.name}-note-n3-main").stdout
    assert "NOTE=second" in env
    assert "NOTE=first" not in (fleet.node_dir("n3") / "agent.log").read_text()
