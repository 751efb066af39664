"""An operator at a one-node mesh: a mesh directory run through `python -m executors.cli` as a
person types it, against the real engine and registry.

`Operator(tmp, catalogue, instances)` writes `catalogue/<module>/module.yaml` (each may name
`{repository}` and `{tag}`: the image the test pushed to the local registry for it) and
mesh.yaml (node `solo` at the address of the engine's default bridge, with a real node key:
the address the containers can dial, as a node's LAN address is; 127.0.0.1 would be each
container's own loopback); `setup()` runs ca init, pin, plan
--issue --out and a first apply. Apply and verify run with the sealed secrets and the node key;
the firewall stays off (the host's ruleset is never touched; tests/test_firewall_* cover it in
network namespaces). Everything printed is kept, to check that no secret value was printed.
"""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
from pathlib import Path

import psycopg

from _docker import cleanup, engine, unique_mesh

REPO = Path(__file__).resolve().parent.parent
REGISTRY = os.environ.get("MESH_TEST_REGISTRY", "127.0.0.1:5000")


def bridge_address(api) -> str:
    """The engine's default bridge gateway: an address of this host its containers reach."""
    network = api.inspect_network("bridge")
    for config in network["IPAM"]["Config"] or ():
        if config.get("Gateway") and ":" not in config["Gateway"]:
            return config["Gateway"]
    # the engine leaves Gateway out when it chose it itself: the bridge interface's address
    bridge = network.get("Options", {}).get("com.docker.network.bridge.name", "docker0")
    out = subprocess.run(["ip", "-4", "-o", "addr", "show", "dev", bridge], check=True,
                         capture_output=True, text=True).stdout
    return out.split(" inet ")[1].split("/")[0]


def free_range(count: int, address: str = "127.0.0.1", within: tuple[int, int] = (21000, 29000)
               ) -> int:
    """The first of `count` consecutive ports free on `address`, the first drawn from
    `within` (start inclusive, end exclusive; by default the meshes' host-ports)."""
    for _ in range(200):
        first = random.randrange(*within)
        sockets = []
        try:
            for port in range(first, first + count):
                s = socket.socket()
                sockets.append(s)
                s.bind((address, port))
            return first
        except OSError:
            continue
        finally:
            for s in sockets:
                s.close()
    raise RuntimeError("no free port range")


def push(api, image: str, repository: str, tag: str) -> None:
    api.tag(image, repository, tag)
    for line in api.push(repository, tag, stream=True, decode=True):
        assert "error" not in line, line


class Operator:
    def __init__(self, tmp: Path, provisions: str, modules: dict[str, tuple[str, str]],
                 instances: dict[str, str], ports: int = 6):
        """modules: name → (module.yaml template, local image to push for it)."""
        self.api = engine()
        self.name = unique_mesh("op")
        self.dir = tmp
        self.state = tmp / "state"
        self.key = tmp / "node.key"
        self.printed: list[str] = []
        self.address = bridge_address(self.api)
        self.first_port = free_range(ports, self.address)
        self.ports = ports
        (tmp / "catalogue").mkdir(parents=True)
        (tmp / "catalogue" / "provisions.yaml").write_text(provisions)
        self.modules = {}
        for module, (template, image) in modules.items():
            repository = f"{REGISTRY}/mesh-test-operator/{module}"
            push(self.api, image, repository, self.name)
            (tmp / "catalogue" / module).mkdir()
            path = tmp / "catalogue" / module / "module.yaml"
            path.write_text(template.format(repository=repository, tag=self.name, tmp=tmp))
            self.modules[module] = path
        public = self.mesh("node-key", "solo", "--path", self.key).stdout
        self.public = public.split("public-key:")[1].split()[0]
        self.write_mesh(instances)

    def write_mesh(self, instances: dict[str, str]) -> None:
        """instances: name → module, all on node solo."""
        lines = [f"mesh: {self.name}", "catalogue: catalogue", "nodes:",
                 f'  solo: {{address: {self.address}, control: true, public-key: "{self.public}"}}',
                 "instances:"]
        lines += [f"  {name}: {{module: {module}, node: solo}}"
                  for name, module in instances.items()]
        lines.append(f"host-ports: {{first: {self.first_port}, "
                     f"last: {self.first_port + self.ports - 1}}}")
        (self.dir / "mesh.yaml").write_text("\n".join(lines) + "\n")

    def setup(self) -> None:
        self.mesh("ca", "init", ".")
        self.mesh("pin", ".")
        self.mesh("plan", ".", "--issue", "--out", "out")
        self.apply()

    def cleanup(self) -> None:
        cleanup(self.api, self.name)

    def mesh(self, *args, check=True):
        result = subprocess.run([sys.executable, "-m", "executors.cli", *map(str, args)],
                                cwd=self.dir, capture_output=True, text=True,
                                env={**os.environ, "PYTHONPATH": str(REPO)})
        self.printed.append(result.stdout + result.stderr)
        if check:
            assert result.returncode == 0, \
                f"mesh {' '.join(map(str, args))}:\n{result.stdout}\n{result.stderr}"
        return result

    def apply(self, *extra, check=True):
        return self.mesh("apply", "out/solo.declaration.json", "--secrets", "ledger.yaml",
                         "--key", self.key, "--state-root", self.state, "--no-firewall",
                         "--stop-timeout", "5", *extra, check=check)

    def apply_json(self, check=True) -> dict:
        return json.loads(self.apply("--json", check=check).stdout)

    def verify(self, check=True):
        return self.mesh("verify", "out/solo.declaration.json", "--secrets", "ledger.yaml",
                         "--key", self.key, "--json", check=check)

    @property
    def record(self) -> Path:
        return self.state / ".mesh" / "applied.json"

    def applied(self, *extra, check=True):
        return self.mesh("applied", ".", "solo", "--report", self.record, *extra, check=check)

    def declaration(self) -> dict:
        return json.loads((self.dir / "out" / "solo.declaration.json").read_text())

    def values(self) -> dict[str, dict[int, str]]:
        """Every value sealed to solo in the ledger (the test reads them to log in itself)."""
        from executors.common import keys
        from resolver.documents import load_ledger

        ledger, _ = load_ledger((self.dir / "ledger.yaml").read_text(), "ledger.yaml")
        return keys.unseal_for_node(ledger, "solo", keys.load_private_key(self.key))

    def credential(self, credential: str):
        from resolver.documents import load_ledger

        ledger, _ = load_ledger((self.dir / "ledger.yaml").read_text(), "ledger.yaml")
        return ledger.credentials[credential]

    def provider_port(self, instance: str) -> int:
        (provider,) = [p for p in self.declaration()["providers"] if p["instance"] == instance]
        return provider["port"]

    def pg_login(self, instance: str, password: str, user: str = "postgres",
                 dbname: str = "postgres"):
        return psycopg.connect(host=self.address, port=self.provider_port(instance), user=user,
                               password=password, dbname=dbname, connect_timeout=5,
                               autocommit=True)

    def container_id(self, short: str) -> str:
        return self.api.inspect_container(f"{self.name}-{short}")["Id"]

    def assert_no_secret_printed(self) -> None:
        everything = "".join(self.printed)
        for generations in self.values().values():
            for value in generations.values():
                assert value not in everything, "a secret value was printed"
