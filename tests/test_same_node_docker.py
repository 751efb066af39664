"""A node as an operator runs it: a real dockerd in its namespace, the mesh firewall on.

Four namespaces on one segment: n1, n2, n3 are the mesh's nodes, n4 (10.77.0.4) is a machine
on the LAN outside the mesh. n1 runs its own dockerd (once with Docker's userland proxy, once
with `--userland-proxy=false`) and its own registry on its loopback, so images are pinned by
their real digests with `mesh pin`, and everything goes through the commands an operator
types: pin, plan --out, apply, verify, in n1's namespace.

The mesh: web@n1 (busybox httpd) is bound by app@n1 (same node) and app@n2 (another node);
idle@n1 is a container on n1 bound to nothing; web's http is exposed to 10.77.0.4/31 (n4 is
in it, n3 is not); broker@n1 is the mesh's broker (its port is a floor open to the mesh's
nodes); a listener on n1's port 22 stands for sshd. Containers dial exactly what their
binding says: the value of their environment. Last, app@n1 (fixed MAC) leaves the mesh and a
second web takes its address in the same apply: n4 must get its page at once (the host's
neighbour entries, executors/node/apply/neighbours.py), so this runs with the firewall on as well as
against the host's Engine (tests/test_apply_neighbours.py).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

try:
    from . import _netns
except ImportError:
    import _netns

pytestmark = pytest.mark.integration

_why = _netns.have_tools()
for tool, package in (("dockerd", "docker.io"), ("busybox", "busybox-static"),
                      ("docker-registry", "docker-registry")):
    if not _why and shutil.which(tool) is None:
        _why = f"{tool} is not installed ({package}; scripts/services.sh installs it)"
if _why:
    pytest.skip(f"same-node firewall test: {_why}", allow_module_level=True)

REGISTRY = "127.0.0.1:5000"  # on n1's own loopback: its dockerd pulls and pushes there
HTTP_GET = "GET / HTTP/1.0\r\n\r\n"
PAGE = "ok from the container"
SSH = 22
MESH = "sn"

PROVISIONS = """\
web: {scope: node, grant: none, keys: [host, port, url], url: "http://{host}:{port}"}
amqp: {scope: node, grant: none, keys: [host, port]}
"""
HTTPD = '["/bin/busybox", "httpd", "-f", "-p", "80", "-h", "/www"]'
SLEEP = '["/bin/busybox", "sleep", "86400"]'
MODULES = {
    "web": f"""\
name: web
artifacts:
  image: {{repository: {REGISTRY}/mesh-test/fw, tag: "1"}}
listens:
  http: {{port: 80}}
provides:
  - {{provision: web, listen: http}}
containers:
  - {{name: server, artifact: image, command: {HTTPD}}}
""",
    "broker": f"""\
name: broker
artifacts:
  image: {{repository: {REGISTRY}/mesh-test/fw, tag: "1"}}
listens:
  amqp: {{port: 80}}
provides:
  - {{provision: amqp, listen: amqp}}
containers:
  - {{name: server, artifact: image, command: {HTTPD}}}
""",
    "app": f"""\
name: app
artifacts:
  image: {{repository: {REGISTRY}/mesh-test/fw, tag: "1"}}
requires:
  - {{as: site, provision: web}}
containers:
  - name: main
    artifact: image
    command: {SLEEP}
    env: {{SITE_HOST: "${{site.host}}", SITE_PORT: "${{site.port}}"}}
""",
    "idle": f"""\
name: idle
artifacts:
  image: {{repository: {REGISTRY}/mesh-test/fw, tag: "1"}}
containers:
  - {{name: main, artifact: image, command: {SLEEP}}}
""",
}
MESH_YAML = f"""\
mesh: {MESH}
catalogue: catalogue
nodes:
  n1: {{address: 10.77.0.1}}
  n2: {{address: 10.77.0.2}}
  n3: {{address: 10.77.0.3}}
