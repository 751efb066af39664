"""The self-hosting transition done by the control plane's publish (issue 28: `mesh publish`
and the `mesh control` loop), on the control node as an operator runs it, with no `mesh build`
step once the registry serves.

The control node n1 is a network namespace (a second, n2, stays idle: a topology has two),
with its own dockerd (which trusts the mesh CA through the file `mesh apply` declares, as in
test_registry_tls_netns.py) and the mesh firewall on; the broker is a RabbitMQ of the test's
own on the host side of the segment, serving AMQP and its management API over TLS only with a
certificate the mesh CA issued it (`mesh ca issue-server`, once the CA exists). The operator's
steps:

    mesh build DIR --local            genesis: tool/image into n1's Engine, recorded local
    mesh publish DIR --key n1.key     the registry is declared but does not run yet: the local
                                      build is kept and published as it is, with a line why
    mesh control DIR --key n1.key     the control loop, from now on (says the same, once)
    mesh apply …n1.declaration.json   registry@n1 now serves TLS from the mesh CA, accounts on
                                      the loop's next round pushes the local build into it (the
                                      push account, through n1's Engine), records the
                                      registry's digest through the ledger transaction, and its
                                      next cycle publishes n1 naming the registry
    mesh apply …                      n1 runs tool from the registry by digest

The registry holds the image at the recorded digest (read over TLS verified against the mesh
CA, with the push account); a `mesh publish` then has nothing to push and nothing to publish.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

try:
    from . import _netns
    from .test_registry_tls_netns import (PROVISIONS, REGISTRY, UPSTREAM, TrustingDockerd,
                                          registry_rootfs, upstream_registry)
except ImportError:
    import _netns
    from test_registry_tls_netns import (PROVISIONS, REGISTRY, UPSTREAM, TrustingDockerd,
                                         registry_rootfs, upstream_registry)

from executors.common.keys import load_private_key, unseal
from executors.control.loading import load_mesh_dir
from resolver.artifacts import PUSH_LOGIN, push_credential, registry_user

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parent.parent

TOOL = f"""\
name: tool
artifacts:
  base: {{repository: {UPSTREAM}/mesh-test/app, tag: "1"}}
  image: {{build: ./image, base: [base]}}
containers:
  - name: main
    artifact: image
    command: [/bin/busybox, sleep, "3600"]
"""
DOCKERFILE = """\
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
COPY built.txt /built.txt
"""

# HEAD of a manifest by digest, over TLS verified against the mesh CA, with an account
PROBE = """\
import sys, requests
registry, path, digest, ca, user, password = sys.argv[1:7]
r = requests.head(f"https://{registry}/v2/{path}/manifests/{digest}", verify=ca, timeout=10,
                  auth=(user, password), headers={"Accept": ", ".join([
                      "application/vnd.docker.distribution.manifest.v2+json",
                      "application/vnd.oci.image.manifest.v1+json"])})
print(r.status_code, r.headers.get("Docker-Content-Digest"))
"""


def test_the_next_publish_pushes_what_was_built_locally_once_the_registry_serves():
    from _fleet import Broker
    from _private_rabbit import PrivateRabbit, available

    why = _netns.fleet_unavailable() or available()
    if why:
        pytest.skip(why)
    with tempfile.TemporaryDirectory(prefix="mesh-sh-") as scratch, \
            _netns.Topology("h", count=2, subnet=f"10.81.{20 + os.getpid() % 200}") as topology:
        tmp = Path(scratch)
        rabbits, dockerd = [], None
        try:
            hub = topology.attach_host()

            def tls_broker(issue) -> Broker:
                """The broker, its certificate from the mesh CA for the hub's address."""
                out = tmp / "broker-tls"
                issue("ca", "issue-server", tmp / "mesh", "broker", "--address", hub, "--out",
                      out)
                rabbit = PrivateRabbit(listen=("127.0.0.1", hub), management=hub, tls=(
                    out / "broker.crt", out / "broker.key", out / "ca.crt")).start()
                rabbits.append(rabbit)
                return Broker.private(rabbit, f"{hub}:{rabbit.port}")

            dockerd = TrustingDockerd(topology, "n1", tmp / "n1-root")
            dockerd.start()
            storage = tmp / "upstream"
            storage.mkdir()
            upstream_registry(topology, "n1", storage, tmp / "upstream.log")
            walk(topology, dockerd, tls_broker, tmp)
        finally:
            if dockerd is not None:
                dockerd.stop()
            for rabbit in rabbits:
                rabbit.remove()


