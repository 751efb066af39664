"""Nothing secret in the clear, checked on the wire: a packet capture of the whole flow finds no
issued secret and no node account password with TLS, and finds them with TLS turned off.

The machines: three network namespaces on one bridged segment, each with the mesh firewall on.
n1 runs postgres@n1 and n2 runs app@n2, bound to it across nodes, each with its own dockerd.
n0 is the control machine (`control: true` in mesh.yaml, its key made there with `mesh
node-key`: the escrow of every issued value is sealed to it, and `mesh control --key` holds
it): every control verb (`mesh node-key`, `mesh ca`, `mesh enrol token/list/accept`, `mesh
status`, `mesh rotate`, `mesh firewall`) and the control loop (`mesh control`) run inside
it, and so does the broker, a RabbitMQ of the test's own (tests/_private_rabbit.py, `netns=`)
standing in for the catalogue's broker module, with its management API on n0 too, as
docs/fleet.md has the control plane keep accounts through it. n0
runs no container, so it has no dockerd (the nodes' own dockerd matters for the nodes that run
containers). The stand-in is declared in mesh.yaml as what it is to the mesh, the substrate
broker (`substrate: {broker: broker@n0}`, a module whose `amqp` listen is fixed on the broker's
port, whose container nobody runs: n0 has no agent), so the mesh computes n0's firewall with
its broker floor: the AMQP port open to the mesh's nodes only. `mesh firewall` applies n0's
declaration as the control loop wrote it (.control/out/n0.declaration.json), inside n0, before
anything is enrolled; then (checked in the first walk) the broker's port is reachable from n1
and not from `out`, a fourth namespace on the segment that is no mesh node, and its management
port from neither.

tcpdump listens on the bridge that joins them all for the whole walk (control↔node traffic
crosses it; the test checks it saw bytes from each node to the broker's port): enrolment of
both nodes (`mesh enrol token`, `mesh agent enrol` in each node's namespace, `mesh enrol
accept` with the fingerprint), the control loop publishing, both agents applying, the app
querying postgres from its container with exactly its binding's values (`psql
"$DATABASE_URL"`, the password in a libpq passfile the mesh writes from the binding as a secret
file), `mesh rotate` of the app's credential and its fan-out, and the queries again.

Then the capture is searched (tests/_pcap.py: every packet's payload, each TCP direction
reassembled, the raw file) for every value the ledger holds sealed (opened in the test with the
nodes' keys, generations before and after the rotation), each node's broker account password
(its agent configuration's sealed value, opened with its key) and each enrolment secret (from
its token). Only counts and credential IDs are ever printed. That the capture saw the app's
queries at all is checked too: bytes from n2 to postgres@n1's port in both walks, and the
query's text in the plain one only.

With TLS (the default: the broker serves amqps with a certificate from the mesh CA for n0's
address, postgres's listen says `tls: true`, the app is told sslmode=verify-full): found
nowhere. With TLS off — the broker plain (`--broker-plain`, so tokens and agents are plain
too) and the listen without `tls` (the module's own switch, docs/schema.md "listen"): the same
search finds every node account password and every enrolment secret (the check can fail). The
database passwords are not found even then, and the test says so rather than asserting it
away: postgres asks for SCRAM, which never sends the password, and declarations carry values
sealed to their node.

And `docker inspect` of every container of both walks and `/proc/<pid>/environ` of each of
their processes (their modules take their secrets as files): no issued value anywhere in
them, Config.Env included. The same scan can fail: the plain walk also runs leak@n2, a module
of the walk's throw-away catalogue that puts its own issued secret in its env on purpose, and
the scan finds that value in its `docker inspect` (Config.Env) and in its process's environ.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

try:
    from . import _netns
except ImportError:
    import _netns

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parent.parent

_why = _netns.fleet_unavailable()
if not _why:
    from _pcap import missing

    _why = missing()
if _why:
    pytest.skip(f"no-clear-secrets capture test: {_why}", allow_module_level=True)

from _fleet import Broker  # noqa: E402
from _pcap import Capture, scan, tcp_bytes  # noqa: E402
from _pgimage import available, postgres_image  # noqa: E402
from test_fleet_netns import REGISTRY, Fleet, _registry  # noqa: E402

from executors.common.enrol_token import decode  # noqa: E402
from executors.common.keys import load_private_key, unseal, unseal_for_node  # noqa: E402
from executors.node.agent.config import load_config  # noqa: E402

if not available():
    pytest.skip("PostgreSQL 15 server binaries are not installed (run scripts/services.sh)",
                allow_module_level=True)

CREDENTIAL = "postgres-database/postgres@n1/app@n2"
CONTROL = "n0"  # the control machine: the control loop, the broker, every control verb
NODES = ("n1", "n2")  # the machines that run containers, each with its own dockerd
OUTSIDER = "out"  # a machine on the segment that is no node of the mesh
PROVISIONS = (REPO / "catalogue" / "provisions.yaml").read_text()
# the catalogue's postgres, reduced to its server, on the test image; its admin secret a file
POSTGRES = """\
name: postgres
artifacts:
  postgres: {{repository: {repository}, tag: "{tag}"{artifact_tls}}}
