"""`mesh verify`'s registry accounts against a real Docker Engine and a real registry requiring
htpasswd accounts (docker-registry on loopback, where the engine speaks plain HTTP; the
two-namespace test_control_build_netns.py checks the same over TLS through a node's firewall).
The engine itself logs in: ok, auth-failed naming the account and generation, unreachable with
the engine's reason, not-yet-provisioned; the password never appears in a result."""

from __future__ import annotations

import json
import shutil
import socket

import bcrypt
import pytest
from pyrsistent import pvector

from resolver import Declaration, RegistryLogin, SecretRef

from _docker import engine
from _registry_helpers import RegistryProcess, closed_port
from executors.node.verify.check import verify_declaration

pytestmark = pytest.mark.integration

PASSWORD = "pull-password-7f3a"
CREDENTIAL = "registry-pull/registry/n2"

if shutil.which("docker-registry") is None:
    pytest.skip("docker-registry is not installed (scripts/services.sh installs it)",
                allow_module_level=True)


def declaration(registry: str, generation=3) -> Declaration:
    return Declaration(mesh="m", node="n2", address="127.0.0.1", registry_logins=pvector([
        RegistryLogin(registry=registry, user="node-n2",
                      secret=SecretRef(CREDENTIAL, generation))]))


def source(password: str):
    def opened(ref: SecretRef) -> str:
        assert ref == SecretRef(CREDENTIAL, 3)
        return password
    return opened


@pytest.fixture
def registry(tmp_path):
    auth = tmp_path / "htpasswd"
    auth.write_text("node-n2:" + bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=6))
                    .decode() + "\n")
    config = (f"auth:\n  htpasswd:\n    realm: mesh\n    path: {auth}\n")
    with RegistryProcess(tmp_path / "registry", auth=config) as process:
        yield process.address


def test_the_engine_logs_in_with_the_nodes_account(registry):
    api = engine()
    (result,) = verify_declaration(declaration(registry), source(PASSWORD), engine=lambda: api)
    assert result.status == "ok" and result.ok, result
    assert result.credential == CREDENTIAL and result.generation == 3
    assert "node-n2" in result.message and PASSWORD not in json.dumps(result.to_json())


def test_a_refused_account_is_auth_failed_naming_it(registry):
    api = engine()
    (result,) = verify_declaration(declaration(registry), source("not-" + PASSWORD),
                                   engine=lambda: api)
    assert result.status == "auth-failed" and not result.ok, result
    assert f"refuses node-n2 with {CREDENTIAL} generation 3" in result.message
    assert PASSWORD not in result.message


def closed_port_spelling(digits: str) -> int:
    """A closed loopback port whose number contains `digits` (40101 was once read as a 401)."""
    for port in sorted(range(1024, 65536), key=lambda p: (digits not in str(p), p)):
        if digits not in str(port):
            break
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError(f"no free loopback port contains {digits}")


@pytest.mark.parametrize("port", [closed_port, lambda: closed_port_spelling("401")],
                         ids=["any-port", "port-spelling-401"])
def test_a_registry_out_of_reach_is_unreachable_with_the_engines_reason(port):
    api = engine()
    (result,) = verify_declaration(declaration(f"127.0.0.1:{port()}"), source(PASSWORD),
                                   engine=lambda: api)
    assert result.status == "unreachable" and not result.ok, result
    assert "cannot log in" in result.message and "refused" in result.message, result.message


def test_not_issued_or_not_given_is_not_yet_provisioned(registry):
    api = engine()
    (unissued,) = verify_declaration(declaration(registry, generation=None), source(PASSWORD),
                                     engine=lambda: api)
    assert unissued.status == "not-yet-provisioned" and "mesh plan --issue" in unissued.message
    (unopened,) = verify_declaration(declaration(registry), None, engine=lambda: api)
    assert unopened.status == "not-yet-provisioned" and "--secrets and --key" in \
        unopened.message
    # without an engine to ask, nothing about registries is said (verify of bindings alone)
    assert [r.status for r in verify_declaration(declaration(registry), source(PASSWORD))] == []
