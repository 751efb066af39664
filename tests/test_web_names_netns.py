"""Web apps by name, for real: network namespaces with their own dockerds, the firewall on.

Two web apps (busybox httpd) on n2 and n3, named app1 and app2 in the mesh domain; the
catalogue's Caddy ingress and dnsmasq name server on n1, its https and dns listens exposed to
the segment. A client namespace (n4, no mesh node) resolves `app1.<domain>` through the
mesh's dnsmasq and gets app1's page over HTTPS verified against the mesh CA; a client trusting
another CA is refused; app1's backend port is refused from the client directly. app1 moved to
n3 answers at the same name, with the same certificate, after the publish; a client requesting
app1's name every 100 ms through the move sees app1's page (from n2, then from n3) or, while
the ingress restarts, a connection error or a 5xx, never another backend's page.
Images: one local image from Debian's caddy and dnsmasq-base packages and the static busybox
(tests/_namesimage.py), pushed to a registry on each node's loopback and pinned by `mesh pin`.
Three dockerds run (n1, n2, n3); the client needs none.
"""

from __future__ import annotations

import json
import os
import shutil
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

from _machines import UPSTREAM, machines, mesh_host, mesh_in  # noqa: E402

pytestmark = pytest.mark.integration

_why = _netns.have_tools()
for tool, package in (("dockerd", "docker.io"), ("busybox", "busybox-static"),
                      ("docker-registry", "docker-registry")):
    if not _why and shutil.which(tool) is None:
        _why = f"{tool} is not installed ({package}; scripts/services.sh installs it)"
if _why:
    pytest.skip(f"web names test: {_why}", allow_module_level=True)

import _namesimage  # noqa: E402

if _namesimage.unavailable():
    pytest.skip(f"web names image: {_namesimage.unavailable()}", allow_module_level=True)

REPO = Path(__file__).resolve().parent.parent
IMAGE = f"{UPSTREAM}/mesh-test-names/all"
DOMAIN = "home.arpa"
ARTIFACT = f'{{repository: {IMAGE}, tag: "1"'

WEB = f"""\
name: web
artifacts:
  web: {ARTIFACT}}}
listens:
  http: {{port: 8080, http: true}}
provides:
  - {{provision: http-route, listen: http}}
containers:
  - name: httpd
    artifact: web
    command: [sh, -c, 'mkdir -p /tmp/www && echo "$PAGE" > /tmp/www/index.html
              && exec httpd -f -p 8080 -h /tmp/www']
    env:
      PAGE: "${{self.instance}} on ${{self.node}} at ${{self.url}}"
"""


def catalogue_module(name: str, artifact: str, tls: bool) -> str:
    """The catalogue's module `name`, its locally built artifact replaced by the test image."""
    text = (REPO / "catalogue" / name / "module.yaml").read_text()
    built = f"  {artifact}:\n    build: image\n" + ("    tls: true   # serves TLS with the "
                                                     "certificates the mesh mounts at "
                                                     "/etc/mesh/tls\n" if tls else "")
    assert built in text, f"catalogue/{name}/module.yaml changed its artifact"
    return text.replace(built, f"  {artifact}: {ARTIFACT}" + (", tls: true}\n" if tls else "}\n"))



def write_mesh(directory: Path, topology, keys: dict, app1_node: str) -> None:
    catalogue = directory / "catalogue"
    for name, text in (("web", WEB), ("caddy", catalogue_module("caddy", "caddy", True)),
                       ("dnsmasq", catalogue_module("dnsmasq", "dnsmasq", False))):
        (catalogue / name).mkdir(parents=True, exist_ok=True)
        (catalogue / name / "module.yaml").write_text(text)
    shutil.copy(REPO / "catalogue" / "provisions.yaml", catalogue / "provisions.yaml")
    segment = topology.subnet + ".0/24"
    nodes = "".join(f"  {node}:\n    address: {topology.addresses[node]}\n"
                    f"    public-key: {keys[node]}\n" + ("    control: true\n" if node == "n1"
                                                         else "")
                    for node in ("n1", "n2", "n3"))
    (directory / "mesh.yaml").write_text(
        f"mesh: names{os.getpid()}\ndomain: {DOMAIN}\ncatalogue: catalogue\n"
        f"ledger: ledger.yaml\nnodes:\n{nodes}instances:\n"
        f"  caddy@n1:\n    module: caddy\n    node: n1\n"
        f"    expose: {{https: {{to: [{segment}], reason: web apps by name}}}}\n"
        f"  dnsmasq@n1:\n    module: dnsmasq\n    node: n1\n"
        f"    expose: {{dns: {{to: [{segment}], reason: the mesh domain}}}}\n"
        f"  app1:\n    module: web\n    node: {app1_node}\n    name: app1\n"
        f"  app2:\n    module: web\n    node: n3\n    name: app2\n")


