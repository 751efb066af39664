"""A broker's own admin secret, rotated through the `mesh` command, put in force on the real
RabbitMQ of scripts/services.sh by the provisioner (its management API, which LavinMQ serves too).

The broker (like LavinMQ and the official RabbitMQ image) creates its default user only on an
empty data directory, so the admin account on the running broker keeps its password until the
provisioner changes it. The mesh here has one node `solo` whose broker is the test service
(the provider's admin endpoint is pointed at it; the account is this test's own administrator,
so no other test's admin changes). Walk: plan --issue → provision → rotate the admin → plan →
provision (the password changes on the broker, authenticated with the generation in force) →
applied → a new consumer is provisioned with the new admin and its account works over AMQP,
and the old admin password is refused.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pika
import pytest
import requests

import _pg
import _rabbit
from _meshdir import run_cli
from executors.common import keys
from executors.node.apply.runner import load_declarations, secret_source_from
from executors.node.provisioners import Endpoint, provision_grants
from executors.common.report import LivePrinter, Report

pytestmark = pytest.mark.integration

DIGEST = "sha256:" + "ab" * 32

PROVISIONS = """\
amqp:
  scope: node
  grant: vhost+account
  keys: [host, port, vhost, user, password, url]
  url: "amqp://{user}@{host}:{port}/{vhost}"
"""

BROKER = """\
name: broker
artifacts:
  broker: {{repository: registry.invalid/broker, tag: "1"}}
listens:
  amqp: {{port: 5672}}
  management: {{port: 15672}}
provides:
  - {{provision: amqp, listen: amqp, admin: admin}}
secrets: [admin]
containers:
  - name: broker
    artifact: broker
    env:
      RABBITMQ_DEFAULT_USER: {admin_user}
      RABBITMQ_DEFAULT_PASS: "${{self.admin.password}}"
"""

APP = """\
name: app
artifacts:
  image: {repository: registry.invalid/app, tag: "1"}
requires:
  - {as: events, provision: amqp}
containers:
  - name: worker
    artifact: image
    env: {AMQP_USER: "${events.user}", AMQP_PASSWORD: "${events.password}"}
