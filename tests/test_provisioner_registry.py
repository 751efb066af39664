"""One registry of provisioners, asked by `mesh apply` and `mesh verify` alike.

The kinds this repository provisions load from it and fit the Provisioner protocol; a kind
it does not list is reported as not provisioned by both; a provisioner registered for a kind
(what a tool embedding the executors does) is the one both then call, with nothing else to
change. The provisioner registered here is a stand-in for the dispatch only: the real
servers are exercised by test_provision_postgres.py and test_provision_amqp.py.
"""

from __future__ import annotations

import socket

import attrs
import pytest
from pyrsistent import pmap, pvector

from resolver import BindingDecl, Declaration, GrantDecl, SecretRef

from executors.common.report import Report
from executors.node.extensions import Provisioner, SecretSource
from executors.node.provisioners import (
    AMQP_KIND,
    POSTGRES_KIND,
    BindingCheck,
    Endpoint,
    GrantOutcome,
    provision_grants,
)
from executors.node.provisioners import registry
from executors.node.verify.check import NO_PROVISIONER, OK, verify_binding

KIND = "bucket+key"


def test_the_kinds_provisioned_here_fit_the_protocol():
    assert set(registry.REGISTRY.kinds()) >= {POSTGRES_KIND, AMQP_KIND}
    for kind in (POSTGRES_KIND, AMQP_KIND):
        provisioner = registry.provisioner_for(kind)
        assert isinstance(provisioner, Provisioner) and provisioner.kind == kind


def test_a_kind_without_a_provisioner_is_said_the_same_way_by_apply_and_verify():
    assert registry.provisioner_for(KIND) is None
    declaration = _declaration()
    report = Report()
    result = provision_grants(declaration, lambda ref: "value", report)
    assert [o.status for o in result.outcomes] == ["not-provisioned"]
    assert result.outcomes[0].message == registry.no_provisioner(KIND)
    assert registry.no_provisioner(KIND) in report.notices[0]["message"]
    with _listening() as port:
        checked = verify_binding(_binding(port), lambda ref: "value", timeout=2)
    assert checked.status == NO_PROVISIONER
    assert registry.no_provisioner(KIND) in checked.message


@attrs.define
class Recorder:
    """A provisioner of KIND that records what it was asked (no server behind it)."""

    kind: str = KIND
    description: str = "bucket store"
    connect_timeout: float = 1.0
    calls: list = attrs.Factory(list)

    def login(self, endpoint: Endpoint, password: str, timeout: float) -> str:
        self.calls.append(("login", endpoint.port))
        return "bucket store 1.0"

    def auth_refused(self, error: Exception) -> bool:
        return False

    def set_admin_password(self, endpoint, password, new_password) -> None:
        raise AssertionError("no rotation here")

    def parse(self, rows):
        return rows

    def diff(self, mesh, provider, desired, observed):
        return ()

    def after(self, observed, plan):
        return observed

    def provision_provider(self, mesh, provider, endpoint, admin_password, grants,
                           secret_source: SecretSource, report, result, *, dry_run=False):
        self.calls.append(("provision", provider, tuple(g.login for g in grants)))
        result.outcomes.extend(GrantOutcome(g.credential.credential, provider, g.consumer,
                                            "in-force", g.credential.generation, kind=KIND)
                               for g in grants)

    def check_binding(self, binding, password, timeout) -> BindingCheck:
        self.calls.append(("check", binding.consumer))
        return BindingCheck(OK, f"bucket {binding.values['bucket']} as {binding.values['user']}")


@pytest.fixture
def recorder(monkeypatch):
    monkeypatch.setattr(registry, "REGISTRY", registry.Registry(registry.KNOWN))
    found = Recorder()
    assert isinstance(found, Provisioner)
    registry.REGISTRY.register(found)
    return found


def test_a_registered_provisioner_is_the_one_apply_and_verify_call(recorder):
    declaration = _declaration()
    result = provision_grants(declaration, lambda ref: "value", Report(),
                              endpoints={"store@n1": Endpoint("127.0.0.1", 9, "admin")})
    assert ("provision", "store@n1", ("app",)) in recorder.calls
    assert ("login", 9) in recorder.calls  # its readiness awaited as the admin first
    assert [o.status for o in result.outcomes] == ["in-force"]
    with _listening() as port:
        checked = verify_binding(_binding(port), lambda ref: "value", timeout=2)
    assert checked.status == OK and checked.message.startswith("bucket files as app")
    assert ("check", "app@n1") in recorder.calls


def _declaration() -> Declaration:
    admin = SecretRef("secret/store@n1/admin", 1)
    grant = GrantDecl(provision="s3-bucket", kind=KIND, provider="store@n1", consumer="app@n1",
                      consumer_node="n1", login="app", resource="files",
                      credential=SecretRef("s3-bucket/store@n1/app@n1", 1), admin=admin)
    return Declaration(mesh="m", node="n1", address="127.0.0.1", serial=1,
                       grants=pvector([grant]))


def _binding(port: int) -> BindingDecl:
    return BindingDecl(consumer="app@n1", requirement="files", provider="store@n1",
                       provision="s3-bucket",
                       values=pmap({"host": "127.0.0.1", "port": str(port), "bucket": "files",
                                    "user": "app"}),
                       secret=SecretRef("s3-bucket/store@n1/app@n1", 1), kind=KIND)


class _listening:
    """A TCP port that accepts connections (a binding must be reachable to be checked)."""

    def __enter__(self) -> int:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        return self.sock.getsockname()[1]

    def __exit__(self, *exc) -> None:
        self.sock.close()