listens:
  postgres: {{port: 5432{listen_tls}}}
provides:
  - {{provision: postgres-database, listen: postgres, admin: admin}}
secrets: [admin]
state:
  data: {{path: {tmp}/pgdata, owner: "999:999", mode: "0700"}}
containers:
  - name: server
    artifact: postgres
{command}\
    env:
      POSTGRES_USER: postgres
      PGDATA: /var/lib/postgresql/data
    secret-files:
      - {{path: /run/secrets/postgres-password, content: "${{self.admin.password}}",
          env: POSTGRES_PASSWORD_FILE, owner: "999:999"}}
    mounts: [{{state: data, target: /var/lib/postgresql/data}}]
    health:
      command: [pg_isready, --username, postgres, --host, 127.0.0.1]
      timeout: 180
"""
TLS = {"artifact_tls": ', tls: true, tls-key-owner: "999:999"',
       "listen_tls": ", tls: true, plain-same-node: true",
       "command": "    command: [postgres, -c, ssl=on, -c, ssl_cert_file=/etc/mesh/tls/server.crt,"
                  " -c, ssl_key_file=/etc/mesh/tls/server.key]\n"}
PLAIN = {"artifact_tls": "", "listen_tls": "", "command": ""}
# the app: libpq told exactly its binding's values — the url (with sslmode=verify-full and the
# CA's path when the listen serves TLS) and the password in a passfile (a secret file)
APP = """\
name: app
artifacts:
  image: {{repository: {repository}, tag: "{tag}"}}
requires:
  - {{as: db, provision: postgres-database}}
containers:
  - name: client
    artifact: image
    command: [sleep, "86400"]
    env:
      DATABASE_URL: "${{db.url}}"
    secret-files:
      - path: /run/secrets/pgpass
        content: "${{db.host}}:${{db.port}}:${{db.database}}:${{db.user}}:${{db.password}}"
        env: PGPASSFILE
"""
# the stand-in broker as the mesh sees it: the substrate broker, its amqp on the broker's port
# (fixed: the test's RabbitMQ already listens there); its container is never run (n0 runs no
# agent), so the image is any pinned one
BROKER = """\
name: broker
description: the test's RabbitMQ in n0, as the mesh's substrate broker
artifacts:
  server: {{repository: {repository}, tag: "{tag}", mirror: false}}
listens:
  amqp: {{port: 5671, fixed: {port}}}
provides:
  - {{provision: amqp, listen: amqp}}
containers:
  - name: server
    artifact: server
"""
# a module that gets the scan to fail on purpose: its own issued secret in its env
LEAKY = """\
name: leaky
artifacts:
  image: {{repository: {repository}, tag: "{tag}"}}
