"""Benchmark: delivery over the broker, against the broker's own raw publish + consume.

Part 1, simulated agents. For 10, 100 and 1,000 nodes (each running one container instance),
the control plane (this process, the library `mesh control` runs) publishes every node's
signed declaration, confirmed by the broker; simulated agents (worker processes) take each
message off its node's queue, verify it exactly as the agent does (common/messages.open_signed
against the pinned CA, node/agent.check_body), build the agent's report (node/agent.Agent) and
publish it in the node's name, confirmed, then acknowledge; the control plane takes the
reports and handles them as it does (control/inbox: kept, judged against the mesh, recorded).
They do not touch Docker. Timed from the first publish to the last report handled.
In the same run, the raw limit: the same message bytes published (confirmed) to the same
queues, consumed by the same workers, each answered with a reply of a report's size
(confirmed), the replies consumed; no signing, no verifying, no handling. Both sides publish
the same way (persistent, mandatory, each confirmed by the broker before the next) and their
workers reply the same way (each reply confirmed), so what differs is the mesh's own work.
Before the first timed round every node's queue carries one message of an untimed raw round
(a durable queue's first message costs the broker more than the next ones: without it, the
side timed first would pay that for both). Prints both, the ratio, and the cost per node
(linear in nodes is the target; ratio at 1,000 nodes ≤ 2), the raw limit's own growth per
node beside it, and the preparation before the first message (resolve, write and record the
declarations) with the signing of every message (done by the send, inside its timing).
The simulated agents of one worker share one connection and publish each report with the
`user_id` of the node it speaks for (an `impersonator` account of this benchmark; a real
node's account may not), so what is measured is the per-message work, not 1,000 TCP
connections. Printed against the targets (issue 33): the ratio of the medians at 1,000 nodes
(at most 2) and the median cost per node from 100 to 1,000 nodes (linear: at most
LINEAR_TOLERANCE times); and, per size, what preparing a one-line edit (a node added) costs
with nothing kept (a one-shot `mesh publish`) and with what the control loop keeps between
rounds (control/publish.Memory).

Part 2, one real node: an enrolled `mesh agent` process applying to the real Docker Engine
(firewall left alone). Time from publish to its report handled, for a change of one
container's environment (recreated) and for a republish of the same declaration (a no-op).
Its container's command ends on SIGTERM (the test image's default command ignores it, so a
recreate would time the Engine's 10 s stop timeout, not the mesh).

Everything speaks TLS, as the mesh does: a RabbitMQ of the benchmark's own
(tests/_private_rabbit.py) serves AMQP over TLS with a server certificate from the
benchmark's mesh CA (one CA, copied into each synthetic mesh as its `ca.path`), and both the
mesh's delivery and the raw limit go over it, verified against that CA. The same broker also
listens plain on loopback, for the cost of TLS: a login (connect, open a channel, close) timed
both ways, and per message, the raw publish+consume+reply over TLS against the same over
plain AMQP.

Needs scripts/services.sh (Docker, the registry; RabbitMQ's package) and root (the private
broker runs as the rabbitmq user). Cleans up its broker, vhost, accounts and containers.

    python3 benchmarks/bench_delivery.py [--sizes 10 100 1000] [--workers 2] [--repetitions 3]
                                         [--real-node-repetitions 5] [--no-real-node]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import multiprocessing.process
import multiprocessing.queues
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Optional
from urllib.parse import quote

import attrs
import pika
import requests

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

# the tests' fleet of real `mesh agent` processes; tests/ is outside mypy's files
from _fleet import APP, FleetMesh, Broker as FleetBroker  # type: ignore[import-not-found]  # noqa: E402,E501
from _private_rabbit import PrivateRabbit  # type: ignore[import-not-found]  # noqa: E402

from executors.common import amqp, messages  # noqa: E402
from executors.common.message_formats import DECLARATION  # noqa: E402
from executors.control import publish  # noqa: E402
from executors.control.broker_settings import settings_from  # noqa: E402
from executors.control.ca import (ca_cert_path, ca_key_path, init_ca, load_ca,  # noqa: E402
                                  sign_external_server)
from executors.control.control_loop import Control, Delivery  # noqa: E402
from executors.control.control_state import ControlState  # noqa: E402
from executors.control.delivery_key import ensure_delivery_key  # noqa: E402
from executors.control.loading import load_mesh_dir  # noqa: E402
from executors.node.agent.config import AgentConfig, BrokerLogin  # noqa: E402
from executors.node.agent.loop import Agent, check_body  # noqa: E402

if TYPE_CHECKING:  # pika is untyped: these name what the channels and deliveries are
    from pika.adapters.blocking_connection import BlockingChannel
    from pika.spec import Basic, BasicProperties

DIGEST = "sha256:" + "ab" * 32
STOPS_ON_TERM = ["sh", "-c", "trap 'exit 0' TERM; sleep 86400 & wait"]  # part 2's command
MODULE = """\
name: app
artifacts:
  image: {repository: registry.invalid/bench/app, tag: "1"}