RESOLVE = r"""
import socket, struct, sys
name, server = sys.argv[1], sys.argv[2]
query = struct.pack(">HHHHHH", 0x4d31, 0x0100, 1, 0, 0, 0)
query += b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"
query += struct.pack(">HH", 1, 1)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(3)
s.sendto(query, (server, 53))
answer, _ = s.recvfrom(512)
count = struct.unpack(">H", answer[6:8])[0]
assert count >= 1, answer
# the answer's A record is the last 4 bytes of the first answer (a single question, compressed name)
offset = len(query)
rtype, rclass, ttl, length = struct.unpack(">HHIH", answer[offset + 2:offset + 12])
assert rtype == 1 and length == 4, answer
print(socket.inet_ntoa(answer[offset + 12:offset + 16]))
"""

FETCH = r"""
import socket, ssl, sys
name, address, cafile = sys.argv[1], sys.argv[2], sys.argv[3]
context = ssl.create_default_context(cafile=cafile)
try:
    with socket.create_connection((address, 443), 5) as raw:
        with context.wrap_socket(raw, server_hostname=name) as tls:
            tls.sendall(f"GET / HTTP/1.1\r\nHost: {name}\r\nConnection: close\r\n\r\n".encode())
            data = b""
            while chunk := tls.recv(4096):
                data += chunk
            print(tls.getpeercert()["serialNumber"])
            print(data.decode(errors="replace"))
except ssl.SSLCertVerificationError as error:
    print("refused:", error)
    sys.exit(3)
"""


LOOP = r"""
import json, socket, ssl, sys, time
name, address, cafile, done, limit = sys.argv[1:6]
context = ssl.create_default_context(cafile=cafile)
deadline, seen = time.monotonic() + float(limit), 0
while time.monotonic() < deadline and seen < 3:
    began = time.monotonic()
    try:
        with socket.create_connection((address, 443), 2) as raw:
            raw.settimeout(2)
            with context.wrap_socket(raw, server_hostname=name) as tls:
                tls.sendall(f"GET / HTTP/1.1\r\nHost: {name}\r\nConnection: close\r\n\r\n"
                            .encode())
                data = b""
                while chunk := tls.recv(4096):
                    data += chunk
        head, _, body = data.decode(errors="replace").partition("\r\n\r\n")
        if "transfer-encoding: chunked" in head.lower():
            chunks, rest = [], body
            while rest and (size := int(rest.split("\r\n", 1)[0], 16)):
                rest = rest.split("\r\n", 1)[1]
                chunks.append(rest[:size])
                rest = rest[size + 2:]
            body = "".join(chunks)
        status = int(head.split(" ", 2)[1]) if head.startswith("HTTP/") else 0
        outcome = {"status": status, "body": body.strip()}
    except ssl.SSLCertVerificationError as error:
        outcome = {"status": -1, "body": f"certificate refused: {error}"}
    except (OSError, ValueError, IndexError) as error:
        outcome = {"status": 0, "body": f"{type(error).__name__}: {error}"}
    outcome["t"] = began
    print(json.dumps(outcome), flush=True)
    seen = seen + 1 if done in outcome["body"] else 0
    time.sleep(max(0.0, 0.1 - (time.monotonic() - began)))
"""