secrets: [token]
containers:
  - name: main
    artifact: image
    command: [sleep, "86400"]
    env:
      LEAKED_TOKEN: "${{self.token.password}}"
"""
QUERY = 'psql "$DATABASE_URL" -X -A -t -c "select current_user" -c "\\conninfo"'


class Walk(Fleet):
    """test_fleet_netns's Fleet with the control machine in a namespace: every `mesh` verb runs
    inside n0 unless another machine is named, the control loop too; each enrolment token is
    kept (its secret is searched for)."""

    tokens: dict

    def mesh(self, *args, node=CONTROL, check=True) -> subprocess.CompletedProcess:
        return super().mesh(*args, node=node, check=check)

    def start_control(self) -> None:
        log = open(self.tmp / "control.log", "a")
        self.control = subprocess.Popen(
            self.topology.argv(CONTROL, sys.executable, "-m", "executors.cli", "control", ".",
                               "--interval", "0.5", "--key",
                               str(self.node_dir(CONTROL) / "node.key"),
                               *map(str, self.broker.options(self.for_nodes))),
            cwd=self.dir, stdout=log, stderr=subprocess.STDOUT, env=self.env())
        log.close()

    def converged(self) -> bool:
        """Both nodes enrolled and applied what was published (n0 runs no agent)."""
        nodes = {n["node"]: n for n in self.status()["nodes"] if n["node"] in NODES}
        return sorted(nodes) == sorted(NODES) and all(
            n["enrolled"] and n["serial_published"] is not None and not n["behind"]
            and n["last_result"] == "applied" for n in nodes.values())

    def enrol(self, node: str) -> None:
        token = self.mesh("enrol", "token", ".", node, *self.broker.options(self.for_nodes)) \
            .stdout.strip()
        self.tokens[node] = token
        enrolled = self.mesh("agent", "enrol", token, "--config",
                             self.node_dir(node) / "agent.yaml", "--key",
                             self.node_dir(node) / "node.key", "--state-root",
                             self.node_dir(node) / "state", "--docker-host",
                             self.dockerd[node].host, "--drift-minutes", "0.25", "--no-wait",
                             node=node)
        fingerprint = enrolled.stderr.split("key fingerprint: ", 1)[1].split()[0]
        self.wait(lambda: any(t["node"] == node and t["state"] == "requested" for t in
                              json.loads(self.mesh("enrol", "list", ".", "--offline",
                                                   "--json").stdout)),
                  f"{node}'s enrolment request reaches the control loop", 60)
        self.mesh("enrol", "accept", ".", node, "--fingerprint", fingerprint,
                  *self.broker.options(self.for_nodes))


@dataclass
class Machines:
    topology: object
    tmp: Path
    dockerd: dict
    repository: str
    tag: str


@pytest.fixture(scope="module")
def machines(tmp_path_factory):
    """The nodes n1 and n2, each with its own dockerd and a registry on its loopback (one
    storage), the postgres image pushed once; the control machine n0 (no dockerd) and the
    outsider on the same segment. Both walks use them, one after the other."""
    from executors.node import docker_engine

    tmp = tmp_path_factory.mktemp("clear")
    registries, dockerds = [], {}
    with _netns.Topology("c", count=2, subnet=f"10.86.{20 + os.getpid() % 200}",
                         more={CONTROL: 100, OUTSIDER: 200}) as topology:
        try:
            for node in NODES:
                dockerds[node] = _netns.NamespacedDockerd(topology, node)
                dockerds[node].start(timeout=120)
            storage = Path(tempfile.mkdtemp(prefix="clear-registry-", dir=tmp))
            for node in NODES:
                registries.append(_registry(topology, node, storage, tmp / "registry"))
            tag = f"nc{os.getpid() % 100000}"
            repository = f"{REGISTRY}/mesh-test-clear/postgres"
            n1 = docker_engine.connect(dockerds["n1"].host)
            n1.tag(postgres_image(n1), repository, tag)
            dockerds["n1"].docker("push", f"{repository}:{tag}")
            yield Machines(topology, tmp, dockerds, repository, tag)
        finally:
            for dockerd in dockerds.values():
                dockerd.stop()
            for process in registries:
                process.kill()
                process.wait()


def write_mesh(fleet: Walk, machines: Machines, tls: bool, first_port: int, control_key: str,
               broker_port: int | None = None) -> None:
    """The walk's mesh directory: its throw-away catalogue and mesh.yaml (n0 the control node,
    with its public key: the escrow is sealed to it; the outsider is no node). With
    `broker_port`, the substrate broker on n0 at that port; the plain walk has leak@n2 too."""
    catalogue = fleet.dir / "catalogue"
    fills = dict(repository=machines.repository, tag=machines.tag, tmp=fleet.tmp)
    modules = {"postgres": POSTGRES.format(**fills, **(TLS if tls else PLAIN)),
               "app": APP.format(**fills), "leaky": LEAKY.format(**fills)}
    if broker_port is not None:
        modules["broker"] = BROKER.format(**fills, port=broker_port)
    for module, text in modules.items():
        (catalogue / module).mkdir(parents=True, exist_ok=True)
        (catalogue / module / "module.yaml").write_text(text)
    (catalogue / "provisions.yaml").write_text(PROVISIONS)
    nodes = "".join(f"  {node}: {{address: {address}"
                    + (f", control: true, public-key: {control_key}" if node == CONTROL
                       else "") + "}\n"
                    for node, address in sorted(machines.topology.addresses.items())
                    if node != OUTSIDER)
    instances = ["postgres@n1: {module: postgres, node: n1}", "app@n2: {module: app, node: n2}"]
    if not tls:
        instances.append("leak@n2: {module: leaky, node: n2}")
    substrate = ""
    if broker_port is not None:
        instances.append(f"broker@{CONTROL}: {{module: broker, node: {CONTROL}}}")
        substrate = f"substrate: {{broker: broker@{CONTROL}}}\n"
    (fleet.dir / "mesh.yaml").write_text(
        f"mesh: {fleet.name}\ncatalogue: catalogue\nnodes:\n{nodes}{substrate}"
        f"host-ports: {{first: {first_port}, last: {first_port + 19}}}\ninstances:\n"
        + "".join(f"  {line}\n" for line in instances))


@dataclass
class Walked:
    findings: dict  # label → tests/_pcap.Finding
    issued: dict  # label → value (never printed)
    accounts: dict  # label → value (node account passwords and enrolment secrets)
    queries: list  # what psql printed in the app's container, before and after the rotation
    summary: str  # tcpdump's own count of what it captured
    inspected: dict  # container → `docker inspect` JSON text
    environ: dict  # container → its processes' /proc/<pid>/environ, joined


def walk(machines: Machines, tls: bool) -> Walked:
    """The whole flow with the capture running, on a mesh of its own; everything it started
    is stopped, and its containers and firewall removed, before it returns."""
    from _private_rabbit import PrivateRabbit

    kind = "tls" if tls else "plain"
    tmp = machines.tmp / kind
    tmp.mkdir()
    topology, addresses = machines.topology, machines.topology.addresses
    fleet = Walk(topology, tmp, None, addresses[CONTROL], f"{machines.tag}{kind[0]}", 0)
    fleet.tokens = {}
    fleet.dockerd = machines.dockerd
    fleet.dir.mkdir()
    rabbit, capture = None, Capture(machines.topology, tmp / "segment.pcap")
    try:
        first_port = 21300 if tls else 21320
        # the control node's key, made on n0 (the escrow of every issued value is sealed to it)
        made = fleet.mesh("node-key", CONTROL, "--path", fleet.node_dir(CONTROL) / "node.key")
        control_key = made.stdout.split("public-key:", 1)[1].split()[0]
        write_mesh(fleet, machines, tls, first_port, control_key)
        fleet.mesh("ca", "init", ".")
        # the broker in n0, on n0's address (and its loopback), its management API on n0's
        # address; with TLS, its certificate from the mesh CA for that address
        on_n0 = dict(listen=("127.0.0.1", addresses[CONTROL]), management=addresses[CONTROL],
                     netns=topology.netns_path(CONTROL))
        if tls:
            issued = tmp / "broker-tls"
            fleet.mesh("ca", "issue-server", ".", "broker", "--address", addresses[CONTROL],
                       "--out", issued)
            rabbit = PrivateRabbit(**on_n0, tls=(
                issued / "broker.crt", issued / "broker.key", issued / "ca.crt")).start()
        else:
            rabbit = PrivateRabbit(**on_n0).start()
        write_mesh(fleet, machines, tls, first_port, control_key, broker_port=rabbit.port)
        fleet.for_nodes = f"{addresses[CONTROL]}:{rabbit.port}"
        fleet.broker = Broker.private(rabbit, fleet.for_nodes)  # plain unless tls
        assert fleet.broker.plain == (not tls)
        fleet.mesh("pin", ".", node="n1")
        fleet.start_control()
        control_firewall(fleet, rabbit, tmp, probe=tls)
        capture.start()

        # -- enrolment, publish, apply
        for node in NODES:
            fleet.enrol(node)
            fleet.start_agent(node)
        fleet.wait(lambda: fleet.ledger().credentials.get(CREDENTIAL) is not None
                   and fleet.converged(), "both nodes converge", 600)
        issued_values: dict[str, str] = {}
        collect_issued(fleet, issued_values)

        # -- the app's queries, with its binding's values
        container = f"{fleet.name}-app-n2-client"
        queries = [query(fleet, container, tls)]

        # -- a rotation of the app's credential, its fan-out, the queries again
        fleet.mesh("rotate", ".", CREDENTIAL)
        fleet.wait(lambda: (lambda c: c.retiring is None and 1 in c.retired
                            and c.applied.get("n2") == 2)(fleet.ledger().credentials[CREDENTIAL])
                   and fleet.converged(), "the rotation's fan-out completes", 300)
        collect_issued(fleet, issued_values)
        assert {label.rsplit(" ", 1)[1] for label in issued_values
                if label.startswith(CREDENTIAL)} == {"1", "2"}, sorted(issued_values)
        queries.append(query(fleet, container, tls))
        pcap = capture.stop()

        accounts = {}
        for node in NODES:
            config = load_config(fleet.node_dir(node) / "agent.yaml")
            key = load_private_key(fleet.node_dir(node) / "node.key")
            accounts[f"the broker account password of {node}"] = unseal(
                key, config.login.password_sealed)
            accounts[f"the enrolment secret of {node}"] = decode(fleet.tokens[node]).secret
        inspected, environ = {}, {}
        for dockerd in machines.dockerd.values():
            names = dockerd.docker("ps", "-a", "--filter", f"label=mesh.mesh={fleet.name}",
                                   "--format", "{{.Names}}").stdout.split()
            for name in names:
                inspected[name] = dockerd.docker("inspect", name).stdout
                environ[name] = processes_environ(dockerd, name)
        expected = {f"{fleet.name}-postgres-n1-server", container} | (
            set() if tls else {f"{fleet.name}-leak-n2-main"})
        assert set(inspected) == expected, sorted(inspected)
        # the capture saw the control plane's traffic: bytes from each node to the broker
        for node in NODES:
            assert tcp_bytes(pcap, addresses[node], addresses[CONTROL], rabbit.port) > 0, node
        # what shows the capture saw the app's queries at all: bytes from n2 to postgres@n1's
        # host port, and their text (plain only)
        port = next(p["port"] for p in json.loads(
            (fleet.dir / ".control" / "out" / "n1.declaration.json").read_text())["providers"]
                    if p["instance"] == "postgres@n1")
        assert tcp_bytes(pcap, addresses["n2"], addresses["n1"], port) > 0, port
        seen = scan(pcap, {"the app's query": "select current_user"})["the app's query"]
        assert seen.found != tls, f"the app's query text: {seen}"
        return Walked(scan(pcap, {**issued_values, **accounts}), issued_values, accounts,
                      queries, capture.summary, inspected, environ)
    finally:
        capture.stop()
        fleet.close()
        for dockerd in machines.dockerd.values():
            names = dockerd.docker("ps", "-aq", "--filter", f"label=mesh.mesh={fleet.name}",
                                   check=False).stdout.split()
            if names:
                dockerd.docker("rm", "-f", *names, check=False)
        for node in (CONTROL, *NODES):
            # the walk's firewall goes with its mesh: the next walk starts from none
            topology.run(node, "nft", "delete", "table", "inet", "mesh", check=False)
        if rabbit is not None:
            rabbit.remove()
        shutil.rmtree(tmp / "pgdata", ignore_errors=True)


def control_firewall(fleet: Walk, rabbit, tmp: Path, probe: bool) -> None:
    """n0's firewall as the mesh computes it (its declaration as the control loop wrote it, the
    broker floor open to the mesh's nodes), applied inside n0 with `mesh firewall`; with
    `probe` (once, in the first walk: the second applies the same), the broker's port is then
    seen to answer n1 and not the outsider, its management port neither."""
    written = fleet.dir / ".control" / "out" / f"{CONTROL}.declaration.json"

    def floors() -> list:
        return json.loads(written.read_text())["firewall"]["floors"] if written.exists() else []

    fleet.wait(lambda: any(f["reason"].startswith("broker") for f in floors()),
               "the control loop writes n0's declaration with the broker's floor", 120)
    addresses = fleet.topology.addresses
    (broker,) = [f for f in floors() if f["reason"].startswith("broker")]
    assert broker["port"] == rabbit.port and sorted(broker["sources"]) == sorted(
        addresses[n] for n in (CONTROL, *NODES)), broker
    applied = fleet.mesh("firewall", written, "--state-dir", tmp / "n0-firewall")
    assert "now carries" in applied.stdout, applied.stdout + applied.stderr
    if not probe:
        return
    assert reaches(fleet, "n1", rabbit.port)
    assert not reaches(fleet, OUTSIDER, rabbit.port), "the outsider reaches the broker"
    assert not reaches(fleet, "n1", rabbit.api_port), "a node reaches the management API"


def reaches(fleet: Walk, source: str, port: int) -> bool:
    """Whether a TCP connection from `source` to n0's `port` is accepted (a dropped one times
    out, a closed port is refused: both are no)."""
    code = ("import socket, sys\n"
            "try: socket.create_connection((sys.argv[1], int(sys.argv[2])), 1).close()\n"
            "except OSError: sys.exit(1)\n")
    return fleet.topology.python(source, code, fleet.topology.addresses[CONTROL], str(port),
                                 check=False).returncode == 0


def processes_environ(dockerd, name: str) -> str:
    """The environment of every process of container `name` (/proc/<pid>/environ, the pids as
    the host sees them), NUL-separated entries on lines of their own."""
    listed = dockerd.docker("top", name, "-eo", "pid").stdout.split()[1:]
    texts = []
    for pid in listed:
        try:
            texts.append(Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
                         .replace("\0", "\n"))
        except OSError:  # a process that ended between the listing and the read
            pass
    assert texts, f"no process of {name} to read"
    return "\n".join(texts)


def collect_issued(fleet: Walk, into: dict) -> None:
    """Every value the ledger holds sealed, opened with the nodes' keys (the control machine
    holds every node key in this test; the values are never printed)."""
    ledger = fleet.ledger()
    for node in NODES:
        key = load_private_key(fleet.node_dir(node) / "node.key")
        for credential, generations in unseal_for_node(ledger, node, key).items():
            for generation, value in generations.items():
                into[f"{credential} generation {generation}"] = value


def query(fleet: Walk, container: str, tls: bool) -> str:
    """psql in the app's container on n2, with the url and passfile its binding gave it;
    retried while the container is being created or recreated."""
    deadline = time.monotonic() + 120
    while True:
        done = fleet.dockerd["n2"].docker("exec", container, "sh", "-c", QUERY, check=False)
        said = done.stdout + done.stderr
        if done.returncode == 0:
            break
        assert time.monotonic() < deadline, said
        time.sleep(1)
    assert ("SSL connection (protocol: TLS" in said) == tls, said
    return said


def where(walked: Walked, labels) -> list[str]:
    return [f"{label}: {walked.findings[label]}" for label in sorted(labels)
            if walked.findings[label].found]


def exposed(walked: Walked, names) -> list[str]:
    """Where an issued value shows in the containers `names`: `docker inspect` (its
    Config.Env said apart) and their processes' environ. Labels and places only."""
    shown = []
    for name in sorted(names):
        text, environ = walked.inspected[name], walked.environ[name]
        (info,) = json.loads(text)
        env = "\n".join(info["Config"]["Env"] or [])
        for label, value in sorted(walked.issued.items()):
            if value in text:
                shown.append(f"{label} in {name}'s "
                             + ("docker inspect Config.Env" if value in env else "docker inspect"))
            if value in environ:
                shown.append(f"{label} in {name}'s /proc environ")
    return shown