containers:
  - name: main
    artifact: image
    env: {GREETING: hello}
"""


@attrs.frozen
class Broker:
    """The benchmark's RabbitMQ: AMQP over TLS (a certificate from the benchmark's CA), the
    same broker's plain listener on loopback, its management API and administrator."""

    amqp: str  # host:port, TLS
    plain_amqp: str  # host:port, plain (only to measure what TLS costs)
    api: str  # the management API's URL (https, the same certificate)
    admin: str
    password_file: str
    ca_dir: Path  # the benchmark's CA: mesh-ca.key and mesh-ca.crt, copied into each mesh

    @property
    def verify(self) -> str:
        """What the benchmark's own management API requests verify it against."""
        return str(ca_cert_path(self.ca_dir, load_mesh_dir(self.ca_dir).mesh))


@attrs.frozen
class Job:
    """What one worker process is given: simulated agents for `nodes` (mode mesh) or raw
    answerers (mode raw), over the benchmark's account."""

    amqp: str  # host:port
    vhost: str
    user: str
    password: str
    mesh: str
    ca: str  # the mesh CA's certificate, PEM
    state: str
    reply_size: int
    tls: bool = True  # verified against `ca`; False: plain AMQP (the cost of TLS)
    nodes: tuple[str, ...] = ()
    mode: Literal["mesh", "raw"] = "mesh"
    index: int = 0


#: How much the median cost per node may grow from N to 10 N nodes and still read as linear.
LINEAR_TOLERANCE = 1.25


@attrs.frozen
class Row:
    """One size of part 1: seconds (best and median of the repetitions) and message size."""

    nodes: int
    prepare: float  # resolve + write + record, before the first publish
    ours: float
    ours_median: float
    raw: float
    raw_median: float
    raw_plain: float  # the raw limit over plain AMQP, same broker
    raw_plain_median: float
    message_bytes: float
    sign: float = 0.0  # signing every node's declaration once (the send does it per message)
    # after a one-line edit (one node added): preparing it as a one-shot process does (nothing
    # kept) and as the control loop does (its publish.Memory from the rounds before)
    edit_fresh: float = 0.0
    edit_kept: float = 0.0


def tls_broker(scratch: Path) -> tuple[Broker, PrivateRabbit]:
    """The benchmark's CA (made once) and a private RabbitMQ serving TLS with a certificate
    it issued for 127.0.0.1, plus a plain listener on loopback."""
    ca_dir = scratch / "ca-mesh"
    (ca_dir / "catalogue").mkdir(parents=True)
    (ca_dir / "catalogue" / "provisions.yaml").write_text("{}\n")
    (ca_dir / "mesh.yaml").write_text("mesh: benchca\ncatalogue: catalogue\nnodes: {}\n"
                                      "instances: {}\n")
    mesh = load_mesh_dir(ca_dir).mesh
    ca = init_ca(ca_dir, mesh)
    certificate, key = sign_external_server(ca, mesh, "broker", "127.0.0.1")
    tls = scratch / "broker-tls"
    tls.mkdir()
    (tls / "server.crt").write_text(certificate)
    (tls / "server.key").write_text(key)
    shutil.copy(ca_cert_path(ca_dir, mesh), tls / "ca.crt")
    rabbit = PrivateRabbit(tls=(tls / "server.crt", tls / "server.key", tls / "ca.crt"),
                           plain_too=True).start()
    return Broker(amqp=rabbit.amqp, plain_amqp=f"127.0.0.1:{rabbit.plain_port}",
                  api=rabbit.api, admin="admin", password_file=str(rabbit.password_file),
                  ca_dir=ca_dir), rabbit


