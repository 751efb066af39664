"""Network namespaces as mesh nodes, for firewall tests that must never touch the host's ruleset.

Invariants:
- Everything runs inside named namespaces this module creates (`mfw-<pid>-…`): three nodes
  (or `count`) wired to a bridge in a "switch" namespace, addresses 10.77.0.<i>/24 (or the
  `subnet` given) and fd77::<i>/64. No command here runs nft, iptables or the executor in the
  root namespace: each goes through `nsenter --net`. `attach_host()` gives the root namespace
  one address on the segment (a veth into the switch), for services that run on the host side
  (a broker); nothing else of the root namespace changes.
- Whatever is created is removed again (listeners, dockerds, namespaces), on failure too;
  leftovers of a crashed earlier run (its pid gone) are removed before a new topology is built.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parent.parent
NETNS_DIR = Path("/var/run/netns")
SUBNET = "10.77.0"
SUBNET6 = "fd77:"
PREFIX = "mfw"
# overlay2 shares an image's layers between its containers; vfs copies the whole image for each
# (seconds per container for the python and postgres images, and their disk). The host's
# dockerd runs overlay2 on the same file system (scripts/services.sh falls back to vfs there,
# and this follows it).
STORAGE_DRIVER = os.environ.get("MESH_TEST_DOCKER_STORAGE_DRIVER", "overlay2")


def have_tools() -> Optional[str]:
    """Why namespace tests cannot run here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "nsenter"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (iproute2 / util-linux)"
    probe = subprocess.run(
        ["unshare", "-n", sys.executable, "-c", "import nftables; nftables.Nftables()"],
        capture_output=True, text=True,
    )
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["no message"])[-1]
        return f"the nftables binding is not importable (scripts/services.sh installs it): {last}"
    return None



def fleet_unavailable() -> Optional[str]:
    """Why a fleet of namespaced machines (each its own dockerd and registry, a private broker
    on the host side) cannot run here, or None."""
    why = have_tools()
    for tool, package in (("dockerd", "docker.io"), ("busybox", "busybox-static"),
                          ("docker-registry", "docker-registry")):
        if not why and shutil.which(tool) is None:
            why = f"{tool} is not installed ({package}; scripts/services.sh installs it)"
    if not why:
        from _private_rabbit import available  # the tests' directory, on the path by then

        why = available()
    return why

def sh(*argv: str, check: bool = True, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), check=check, capture_output=True, text=True, **kw)


def remove_stale() -> None:
    """Namespaces of earlier runs whose process is gone (names carry the creating pid)."""
    if not NETNS_DIR.exists():
        return
    for entry in NETNS_DIR.iterdir():
        found = re.fullmatch(rf"{PREFIX}-(\d+)-\w+", entry.name)
        if found and not Path(f"/proc/{found.group(1)}").exists():
            sh("ip", "netns", "del", entry.name, check=False)