def walk(topology, dockerd, tls_broker, tmp: Path) -> None:
    # upstream images (the registry's server, busybox as the base), on n1's loopback registry
    subprocess.run(["docker", "-H", dockerd.host, "import", "--change",
                    'CMD ["/bin/registry", "serve", "/etc/docker/registry/config.yml"]',
                    "-", f"{UPSTREAM}/mesh-test/registry:1"],
                   input=registry_rootfs(), check=True, capture_output=True)
    dockerd.load_busybox()
    dockerd.docker("tag", dockerd.IMAGE, f"{UPSTREAM}/mesh-test/app:1")
    for image in ("registry", "app"):
        dockerd.docker("push", f"{UPSTREAM}/mesh-test/{image}:1")

    def mesh(*args, check: bool = True) -> str:
        result = subprocess.run(topology.argv("n1", sys.executable, "-m", "executors.cli",
                                              *map(str, args)),
                                cwd=str(REPO), capture_output=True, text=True, timeout=900,
                                env={**os.environ, "PYTHONPATH": str(REPO),
                                     "DOCKER_HOST": dockerd.host})
        said = result.stdout + result.stderr
        assert not check or result.returncode == 0, f"mesh {args}:\n{said}"
        return said

    directory, key = tmp / "mesh", tmp / "n1.key"
    catalogue = directory / "catalogue"
    for name, text in (("registry", REGISTRY), ("tool", TOOL)):
        (catalogue / name).mkdir(parents=True)
        (catalogue / name / "module.yaml").write_text(text)
    (catalogue / "tool" / "image").mkdir()
    (catalogue / "tool" / "image" / "Dockerfile").write_text(DOCKERFILE)
    (catalogue / "tool" / "image" / "built.txt").write_text("built at genesis\n")
    (catalogue / "provisions.yaml").write_text(PROVISIONS)
    public = mesh("node-key", "n1", "--path", key).split("public-key:")[1].split()[0]
    address = topology.addresses["n1"]
    (directory / "mesh.yaml").write_text(
        f"mesh: sh{os.getpid()}\ncatalogue: catalogue\nnodes:\n  n1:\n"
        f"    address: {address}\n    public-key: {public}\n    control: true\n"
        "instances:\n  tool:\n    module: tool\n    node: n1\n"
        "  registry:\n    module: registry\n    node: n1\n")
    mesh("ca", "init", directory)
    broker = tls_broker(mesh)
    assert not broker.plain and broker.api.startswith("https://")
    mesh("pin", directory)
    built = mesh("build", directory, "tool/image", "--local")
    local = load_mesh_dir(directory).ledger.builds["tool/image"]
    assert local.local and "built 1" in built, built

    publish = ["publish", directory, "--key", key, *broker.options()]
    out = directory / ".control" / "out" / "n1.declaration.json"

    def images() -> dict[str, str]:
        return {c["instance"]: c["image"] for c in json.loads(out.read_text())["containers"]}

    # the registry is declared but does not run: kept, published as it is, said why
    first = mesh(*publish)
    assert "self-hosting: tool/image kept as local build(s), published as they are" in first \
        and "tried again at the next publish" in first, first
    assert "published n1 serial" in first, first
    assert load_mesh_dir(directory).ledger.builds["tool/image"] == local
    assert images()["tool"] == local.digest  # the bare image ID: runs from n1's Engine

    def apply() -> str:
        return mesh("apply", out, "--secrets", directory / "ledger.yaml", "--key", key,
                    "--docker-host", dockerd.host, "--state-root", tmp / "n1-state",
                    "--file-root", tmp / "n1-root", "--no-fast")

    # the control loop runs from now on; the registry still does not answer: kept, said once
    log = tmp / "control.log"
    with open(log, "wb") as sink:
        loop = subprocess.Popen(
            topology.argv("n1", sys.executable, "-m", "executors.cli", "control", directory,
                          "--key", key, *broker.options()),
            cwd=str(REPO), stdout=sink, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(REPO), "DOCKER_HOST": dockerd.host})
    try:
        deadline = time.monotonic() + 60
        while "serving mesh" not in log.read_text():
            assert loop.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.5)
        apply()  # registry@n1 serves TLS with its certificate from the mesh CA, accounts on
        ledger = load_mesh_dir(directory).ledger
        registry = f"{address}:{ledger.ports['registry']['http'].port}"
        assert (tmp / "n1-root" / "etc/docker/certs.d" / registry / "ca.crt").is_file()
        # its next housekeeping round pushes the local build, records the registry's digest,
        # and the cycle that sees the ledger change publishes n1 naming the registry
        deadline = time.monotonic() + 90
        while "published n1 serial 2" not in log.read_text():
            assert loop.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.5)
    finally:
        loop.terminate()
        loop.wait(timeout=30)
    second = log.read_text()
    # retried every round while the registry did not answer, the reason said once (a push
    # refused while apply was still writing the registry's accounts is said, and retried too)
    assert second.count("does not answer") == 1, second
    assert f"self-hosting: the mesh's registry {registry} answers" in second, second
    assert "pushing the local build" in second, second
    assert second.index("recorded tool/image") < second.index("published n1 serial 2"), second
    ledger = load_mesh_dir(directory).ledger
    record = ledger.builds["tool/image"]
    assert not record.local and record.bases == local.bases and record.digest != local.digest
    assert ledger.mirrored[record.digest] == registry
    assert images()["tool"] == f"{registry}/tool/image@{record.digest}"
    # the registry holds it at that digest (TLS verified against the mesh CA, push account)
    push = ledger.credentials[push_credential("registry")].active
    boxes = list(push.sealed.values()) + list(push.escrow.values())
    password = unseal(load_private_key(key), boxes[0])
    ca = str(directory / "ca" / "mesh-ca.crt")
    served = topology.python("n1", PROBE, registry, "tool/image", record.digest, ca,
                             registry_user(PUSH_LOGIN, push.slot), password).stdout.split()
    assert served == ["200", record.digest], served
    apply()  # n1 runs it from the registry, by digest
    (container,) = dockerd.docker("ps", "-q", "--filter", "label=mesh.instance=tool"
                                  ).stdout.split()
    created_from = dockerd.docker("inspect", "--format", "{{.Config.Image}}",
                                  container).stdout.strip()
    assert created_from == f"{registry}/tool/image@{record.digest}", created_from

    # nothing local is left: nothing to push, nothing changed to publish
    third = mesh(*publish)
    assert "self-hosting" not in third and "nothing to publish" in third, third
    assert password not in first + second + third