def no_issued_value_in_containers(walked: Walked, leak: str | None = None) -> None:
    clean = sorted(name for name in walked.inspected if name != leak)
    for name in clean:
        (info,) = json.loads(walked.inspected[name])
        assert "/run/secrets/" in "\n".join(info["Config"]["Env"] or []), (
            name, "takes its secrets as files")
    shown = exposed(walked, clean)
    assert shown == [], shown


def test_with_tls_no_secret_crosses_the_segment_in_the_clear(machines):
    walked = walk(machines, tls=True)
    assert any(label.startswith("tls/postgres@n1") for label in walked.issued)
    leaks = where(walked, {**walked.issued, **walked.accounts})
    assert leaks == [], leaks
    print(f"capture: {walked.summary}; searched {len(walked.issued)} issued values and "
          f"{len(walked.accounts)} account secrets: none found")
    no_issued_value_in_containers(walked)


def test_with_tls_off_the_same_capture_finds_them(machines):
    walked = walk(machines, tls=False)
    # every node account password and enrolment secret crossed readable: the check can fail
    assert where(walked, walked.accounts) == [
        f"{label}: {walked.findings[label]}" for label in sorted(walked.accounts)], \
        {label: str(finding) for label, finding in walked.findings.items()}
    # the database passwords do not, even plain: SCRAM never sends one, and declarations
    # carry values sealed to their node — said, not asserted away
    print(f"capture: {walked.summary}; plain: " + "; ".join(where(walked, walked.accounts))
          + f"; issued values found: {where(walked, walked.issued) or 'none'}")
    # the containers' scan can fail too: leak@n2's token, put in its env on purpose, is found
    # by the same scan in its docker inspect (Config.Env) and its process's environ
    leak = next(name for name in walked.inspected if "-leak-n2-" in name)
    tokens = [label for label in walked.issued if label.startswith("secret/leak@n2/token ")]
    assert len(tokens) == 1, sorted(walked.issued)
    assert exposed(walked, [leak]) == [f"{tokens[0]} in {leak}'s docker inspect Config.Env",
                                       f"{tokens[0]} in {leak}'s /proc environ"]
    print(f"the deliberate leak: {'; '.join(exposed(walked, [leak]))}")
    no_issued_value_in_containers(walked, leak)
