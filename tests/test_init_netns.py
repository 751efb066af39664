"""From nothing to a fleet in two commands, as an operator runs them: two network namespaces as
machines, each with its own dockerd and the mesh firewall on.

Machine n1: `mesh init DIR --node n1 --address … --join n2=…`: key, CA, mesh.yaml from the
template (store, broker, registry and control@n1 on n1), pins, the control image built into
n1's Engine (`mesh build --local`, this checkout's wheel staged), issue, apply: control@n1's
container is the control loop (on DIR, a facility of n1; the broker options init was given
kept in DIR/.control/settings.json, the admin's password sealed), n1's agent a service (no
systemd here: `mesh supervise`); converged, a `mesh join` line printed for n2. The control
container killed: the Engine starts it again and it goes on publishing.
Machine n2: that line. Then the operator's one step for an app on n2: assign it in mesh.yaml
(and pin its image); it runs, bound to postgres@n1 across n1's firewall, and its binding
verifies from inside its container. n2's agent is killed and comes back by itself.
Then n2 leaves: its instances unassigned, `mesh node remove`; after the control loop's next
publish the broker refuses n2's login (its agent configuration's credentials). And the control
node is lost: `mesh control backup`, n1's control loop stopped and its mesh directory deleted,
`mesh control restore … --node n3 --address …` on machine n3 (a third namespace, no dockerd:
it only runs the control loop, which restore installs as a `mesh supervise` service; restore
makes n3 the control node in mesh.yaml and takes control@n1, whose directory is gone, out of
it: no hand edit), where a change to mesh.yaml (note@n1) is published and applied by n1's
agent, which never notices the move.

What stands in for what this machine cannot run (no public registry, no LavinMQ image): the
postgres image is built from the host's PostgreSQL (tests/_pgimage.py); the control module's
python base is one made from this host's interpreter (tests/_pyimage.py) behind the nodes'
registry standing in for docker.io (the catalogue's own control module, its python repository
renamed, given with --catalogue); the broker and the
registry modules are stubs of the same names (the broker's providing `amqp`; the registry's
no `artifact-store`, since it serves no registry and every node's pull check against it would
fail), and the real broker is a
RabbitMQ of the test's own on the host side of the segment, given to `mesh init` with the
control verbs' --broker options (as the fleet tests give it to `mesh control`). It speaks plain
AMQP, and `mesh init` is told `--broker-plain`, which it keeps for the control loop: this is the
suite's one test of the plain path an operator asks for in so many words (a broker of their
own that the mesh CA cannot have certified before `mesh init` made that CA); every other fleet
test runs over TLS from the mesh CA (tests/_fleet.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

import pika
import pika.exceptions
import pytest

try:
    from . import _netns
except ImportError:
    import _netns

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parent.parent

_why = _netns.fleet_unavailable()
if _why:
    pytest.skip(f"init namespace test: {_why}", allow_module_level=True)

from _fleet import Broker  # noqa: E402
from _manifests import APP, POSTGRES  # noqa: E402
from _pgimage import postgres_image  # noqa: E402
from _pyimage import python_image  # noqa: E402
from test_fleet_netns import NOTE, REGISTRY, _registry  # noqa: E402

PYTHON = f"{REGISTRY}/mesh-test-init/python"  # docker.io/library/python, as the nodes see it

from executors.common.service import child_pid, supervisor_pid  # noqa: E402

PROVISIONS = """\
postgres-database:
  scope: node
  grant: database+login
  keys: [host, port, database, user, password, url]
  url: "postgres://{user}@{host}:{port}/{database}"
amqp:
  scope: node
  grant: none
  keys: [host, port, vhost, user, password, url]
  url: "amqp://{user}@{host}:{port}/{vhost}"
amqp-management:
  scope: node
  grant: none
  keys: [host, port, url]
  url: "http://{host}:{port}"
mesh-ca:
  scope: mesh
  grant: none
  keys: [host, port, url]
  url: "http://{host}:{port}/ca"
stub-registry:
  description: what the registry stub provides instead of artifact-store (it serves no
    registry, so nodes get no pull account from it, and their verify no check against it)
"""

STUB = """\
name: {name}
artifacts:
  server: {{repository: {repository}, tag: "{tag}", mirror: false}}
listens:
  main: {{port: 8080}}
provides:
  - {{provision: {provision}, listen: main{admin}}}{more}{secrets}
containers:
  - name: server
    artifact: server