def adopt_ca(broker: Broker, directory: Path) -> None:
    """The benchmark's CA as the mesh's (`ca.path`), so the broker's certificate is its."""
    source, mesh = load_mesh_dir(broker.ca_dir).mesh, load_mesh_dir(directory).mesh
    for path in (ca_key_path, ca_cert_path):
        path(directory, mesh).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path(broker.ca_dir, source), path(directory, mesh))
    load_ca(directory, mesh)  # it loads as the mesh's


def synthetic_mesh(directory: Path, name: str, nodes: int, broker: Broker) -> list[str]:
    names = [f"n{i:04d}" for i in range(nodes)]
    (directory / "catalogue" / "app").mkdir(parents=True)
    (directory / "catalogue" / "provisions.yaml").write_text("{}\n")
    (directory / "catalogue" / "app" / "module.yaml").write_text(MODULE)
    lines = [f"mesh: {name}", "catalogue: catalogue", "nodes:"]
    lines += [f"  {n}: {{address: 10.{i // 250}.{i % 250}.1}}" for i, n in enumerate(names)]
    lines += ["instances:"] + [f"  app@{n}: {{module: app, node: {n}}}" for n in names]
    (directory / "mesh.yaml").write_text("\n".join(lines) + "\n")
    (directory / "ledger.yaml").write_text(f"version: 1\npins:\n  registry.invalid/bench/app:1: "
                                           f"'{DIGEST}'\n")
    adopt_ca(broker, directory)
    return names


def make_control(directory: Path, broker: Broker) -> Control:
    inputs = load_mesh_dir(directory)
    settings = settings_from(inputs, broker=broker.amqp, api=broker.api,
                             admin=broker.admin, admin_password_file=broker.password_file)
    return Control(mesh_dir=directory, settings=settings, state=ControlState(directory),
                   say=lambda line: None, issue=False)


class Impersonator:
    """This benchmark's account: all rights in the mesh's vhost, the `impersonator` tag."""

    def __init__(self, broker: Broker, vhost: str) -> None:
        self.api, self.vhost = broker.api, vhost
        self.auth = (broker.admin, Path(broker.password_file).read_text().strip())
        self.verify = broker.verify
        self.user = f"bench-{uuid.uuid4().hex[:8]}"
        self.password = uuid.uuid4().hex
        base = f"{self.api}/api"
        requests.put(f"{base}/users/{self.user}", json={"password": self.password,
                                                         "tags": "impersonator"},
                     auth=self.auth, timeout=10, verify=self.verify).raise_for_status()
        requests.put(f"{base}/permissions/{quote(vhost, safe='')}/{self.user}",
                     json={"configure": ".*", "write": ".*", "read": ".*"}, auth=self.auth,
                     timeout=10, verify=self.verify).raise_for_status()

    def remove(self) -> None:
        requests.delete(f"{self.api}/api/users/{self.user}", auth=self.auth, timeout=10,
                        verify=self.verify)


def remove_mesh(broker: Broker, mesh: str) -> None:
    auth = (broker.admin, Path(broker.password_file).read_text().strip())
    api, vhost, verify = broker.api, f"mesh.{mesh}", broker.verify
    requests.delete(f"{api}/api/vhosts/{quote(vhost, safe='')}", auth=auth, timeout=30,
                    verify=verify)
    for user in requests.get(f"{api}/api/users", auth=auth, timeout=10, verify=verify).json():
        if user["name"].startswith(vhost + "."):
            requests.delete(f"{api}/api/users/{quote(user['name'], safe='')}", auth=auth,
                            timeout=10, verify=verify)
    for parameter in requests.get(f"{api}/api/global-parameters", auth=auth, timeout=10,
                                  verify=verify).json():
        if parameter["name"].startswith("mesh-mark:") and vhost in parameter["name"]:
            requests.delete(f"{api}/api/global-parameters/{quote(parameter['name'], safe='')}",
                            auth=auth, timeout=10, verify=verify)


# --------------------------------------------------------------------------- workers


