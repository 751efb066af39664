"""The control module's image built by the mesh, across the network, as an operator builds it.

Two network namespaces, each with its own dockerd, the mesh firewall on in both (as in
test_registry_tls_netns.py, whose helpers this uses): registry@n1 serves TLS with the
certificate the mesh CA issued it and requires an account. The control module is the
catalogue's own (catalogue/control, copied into the mesh directory), its `python` base named by
the upstream registry an operator's network would offer (here a plain registry on each node's
loopback holding a python base made from this host's interpreter, tests/_pyimage.py; no public
registry is reachable). The operator's steps, in order:

    mesh pin DIR --all; mesh plan DIR --issue --out out/; mesh apply …   (n1, then n2)
    mesh mirror DIR --all --key n1.key                       (the python base, by digest)
    sh scripts/stage-control-image.sh DIR/catalogue/control/image   (this project's wheel)
    mesh build DIR control/control --key n1.key                    (in n1's engine)

A build before staging fails and says to stage. The build pulls the base by its pinned digest
from the mesh's registry, pushes the result by digest, records it, and `mesh stale` is empty
afterwards. n2's runtime pulls the built image by digest with its own pull account and runs
it: its /ca serves the mesh CA and its /healthz answers 200 while the real `mesh control`
runs inside (retrying the broker this mesh does not have). `mesh verify` on n2 logs in to the
registry through n2's engine with n2's account: ok; after the account rotated on the registry
but before n2 was told, auth-failed naming the generation; ok again once it is. `mesh renew`
re-signs the registry's certificate: n1 serves the new one after its apply, n2 still logs in.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

try:
    from . import _netns
    from .test_registry_tls_netns import (REGISTRY, UPSTREAM, declaration,
                                          apply_node, mesh, mesh_host, nodes_yaml, registry_rootfs,
                                          trusting_nodes)
except ImportError:
    import _netns
    from test_registry_tls_netns import (REGISTRY, UPSTREAM, declaration,
                                         apply_node, mesh, mesh_host, nodes_yaml, registry_rootfs,
                                         trusting_nodes)

from executors.common.keys import load_private_key, unseal
from executors.control.loading import load_mesh_dir

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parent.parent
PYTHON = f"{UPSTREAM}/library/python"
API_PORT = 18080
UID = 10001  # the control module's state owner, its image's USER


def write_mesh(directory: Path, topology, keys: dict) -> None:
    catalogue = directory / "catalogue"
    (catalogue / "registry").mkdir(parents=True)
    (catalogue / "registry" / "module.yaml").write_text(REGISTRY)
    shutil.copytree(REPO / "catalogue" / "control", catalogue / "control",
                    ignore=shutil.ignore_patterns("dist", "__pycache__"))
    module = catalogue / "control" / "module.yaml"
    text = module.read_text()
    assert "repository: docker.io/library/python" in text
    module.write_text(text.replace("repository: docker.io/library/python",
                                   f"repository: {PYTHON}"))
    shutil.copy(REPO / "catalogue" / "provisions.yaml", catalogue / "provisions.yaml")
    nodes = nodes_yaml(topology, keys)
    (directory / "mesh.yaml").write_text(
        f"mesh: cb{os.getpid()}\ncatalogue: catalogue\nledger: ledger.yaml\nnodes:\n{nodes}"
        "instances:\n  registry:\n    module: registry\n    node: n1\n")


def test_the_mesh_builds_its_control_image_and_a_node_runs_it():
    with tempfile.TemporaryDirectory(prefix="mesh-cb-") as scratch, \
            _netns.Topology("c", count=2) as topology, \
            trusting_nodes(topology, Path(scratch)) as daemons:
        tmp = Path(scratch)
        states = {node: tmp / f"{node}-state" for node in ("n1", "n2")}
        n1, n2 = daemons["n1"], daemons["n2"]
        import docker

        from _pyimage import python_image

        base = python_image(docker.APIClient(base_url=n1.host, timeout=600))
        n1.docker("tag", base, f"{PYTHON}:3.11-slim")
        subprocess.run(["docker", "-H", n1.host, "import", "--change",
                        'CMD ["/bin/registry", "serve", "/etc/docker/registry/config.yml"]',
                        "-", f"{UPSTREAM}/mesh-test/registry:1"],
                       input=registry_rootfs(), check=True, capture_output=True)
        for image in (f"{PYTHON}:3.11-slim", f"{UPSTREAM}/mesh-test/registry:1"):
            n1.docker("push", image)

        directory, out = tmp / "mesh", tmp / "out"
        directory.mkdir()
        keys = {}
        for node in ("n1", "n2"):
            made = mesh_host("node-key", node, "--path", str(tmp / f"{node}.key"))
            keys[node] = made.stdout.split("public-key:")[1].split()[0]
        write_mesh(directory, topology, keys)
        mesh_host("ca", "init", str(directory))
        # --all: the control module is built before any instance runs it
        mesh(topology, "n1", "pin", str(directory), "--all")
        mesh_host("plan", str(directory), "--issue", "--out", str(out))

        def apply(node: str) -> str:
            return apply_node(topology, daemons, tmp, directory, out, node)

        apply("n1")
        apply("n2")  # the trust file for the registry
        registry = next(f["path"] for f in declaration(out, "n2")["files"]
                        if f["path"].startswith("/etc/docker/certs.d/")).split("/")[4]
        mirrored = mesh(topology, "n1", "mirror", str(directory), "--all", "--key",
                        str(tmp / "n1.key"))
        pin = load_mesh_dir(directory).ledger.pins[f"{PYTHON}:3.11-slim"]
        assert load_mesh_dir(directory).ledger.mirrored.get(pin) == registry, mirrored
        stale = mesh_host("stale", str(directory)).stdout
        assert "control/control: never built" in stale, stale

        def build() -> subprocess.CompletedProcess:
            return topology.mesh("n1", "build", str(directory), "control/control", "--key",
                                 str(tmp / "n1.key"), "--docker-host", n1.host)

        # a mistake on purpose: building before the wheel is staged says what to do
        unstaged = build()
        said = unstaged.stdout + unstaged.stderr
        assert unstaged.returncode == 1 and "stage-control-image.sh" in said, said
        assert "control/control" not in load_mesh_dir(directory).ledger.builds

        context = directory / "catalogue" / "control" / "image"
        staged = subprocess.run(["sh", str(REPO / "scripts" / "stage-control-image.sh"),
                                 str(context)], capture_output=True, text=True,
                                timeout=600)
        assert staged.returncode == 0, staged.stdout + staged.stderr
        built = build()
        said = built.stdout + built.stderr
        assert built.returncode == 0, said
        assert f"base control/python by digest: {registry}/library/python@{pin}" \
            in said, said  # from the mesh's registry, where mirror put it (pulled by the
        # build before staging, so this one finds it in the Engine: it is not pulled again)
        ledger = load_mesh_dir(directory).ledger
        record = ledger.builds["control/control"]
        assert dict(record.bases) == {"control/python": pin}
        assert ledger.mirrored[record.digest] == registry
        assert "nothing is stale" in mesh_host("stale", str(directory)).stdout

        # n2's runtime pulls the built image by digest with its own account, and runs it
        n2_key = load_private_key(tmp / "n2.key")

        def n2_password(slot: str = "active") -> str:
            credential = load_mesh_dir(directory).ledger.credentials[
                "registry-pull/registry/n2"]
            return unseal(n2_key, getattr(credential, slot).sealed["n2"])

        image = f"{registry}/control/control@{record.digest}"
        engine = docker.APIClient(base_url=n2.host, timeout=600)
        refused = n2.docker("pull", image, check=False)  # no account given: refused
        assert refused.returncode != 0, refused.stdout
        for event in engine.pull(f"{registry}/control/control", tag=record.digest,
                                 stream=True, decode=True,
                                 auth_config={"username": "node-n2_a",
                                              "password": n2_password()}):
            assert "error" not in event, event
        volume = tmp / "control-data"
        shutil.copytree(directory, volume / "mesh")
        (volume / "broker-admin").write_text("not-used\n")
        for root, dirs, files in os.walk(volume):
            for name in [root, *(os.path.join(root, n) for n in dirs + files)]:
                os.lchown(name, UID, UID)
        container = engine.create_container(
            image, environment={
                "MESH_API_PORT": str(API_PORT),
                # a broker nobody runs here: the control plane keeps retrying it
                "MESH_BROKER_URL": "amqp://control:unused@127.0.0.1:5672/control",
                "MESH_BROKER_API": "http://127.0.0.1:15672",
                "MESH_BROKER_ADMIN": "admin",
                "MESH_BROKER_ADMIN_PASSWORD_FILE": "/var/lib/mesh-control/broker-admin"},
            host_config=engine.create_host_config(network_mode="host", binds={
                str(volume): {"bind": "/var/lib/mesh-control", "mode": "rw"}}),
            name=f"control-{os.getpid()}")
        engine.start(container)

        def logs() -> str:
            return engine.logs(container, stdout=True, stderr=True).decode("utf-8",
                                                                            "replace")

        probe = ("import sys, urllib.request, urllib.error\n"
                 "try:\n"
                 "    r = urllib.request.urlopen(f'http://127.0.0.1:{sys.argv[1]}{sys.argv[2]}',"
                 " timeout=5)\n"
                 "    print(r.status); print(r.read().decode())\n"
                 "except urllib.error.HTTPError as e:\n"
                 "    print(e.code); print(e.read().decode())\n"
                 "except OSError as e:\n"
                 "    print(0); print(e)\n")

        def get(path: str) -> tuple[int, str]:
            answer = topology.python("n2", probe, str(API_PORT), path).stdout
            code, _, body = answer.partition("\n")
            return int(code), body

        deadline = time.monotonic() + 180
        while get("/healthz")[0] != 200:
            assert time.monotonic() < deadline, (get("/healthz"), logs()[-4000:])
            time.sleep(1)
        code, body = get("/ca")
        assert code == 200 and body.strip() == (directory / "ca" / "mesh-ca.crt"
                                                ).read_text().strip()
        deadline = time.monotonic() + 120
        while "broker" not in logs():
            assert time.monotonic() < deadline, logs()[-4000:]
            time.sleep(1)
        printed = logs()
        assert "starting: mesh control /var/lib/mesh-control/mesh" in printed, printed
        assert "unused" not in printed and n2_password() not in printed
        engine.remove_container(container, force=True)

        # mesh verify on n2: its pull account logs in through n2's own engine
        def verify() -> tuple[int, list]:
            done = topology.mesh("n2", "verify", str(out / "n2.declaration.json"),
                                 "--secrets", str(directory / "ledger.yaml"), "--key",
                                 str(tmp / "n2.key"), "--docker-host", n2.host, "--json")
            assert done.returncode in (0, 1), done.stdout + done.stderr
            results = json.loads(done.stdout)["results"]
            return done.returncode, [r for r in results if r["kind"] == "registry+account"]

        code, results = verify()
        assert code == 0 and [r["status"] for r in results] == ["ok"], results
        assert results[0]["credential"] == "registry-pull/registry/n2"
        assert n2_password() not in json.dumps(results)
        # the account rotates: the registry puts the new password in force first, in the idle
        # slot's entry; until n2 is told, the generation it holds still logs in (no window)
        mesh_host("rotate", str(directory), "registry-pull/registry/n2")
        mesh_host("plan", str(directory), "--out", str(out))
        apply("n1")
        code, results = verify()
        assert code == 0 and results[0]["status"] == "ok", results
        assert results[0]["generation"] == 1 and "node-n2_a" in results[0]["message"], results
        mesh_host("applied", str(directory), "n1", "--report",
                  str(states["n1"] / ".mesh" / "applied.json"))
        mesh_host("plan", str(directory), "--out", str(out))
        code, results = verify()
        assert code == 0 and results[0]["status"] == "ok", results
        assert results[0]["generation"] == 2

        # `mesh renew` re-signs the registry's server certificate (a new key): the next
        # apply on n1 serves it, and n2's runtime, trusting the CA, logs in as before
        def served_serial() -> str:
            code = ("import ssl, sys\n"
                    "from cryptography import x509\n"
                    "host, port = sys.argv[1].rsplit(':', 1)\n"
                    "pem = ssl.get_server_certificate((host, int(port)))\n"
                    "print(format(x509.load_pem_x509_certificate(pem.encode())"
                    ".serial_number, 'x'))\n")
            return topology.python("n2", code, registry).stdout.strip()

        old_serial = load_mesh_dir(directory).ledger.tls["registry"].serial
        assert served_serial() == old_serial
        renewed = mesh_host("renew", str(directory), "n1").stdout
        new_serial = load_mesh_dir(directory).ledger.tls["registry"].serial
        assert new_serial != old_serial and "registry's server certificate" in renewed, \
            renewed
        mesh_host("plan", str(directory), "--out", str(out))
        apply("n1")
        assert served_serial() == new_serial
        code, results = verify()
        assert code == 0 and results[0]["status"] == "ok", results
