"""The mesh's registry across the network: two network namespaces, each with its own dockerd
and the mesh firewall on.

registry@n1 runs Debian's docker-registry as a container (an image made here from the
package's binary) serving TLS with the certificate the mesh CA issued it for n1's address;
app@n2 is pulled by n2's dockerd from that registry by digest, trusting the mesh CA through the
file `mesh apply` declared (/etc/docker/certs.d/<host:port>/ca.crt under n2's file root, which
n2's dockerd sees as /etc/docker through a bind mount in a mount namespace of its own), never
through `insecure-registries`. n1's firewall lets n2 (a pulling node) reach the registry's port
and nobody else. `mesh mirror` (run inside n1) verifies the registry against the mesh CA and
refuses it without that CA. Upstream images come from a plain registry on each node's loopback
(one storage behind both), as a public registry would serve them. Removing the registry
instance takes n2 back to the upstream image and removes its trust file.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import pytest

from executors.common.keys import load_private_key, unseal
from executors.control.loading import load_mesh_dir

try:
    from . import _netns
except ImportError:
    import _netns

from _machines import UPSTREAM, upstream_registry  # noqa: E402
from _machines import mesh_in as mesh  # noqa: E402

pytestmark = pytest.mark.integration

_why = _netns.have_tools()
for tool, package in (("dockerd", "docker.io"), ("busybox", "busybox-static"),
                      ("docker-registry", "docker-registry"), ("unshare", "util-linux")):
    if not _why and shutil.which(tool) is None:
        _why = f"{tool} is not installed ({package}; scripts/services.sh installs it)"
if _why:
    pytest.skip(f"two-namespace registry test: {_why}", allow_module_level=True)

REPO = Path(__file__).resolve().parent.parent

PROVISIONS = """\
artifact-store:
  scope: node
  grant: none
  keys: [host, port, url]
  url: "https://{host}:{port}"
"""
REGISTRY = f"""\
name: registry
artifacts:
  server: {{repository: {UPSTREAM}/mesh-test/registry, tag: "1", mirror: false}}
listens:
  http: {{port: 5000}}
provides:
  - {{provision: artifact-store, listen: http}}
containers:
  - name: registry
    artifact: server
    env:
      REGISTRY_HTTP_ADDR: "0.0.0.0:5000"
      REGISTRY_HTTP_TLS_CERTIFICATE: /etc/mesh/tls/server.crt
      REGISTRY_HTTP_TLS_KEY: /etc/mesh/tls/server.key
      REGISTRY_AUTH: htpasswd
      REGISTRY_AUTH_HTPASSWD_REALM: mesh
      REGISTRY_AUTH_HTPASSWD_PATH: /etc/mesh/auth/htpasswd
    health: {{tcp: http}}
"""
TOOL = """\
name: tool
artifacts:
  image: {build: ./image, base: [app/image]}
"""
DOCKERFILE = """\
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
COPY built.txt /built.txt
"""
APP = f"""\
name: app
artifacts:
  image: {{repository: {UPSTREAM}/mesh-test/app, tag: "1"}}
containers:
  - name: main
    artifact: image
    command: [/bin/busybox, sleep, "3600"]
"""


def registry_rootfs() -> bytes:
    """A root filesystem running Debian's docker-registry: the binary, the C library it links
    and a configuration whose values the container's REGISTRY_* environment overrides."""
    binary = shutil.which("docker-registry")
    libraries = [line.split("=>")[-1].split("(")[0].strip()
                 for line in subprocess.run(["ldd", binary], capture_output=True, text=True,
                                            check=True).stdout.splitlines()
                 if "/" in line]
    config = (b"version: 0.1\nlog:\n  level: info\nstorage:\n  filesystem:\n"
              b"    rootdirectory: /var/lib/registry\nhttp:\n  addr: :5000\n")
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        tar.add(binary, arcname="bin/registry")
        for library in libraries:
            tar.add(os.path.realpath(library), arcname=library.lstrip("/"))
        info = tarfile.TarInfo("etc/docker/registry/config.yml")
        info.size = len(config)
        tar.addfile(info, io.BytesIO(config))
        for directory in ("tmp", "var/lib/registry"):
            info = tarfile.TarInfo(directory)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777
            tar.addfile(info)
    return raw.getvalue()