class Topology:
    """Node namespaces n1..n3 (or n1..n<count>) on one bridged segment, IPv4 and IPv6; n1 is
    the provider in the tests. `more`: further machines by name → host number on the segment
    (e.g. {"n0": 100}: a control machine at <subnet>.100), wired the same way."""

    def __init__(self, tag: str = "t", count: int = 3, subnet: str = SUBNET,
                 more: Optional[dict[str, int]] = None):
        self.tag = f"{PREFIX}-{os.getpid()}-{tag}"
        self.switch = f"{self.tag}sw"
        self.subnet = subnet
        numbers = {f"n{i}": i for i in range(1, count + 1)} | dict(more or {})
        self.nodes = {name: f"{self.tag}{name}" for name in numbers}
        self.addresses = {name: f"{subnet}.{i}" for name, i in numbers.items()}
        self.addresses6 = {name: f"{SUBNET6}:{i}" for name, i in numbers.items()}
        self._processes: list[subprocess.Popen] = []
        self._created: list[str] = []
        self._host_link: Optional[str] = None

    # -- lifecycle

    def __enter__(self) -> "Topology":
        remove_stale()
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _add_netns(self, name: str) -> None:
        sh("ip", "netns", "add", name)
        self._created.append(name)
        sh("ip", "-n", name, "link", "set", "lo", "up")

    def _build(self) -> None:
        self._add_netns(self.switch)
        sh("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", self.switch, "link", "set", "br0", "up")
        for index, (node, netns) in enumerate(sorted(self.nodes.items()), start=1):
            self._add_netns(netns)
            port = f"p{index}"
            # Both ends are created straight inside their namespaces: nothing in the root one.
            sh("ip", "-n", self.switch, "link", "add", port, "type", "veth",
               "peer", "name", "eth0", "netns", netns)
            sh("ip", "-n", self.switch, "link", "set", port, "master", "br0", "up")
            sh("ip", "-n", netns, "addr", "add", f"{self.addresses[node]}/24", "dev", "eth0")
            sh("ip", "-n", netns, "addr", "add", f"{self.addresses6[node]}/64", "dev", "eth0",
               "nodad")
            sh("ip", "-n", netns, "link", "set", "eth0", "up")
        deadline = time.monotonic() + 10
        while not self.reachable("n2", "n1"):  # the bridge forwards once its ports are up
            if time.monotonic() > deadline:
                raise RuntimeError("the test bridge did not come up within 10 s")
            time.sleep(0.2)

    def attach_host(self, index: int = 254) -> str:
        """The root namespace on the segment at <subnet>.<index>/24 (a veth into the switch);
        returns that address."""
        link = f"mh{os.getpid() % 100000}{self.tag[-1]}"[:15]
        sh("ip", "link", "add", link, "type", "veth", "peer", "name", "hub", "netns",
           self.switch)
        self._host_link = link
        sh("ip", "-n", self.switch, "link", "set", "hub", "master", "br0", "up")
        address = f"{self.subnet}.{index}"
        sh("ip", "addr", "add", f"{address}/24", "dev", link)
        sh("ip", "link", "set", link, "up")
        return address

    def reachable(self, source: str, target: str) -> bool:
        """Whether `target` answers at all (a refused connection to a closed port is an answer)."""
        code = (
            "import socket, sys\n"
            "try: socket.create_connection((sys.argv[1], 9), 1)\n"
            "except ConnectionRefusedError: sys.exit(0)\n"
            "except OSError: sys.exit(1)\n"
        )
        return self.python(source, code, self.addresses[target], check=False).returncode == 0

    def close(self) -> None:
        for process in reversed(self._processes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(5)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        self._processes.clear()
        if self._host_link is not None:
            sh("ip", "link", "del", self._host_link, check=False)
            self._host_link = None
        for name in reversed(self._created):
            sh("ip", "netns", "del", name, check=False)
        self._created.clear()

    # -- running things inside a node

    def netns_path(self, node: str) -> str:
        path = NETNS_DIR / self.nodes.get(node, node)
        if not path.exists():  # never fall through to the root namespace
            raise RuntimeError(f"network namespace {path} does not exist")
        return str(path)

    def argv(self, node: str, *argv: str) -> list[str]:
        return ["nsenter", f"--net={self.netns_path(node)}", *argv]

    def run(self, node: str, *argv: str, check: bool = True, **kw) -> subprocess.CompletedProcess:
        return sh(*self.argv(node, *argv), check=check, **kw)

    def python(self, node: str, code: str, *args: str, check: bool = True):
        env = dict(os.environ, PYTHONPATH=str(REPO))
        return self.run(node, sys.executable, "-c", code, *args, check=check, cwd=str(REPO),
                        env=env)

    def mesh(self, node: str, *args: str) -> subprocess.CompletedProcess:
        """The `mesh` command line, run inside `node`'s namespace."""
        env = dict(os.environ, PYTHONPATH=str(REPO))
        return self.run(node, sys.executable, "-m", "executors.cli", *args, check=False,
                        cwd=str(REPO), env=env)

    def listen(self, node: str, port: int, address: Optional[str] = None) -> None:
        """A TCP listener on `node`'s address (or `address`, IPv4 or IPv6) that answers `ok`
        to every connection."""
        code = (
            "import socket, sys\n"
            "family = socket.AF_INET6 if ':' in sys.argv[1] else socket.AF_INET\n"
            "s = socket.socket(family); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
            "s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(64)\n"
            "print('ready', flush=True)\n"
            "while True:\n"
            "    c, _ = s.accept(); c.sendall(b'ok\\n'); c.close()\n"
        )
        process = subprocess.Popen(
            self.argv(node, sys.executable, "-c", code, address or self.addresses[node],
                      str(port)),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        self._processes.append(process)
        if process.stdout.readline().strip() != "ready":
            raise RuntimeError(f"listener on {node}:{port} failed: {process.stderr.read()}")

    def connects(self, source: str, target: str, port: int, *, timeout: float = 1.0,
                 request: bytes = b"", expect: bytes = b"ok") -> bool:
        """Whether `source` opens a TCP connection to `target`'s address and reads `expect`."""
        code = (
            "import socket, sys\n"
            "try:\n"
            "    c = socket.create_connection((sys.argv[1], int(sys.argv[2])), float(sys.argv[3]))\n"
            "    c.settimeout(float(sys.argv[3]) * 3)\n"
            "    c.sendall(sys.argv[4].encode())\n"
            "    data = b''\n"
            "    while True:\n"
            "        chunk = c.recv(4096)\n"
            "        if not chunk: break\n"
            "        data += chunk\n"
            "    sys.exit(0 if sys.argv[5].encode() in data else 3)\n"
            "except OSError as e:\n"
            "    print(type(e).__name__, e); sys.exit(1)\n"
        )
        address = self.addresses.get(target, target)
        result = self.run(source, sys.executable, "-c", code, address, str(port), str(timeout),
                          request.decode(), expect.decode(), check=False)
        return result.returncode == 0

    def nft_tables(self, node: str, *, skip: tuple = ("inet", "mesh")) -> dict:
        """Every table in `node` except ours, listed statelessly (no counters), for comparison."""
        code = (
            "import json, sys, nftables\n"
            "n = nftables.Nftables(); n.set_stateless_output(True)\n"
            "rc, out, err = n.json_cmd({'nftables': [{'list': {'ruleset': None}}]})\n"
            "assert rc == 0, err\n"
            "print(json.dumps(out))\n"
        )
        listing = json.loads(self.python(node, code).stdout)["nftables"]
        tables: dict = {}
        for item in listing:
            ((kind, body),) = item.items()
            if kind == "metainfo":
                continue
            key = (body["family"], body["name"] if kind == "table" else body["table"])
            if key != skip:
                tables.setdefault(f"{key[0]} {key[1]}", []).append(item)
        return tables


# ---------------------------------------------------------------------------- dockerd in a node


def busybox_rootfs_tar(directory: str) -> str:
    """A one-layer root filesystem: the static busybox and a page for `busybox httpd`."""
    busybox = shutil.which("busybox") or "/bin/busybox"
    path = os.path.join(directory, "rootfs.tar")
    page = os.path.join(directory, "index.html")
    with open(page, "w") as handle:
        handle.write("ok from the container\n")
    with tarfile.open(path, "w") as tar:
        tar.add(busybox, arcname="bin/busybox")
        tar.add(page, arcname="www/index.html")
    return path


class NamespacedDockerd:
    """A dockerd living in one node's namespace with its own socket, data root and exec root.

    Started as DESIGN.md says (`nsenter --net=… dockerd`, not `ip netns exec`), so its bridge,
    iptables-nft tables and published ports exist only inside that namespace."""

    IMAGE = "mesh-test/fw-busybox:1"

    def __init__(self, topology: Topology, node: str, extra_args: tuple = ()):
        self.topology = topology
        self.node = node
        self.extra_args = tuple(extra_args)  # e.g. ("--userland-proxy=false",)
        name = topology.nodes[node]
        self.socket = f"/run/{name}.sock"
        self.host = f"unix://{self.socket}"
        self.data_root = f"/var/lib/mesh-test/{name}-docker"
        self.exec_root = f"/run/{name}-docker"
        self.pidfile = f"/run/{name}-docker.pid"
        self.log = f"/tmp/{name}-dockerd.log"
        self.process: Optional[subprocess.Popen] = None

    def start(self, timeout: float = 60) -> None:
        os.makedirs(self.data_root, exist_ok=True)
        os.makedirs(self.exec_root, exist_ok=True)
        with open(self.log, "w") as log:
            self.process = subprocess.Popen(
                self.topology.argv(self.node, "dockerd", "--host", self.host,
                                   "--data-root", self.data_root, "--exec-root", self.exec_root,
                                   "--pidfile", self.pidfile, "--storage-driver", STORAGE_DRIVER,
                                   *self.extra_args),
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while sh("docker", "-H", self.host, "info", check=False).returncode != 0:
            if self.process.poll() is not None or time.monotonic() > deadline:
                tail = Path(self.log).read_text()[-2000:]
                self.stop()
                raise RuntimeError(f"dockerd in {self.node} did not answer:\n{tail}")
            time.sleep(0.5)

    def load_busybox(self) -> str:
        with tempfile.TemporaryDirectory() as scratch:
            tar = busybox_rootfs_tar(scratch)
            sh("docker", "-H", self.host, "import", tar, self.IMAGE)
        return self.IMAGE

    def docker(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return sh("docker", "-H", self.host, *args, check=check)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            ids = self.docker("ps", "-aq", check=False).stdout.split()
            if ids:
                self.docker("rm", "-f", *ids, check=False)
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
        for root in (self.data_root, self.exec_root):
            mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()
                      if line.split()[1] == root or line.split()[1].startswith(root + "/")]
            for mount in sorted(mounts, reverse=True):
                sh("umount", "-l", mount, check=False)
            shutil.rmtree(root, ignore_errors=True)
        for path in (self.pidfile, self.socket):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