def judge_move(lines: list[str], old: str, new: str) -> float:
    """The client loop's answers through a move: each is app1's page from the `old` node or
    the `new` one, all the old ones before the new ones, or a connection error or 5xx while
    the ingress switches (never another backend's page, a 4xx or a certificate refused); the
    error window (first error to the end of the last) is returned."""
    answers = [json.loads(line) for line in lines if line.strip()]
    assert answers and old in answers[0]["body"], answers[:3]
    assert new in answers[-1]["body"], answers[-3:]
    wrong = [a for a in answers if not (
        (200 <= a["status"] < 300 and a["body"] in (old, new))
        or a["status"] == 0 or 500 <= a["status"] < 600)]
    assert not wrong, f"answers that are not app1's page nor a switch's error: {wrong}"
    pages = [a["body"] for a in answers if 200 <= a["status"] < 300]
    assert pages == sorted(pages, key=lambda body: body == new), \
        f"app1 answered from the old node after the new one: {pages}"
    errors = [a["t"] for a in answers if not 200 <= a["status"] < 300]
    window = (errors[-1] - errors[0] + 0.1) if errors else 0.0
    print(f"move: {len(answers)} requests over {answers[-1]['t'] - answers[0]['t']:.1f} s, "
          f"{len(pages)} pages ({sum(b == old for b in pages)} old, {sum(b == new for b in pages)}"
          f" new), {len(errors)} errors in a {window:.1f} s window")
    return window


def test_a_client_reaches_each_app_by_name_over_https_and_the_name_survives_a_move():
    with tempfile.TemporaryDirectory(prefix="mesh-names-") as scratch, \
            _netns.Topology("w", count=4,
                            subnet=f"10.83.{20 + os.getpid() % 200}") as topology:
        tmp = Path(scratch)
        with machines(topology, tmp, ("n1", "n2", "n3")) as daemons:
            _walk(topology, daemons, tmp)