class TrustingDockerd(_netns.NamespacedDockerd):
    """A node's dockerd whose /etc/docker is `<file root>/etc/docker` (a bind mount in a mount
    namespace of its own): it reads the trust files `mesh apply --file-root` writes there, and
    the host's /etc/docker is never touched."""

    def __init__(self, topology, node, file_root: Path):
        super().__init__(topology, node)
        self.file_root = file_root

    def start(self, timeout: float = 90) -> None:
        etc = self.file_root / "etc" / "docker"
        etc.mkdir(parents=True, exist_ok=True)
        original = self.topology.argv

        def argv(node, *command):
            return original(node, "unshare", "--mount", "--propagation", "private", "sh", "-c",
                            'mount --bind "$0" /etc/docker && exec "$@"', str(etc), *command)

        self.topology.argv = argv
        try:
            super().start(timeout)
        finally:
            self.topology.argv = original


def mesh_host(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    result = subprocess.run([sys.executable, "-m", "executors.cli", *args], cwd=str(REPO),
                            env=env, capture_output=True, text=True)
    assert not check or result.returncode in (0, 1), result.stdout + result.stderr
    return result


@contextlib.contextmanager
def trusting_nodes(topology, tmp: Path):
    """n1 and n2, each with a TrustingDockerd rooted at `<tmp>/<node>-root` and a loopback
    upstream registry (one storage shared by both, as one upstream seen from two machines);
    yields node → daemon and stops every daemon on the way out."""
    daemons = {node: TrustingDockerd(topology, node, tmp / f"{node}-root")
               for node in ("n1", "n2")}
    try:
        for daemon in daemons.values():
            daemon.start()
        storage = tmp / "upstream"
        storage.mkdir()
        for node in daemons:
            upstream_registry(topology, node, storage, tmp / f"upstream-{node}.log")
        yield daemons
    finally:
        for daemon in daemons.values():
            daemon.stop()


def apply_node(topology, daemons: dict, tmp: Path, directory: Path, out: Path,
               node: str) -> str:
    """`mesh apply` of `node`'s declaration inside its namespace, against its own dockerd, with
    the file root trusting_nodes() gave it and a state root beside it (no fast path)."""
    return mesh(topology, node, "apply", str(out / f"{node}.declaration.json"),
                "--secrets", str(directory / "ledger.yaml"), "--key", str(tmp / f"{node}.key"),
                "--docker-host", daemons[node].host, "--state-root", str(tmp / f"{node}-state"),
                "--file-root", str(tmp / f"{node}-root"), "--no-fast")


def nodes_yaml(topology, keys: dict) -> str:
    """mesh.yaml's `nodes:` entries for n1 (the control node) and n2."""
    return "".join(f"  {node}:\n    address: {topology.addresses[node]}\n"
                   f"    public-key: {keys[node]}\n" + ("    control: true\n" if node == "n1"
                                                        else "")
                   for node in ("n1", "n2"))


def write_mesh(directory: Path, topology, keys: dict, *, with_registry: bool) -> None:
    catalogue = directory / "catalogue"
    for name, text in (("registry", REGISTRY), ("app", APP), ("tool", TOOL)):
        (catalogue / name).mkdir(parents=True, exist_ok=True)
        (catalogue / name / "module.yaml").write_text(text)
    (catalogue / "tool" / "image").mkdir(exist_ok=True)
    (catalogue / "tool" / "image" / "Dockerfile").write_text(DOCKERFILE)
    (catalogue / "tool" / "image" / "built.txt").write_text("built by the mesh\n")
    (catalogue / "provisions.yaml").write_text(PROVISIONS)
    nodes = nodes_yaml(topology, keys)
    instances = "  app:\n    module: app\n    node: n2\n"
    if with_registry:
        instances += "  registry:\n    module: registry\n    node: n1\n"
    (directory / "mesh.yaml").write_text(
        f"mesh: tls{os.getpid()}\ncatalogue: catalogue\nledger: ledger.yaml\nnodes:\n{nodes}"
        f"instances:\n{instances}")


def declaration(out: Path, node: str) -> dict:
    return json.loads((out / f"{node}.declaration.json").read_text())


def test_nodes_pull_from_the_mesh_registry_over_tls_through_the_firewall():
    with tempfile.TemporaryDirectory(prefix="mesh-tls-") as scratch, \
            _netns.Topology("r", count=2) as topology, \
            trusting_nodes(topology, Path(scratch)) as daemons:
        tmp = Path(scratch)
        roots = {node: tmp / f"{node}-root" for node in ("n1", "n2")}
        states = {node: tmp / f"{node}-state" for node in ("n1", "n2")}
        n1, n2 = daemons["n1"], daemons["n2"]
        # upstream images, pushed through n1's engine to the loopback registry
        subprocess.run(["docker", "-H", n1.host, "import", "--change",
                        'CMD ["/bin/registry", "serve", "/etc/docker/registry/config.yml"]',
                        "-", f"{UPSTREAM}/mesh-test/registry:1"],
                       input=registry_rootfs(), check=True, capture_output=True)
        n1.load_busybox()
        n1.docker("tag", n1.IMAGE, f"{UPSTREAM}/mesh-test/app:1")
        for image in ("registry", "app"):
            n1.docker("push", f"{UPSTREAM}/mesh-test/{image}:1")

        directory, out = tmp / "mesh", tmp / "out"
        directory.mkdir()
        keys = {}
        for node in ("n1", "n2"):
            made = mesh_host("node-key", node, "--path", str(tmp / f"{node}.key"))
            keys[node] = made.stdout.split("public-key:")[1].split()[0]
        write_mesh(directory, topology, keys, with_registry=True)
        mesh_host("ca", "init", str(directory))
        mesh(topology, "n1", "pin", str(directory))  # asks n1's loopback registry
        issued = mesh_host("plan", str(directory), "--issue", "--out", str(out))
        planned = issued.stdout + issued.stderr
        assert "signed registry's server certificate" in planned, planned

        decl1 = declaration(out, "n1")
        ledger_text = (directory / "ledger.yaml").read_text()
        assert "BEGIN PRIVATE KEY" not in ledger_text and "PRIVATE KEY" not in json.dumps(decl1)
        registry = next(f["path"] for f in decl1["files"]
                        if f["path"].startswith("/etc/docker/certs.d/")).split("/")[4]
        assert registry.startswith(topology.addresses["n1"] + ":")
        port = int(registry.rsplit(":", 1)[1])
        # n1's firewall opens the registry's port to n2, the node that pulls from it
        allows = decl1["firewall"]["allow"]
        assert [(a["port"], a["sources"]) for a in allows] == [
            (port, [topology.addresses["n2"]])]

        def apply(node: str) -> str:
            return apply_node(topology, daemons, tmp, directory, out, node)

        apply("n1")
        key_file = roots["n1"] / "etc/mesh/tls/registry/server.key"
        assert oct(key_file.stat().st_mode & 0o777) == "0o600"
        ca = roots["n1"] / "etc/docker/certs.d" / registry / "ca.crt"
        assert ca.read_text() == (directory / "ca" / "mesh-ca.crt").read_text()
        # TLS with the CA-issued certificate, verified against the mesh CA (from n2), and
        # an account required: anonymous is refused, n2's own account is let in
        probe = ("import sys, requests\n"
                 "auth = tuple(sys.argv[3].split(':', 1)) if len(sys.argv) > 3 else None\n"
                 "r = requests.get(f'https://{sys.argv[1]}/v2/', verify=sys.argv[2], "
                 "timeout=10, auth=auth)\n"
                 "print(r.status_code)\n")
        assert topology.python("n2", probe, registry, str(ca)).stdout.strip() == "401"
        n2_key = load_private_key(tmp / "n2.key")

        def n2_password(generation_slot: str = "active") -> str:
            ledger = load_mesh_dir(directory).ledger
            credential = ledger.credentials["registry-pull/registry/n2"]
            return unseal(n2_key, getattr(credential, generation_slot).sealed["n2"])

        assert topology.python("n2", probe, registry, str(ca),
                               f"node-n2_a:{n2_password()}").stdout.strip() == "200"
        assert topology.python("n2", probe, registry, str(ca),
                               "node-n2_a:not-the-password").stdout.strip() == "401"
        htpasswd = (roots["n1"] / "etc/mesh/auth/registry/htpasswd").read_text()
        assert n2_password() not in htpasswd and htpasswd.count("# mesh-mark:") == 3
        assert [login["user"] for login in declaration(out, "n2")["registry_logins"]] == [
            "node-n2_a"]  # n2 holds its own account, no other
        plain = topology.python("n2", "import sys, requests\n"
                                "print(requests.get(f'http://{sys.argv[1]}/v2/', "
                                "timeout=10).status_code)", registry).stdout.strip()
        assert plain == "400"  # the registry speaks TLS only
        # the host is no mesh node: n1's firewall refuses it the registry's port
        topology.attach_host()
        refused = subprocess.run([sys.executable, "-c", probe, registry, str(ca)],
                                 capture_output=True, text=True, timeout=60)
        assert refused.returncode != 0

        # mirror (inside n1, where upstream is): the registry verified against the CA
        anonymous = topology.mesh("n1", "mirror", str(directory))
        assert anonymous.returncode == 1 and "anonymous access is refused" in \
            anonymous.stdout, anonymous.stdout  # pushing needs the push account
        mirrored = mesh(topology, "n1", "mirror", str(directory), "--key",
                        str(tmp / "n1.key"))
        assert "artifacts: self-hosting" in mirrored, mirrored
        planned = mesh_host("plan", str(directory), "--out", str(out)).stdout
        app = declaration(out, "n2")["containers"][0]
        assert app["image"].startswith(f"{registry}/mesh-test/app@sha256:"), app
        # trusting the CA but without its account, n2's runtime is refused by the registry
        trust = roots["n2"] / "etc/docker/certs.d" / registry / "ca.crt"
        trust.parent.mkdir(parents=True)
        shutil.copy(ca, trust)
        refused = n2.docker("pull", app["image"], check=False)
        assert refused.returncode != 0 and ("no basic auth credentials" in refused.stderr
                                            or "unauthorized" in refused.stderr), \
            refused.stdout + refused.stderr
        trust.unlink()
        trust.parent.rmdir()
        apply("n2")  # pulls over TLS with its own account, trusting the mesh CA through
        # its declared file
        assert (roots["n2"] / "etc/docker/certs.d" / registry / "ca.crt").is_file()
        info = json.loads(n2.docker("info", "--format", "{{json .RegistryConfig}}").stdout)
        assert info["InsecureRegistryCIDRs"] in (None, ["127.0.0.0/8"]), info
        assert all(c["Secure"] for name, c in (info.get("IndexConfigs") or {}).items()
                   if name == registry), info
        state = n2.docker("inspect", "--format", "{{.State.Running}} {{.Config.Image}}",
                          app["name"]).stdout.split()
        assert state == ["true", app["image"]]

        # without the CA the registry is refused: a pull from a runtime that does not
        # trust it fails on the certificate
        (roots["n2"] / "etc/docker/certs.d" / registry / "ca.crt").unlink()
        n2.docker("image", "rm", "-f", app["image"], check=False)
        n2.docker("rm", "-f", app["name"], check=False)
        failed = n2.docker("pull", app["image"], check=False)
        assert failed.returncode != 0 and "certificate" in failed.stderr, failed.stderr
        apply("n2")  # the declared file is written again, the pull succeeds
        assert n2.docker("inspect", "--format", "{{.State.Running}}",
                         app["name"]).stdout.strip() == "true"

        # a build FROM the mirrored base, in n1's engine (which trusts the mesh CA through
        # its declared file), pushed with the push account and recorded
        built = mesh(topology, "n1", "build", str(directory), "tool/image", "--key",
                     str(tmp / "n1.key"), "--docker-host", n1.host)
        assert "pulling base app/image by digest" in built and "pushed" in built, built
        ledger = load_mesh_dir(directory).ledger
        record = ledger.builds["tool/image"]
        app_digest = app["image"].split("@")[1]
        assert dict(record.bases) == {"app/image": app_digest}
        assert ledger.mirrored[record.digest] == registry
        assert "nothing is stale" in mesh_host("stale", str(directory)).stdout
        # the base's pin moves: the build is stale, and --stale rebuilds exactly it
        with tempfile.TemporaryDirectory() as scratch2:
            tar = _netns.busybox_rootfs_tar(scratch2)
            n1.docker("import", "--change", "LABEL release=2", tar,
                      f"{UPSTREAM}/mesh-test/app:1")
        n1.docker("push", f"{UPSTREAM}/mesh-test/app:1")
        mesh(topology, "n1", "pin", str(directory), "--refresh", "app/image")
        stale = mesh_host("stale", str(directory)).stdout
        assert "tool/image: base app/image changed" in stale, stale
        rebuilt = mesh(topology, "n1", "build", str(directory), "--stale", "--key",
                       str(tmp / "n1.key"), "--docker-host", n1.host)
        assert "built 1" in rebuilt, rebuilt
        ledger = load_mesh_dir(directory).ledger
        new_base = ledger.pins[f"{UPSTREAM}/mesh-test/app:1"]
        assert new_base != app_digest
        assert dict(ledger.builds["tool/image"].bases) == {"app/image": new_base}
        assert "nothing is stale" in mesh_host("stale", str(directory)).stdout

        # n2's pull account rotated: the registry puts the new password in force first, in
        # the idle slot's entry (its provisioner rewrites htpasswd and restarts it), and the
        # old one, which n2 still pulls with, keeps working: no window
        old_password = n2_password()
        mesh_host("rotate", str(directory), "registry-pull/registry/n2")
        mesh_host("plan", str(directory), "--out", str(out))
        apply("n1")
        new_password = n2_password("pending")
        assert new_password != old_password
        assert topology.python("n2", probe, registry, str(ca),
                               f"node-n2_b:{new_password}").stdout.strip() == "200"
        assert topology.python("n2", probe, registry, str(ca),
                               f"node-n2_a:{old_password}").stdout.strip() == "200"
        assert topology.python("n2", probe, registry, str(ca),
                               f"node-n2_a:{new_password}").stdout.strip() == "401"
        again = topology.mesh("n1", "apply", str(out / "n1.declaration.json"), "--secrets",
                              str(directory / "ledger.yaml"), "--key", str(tmp / "n1.key"),
                              "--docker-host", n1.host, "--state-root", str(states["n1"]),
                              "--file-root", str(roots["n1"]), "--no-fast", "--json")
        report = json.loads(again.stdout[again.stdout.index("{"):])
        assert [op for op in report["ops"] if op["op"] != "record-applied"] == [], \
            report["operations"]  # idempotent: nothing written, nothing restarted

        # mirror refuses a registry whose certificate the CA it is given does not vouch for
        other = tmp / "other"
        other.mkdir()
        shutil.copytree(directory / "catalogue", other / "catalogue")
        shutil.copy(directory / "mesh.yaml", other / "mesh.yaml")
        shutil.copy(directory / "ledger.yaml", other / "ledger.yaml")
        mesh_host("ca", "init", str(other))  # another CA, same mesh
        wrong = topology.mesh("n1", "mirror", str(other))
        said = wrong.stdout + wrong.stderr
        assert wrong.returncode != 0 and "not one the mesh CA" in said, said

        # going back: without the registry, n2 runs the upstream digest again and its
        # trust file is removed
        write_mesh(directory, topology, keys, with_registry=False)
        mesh_host("plan", str(directory), "--out", str(out))
        back = declaration(out, "n2")
        assert back["containers"][0]["image"].startswith(f"{UPSTREAM}/mesh-test/app@")
        assert not back.get("files")
        apply("n2")
        assert not (roots["n2"] / "etc/docker/certs.d" / registry).exists()
        assert n2.docker("inspect", "--format", "{{.State.Running}}",
                         app["name"]).stdout.strip() == "true"
