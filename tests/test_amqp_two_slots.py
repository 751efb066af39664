"""An AMQP account rotates with no window, against the real RabbitMQ of scripts/services.sh.

Each binding has two accounts on its vhost (`<login>_a`, `<login>_b`), as PostgreSQL's
two logins: the new generation goes to the idle slot's account while the old one keeps working
until every holder applied the new one. Walked through the `mesh` command (plan --issue,
rotate, applied) with the provider's apply done by the real provisioner (provision_grants
against the broker's management API) and the consumer's apply being what its container would
hold after each apply: the user it is told and the generation its declaration holds.

A client dials the broker over AMQP in a loop through the whole rotation, always as the
consumer's current view says, and also once right after each step: it never fails to log in.
The same walk with an account issued before accounts had two slots (one account per binding,
its password replaced on the broker first) fails right after the provider's apply: that is the
window the two slots close.
"""

from __future__ import annotations

import threading
import time

import attrs
import pika
import pytest
import requests
from pika import exceptions

import _pg
import _rabbit
from _background import repeatedly
from executors.node.apply.runner import load_declarations
from resolver.documents import dump_ledger, load_ledger
from test_admin_rotation_broker import Mesh

pytestmark = pytest.mark.integration

APP = "app1"


class Consumer:
    """What the consumer's container holds: the user it is told, its password's generation."""

    def __init__(self, mesh: Mesh):
        self.mesh = mesh
        self.lock = threading.Lock()
        self.view = None
        self.failures: list[str] = []
        self.dials = 0

    def applies(self, declaration) -> None:
        (binding,) = [b for b in declaration.bindings if b.consumer.endswith(f"{APP}@solo")]
        (container,) = [c for c in declaration.containers if c.instance == binding.consumer]
        (held,) = [s for s in container.secrets if s.credential == binding.secret.credential]
        password = self.mesh.secrets()(held)
        with self.lock:
            self.view = (binding.values["user"], binding.values["vhost"], password,
                         held.generation)

    def dial(self) -> bool:
        with self.lock:
            user, vhost, password, generation = self.view
        host, port = _rabbit.amqp_address()
        self.dials += 1
        try:
            connection = pika.BlockingConnection(pika.ConnectionParameters(
                host=host, port=port, virtual_host=vhost, connection_attempts=1,
                credentials=pika.PlainCredentials(user, password), socket_timeout=10))
        except (exceptions.ProbableAuthenticationError, exceptions.AuthenticationError,
                exceptions.ProbableAccessDeniedError) as error:
            self.failures.append(f"{user} generation {generation}: {type(error).__name__}")
            return False
        connection.close()
        return True


def declaration_of(mesh: Mesh):
    mesh.cli("plan", mesh.dir, "--out", mesh.dir / "out")
    ((_, declaration),) = load_declarations([str(mesh.dir / "out" / "solo.declaration.json")])
    return declaration


def provider_applies(mesh: Mesh):
    """The broker node's apply: the provisioner puts the grants in force; reported."""
    declaration = declaration_of(mesh)
    result, report = mesh.provision(declaration)
    assert not report.failed, report.to_json()
    mesh.report_applied(declaration, result)
    return declaration, report


@pytest.fixture
def mesh(tmp_path):
    api, root_user, root_password = _rabbit.rabbit_admin()  # skips without the broker
    prefix = _pg.unique_prefix()
    world = Mesh(tmp_path, prefix)
    world.cli("plan", world.dir, "--issue")
    admin = world.values()["secret/broker@solo/admin"][1]
    created = requests.put(f"{api}/api/users/{world.admin_user}", auth=(root_user, root_password),
                           json={"password": admin, "tags": "administrator"}, timeout=10)
    assert created.status_code in (201, 204), created.text
    try:
        yield world
    finally:
        _rabbit.cleanup(prefix)


def walk(mesh: Mesh, credential: str) -> tuple[Consumer, list[str]]:
    """Provision, then rotate `credential` to its end, a client dialling all along; (the client,
    what the provider's applies did, op by op)."""
    consumer = Consumer(mesh)
    declaration, _ = provider_applies(mesh)
    consumer.applies(declaration)
    assert consumer.dial(), consumer.failures
    ops: list[str] = []
    with repeatedly(consumer.dial):
        mesh.cli("rotate", mesh.dir, credential)
        for _ in range(4):  # provider, then holder, until the old generation retired
            declaration, report = provider_applies(mesh)
            ops += [f"{op.op} {op.subject}" for op in report.ops
                    if op.op in ("create-user", "update-user", "delete-user")]
            consumer.dial()  # right after the provider's apply, before the consumer's
            declaration = declaration_of(mesh)
            consumer.applies(declaration)  # the consumer's container is recreated
            consumer.dial()
            mesh.cli("applied", mesh.dir, "solo", "--digest", declaration.digest)
            if len(mesh.values()[credential]) == 1:  # the old generation is retired
                break
        ops += [f"{op.op} {op.subject}" for op in provider_applies(mesh)[1].ops
                if op.op in ("create-user", "update-user", "delete-user")]
        consumer.dial()
        time.sleep(0.3)
    return consumer, ops


def test_a_client_dialling_through_an_amqp_rotation_never_fails_to_log_in(mesh):
    credential = f"amqp/broker@solo/{mesh.prefix}{APP}@solo"
    consumer, ops = walk(mesh, credential)
    assert consumer.failures == [], consumer.failures
    assert consumer.dials > 10
    login = mesh.values()  # the walk ended on slot b, generation 2
    user, _, _, generation = consumer.view
    assert user.endswith("_b") and generation == 2, consumer.view
    assert any(op.startswith("create-user") and op.endswith("_b") for op in ops), ops
    assert any(op.startswith("delete-user") and op.endswith("_a") for op in ops), ops
    assert not any(op.startswith("update-user") for op in ops), ops  # nobody's password swapped
    assert credential in login


def test_an_account_issued_with_one_slot_has_the_window_the_two_slots_close(mesh):
    """The control for the test above: the same walk, the account issued as before (one
    account, no slot), fails right after the provider's apply."""
    credential = f"amqp/broker@solo/{mesh.prefix}{APP}@solo"
    path = mesh.dir / "ledger.yaml"
    ledger, _ = load_ledger(path.read_text(), str(path))
    issued = ledger.credentials[credential]
    assert issued.active.slot == "a"
    single = attrs.evolve(issued, active=attrs.evolve(issued.active, slot=None))
    path.write_text(dump_ledger(attrs.evolve(
        ledger, credentials=ledger.credentials.set(credential, single))))
    consumer, ops = walk(mesh, credential)
    assert consumer.failures, "a single account must show its window"
    assert any(op.startswith("update-user") for op in ops), ops