substrate: {{broker: broker@n1}}
host-ports: {{first: 20000, last: 20099}}
instances:
  web@n1:
    module: web
    node: n1
    expose:
      http: {{to: [10.77.0.4/31], reason: the LAN's dashboard machine}}
  broker@n1: {{module: broker, node: n1}}
  app@n1: {{module: app, node: n1}}
  app@n2: {{module: app, node: n2, bind: {{site: web@n1}}}}
  idle@n1: {{module: idle, node: n1}}
"""


class Node1:
    """n1 of a topology, with its dockerd and registry, and the mesh applied there."""

    def __init__(self, topology, dockerd, mesh_dir: Path, state: Path):
        self.topology, self.dockerd, self.mesh_dir, self.state = topology, dockerd, mesh_dir, state
        self.declaration = mesh_dir / "out" / "n1.declaration.json"

    def mesh(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        result = self.topology.mesh("n1", *map(str, args))
        if check:
            assert result.returncode == 0, f"mesh {' '.join(map(str, args))}:\n" \
                f"{result.stdout}\n{result.stderr}"
        return result

    def apply(self, *extra: str) -> subprocess.CompletedProcess:
        return self.mesh("apply", self.declaration, "--docker-host", self.dockerd.host,
                         "--state-root", self.state, *extra)

    def verify(self, check: bool = True) -> subprocess.CompletedProcess:
        return self.mesh("verify", self.declaration, "--docker-host", self.dockerd.host,
                         "--timeout", "3", check=check)

    def container(self, instance: str) -> str:
        return f"{MESH}-{instance}-main".replace("@", "-")

    def dial_from(self, container: str, host: str, port: str) -> bool:
        """Whether `container` gets the page from host:port (busybox nc, 3 s)."""
        result = self.dockerd.docker(
            "exec", container, "/bin/busybox", "sh", "-c",
            f"printf '{HTTP_GET}' | /bin/busybox nc -w 3 {host} {port}", check=False)
        return PAGE in result.stdout

    def told(self, container: str) -> tuple[str, str]:
        """What the container's binding says: its SITE_HOST and SITE_PORT."""
        env = dict(line.split("=", 1) for line in self.dockerd.docker(
            "exec", container, "/bin/busybox", "env").stdout.splitlines() if "=" in line)
        return env["SITE_HOST"], env["SITE_PORT"]

    def port_of(self, instance: str) -> int:
        declaration = json.loads(self.declaration.read_text())
        for container in declaration["containers"]:
            if container["instance"] == instance:
                return container["ports"][0]["host_port"]
        raise AssertionError(f"{instance} publishes nothing")


def _start_registry(topology, directory: Path) -> subprocess.Popen:
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "config.yml"
    config.write_text(f"version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n"
                      f"    rootdirectory: {directory / 'data'}\nhttp:\n  addr: {REGISTRY}\n")
    process = subprocess.Popen(topology.argv("n1", shutil.which("docker-registry"), "serve",
                                             str(config)),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    probe = "import urllib.request; urllib.request.urlopen('http://%s/v2/', timeout=1)" % REGISTRY
    while topology.python("n1", probe, check=False).returncode != 0:
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError("the registry in n1 did not answer")
        time.sleep(0.3)
    return process


@pytest.fixture(scope="module", params=["userland-proxy", "no-userland-proxy"])
def node1(request, tmp_path_factory):
    mode = request.param
    tmp = tmp_path_factory.mktemp(mode)
    extra = ("--userland-proxy=false",) if mode == "no-userland-proxy" else ()
    with _netns.Topology("s" + ("p" if extra else "u"), count=4) as topology:
        dockerd = _netns.NamespacedDockerd(topology, "n1", extra_args=extra)
        registry = None
        try:
            dockerd.start()
            registry = _start_registry(topology, tmp / "registry")
            image = dockerd.load_busybox()
            dockerd.docker("tag", image, f"{REGISTRY}/mesh-test/fw:1")
            dockerd.docker("push", f"{REGISTRY}/mesh-test/fw:1")
            topology.listen("n1", SSH)
            mesh_dir = tmp / "mesh"
            for name, text in MODULES.items():
                (mesh_dir / "catalogue" / name).mkdir(parents=True)
                (mesh_dir / "catalogue" / name / "module.yaml").write_text(text)
            (mesh_dir / "catalogue" / "provisions.yaml").write_text(PROVISIONS)
            (mesh_dir / "mesh.yaml").write_text(MESH_YAML)
            node = Node1(topology, dockerd, mesh_dir, tmp / "state")
            node.mesh("pin", mesh_dir)
            node.mesh("plan", mesh_dir, "--out", mesh_dir / "out", "--write-ledger")
            node.apply()
            yield node
        finally:
            if registry is not None:
                registry.kill()
                registry.wait()
            dockerd.stop()


def test_a_same_node_consumer_dials_what_its_binding_says_and_connects(node1):
    app = node1.container("app@n1")
    host, port = node1.told(app)
    assert (host, int(port)) == ("10.77.0.1", node1.port_of("web@n1"))
    assert node1.dial_from(app, host, port)


def test_another_container_on_the_node_without_a_binding_is_refused(node1):
    host, port = node1.told(node1.container("app@n1"))
    assert not node1.dial_from(node1.container("idle@n1"), host, port)
    # the control: the runtime itself would let it in (the mesh's table is what refuses it)
    assert node1.dockerd.docker("inspect", "-f", "{{.State.Running}}",
                                node1.container("idle@n1")).stdout.strip() == "true"


def test_other_nodes_get_in_as_bound_exposed_or_floored(node1):
    topology = node1.topology
    web, broker = node1.port_of("web@n1"), node1.port_of("broker@n1")
    get = dict(request=HTTP_GET.encode(), expect=PAGE.encode())
    assert topology.connects("n2", "n1", web, **get)  # app@n2 is bound to it
    assert not topology.connects("n3", "n1", web, **get)  # a mesh node, bound to nothing
    assert topology.connects("n4", "n1", web, **get)  # in 10.77.0.4/31: exposed to it
    assert topology.connects("n2", "n1", broker, **get)  # the broker floor: mesh nodes
    assert not topology.connects("n4", "n1", broker, **get)  # not a mesh node
    assert topology.connects("n4", "n1", SSH)  # the ssh floor: from anywhere


def test_verify_checks_from_inside_the_consumers_container(node1):
    result = node1.verify()
    lines = result.stdout.splitlines()
    (line,) = [l for l in lines if l.startswith("ok") and "app@n1 site" in l]
    assert f"from inside {node1.container('app@n1')}" in line
    assert any(l.startswith("requires-nothing") and "idle@n1" in l for l in lines)


def test_verify_reports_a_binding_the_firewall_blocks_naming_the_consumer(node1, tmp_path):
    declaration = json.loads(node1.declaration.read_text())
    declaration["firewall"].pop("local")  # a firewall that lets the same-node consumer in no more
    stale = tmp_path / "stale.json"
    stale.write_text(json.dumps(declaration))
    node1.mesh("firewall", stale, "--state-dir", node1.state, "--docker-host",
               node1.dockerd.host)
    try:
        app = node1.container("app@n1")
        assert not node1.dial_from(app, *node1.told(app))
        result = node1.verify(check=False)
        assert result.returncode == 1
        (line,) = [l for l in result.stdout.splitlines() if "app@n1 site" in l]
        assert line.startswith("unreachable")
        assert f"container {app} (consumer app@n1)" in line and "web@n1" in line
    finally:
        node1.apply()  # the declaration's own firewall again
    assert node1.dial_from(node1.container("app@n1"), *node1.told(node1.container("app@n1")))
    assert node1.verify().returncode == 0


def test_a_second_apply_changes_nothing_not_even_the_firewall(node1):
    result = node1.apply("--json")
    report = json.loads(result.stdout)
    assert report["result"] == "applied" and report["ops"] == []
    again = node1.apply("--no-fast")  # the full path: the firewall executor finds it current
    assert "up to date" in again.stderr and "[applied]" not in again.stderr
    assert "checking the batch" not in again.stderr


def _bridge_address(node1, container: str) -> tuple[str, str]:
    network = json.loads(node1.dockerd.docker("inspect", container).stdout)[0][
        "NetworkSettings"]["Networks"]["bridge"]
    return network["IPAddress"], network["MacAddress"].lower()


def _neighbour(node1, ip: str) -> str:
    shown = node1.topology.run("n1", "ip", "-j", "neigh", "show", "dev", "docker0").stdout
    return {e["dst"]: e.get("lladdr", "").lower() for e in json.loads(shown or "[]")}.get(ip, "")


def _answers_within(topology, source: str, target: str, port: int, seconds: float):
    """Seconds until `source` first gets the page from `target`:port, or None within `seconds`
    (one process trying every 0.1 s, each try 0.5 s at most)."""
    code = (
        "import socket, sys, time\n"
        "start = time.monotonic(); end = start + float(sys.argv[3])\n"
        "while time.monotonic() < end:\n"
        "    try:\n"
        "        c = socket.create_connection((sys.argv[1], int(sys.argv[2])), 0.5)\n"
        "        c.settimeout(0.5); c.sendall(sys.argv[4].encode()); data = b''\n"
        "        while True:\n"
        "            chunk = c.recv(4096)\n"
        "            if not chunk: break\n"
        "            data += chunk\n"
        "        if sys.argv[5].encode() in data:\n"
        "            print(round(time.monotonic() - start, 2)); sys.exit(0)\n"
        "    except OSError:\n"
        "        pass\n"
        "    time.sleep(0.1)\n"
        "sys.exit(1)\n")
    result = topology.python(source, code, topology.addresses[target], str(port), str(seconds),
                             HTTP_GET, PAGE, check=False)
    return float(result.stdout) if result.returncode == 0 else None


def test_a_container_given_a_removed_fixed_mac_containers_address_answers_at_once(node1,
                                                                                  tmp_path):
    """Firewall on, n1's own dockerd, the apply run in n1: app@n1 (a same-node consumer, so a
    fixed MAC) leaves the mesh and web2@n1 arrives in the same apply, given app@n1's address;
    n4 (exposed to) gets web2's page through its published port within 5 s of the apply
    returning. Left to the kernel, n1's neighbour entry would send it to app@n1's MAC for 8-45 s
    (tests/test_apply_neighbours.py says why). Runs last: the mesh stays changed."""
    app = node1.container("app@n1")
    ip, mac = _bridge_address(node1, app)
    assert node1.dial_from(app, *node1.told(app))  # n1 answers it, so n1 learns its MAC now
    assert _neighbour(node1, ip) == mac
    changed = tmp_path / "mesh"
    shutil.copytree(node1.mesh_dir, changed, ignore=shutil.ignore_patterns("out"))
    text = (changed / "mesh.yaml").read_text()
    assert "  app@n1: {module: app, node: n1}\n" in text
    (changed / "mesh.yaml").write_text(text.replace(
        "  app@n1: {module: app, node: n1}\n",
        "  web2@n1:\n    module: web\n    node: n1\n"
        "    expose:\n      http: {to: [10.77.0.4/32], reason: the dashboard machine}\n"))
    node1.mesh("plan", changed, "--out", changed / "out", "--write-ledger")
    declaration = changed / "out" / "n1.declaration.json"
    applied = node1.mesh("apply", declaration, "--docker-host", node1.dockerd.host,
                         "--state-root", node1.state, "--json")
    report = json.loads(applied.stdout)
    assert report["result"] == "applied", report
    web2 = f"{MESH}-web2-n1-server"
    assert _bridge_address(node1, web2)[0] == ip, \
        "web2@n1 was not given app@n1's address, which the scenario needs"
    port = next(c["ports"][0]["host_port"] for c in json.loads(declaration.read_text())[
        "containers"] if c["instance"] == "web2@n1")
    took = _answers_within(node1.topology, "n4", "n1", port, 5.0)
    assert took is not None, (
        f"web2@n1 ({ip}) did not answer n4 through port {port} within 5 s of the apply; n1's "
        f"neighbour entry for {ip} names {_neighbour(node1, ip)!r} (app@n1's MAC was {mac})")
    assert _neighbour(node1, ip) != mac
