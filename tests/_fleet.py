"""A mesh run over the broker as an operator runs it: a control node (this test's mesh
directory) and nodes whose agents are `mesh agent` processes, enrolled with real tokens.

`FleetMesh(tmp, modules, instances, nodes)` writes the catalogue (each module's image is the
env-echoing busybox image pushed to the services' registry and pinned by `mesh pin`) and
mesh.yaml with the nodes' addresses and no keys; `enrol(node)` goes through `mesh enrol token`,
`mesh agent enrol`, `mesh enrol list` and `mesh enrol accept --fingerprint` (the fingerprint
the node printed, found in the list); `start_agent(node)` runs
`mesh agent --config` in the background (its stderr kept in a file). Every node applies to the
services' Docker Engine with the firewall left alone (the host's ruleset is never touched:
tests/test_fleet_netns.py runs nodes in namespaces with the firewall on), each with its own
state root. The broker is the RabbitMQ of scripts/services.sh unless a test passes another
(`PrivateRabbit`); that one speaks plain AMQP, so a fleet on it is told `--broker-plain`. The
way an operator runs it is TLS: `tls_rabbit()` gives the fleet a private RabbitMQ serving AMQP
and its management API over TLS with a certificate from the fleet's own mesh CA, and
`SharedTlsBroker` keeps one such broker for a test file, each fleet's certificate swapped in.
Everything printed is kept, to check no secret was printed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional
from urllib.parse import quote

import requests

import _rabbit
from _docker import cleanup, engine, env_image, unique_mesh
from _meshop import REGISTRY, bridge_address, free_range, push

REPO = Path(__file__).resolve().parent.parent


class Broker:
    """How tests reach a broker: AMQP address, management API and its admin."""

    def __init__(self, amqp: str, api: str, admin: str, password_file: str,
                 plain: bool = True, verify=True):
        """`plain`: the broker speaks plain AMQP and the verbs are told so (`--broker-plain`);
        False: TLS with a certificate from the test mesh's CA (tests/test_fleet_tls.py).
        `verify`: what the test's own management API requests verify an https API against."""
        self.amqp, self.api, self.admin, self.password_file = amqp, api, admin, password_file
        self.plain = plain
        self.verify = verify

    @classmethod
    def private(cls, rabbit, amqp: Optional[str] = None) -> "Broker":
        """A PrivateRabbit as the fleet's broker (TLS when it serves TLS); `amqp`: the address
        the control plane and the nodes dial, when not loopback."""
        return cls(amqp or rabbit.amqp, rabbit.api, "admin", str(rabbit.password_file),
                   plain=not rabbit.tls, verify=rabbit.verify)

    def tls(self):
        """How the test's own AMQP connections are secured (executors/common/amqp.BrokerTls):
        verified against the CA the broker's certificate is from."""
        from executors.common import amqp

        if self.plain:
            return amqp.BrokerTls.plain()
        return amqp.BrokerTls(Path(self.verify).read_text())

    def connection_parameters(self, vhost: str, user: str, password: str):
        """pika parameters for an account of the mesh, over TLS when the broker speaks it."""
        import pika

        host, port = self.amqp.rsplit(":", 1)
        ssl_options = None
        if not self.plain:
            ssl_options = pika.SSLOptions(self.tls().context(), host)
        return pika.ConnectionParameters(host, int(port), vhost,
                                         pika.PlainCredentials(user, password),
                                         ssl_options=ssl_options)

    @classmethod
    def services(cls) -> "Broker":
        api, user, _password = _rabbit.rabbit_admin()
        host, port = _rabbit.amqp_address()
        env = _rabbit.service_env()
        return cls(f"{host}:{port}", api, user, env.get(
            "MESH_TEST_RABBIT_PASSWORD_FILE", "/var/lib/mesh-test/rabbit-admin"))

    @property
    def password(self) -> str:
        return Path(self.password_file).read_text().strip()

    def options(self, for_nodes: Optional[str] = None) -> list[str]:
        return ["--broker", self.amqp, "--broker-api", self.api, "--broker-admin", self.admin,
                "--broker-admin-password-file", self.password_file] + (
            ["--broker-for-nodes", for_nodes] if for_nodes else []) + (
            ["--broker-plain"] if self.plain else [])

    def remove_mesh(self, mesh: str) -> None:
        """The mesh's vhost, its accounts and their marks."""
        # verify per request: a session's own is replaced by $REQUESTS_CA_BUNDLE
        session, tls = requests.Session(), {"verify": self.verify, "timeout": 10}
        session.auth = (self.admin, self.password)
        vhost, prefix = f"mesh.{mesh}", f"mesh.{mesh}."
        try:
            session.delete(f"{self.api}/api/vhosts/{quote(vhost, safe='')}", **tls)
            for user in session.get(f"{self.api}/api/users", **tls).json():
                if user["name"].startswith(prefix):
                    session.delete(f"{self.api}/api/users/{quote(user['name'], safe='')}",
                                   **tls)
            for parameter in session.get(f"{self.api}/api/global-parameters", **tls).json():
                name = parameter["name"]
                if name.startswith("mesh-mark:") and (name.endswith(":" + vhost)
                                                      or prefix in name):
                    session.delete(f"{self.api}/api/global-parameters/{quote(name, safe='')}",
                                   **tls)
        except requests.RequestException:
            pass  # the broker is gone (a private one already stopped)

    def queue(self, mesh: str, queue: str) -> dict:
        auth = (self.admin, self.password)
        reply = requests.get(f"{self.api}/api/queues/{quote(f'mesh.{mesh}', safe='')}/"
                             f"{quote(queue, safe='')}", auth=auth, timeout=10,
                             verify=self.verify)
        return reply.json() if reply.status_code == 200 else {}