"""


class Mesh:
    def __init__(self, tmp: Path, prefix: str):
        self.dir, self.prefix = tmp, prefix
        self.admin_user = f"{prefix}admin"
        (tmp / "catalogue" / "broker").mkdir(parents=True)
        (tmp / "catalogue" / "app").mkdir()
        (tmp / "catalogue" / "provisions.yaml").write_text(PROVISIONS)
        (tmp / "catalogue" / "broker" / "module.yaml").write_text(
            BROKER.format(admin_user=self.admin_user))
        (tmp / "catalogue" / "app" / "module.yaml").write_text(APP)
        self.key = tmp / "solo.key"
        self.public = keys.create_node_key(self.key)
        self.write(["app1"])

    def write(self, apps) -> None:
        instances = "".join(f"  {self.prefix}{a}@solo: {{module: app, node: solo}}\n"
                            for a in apps)
        (self.dir / "mesh.yaml").write_text(
            f"mesh: mesh-{self.prefix}\ncatalogue: catalogue\n"
            f"nodes:\n  solo: {{address: 127.0.0.1, control: true, "
            f"public-key: \"{self.public}\"}}\n"
            f"instances:\n  broker@solo: {{module: broker, node: solo}}\n{instances}"
            f"host-ports: {{first: 30000, last: 30020}}\n")
        (self.dir / "ledger.yaml").touch()
        ledger = (self.dir / "ledger.yaml").read_text()
        if '"pins":' not in ledger and "pins:" not in ledger:  # synthetic digests: nothing here runs a container
            (self.dir / "ledger.yaml").write_text(
                "version: 1\npins:\n"
                f"  registry.invalid/broker:1: \"{DIGEST}\"\n"
                f"  registry.invalid/app:1: \"{DIGEST}\"\n")

    def cli(self, *args) -> str:
        code, output = run_cli(*args)
        assert code == 0, output
        return output

    def declaration(self):
        self.cli("plan", self.dir, "--out", self.dir / "out")
        ((_, declaration),) = load_declarations([str(self.dir / "out" / "solo.declaration.json")])
        return declaration

    def secrets(self):
        return secret_source_from(str(self.dir / "ledger.yaml"), str(self.key), "solo")

    def values(self) -> dict:
        from resolver.documents import load_ledger

        ledger, _ = load_ledger((self.dir / "ledger.yaml").read_text(), "ledger.yaml")
        return keys.unseal_for_node(ledger, "solo", keys.load_private_key(self.key))

    def provision(self, declaration):
        host, port = _rabbit.api_address()
        report = Report(printer=LivePrinter(stream=io.StringIO()))
        result = provision_grants(declaration, self.secrets(), report, ready_timeout=30,
                                  endpoints={"broker@solo": Endpoint(host, port,
                                                                     self.admin_user)})
        return result, report

    def report_applied(self, declaration, result) -> str:
        """What `mesh apply` leaves on the node, reported with `mesh applied --report`."""
        granted = {o.credential: o.generation for o in result.outcomes
                   if o.status == "in-force"}
        granted.update(result.admins)
        record = {"version": 2, "mesh": declaration.mesh, "node": "solo", "result": "applied",
                  "serial": declaration.serial, "digest": declaration.digest,
                  "generations": {}, "granted": granted, "not_provisioned": [], "failed": None}
        path = self.dir / "applied.json"
        path.write_text(json.dumps(record))
        return self.cli("applied", self.dir, "solo", "--report", path)


def broker_accepts(user: str, password: str) -> bool:
    api, _, _ = _rabbit.rabbit_admin()
    status = requests.get(api + "/api/overview", auth=(user, password), timeout=10).status_code
    assert status in (200, 401), status
    return status == 200


@pytest.fixture
def mesh(tmp_path):
    _rabbit.rabbit_admin()  # skips when the broker is not running
    prefix = _pg.unique_prefix()
    world = Mesh(tmp_path, prefix)
    try:
        yield world
    finally:
        _rabbit.cleanup(prefix)  # the test's admin account too: its name has the prefix


def test_rotating_the_broker_admin_changes_it_on_the_running_broker(mesh):
    admin_id = "secret/broker@solo/admin"
    mesh.cli("plan", mesh.dir, "--issue")
    first = mesh.values()[admin_id][1]
    # the broker was started with generation 1 as its default user (what an empty data
    # directory does with RABBITMQ_DEFAULT_PASS); here: this test's own administrator
    api, root_user, root_password = _rabbit.rabbit_admin()
    created = requests.put(f"{api}/api/users/{mesh.admin_user}", auth=(root_user, root_password),
                           json={"password": first, "tags": "administrator"}, timeout=10)
    assert created.status_code in (201, 204), created.text
    declaration = mesh.declaration()
    result, report = mesh.provision(declaration)
    assert not report.failed, report.to_json()
    assert result.admins == {admin_id: 1}
    mesh.report_applied(declaration, result)

    rotated = mesh.cli("rotate", mesh.dir, admin_id)
    assert "changes its admin password on the running server" in rotated
    declaration = mesh.declaration()
    result, report = mesh.provision(declaration)
    assert not report.failed, report.to_json()
    assert [op.op for op in report.ops] == ["set-admin-password"], report.to_json()
    second = mesh.values()[admin_id][2]
    assert broker_accepts(mesh.admin_user, second)
    assert not broker_accepts(mesh.admin_user, first)
    tags = requests.get(f"{api}/api/users/{mesh.admin_user}", auth=(root_user, root_password),
                        timeout=10).json()["tags"]
    assert "administrator" in (tags if isinstance(tags, list) else tags.split(","))
    mesh.report_applied(declaration, result)

    mesh.write(["app1", "app2"])  # a new consumer, provisioned with the new admin
    mesh.cli("plan", mesh.dir, "--issue")
    declaration = mesh.declaration()
    result, report = mesh.provision(declaration)
    assert not report.failed, report.to_json()
    assert {o.status for o in result.outcomes} == {"in-force"}
    (grant,) = [g for g in declaration.grants if g.consumer == f"{mesh.prefix}app2@solo"]
    host, port = _rabbit.amqp_address()
    password = mesh.secrets()(grant.credential)
    connection = pika.BlockingConnection(pika.ConnectionParameters(
        host=host, port=port, virtual_host=grant.resource,
        credentials=pika.PlainCredentials(f"{grant.login}_{grant.slot}", password),
        connection_attempts=1))  # the slot's account, as the consumer is told
    channel = connection.channel()
    channel.queue_declare("", exclusive=True)
    connection.close()
    assert not broker_accepts(mesh.admin_user, first)
    everything = json.dumps(report.to_json()) + rotated
    assert first not in everything and second not in everything