def worker(job: Job, ready: multiprocessing.queues.Queue[int],
           done: multiprocessing.queues.Queue[int]) -> None:
    """Simulated agents for `job.nodes`: verify and report (mode mesh) or answer (raw)."""
    host, port = job.amqp.split(":")
    tls = amqp.BrokerTls(job.ca) if job.tls else amqp.BrokerTls.plain()
    connection = pika.BlockingConnection(pika.ConnectionParameters(
        host, int(port), job.vhost, pika.PlainCredentials(job.user, job.password),
        ssl_options=pika.SSLOptions(tls.context(), server_hostname=host) if job.tls
        else None))
    consume = connection.channel()
    consume.basic_qos(prefetch_count=500)
    replies = connection.channel()
    replies.confirm_delivery()
    names = amqp.FleetNames(job.mesh)
    agents: dict[str, Agent] = {}
    cas = messages.load_certificate(job.ca)
    for node in job.nodes:
        config = AgentConfig(path="-", mesh=job.mesh, node=node, key="-",
                             ca_fingerprint=messages.certificate_fingerprint(cas),
                             broker_host=host, broker_port=int(port), vhost=job.vhost,
                             state_root=job.state, verify=False, ca_certificate=job.ca,
                             login=BrokerLogin(host, int(port), job.vhost,
                                               names.node_user(node), "-"))
        agents[node] = Agent(config, say=lambda line: None)
    reply = b"x" * job.reply_size
    count = {"n": 0}

    def on_message(channel: BlockingChannel, method: Basic.Deliver, props: BasicProperties,
                   body: bytes, node: str) -> None:
        if job.mode == "mesh":
            agent = agents[node]
            verified = messages.open_signed(body, kind=DECLARATION, ca=agent.ca, mesh=job.mesh)
            declaration = check_body(verified, agent.config)
            record = {"version": 2, "mesh": job.mesh, "node": node, "result": "applied",
                      "serial": declaration.serial, "digest": declaration.digest,
                      "generations": {}, "granted": {}, "not_provisioned": [], "failed": None}
            report = agent._report("message", result="applied", message_id=props.message_id,
                                   serial=declaration.serial, digest=declaration.digest,
                                   serial_applied=declaration.serial, record=record)
            amqp.publish(replies, amqp.REPORTS, amqp.REPORTS, messages.plain(report),
                         amqp.properties(message_id=f"report/{node}", kind="report",
                                         user_id=names.node_user(node)))
        else:
            amqp.publish(replies, amqp.REPORTS, amqp.REPORTS, reply,
                         amqp.properties(message_id=f"raw/{node}", kind="raw"))
        channel.basic_ack(method.delivery_tag)
        count["n"] += 1

    for node in job.nodes:
        consume.basic_consume(names.node_queue(node),
                              lambda ch, m, p, b, node=node: on_message(ch, m, p, b, node))
    ready.put(job.index)
    while count["n"] < len(job.nodes):
        connection.process_data_events(time_limit=0.5)
    done.put(job.index)
    connection.close()


def start_workers(mode: Literal["mesh", "raw"], shards: list[list[str]], base: Job,
                  ) -> tuple[list[multiprocessing.process.BaseProcess],
                             multiprocessing.queues.Queue[int]]:
    context = multiprocessing.get_context("fork")
    ready: multiprocessing.queues.Queue[int] = context.Queue()
    done: multiprocessing.queues.Queue[int] = context.Queue()
    processes: list[multiprocessing.process.BaseProcess] = []
    for index, nodes in enumerate(shards):
        job = attrs.evolve(base, nodes=tuple(nodes), mode=mode, index=index)
        process = context.Process(target=worker, args=(job, ready, done), daemon=True)
        process.start()
        processes.append(process)
    for _ in processes:
        ready.get(timeout=120)
    return processes, done


def take_reports(control: Control, channel: BlockingChannel, expected: int,
                 handle: bool) -> None:
    """Consume `expected` messages off the reports queue; with `handle`, as control does."""
    connection = channel.connection
    inbox = connection.channel()
    inbox.basic_qos(prefetch_count=1000)
    waiting: list[Delivery] = []
    inbox.basic_consume(amqp.REPORT_QUEUE, lambda ch, m, p, b: waiting.append(
        (amqp.REPORT_QUEUE, m, p, b)))
    taken = 0
    while taken < expected:
        connection.process_data_events(time_limit=0.05 if not waiting else 0)
        if waiting:
            batch, waiting[:] = list(waiting), []
            taken += len(batch)
            if handle:
                control.handle_batch(inbox, batch)
            else:
                inbox.basic_ack(batch[-1][1].delivery_tag, multiple=True)
    inbox.close()