class SharedTlsBroker:
    """One private TLS RabbitMQ for a test file's fleets (a module-scoped fixture): started
    with the first fleet's certificate, each later fleet's swapped in as RabbitMQ rotates a
    certificate (PrivateRabbit.use_certificate), so each fleet verifies it against its own
    mesh CA without a broker start per test."""

    def __init__(self):
        self.rabbit = None

    def serve(self, tls, **options):
        from _private_rabbit import PrivateRabbit

        if self.rabbit is None:
            self.rabbit = PrivateRabbit(tls=tls, **options).start()
        else:
            self.rabbit.use_certificate(tls)
        return self.rabbit

    def remove(self) -> None:
        if self.rabbit is not None:
            self.rabbit.remove()


APP = """\
name: app
artifacts:
  image: {{repository: {repository}, tag: "{tag}"}}
containers:
  - name: main
    artifact: image
    env: {{GREETING: hello}}
"""


class FleetMesh:
    def __init__(self, tmp: Path, instances: dict[str, tuple[str, str]],
                 nodes: tuple[str, ...] = ("solo",), broker: Optional[Broker] = None,
                 modules: Optional[dict[str, tuple[str, object]]] = None,
                 provisions: str = "{}\n", for_nodes: Optional[str] = None):
        """instances: name → (module, node); modules: name → (module.yaml template naming
        `{repository}`, `{tag}` and `{tmp}`, the local image to push for it: None for the
        env-echoing busybox image)."""
        self.api = engine()
        self.name = unique_mesh("fl")
        self.dir = tmp / "mesh"
        self.dir.mkdir(parents=True)
        self.broker = broker or Broker.services()
        self.for_nodes = for_nodes
        self.address = bridge_address(self.api)
        self.first_port = free_range(8, self.address)
        self.printed: list[str] = []
        self.agents: dict[str, subprocess.Popen] = {}
        self.nodes = nodes
        catalogue = self.dir / "catalogue"
        catalogue.mkdir()
        (catalogue / "provisions.yaml").write_text(provisions)
        self.repositories: dict[str, str] = {}
        for module, (template, image) in (modules or {"app": (APP, None)}).items():
            repository = f"{REGISTRY}/mesh-test-fleet/{module}"
            push(self.api, image or env_image(self.api), repository, self.name)
            self.repositories[module] = repository
            self.write_module(module, template)
        self.instances = dict(instances)
        self.write_mesh()

    # -- files

    def write_module(self, module: str, template: str) -> None:
        (self.dir / "catalogue" / module).mkdir(exist_ok=True)
        (self.dir / "catalogue" / module / "module.yaml").write_text(template.format(
            repository=self.repositories[module], tag=self.name, tmp=self.dir.parent))

    def write_mesh(self, keys: Optional[dict[str, str]] = None) -> None:
        """mesh.yaml, keeping the keys `mesh enrol accept` wrote (read back from it)."""
        keys = keys if keys is not None else self.keys()
        lines = [f"# the fleet test mesh {self.name}", f"mesh: {self.name}",
                 "catalogue: catalogue", "nodes:"]
        for index, node in enumerate(self.nodes):
            control = ", control: true" if index == 0 else ""
            key = f', public-key: "{keys[node]}"' if node in keys else ""
            lines.append(f"  {node}: {{address: {self.address}{control}{key}}}  # node {node}")
        lines.append("instances:" if self.instances else "instances: {}")
        for name, (module, node) in self.instances.items():
            lines.append(f"  {name}: {{module: {module}, node: {node}}}")
        lines.append(f"host-ports: {{first: {self.first_port}, last: {self.first_port + 7}}}")
        (self.dir / "mesh.yaml").write_text("\n".join(lines) + "\n")

    def keys(self) -> dict[str, str]:
        from ruamel.yaml import YAML

        path = self.dir / "mesh.yaml"
        if not path.exists():
            return {}
        nodes = YAML(typ="safe").load(path.read_text()).get("nodes") or {}
        return {n: v["public-key"] for n, v in nodes.items() if v and v.get("public-key")}

    def node_dir(self, node: str) -> Path:
        path = self.dir.parent / "nodes" / node
        path.mkdir(parents=True, exist_ok=True)
        return path

    def config(self, node: str) -> Path:
        return self.node_dir(node) / "agent.yaml"

    def state(self, node: str) -> Path:
        return self.node_dir(node) / "state"

    def log(self, node: str) -> Path:
        return self.node_dir(node) / "agent.log"

    # -- commands

    def mesh(self, *args, check=True, timeout=180, cwd=None) -> subprocess.CompletedProcess:
        result = subprocess.run([sys.executable, "-m", "executors.cli", *map(str, args)],
                                cwd=cwd or self.dir, capture_output=True, text=True,
                                env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=timeout)
        self.printed.append(result.stdout + result.stderr)
        if check:
            assert result.returncode == 0, \
                f"mesh {' '.join(map(str, args))}:\n{result.stdout}\n{result.stderr}"
        return result

    def control_args(self, *args) -> list[str]:
        return [*args, *self.broker.options(self.for_nodes)]

    def setup(self) -> None:
        self.mesh("ca", "init", ".")
        self.mesh("pin", ".")

    def tls_rabbit(self, mesh_dir=".", name: str = "broker", shared=None, **options):
        """A private RabbitMQ (tests/_private_rabbit.py) serving AMQP and its management API
        over TLS only, with a server certificate the CA of the mesh in `mesh_dir` issued for
        127.0.0.1, as an operator issues one for a broker the mesh does not run (`mesh ca
        issue-server`); made this fleet's broker when `mesh_dir` is its own. `shared`: the test
        file's SharedTlsBroker, started by its first fleet, given each later one's certificate.
        After setup() (the CA exists)."""
        import pytest
        from _private_rabbit import PrivateRabbit, available

        why = available()
        if why:
            pytest.skip(f"a TLS broker of the test's own: {why}")
        out = self.dir.parent / f"{name}-tls"
        self.mesh("ca", "issue-server", mesh_dir, name, "--address", "127.0.0.1", "--out", out)
        tls = (out / f"{name}.crt", out / f"{name}.key", out / "ca.crt")
        if shared is not None:
            rabbit = shared.serve(tls, **options)
        else:
            rabbit = PrivateRabbit(tls=tls, **options).start()
        if str(mesh_dir) == ".":
            self.broker = Broker.private(rabbit)
        return rabbit

    def token(self, node: str, *extra) -> str:
        return self.mesh(*self.control_args("enrol", "token", ".", node, *extra)) \
            .stdout.strip()

    def enrol(self, node: str, drift_minutes: float = 0, address: Optional[str] = None) -> None:
        token = self.token(node)
        enrolled = self.mesh("agent", "enrol", token, "--config", self.config(node), "--key",
                             self.node_dir(node) / "node.key", "--address",
                             address or self.address, "--state-root", self.state(node),
                             "--docker-host", self.docker_host, "--no-firewall",
                             "--drift-minutes", drift_minutes, "--no-wait")
        # what the operator reads on the node and compares with the list before accepting
        fingerprint = enrolled.stderr.split("key fingerprint: ", 1)[1].split()[0]
        listed = self.mesh(*self.control_args("enrol", "list", ".")).stdout
        assert f"key fingerprint {fingerprint}" in listed, listed
        self.mesh(*self.control_args("enrol", "accept", ".", node, "--fingerprint",
                                     fingerprint))

    @property
    def docker_host(self) -> str:
        from _docker import docker_host

        return docker_host()

    def start_agent(self, node: str, wait_for: Optional[str] = "connected to the broker",
                    timeout: float = 60) -> subprocess.Popen:
        log = self.log(node)
        handle = open(log, "a")
        process = subprocess.Popen(
            [sys.executable, "-m", "executors.cli", "agent", "--config", str(self.config(node))],
            cwd=self.dir, stdout=handle, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(REPO)})
        handle.close()
        self.agents[node] = process
        if wait_for:
            self.wait_log(node, wait_for, timeout)
        return process

    def stop_agent(self, node: str, sig=signal.SIGTERM) -> None:
        process = self.agents.pop(node, None)
        if process is not None and process.poll() is None:
            process.send_signal(sig)
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def wait_log(self, node: str, text: str, timeout: float = 60, after: int = 0) -> str:
        deadline = time.monotonic() + timeout
        while True:
            content = self.log(node).read_text() if self.log(node).exists() else ""
            if text in content[after:]:
                return content
            process = self.agents.get(node)
            if process is not None and process.poll() is not None:
                raise AssertionError(f"agent {node} exited ({process.returncode}):\n{content}")
            if time.monotonic() > deadline:
                raise AssertionError(f"agent {node}: {text!r} not logged in {timeout}s:\n"
                                     f"{content[-4000:]}")
            time.sleep(0.2)

    def log_size(self, node: str) -> int:
        return len(self.log(node).read_text()) if self.log(node).exists() else 0

    def publish(self, *extra) -> subprocess.CompletedProcess:
        return self.mesh(*self.control_args("publish", ".", *extra))

    def collect(self, wait: float = 120, check=True) -> subprocess.CompletedProcess:
        return self.mesh(*self.control_args("collect", ".", "--wait", wait), check=check,
                         timeout=wait + 120)

    def status(self) -> dict:
        return json.loads(self.mesh("status", ".", "--json").stdout)

    def ledger(self):
        from resolver.documents import load_ledger

        return load_ledger((self.dir / "ledger.yaml").read_text(), "ledger.yaml")[0]

    def applied(self, node: str) -> dict:
        path = self.state(node) / ".mesh" / "applied.json"
        return json.loads(path.read_text()) if path.exists() else {}

    def reports(self, node: str) -> dict:
        path = self.dir / ".control" / "reports.json"
        return (json.loads(path.read_text()).get(node) or {}) if path.exists() else {}

    def container(self, instance: str, short: str = "main") -> str:
        return f"{self.name}-{instance.replace('@', '-')}-{short}"

    def env_of(self, instance: str) -> dict:
        info = self.api.inspect_container(self.container(instance))
        return dict(item.split("=", 1) for item in info["Config"]["Env"])

    def close(self) -> None:
        for node in list(self.agents):
            self.stop_agent(node, signal.SIGKILL)
        cleanup(self.api, self.name)
        self.broker.remove_mesh(self.name)

    def everything_printed(self) -> str:
        logs = "".join(self.log(n).read_text() for n in self.nodes if self.log(n).exists())
        return "".join(self.printed) + logs