"""


class Machines:
    """The machines (n1, n2 with dockerds; n3 for the restored control node), the host-side
    broker, and the `mesh` command run inside each."""

    def __init__(self, topology, tmp: Path, broker: Broker, name: str):
        self.topology, self.tmp, self.broker, self.name = topology, tmp, broker, name
        self.dir = tmp / "mesh"
        self.control = "n1"  # the machine holding self.dir, the control node
        self.dockerd: dict[str, _netns.NamespacedDockerd] = {}

    def home(self, node: str) -> Path:
        path = self.tmp / "nodes" / node
        path.mkdir(parents=True, exist_ok=True)
        return path

    def mesh(self, node: str, *args, check: bool = True,
             timeout: float = 900) -> subprocess.CompletedProcess:
        result = subprocess.run(self.topology.argv(node, sys.executable, "-m", "executors.cli",
                                                   *map(str, args)),
                                cwd=self.tmp, capture_output=True, text=True, timeout=timeout,
                                env={**os.environ, "PYTHONPATH": str(REPO)})
        if check:
            assert result.returncode == 0, f"mesh {args}:\n{result.stdout}\n{result.stderr}"
        return result

    def node_options(self, node: str) -> list:
        home = self.home(node)
        return ["--config", home / "agent.yaml", "--key", home / "node.key", "--state-root",
                home / "state", "--docker-host", self.dockerd[node].host, "--drift-minutes",
                "0.25", "--run-dir", home]

    def status(self) -> dict:
        return json.loads(self.mesh(self.control, "status", self.dir, "--json").stdout)

    def running(self, node: str) -> str:
        return self.dockerd[node].docker("ps", "--format", "{{.Names}}").stdout

    def converged(self) -> bool:
        return all(n["serial_published"] is not None and not n["behind"]
                   and n["last_result"] == "applied" for n in self.status()["nodes"])

    @property
    def control_container(self) -> str:
        return f"{self.name}-control-n1-control"

    def control_state(self) -> dict:
        """n1's control container as its Engine sees it (State: Running, Pid, …)."""
        done = self.dockerd["n1"].docker("inspect", self.control_container, check=False)
        return json.loads(done.stdout)[0]["State"] if done.returncode == 0 else {}

    def logs(self) -> str:
        parts = []
        for node in sorted(self.topology.nodes):
            for log in sorted(self.home(node).glob("*.log")):
                parts.append(f"--- {node} {log.name}\n{log.read_text()[-4000:]}")
        if "n1" in self.dockerd:
            done = self.dockerd["n1"].docker("logs", "--tail", "60", self.control_container,
                                             check=False)
            parts.append(f"--- n1 {self.control_container}\n{done.stdout}{done.stderr}")
        return "\n".join(parts)

    def wait(self, condition, what: str, timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if condition():
                    return
            except (KeyError, AttributeError, TypeError, json.JSONDecodeError):
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: not within {timeout}s\n{self.logs()}")
            time.sleep(1)

    def add_instances(self, *lines: str) -> None:
        """Assign instances in mesh.yaml, the operator's edit (the template's comments kept)."""
        path = self.dir / "mesh.yaml"
        text = path.read_text()
        assert "\ninstances:\n" in text
        path.write_text(text.replace("\ninstances:\n", "\ninstances:\n" + "".join(
            f"  {line}\n" for line in lines), 1))

    def stop_services(self) -> None:
        for node in self.topology.nodes:
            for service in ("agent", "control"):
                pid = supervisor_pid(service, self.home(node))
                if pid is None:
                    continue
                os.kill(pid, signal.SIGTERM)
                deadline = time.monotonic() + 60
                while supervisor_pid(service, self.home(node)) is not None \
                        and time.monotonic() < deadline:
                    time.sleep(0.2)


def write_catalogue(machines: Machines) -> Path:
    source = machines.tmp / "catalogue-src"
    repository = f"{REGISTRY}/mesh-test-init"
    texts = {
        "postgres": POSTGRES.format(repository=f"{repository}/postgres", tag=machines.name,
                                    tmp=machines.tmp),
        "app": APP.format(repository=f"{repository}/app", tag=machines.name),
        "note": NOTE.format(registry=REGISTRY, tag=machines.name, note="after").replace(
            "mesh-test-e2e", "mesh-test-init"),
        "lavinmq": STUB.format(name="lavinmq", repository=f"{repository}/app",
                               tag=machines.name, provision="amqp", admin=", admin: admin",
                               more="\n  - {provision: amqp-management, listen: main}",
                               secrets="\nsecrets: [admin]"),
        "registry": STUB.format(name="registry", repository=f"{repository}/app",
                                tag=machines.name, provision="stub-registry", admin="",
                                more="", secrets=""),
    }
    for module, text in texts.items():
        (source / module).mkdir(parents=True)
        (source / module / "module.yaml").write_text(text)
    (source / "provisions.yaml").write_text(PROVISIONS)
    # the catalogue's own control module, its python base where this test's registry has it
    shutil.copytree(REPO / "catalogue" / "control", source / "control",
                    ignore=shutil.ignore_patterns("dist", "__pycache__"))
    module = source / "control" / "module.yaml"
    text = module.read_text()
    assert "repository: docker.io/library/python" in text
    module.write_text(text.replace("repository: docker.io/library/python",
                                   f"repository: {PYTHON}"))
    return source


@contextlib.contextmanager
def machines_in(tmp: Path) -> Iterator[Machines]:
    """Two machines with their dockerds and registries, the broker on the host side, the
    images staged; everything removed again (services, dockerds, namespaces, the broker)."""
    from _private_rabbit import PrivateRabbit

    from executors.node import docker_engine

    subnet = f"10.80.{20 + os.getpid() % 200}"
    registries, rabbit, machines = [], None, None
    with _netns.Topology("i", count=3, subnet=subnet) as topology:
        try:
            hub = topology.attach_host()
            rabbit = PrivateRabbit(listen=("127.0.0.1", hub), management=hub).start()
            broker = Broker(f"{hub}:{rabbit.port}", rabbit.api, "admin",
                            str(rabbit.password_file))
            machines = Machines(topology, tmp, broker, f"in{os.getpid() % 100000}")
            for node in ("n1", "n2"):  # n3 only ever runs the restored control loop
                machines.dockerd[node] = _netns.NamespacedDockerd(topology, node)
                machines.dockerd[node].start(timeout=120)
            storage = Path(tempfile.mkdtemp(prefix="init-registry-", dir=tmp))
            for node in ("n1", "n2"):
                registries.append(_registry(topology, node, storage, tmp / "registry"))
            n1 = docker_engine.connect(machines.dockerd["n1"].host)
            repository = f"{REGISTRY}/mesh-test-init"
            n1.tag(postgres_image(n1), f"{repository}/postgres", machines.name)
            machines.dockerd["n1"].docker("push", f"{repository}/postgres:{machines.name}")
            from _docker import _rootfs

            n1.import_image_from_data(
                _rootfs(), repository=f"{repository}/app", tag=machines.name,
                changes=['CMD ["httpd", "-f", "-p", "8080", "-h", "/www"]', "ENV PATH=/bin"])
            machines.dockerd["n1"].docker("push", f"{repository}/app:{machines.name}")
            # what docker.io would serve as python:3.11-slim, made from this interpreter
            n1.tag(python_image(n1), PYTHON, "3.11-slim")
            machines.dockerd["n1"].docker("push", f"{PYTHON}:3.11-slim")
            yield machines
        finally:
            if machines is not None:
                machines.stop_services()
                for dockerd in machines.dockerd.values():
                    dockerd.stop()
            for process in registries:
                process.kill()
                process.wait()
            if rabbit is not None:
                rabbit.remove()


@pytest.fixture(scope="module")
def machines(tmp_path_factory):
    with machines_in(tmp_path_factory.mktemp("init")) as made:
        yield made


def test_init_then_join_runs_an_app_across_machines_and_the_killed_agent_comes_back(machines):
    init_seconds, app_seconds = scenario(machines)
    print(f"init to converged {init_seconds:.1f}s; join to the first app running "
          f"{app_seconds:.1f}s")
    node_leaves(machines)
    control_node_restored_elsewhere(machines)


def scenario(machines: Machines) -> tuple[float, float]:
    """The operator's walk, asserted; (seconds from `mesh init` to converged, from `mesh join`
    to the first app running on the joined machine)."""
    topology = machines.topology
    source = write_catalogue(machines)
    began = time.monotonic()
    init = machines.mesh("n1", "init", machines.dir, "--node", "n1", "--address",
                         topology.addresses["n1"], "--mesh", machines.name, "--catalogue",
                         source, "--join",
                         f"n2={topology.addresses['n2']}", "--timeout", "600",
                         *machines.node_options("n1"),
                         *machines.broker.options(machines.broker.amqp), check=False)
    assert init.returncode == 0, f"{init.stdout}\n{init.stderr}\n{machines.logs()}"
    init_seconds = time.monotonic() - began
    assert "n1 converged" in init.stderr and "key fingerprint: SHA256:" in init.stderr
    (line,) = [l for l in init.stdout.splitlines() if l.startswith("on n2, as root: mesh join ")]
    token = line.split("mesh join ", 1)[1].strip()
    assert "mesh build" in init.stderr and "staged" in init.stderr, init.stderr
    # exactly one control loop: control@n1's container, no host service
    assert supervisor_pid("control", machines.home("n1")) is None
    assert machines.control_state().get("Running"), machines.logs()
    assert supervisor_pid("agent", machines.home("n1")) is not None
    text = (machines.dir / "mesh.yaml").read_text()
    assert re.search(r"catalogue: catalogue\b", text)
    assert f'mesh-dir={machines.dir}' in text and "control@n1:" in text, text
    kept = json.loads((machines.dir / ".control" / "settings.json").read_text())
    assert kept["broker"] == machines.broker.amqp and kept["broker_admin_password_sealed"]
    assert machines.broker.plain and kept["broker_plain"] is True  # asked for, and kept
    password = Path(machines.broker.password_file).read_text().strip()
    assert password not in (machines.dir / ".control" / "settings.json").read_text()
    ledger = (machines.dir / "ledger.yaml").read_text()
    assert '"control/control":' in ledger and '"local":true' in ledger, ledger

    # the control loop crashes: the Engine's restart policy starts it again
    crashed = machines.control_state()["Pid"]
    os.kill(crashed, signal.SIGKILL)
    machines.wait(lambda: machines.control_state().get("Running")
                  and machines.control_state()["Pid"] not in (0, crashed),
                  "the Engine starts the control container again", 60)

    began = time.monotonic()
    joined = machines.mesh("n2", "join", token, "--wait", "120", *machines.node_options("n2"))
    assert "joined: n2 is a node of mesh" in joined.stdout, joined.stdout + joined.stderr

    # the operator's one step for an app on n2: assign it (and pin its image)
    machines.add_instances("app@n2: {module: app, node: n2}")
    machines.mesh("n1", "pin", machines.dir)
    machines.wait(lambda: f"{machines.name}-app-n2-web" in machines.running("n2")
                  and machines.converged(), "app@n2 runs, both machines converge", 600)
    app_seconds = time.monotonic() - began
    # its binding checked from inside its container, across n1's firewall
    machines.wait(lambda: [(n["verify"]["ok"], n["verify"]["not_ok"]) for n in
                           machines.status()["nodes"] if n["node"] == "n2"] == [(1, [])],
                  "app@n2's binding verifies from its container", 240)

    # n2's agent is killed: its supervisor starts it again, and it applies the next change
    home = machines.home("n2")
    killed = child_pid("agent", home)
    assert killed is not None
    os.kill(killed, signal.SIGKILL)
    machines.wait(lambda: child_pid("agent", home) not in (None, killed),
                  "n2's agent is started again by its supervisor", 60)
    machines.add_instances("note@n2: {module: note, node: n2}")
    machines.mesh("n1", "pin", machines.dir)
    machines.wait(lambda: f"{machines.name}-note-n2-main" in machines.running("n2")
                  and machines.converged(), "the restarted agent applies the next change", 300)
    return init_seconds, app_seconds


def broker_login(machines: Machines, node: str) -> None:
    """Dial the real broker as `node`'s agent does, with the credentials its agent
    configuration holds (the password sealed to its key); close again. Raises when refused."""
    from executors.common.keys import load_private_key, unseal
    from executors.node.agent.config import load_config

    config = load_config(machines.home(node) / "agent.yaml")
    assert config.login is not None, f"{node}'s agent configuration holds no broker login"
    password = unseal(load_private_key(config.key), config.login.password_sealed)
    pika.BlockingConnection(pika.ConnectionParameters(
        config.login.host, config.login.port, config.login.vhost,
        pika.PlainCredentials(config.login.user, password), connection_attempts=1,
        socket_timeout=10)).close()


def refused(machines: Machines, node: str) -> bool:
    """The broker refuses `node`'s login (not merely unreachable: that raises on)."""
    try:
        broker_login(machines, node)
    except (pika.exceptions.ProbableAuthenticationError,
            pika.exceptions.AuthenticationError):
        return True
    return False


def node_leaves(machines: Machines) -> None:
    """n2's instances unassigned (the operator's edit), `mesh node remove DIR n2`; the control
    loop's next publish deletes n2's broker account: its login is refused by the broker."""
    path = machines.dir / "mesh.yaml"
    path.write_text("".join(line for line in path.read_text().splitlines(keepends=True)
                            if "@n2:" not in line))
    machines.wait(lambda: not any(f"{machines.name}-{what}-n2-" in machines.running("n2")
                                  for what in ("app", "note")) and machines.converged(),
                  "n2 applies a declaration without its instances", 300)
    broker_login(machines, "n2")  # its account works until it is removed
    removed = machines.mesh("n1", "node", "remove", machines.dir, "n2")
    assert "removed node n2" in removed.stdout and "left on n2's machine" in removed.stdout, \
        removed.stdout
    assert "\n  n2:" not in path.read_text()
    machines.wait(lambda: refused(machines, "n2"),
                  "the control loop's next publish deletes n2's broker account", 120)
    assert [n["node"] for n in machines.status()["nodes"]] == ["n1"]


def control_node_restored_elsewhere(machines: Machines) -> None:
    """`mesh control backup`; n1's control loop stopped and its mesh directory deleted;
    `mesh control restore --node n3` on n3 (n3 the control node in mesh.yaml, control@n1 out,
    the control loop a service there: exactly the documented commands); a change to mesh.yaml
    in the restored directory is published and applied by n1's agent, which never re-enrols."""
    passphrase = machines.tmp / "backup.pass"
    passphrase.write_text("the operator's backup passphrase\n")
    archive = machines.tmp / "offsite" / "control.mesh-backup"
    key = machines.home("n1") / "node.key"
    made = machines.mesh("n1", "control", "backup", machines.dir, "--out", archive, "--key",
                         key, "--passphrase-file", passphrase)
    assert archive.is_file(), made.stdout + made.stderr
    (n1,) = machines.status()["nodes"]
    serial = n1["serial_applied"]
    agent = child_pid("agent", machines.home("n1"))
    agent_log = machines.home("n1") / "agent.log"
    mark = len(agent_log.read_text())

    # machine 1's control node is lost: its control loop stops, its mesh directory is gone
    machines.dockerd["n1"].docker("stop", machines.control_container)
    shutil.rmtree(machines.dir)

    # machine 3 becomes the control node
    home = machines.home("n3")
    restored, control_key = home / "mesh", home / "control.key"
    done = machines.mesh("n3", "control", "restore", archive, "--dir", restored, "--key",
                         control_key, "--passphrase-file", passphrase, "--node", "n3",
                         "--address", machines.topology.addresses["n3"], "--run-dir", home)
    assert control_key.read_bytes() == key.read_bytes()
    for line in ("mesh.yaml: added node n3", "mesh.yaml: nodes.n1: control: true removed",
                 "mesh.yaml: instances.control@n1 removed", "no systemd here: `mesh supervise`"):
        assert line in done.stderr, done.stderr
    assert supervisor_pid("control", home) is not None, done.stderr
    text = (restored / "mesh.yaml").read_text()
    assert "\n  control@n1:" not in text and "# Made by `mesh init`" in text, text
    machines.dir, machines.control = restored, "n3"

    # the operator's change, made in the restored directory: note@n1 in: published by the
    # restored control loop, applied by n1 (which drops control@n1's container)
    machines.add_instances("note@n1: {module: note, node: n1}")

    def n1_applied() -> bool:
        (n1,) = [n for n in machines.status()["nodes"] if n["node"] == "n1"]
        return (f"{machines.name}-note-n1-main" in machines.running("n1")
                and n1["last_result"] == "applied" and not n1["behind"]
                and n1["serial_applied"] > serial)

    machines.wait(n1_applied, "the restored control node's publish is applied by n1", 300)
    nodes = {n["node"]: n for n in machines.status()["nodes"]}
    assert sorted(nodes) == ["n1", "n3"] and not nodes["n3"]["enrolled"], nodes
    assert machines.control_state() == {}, "control@n1's container is removed"
    assert child_pid("agent", machines.home("n1")) == agent, "n1's agent restarted"
    assert "enrol" not in agent_log.read_text()[mark:].lower(), agent_log.read_text()[mark:]
    assert "the operator's backup passphrase" not in machines.logs()