def part_one(sizes: list[int], workers: int, repetitions: int, broker: Broker) -> list[Row]:
    rows: list[Row] = []
    for size in sizes:
        scratch = Path(tempfile.mkdtemp(prefix="bench-delivery-"))
        mesh = f"bd{uuid.uuid4().hex[:8]}"
        impersonator = None
        try:
            nodes = synthetic_mesh(scratch, mesh, size, broker)
            control = make_control(scratch, broker)
            connection, channel = control.connect()
            plain_connection = amqp.connect(amqp.parameters(
                amqp.BrokerAddress.parse(broker.plain_amqp), control.fleet.names.vhost,
                control.fleet.names.control_user, control.state.control_password(),
                tls=amqp.BrokerTls.plain()))
            plain_channel = plain_connection.channel()
            plain_channel.confirm_delivery()
            impersonator = Impersonator(broker, control.fleet.names.vhost)
            key = ensure_delivery_key(scratch, load_mesh_dir(scratch).mesh)
            began = time.perf_counter()
            prepared = control.prepare()
            prepare_seconds = time.perf_counter() - began
            began = time.perf_counter()
            raw_data = [messages.sign(DECLARATION,
                                      publish.declaration_body(d, prepared.ledger, "x"),
                                      key.key, key.certificate_pem)
                        for d in prepared.declarations]
            sign_seconds = time.perf_counter() - began
            shards = [nodes[i::workers] for i in range(workers)]
            base = Job(amqp=broker.amqp, vhost=control.fleet.names.vhost,
                       user=impersonator.user, password=impersonator.password,
                       mesh=mesh, ca=key.ca_pem, state=str(scratch / "agent"),
                       reply_size=1200)
            # untimed: every queue carries its first message (see the module's docstring)
            processes, done = start_workers("raw", shards, base)
            for node, data in zip(nodes, raw_data):
                amqp.publish(channel, amqp.DECLARATIONS, node, data,
                             amqp.properties(message_id=node, kind="raw"))
            take_reports(control, channel, size, handle=False)
            for process in processes:
                process.join(60)
            ours: list[float] = []
            raw: list[float] = []
            raw_plain: list[float] = []
            for repetition in range(repetitions):
                processes, done = start_workers("mesh", shards, base)
                began = time.perf_counter()
                if repetition:  # the same declarations again (their digests were published)
                    prepared = control.prepare(force=nodes)
                    began = time.perf_counter()
                control.send(channel, prepared)
                take_reports(control, channel, size, handle=True)
                ours.append(time.perf_counter() - began)
                for process in processes:
                    process.join(60)
                processes, done = start_workers("raw", shards, base)
                began = time.perf_counter()
                for node, data in zip(nodes, raw_data):
                    amqp.publish(channel, amqp.DECLARATIONS, node, data,
                                 amqp.properties(message_id=node, kind="raw"))
                take_reports(control, channel, size, handle=False)
                raw.append(time.perf_counter() - began)
                for process in processes:
                    process.join(60)
                # the same raw limit over plain AMQP: what TLS costs per message
                processes, done = start_workers("raw", shards, attrs.evolve(
                    base, amqp=broker.plain_amqp, tls=False))
                began = time.perf_counter()
                for node, data in zip(nodes, raw_data):
                    amqp.publish(plain_channel, amqp.DECLARATIONS, node, data,
                                 amqp.properties(message_id=node, kind="raw"))
                take_reports(control, plain_channel, size, handle=False)
                raw_plain.append(time.perf_counter() - began)
                for process in processes:
                    process.join(60)
            reports = control.state.reports()
            assert len(reports) == size and all(r["last"]["result"] == "applied"
                                                for r in reports.values())
            edit_fresh, edit_kept = prepare_after_edits(control, scratch)
            rows.append(Row(nodes=size, prepare=prepare_seconds, ours=min(ours),
                            ours_median=statistics.median(ours), raw=min(raw),
                            raw_median=statistics.median(raw), raw_plain=min(raw_plain),
                            raw_plain_median=statistics.median(raw_plain),
                            message_bytes=statistics.mean(len(d) for d in raw_data),
                            sign=sign_seconds, edit_fresh=edit_fresh, edit_kept=edit_kept))
            connection.close()
            plain_connection.close()
        finally:
            if impersonator is not None:
                impersonator.remove()
            remove_mesh(broker, mesh)
            shutil.rmtree(scratch, ignore_errors=True)
        row = rows[-1]
        ratio = row.ours_median / row.raw_median
        print(f"{size:>5} nodes: publish→reports {row.ours:.3f}s (median "
              f"{row.ours_median:.3f}s), raw publish+consume+reply {row.raw:.3f}s "
              f"(median {row.raw_median:.3f}s), ratio {row.ours / row.raw:.2f} (medians "
              f"{ratio:.2f}{', target <= 2: ' + _mark(ratio <= 2) if size >= 1000 else ''}); "
              f"{1000 * row.ours / size:.2f} ms/node; before the first message: resolve+write+"
              f"record {row.prepare:.2f}s (signing all {size} messages, done by the send: "
              f"{row.sign:.3f}s); message {row.message_bytes:.0f} bytes; TLS costs "
              f"{1e6 * (row.raw - row.raw_plain) / size:.0f} µs/message (raw over plain AMQP "
              f"{row.raw_plain:.3f}s)", flush=True)
        print(f"{size:>5} nodes: after a one-line edit (one node added), preparing it "
              f"{row.edit_fresh:.2f}s with nothing kept (a one-shot `mesh publish`), "
              f"{row.edit_kept:.2f}s with what the control loop keeps between rounds",
              flush=True)
    return rows