def _walk(topology, daemons: dict, tmp: Path) -> None:
    n1 = daemons["n1"]
    n1.docker("import", str(_namesimage.rootfs_tar()), f"{IMAGE}:1")
    n1.docker("push", f"{IMAGE}:1")

    directory = tmp / "mesh"
    directory.mkdir()
    keys = {}
    for node in daemons:
        made = mesh_host("node-key", node, "--path", str(tmp / f"{node}.key"))
        keys[node] = made.split("public-key:")[1].split()[0]
    write_mesh(directory, topology, keys, "n2")
    mesh_host("ca", "init", str(directory))
    mesh_in(topology, "n1", "pin", str(directory))

    def publish(out: Path) -> str:
        planned = mesh_host("plan", str(directory), "--issue", "--key", str(tmp / "n1.key"),
                            "--out", str(out))
        assert "0 refusals" in planned, planned
        return planned

    def apply(node: str, out: Path) -> str:
        return mesh_in(topology, node, "apply", str(out / f"{node}.declaration.json"),
                       "--secrets", str(directory / "ledger.yaml"), "--key",
                       str(tmp / f"{node}.key"), "--docker-host", daemons[node].host,
                       "--state-root", str(tmp / f"{node}-state"), "--file-root",
                       str(tmp / f"{node}-root"), "--no-fast")

    first = tmp / "out1"
    planned = publish(first)
    assert "signed the certificate of app1.home.arpa" in planned, planned
    assert "signed the certificate of app2.home.arpa" in planned, planned
    for node in ("n2", "n3", "n1"):  # backends first: the ingress's health waits on nothing
        apply(node, first)

    ca = tmp / "ca.crt"
    shutil.copy(directory / "ca" / "mesh-ca.crt", ca)
    client = "n4"

    def resolve(name: str) -> str:
        deadline = time.monotonic() + 30
        while True:
            answered = topology.python(client, RESOLVE, name, topology.addresses["n1"],
                                       check=False)
            if answered.returncode == 0:
                return answered.stdout.strip()
            assert time.monotonic() < deadline, answered.stdout + answered.stderr + \
                n1.docker("ps", "-a").stdout + n1.docker(
                    "logs", f"names{os.getpid()}-dnsmasq-n1-dnsmasq", check=False).stderr \
                + topology.run("n1", "nft", "list", "ruleset").stdout
            time.sleep(1)

    def fetch(name: str, cafile: Path = ca) -> subprocess.CompletedProcess:
        return topology.python(client, FETCH, name, resolve(name), str(cafile), check=False)

    def page(name: str, expect: str) -> str:
        deadline = time.monotonic() + 60
        while True:
            got = fetch(name)
            if got.returncode == 0 and expect in got.stdout:
                return got.stdout.splitlines()[0]  # the certificate's serial
            assert time.monotonic() < deadline, got.stdout + got.stderr
            time.sleep(1)

    # `mesh names` says the same for a hosts file or a router
    assert f"{topology.addresses['n1']}\tapp1.{DOMAIN}\n" in mesh_host(
        "names", str(directory), "--format", "hosts")
    # names resolve through the mesh's dnsmasq to the ingress
    assert resolve(f"app1.{DOMAIN}") == topology.addresses["n1"]
    # each app's page over HTTPS, verified against the mesh CA, told its own public URL
    serial = page(f"app1.{DOMAIN}", f"app1 on n2 at https://app1.{DOMAIN}")
    page(f"app2.{DOMAIN}", f"app2 on n3 at https://app2.{DOMAIN}")
    # a client trusting another CA is refused
    other = tmp / "other"
    (other / "catalogue").mkdir(parents=True)
    (other / "catalogue" / "provisions.yaml").write_text("{}\n")
    (other / "mesh.yaml").write_text("mesh: other\nnodes:\n  x: {address: 10.9.9.9}\n")
    mesh_host("ca", "init", str(other))
    refused = fetch(f"app1.{DOMAIN}", other / "ca" / "mesh-ca.crt")
    assert refused.returncode == 3 and "refused:" in refused.stdout, refused.stdout
    # a name no app has: the ingress answers with its own certificate, which is not that name's
    unknown = fetch(f"nothing.{DOMAIN}")
    assert unknown.returncode == 3 and "refused:" in unknown.stdout, unknown.stdout
    # app1's backend port: the ingress's node only, never the client
    declaration = json.loads((first / "n2.declaration.json").read_text())
    (port,) = [p["host_port"] for c in declaration["containers"] for p in c["ports"]]
    assert not topology.connects(client, "n2", port, request=b"GET / HTTP/1.0\r\n\r\n",
                                 expect=b"app1")
    assert topology.connects("n1", "n2", port, request=b"GET / HTTP/1.0\r\n\r\n",
                             expect=b"app1")

    # app1 moves to n3: the same name answers, with the same certificate, after the publish;
    # a client keeps requesting it every 100 ms from before the publish until n3 answers
    old, new = (f"app1 on {node} at https://app1.{DOMAIN}" for node in ("n2", "n3"))
    answers = tmp / "answers.jsonl"
    with open(answers, "w") as out:
        loop = subprocess.Popen(topology.argv(client, sys.executable, "-c", LOOP,
                                              f"app1.{DOMAIN}", resolve(f"app1.{DOMAIN}"),
                                              str(ca), new, "240"),
                                stdout=out, stderr=subprocess.STDOUT)
    topology._processes.append(loop)  # stopped with the namespaces if the test fails first
    deadline = time.monotonic() + 30
    while answers.read_text().count(old) < 3:  # requesting, and answered, before the move
        assert loop.poll() is None and time.monotonic() < deadline, answers.read_text()
        time.sleep(0.1)
    write_mesh(directory, topology, keys, "n3")
    second = tmp / "out2"
    planned = publish(second)
    assert "signed the certificate of app1" not in planned, planned
    for node in ("n3", "n1", "n2"):
        apply(node, second)
    loop.wait(timeout=120)
    window = judge_move(answers.read_text().splitlines(), old, new)
    assert window < 30, f"the switch took {window:.1f} s"
    assert page(f"app1.{DOMAIN}", new) == serial
    page(f"app2.{DOMAIN}", f"app2 on n3 at https://app2.{DOMAIN}")