def _mark(ok: bool) -> str:
    return "ok" if ok else "MISSED"


def prepare_after_edits(control: Control, directory: Path) -> tuple[float, float]:
    """Seconds to prepare a one-line edit of mesh.yaml (a node added, with no instance: its
    own declaration is the one that changes), once with the control loop's memory (kept over
    the rounds before, which wrote the ledger) and once, after another such edit, as a fresh
    process does (nothing kept); each prepared (written and recorded), not sent (so the second
    prepares both added nodes). Returns (fresh, kept)."""
    timings = []
    kept = control.memory
    for number, fresh in ((0, False), (1, True)):
        text = (directory / "mesh.yaml").read_text()
        (directory / "mesh.yaml").write_text(text.replace(
            "nodes:\n", f"nodes:\n  added{number}: {{address: 10.250.0.{number + 1}}}\n", 1))
        control.memory = publish.Memory() if fresh else kept
        began = time.perf_counter()
        prepared = control.prepare()
        timings.append(time.perf_counter() - began)
        # prepared, not sent: the node added before is still to publish
        assert [d.node for d in prepared.declarations] == [
            f"added{n}" for n in range(number + 1)], [d.node for d in prepared.declarations]
    control.memory = kept
    return timings[1], timings[0]


def login_cost(broker: Broker, logins: int = 20) -> dict[str, float]:
    """Seconds per login (connect, open a channel, close) over TLS and over plain AMQP, as
    the control account of a small mesh: what TLS adds at login."""
    scratch = Path(tempfile.mkdtemp(prefix="bench-delivery-login-"))
    mesh = f"bd{uuid.uuid4().hex[:8]}"
    seconds: dict[str, float] = {}
    try:
        synthetic_mesh(scratch, mesh, 1, broker)
        control = make_control(scratch, broker)
        connection, _channel = control.connect()  # the account and its vhost made
        connection.close()
        for label, address, tls in (
                ("tls", broker.amqp, control.settings.tls),
                ("plain", broker.plain_amqp, amqp.BrokerTls.plain())):
            params = amqp.parameters(amqp.BrokerAddress.parse(address),
                                     control.fleet.names.vhost,
                                     control.fleet.names.control_user,
                                     control.state.control_password(), tls=tls)
            times = []
            for _ in range(logins):
                began = time.perf_counter()
                opened = amqp.connect(params)
                opened.channel()
                opened.close()
                times.append(time.perf_counter() - began)
            seconds[label] = statistics.median(times)
    finally:
        remove_mesh(broker, mesh)
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"a login (connect, channel, close), median of {logins}: TLS "
          f"{1000 * seconds['tls']:.1f} ms, plain {1000 * seconds['plain']:.1f} ms: TLS "
          f"costs {1000 * (seconds['tls'] - seconds['plain']):.1f} ms per login", flush=True)
    return seconds


# --------------------------------------------------------------------------- one real node


def part_two(repetitions: int, broker: Broker) -> dict[str, list[float]]:
    scratch = Path(tempfile.mkdtemp(prefix="bench-delivery-node-"))
    fleet = FleetMesh(scratch, {"app@solo": ("app", "solo")}, broker=FleetBroker(
        broker.amqp, broker.api, broker.admin, broker.password_file, plain=False))
    results: dict[str, list[float]] = {"change": [], "republish": []}
    app = APP.replace("    env:", f"    command: {json.dumps(STOPS_ON_TERM)}\n    env:", 1)
    try:
        fleet.write_module("app", app)
        adopt_ca(broker, fleet.dir)  # instead of `mesh ca init`: the broker's CA
        fleet.mesh("pin", ".")
        fleet.enrol("solo")
        fleet.start_agent("solo")
        broker = fleet.broker
        inputs = load_mesh_dir(fleet.dir)
        control = Control(mesh_dir=fleet.dir, settings=settings_from(
            inputs, broker=broker.amqp, api=broker.api, admin=broker.admin,
            admin_password_file=broker.password_file), state=ControlState(fleet.dir),
            say=lambda line: None, issue=False)
        connection, channel = control.connect()
        control.publish(channel)
        take_reports(control, channel, 1, handle=True)
        for repetition in range(repetitions):
            fleet.write_module("app", app.replace("GREETING: hello",
                                                  f"GREETING: hello{repetition}"))
            began = time.perf_counter()
            control.publish(channel)
            take_reports(control, channel, 1, handle=True)
            results["change"].append(time.perf_counter() - began)
            report = control.state.report("solo")
            assert report is not None and report["last"]["result"] == "applied"
            began = time.perf_counter()
            control.publish(channel, force=["solo"], only=["solo"])
            take_reports(control, channel, 1, handle=True)
            results["republish"].append(time.perf_counter() - began)
            report = control.state.report("solo")
            assert report is not None
            last = report["last"]
            assert last["result"] == "applied" and last["operations"] == [], last
        connection.close()
    finally:
        fleet.close()
        shutil.rmtree(scratch, ignore_errors=True)
    for what, label in (("change", "one container's environment changed (recreated)"),
                        ("republish", "the same declaration republished (no-op)")):
        values = results[what]
        print(f"one real node, {label}: publish→report best {min(values):.3f}s, median "
              f"{statistics.median(values):.3f}s over {len(values)}", flush=True)
    return results


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--real-node-repetitions", type=int, default=5)
    parser.add_argument("--no-real-node", action="store_true")
    args = parser.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="bench-delivery-broker-"))
    broker, rabbit = tls_broker(scratch)
    try:
        return _run(args, broker)
    finally:
        rabbit.remove()
        shutil.rmtree(scratch, ignore_errors=True)


def _run(args: argparse.Namespace, broker: Broker) -> int:
    print(f"over TLS (amqps, verified against the mesh CA) to a private RabbitMQ at "
          f"{broker.amqp}", flush=True)
    logins = login_cost(broker)
    print(f"simulated agents: {args.workers} worker processes; {args.repetitions} repetitions "
          "each, best shown", flush=True)
    rows = part_one(args.sizes, args.workers, args.repetitions, broker)
    if len(rows) > 1:
        first, last = rows[0], rows[-1]
        print(f"cost per node from {first.nodes} to {last.nodes} nodes: "
              f"{1000 * first.ours / first.nodes:.2f} → "
              f"{1000 * last.ours / last.nodes:.2f} ms/node (raw "
              f"{1000 * first.raw / first.nodes:.2f} → "
              f"{1000 * last.raw / last.nodes:.2f})")
        # linear: the median cost per node at the largest size within LINEAR_TOLERANCE of the
        # one at the size ten times smaller (10 nodes is all fixed costs: not compared)
        base = next((row for row in rows if row.nodes * 10 == last.nodes), None)
        if base is not None:
            grows = (last.ours_median / last.nodes) / (base.ours_median / base.nodes)
            raw_grows = (last.raw_median / last.nodes) / (base.raw_median / base.nodes)
            print(f"median cost per node from {base.nodes} to {last.nodes} nodes: "
                  f"{1000 * base.ours_median / base.nodes:.2f} → "
                  f"{1000 * last.ours_median / last.nodes:.2f} ms/node, x{grows:.2f}; "
                  f"linear (at most x{LINEAR_TOLERANCE}): {_mark(grows <= LINEAR_TOLERANCE)} "
                  f"(the raw limit's own: {1000 * base.raw_median / base.nodes:.2f} → "
                  f"{1000 * last.raw_median / last.nodes:.2f} ms/node, x{raw_grows:.2f})")
    if not args.no_real_node:
        part_two(args.real_node_repetitions, broker)
    print(json.dumps({"login_seconds": logins, "simulated": [attrs.asdict(row) for row in rows]},
                     indent=None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
