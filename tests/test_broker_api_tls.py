"""The broker's management API over HTTPS (the admin's password crosses to it), against a real
RabbitMQ serving it with a certificate from a mesh CA (`management.ssl.*`,
tests/_private_rabbit.py): executors/common/broker_api.Api verifies it against the mesh CA
alone, or, on the broker's own node, against the server certificate its declaration gives it
(pinned), checking the name its certificate was issued for while dialling loopback; another
CA's certificate, a name the certificate does not carry, and an https API with no CA to verify
against are refused before the password is sent, whatever CA bundle the environment names.
And the control verbs: `mesh enrol token`
told an https API whose certificate is another mesh's says so in one line.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import requests

from _private_rabbit import PrivateRabbit, available
from executors.common.broker_api import Api
from resolver import MeshError

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parent.parent

_why = available()
if _why:
    pytest.skip(f"private RabbitMQ: {_why}", allow_module_level=True)


def mesh(*args, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "executors.cli", *map(str, args)],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert not check or done.returncode == 0, done.stdout + done.stderr
    return done


def mesh_dir(tmp: Path, name: str) -> Path:
    directory = tmp / name
    (directory / "catalogue").mkdir(parents=True)
    (directory / "catalogue" / "provisions.yaml").write_text("{}\n")
    (directory / "mesh.yaml").write_text(
        f"mesh: {name}\ncatalogue: catalogue\nnodes:\n  a: {{address: 127.0.0.1, control: "
        f"true}}\ninstances: {{}}\n")
    mesh("ca", "init", directory)
    return directory


def issue(directory: Path, address: str, stem: str) -> tuple[Path, Path, Path]:
    out = directory / f"tls-{stem}"
    mesh("ca", "issue-server", directory, stem, "--address", address, "--out", out)
    return out / f"{stem}.crt", out / f"{stem}.key", out / "ca.crt"


def leaf(path: Path) -> str:
    """The server's own certificate (what `mesh ca issue-server` writes before the CA's)."""
    return path.read_text().split("-----END CERTIFICATE-----")[0] + "-----END CERTIFICATE-----\n"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("api-tls")
    ours, theirs = mesh_dir(tmp, "ours"), mesh_dir(tmp, "theirs")
    served = issue(ours, "127.0.0.1", "broker")
    rabbit = PrivateRabbit(tls=served).start()
    try:
        yield rabbit, ours, theirs, served
    finally:
        rabbit.remove()


def overview(rabbit: PrivateRabbit, **tls) -> object:
    api = Api(rabbit.api, "admin", rabbit.password, **tls)
    try:
        return api.get("/api/overview")
    finally:
        api.close()


def test_verified_against_the_mesh_ca_and_refused_with_another(world):
    rabbit, ours, theirs, served = world
    assert rabbit.api.startswith("https://")
    ca = (ours / "ca" / "mesh-ca.crt").read_text()
    assert overview(rabbit, ca_pem=ca)["management_version"]
    with pytest.raises(requests.exceptions.SSLError):
        overview(rabbit, ca_pem=(theirs / "ca" / "mesh-ca.crt").read_text())
    with pytest.raises(MeshError, match="verified against the mesh CA, and none was given"):
        overview(rabbit)  # the system's CAs are never asked


def test_a_bundle_named_by_the_environment_is_never_trusted_for_it(world, monkeypatch):
    """requests would verify against $REQUESTS_CA_BUNDLE: here it names the very CA that
    issued the broker's certificate, and an Api told another CA still refuses the server."""
    rabbit, ours, theirs, served = world
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(ours / "ca" / "mesh-ca.crt"))
    monkeypatch.setenv("CURL_CA_BUNDLE", str(ours / "ca" / "mesh-ca.crt"))
    with pytest.raises(requests.exceptions.SSLError):
        overview(rabbit, ca_pem=(theirs / "ca" / "mesh-ca.crt").read_text())


def test_pinned_to_the_servers_own_certificate_with_the_name_it_carries(world, tmp_path):
    rabbit, ours, theirs, served = world
    mine = leaf(served[0])
    assert overview(rabbit, ca_pem=mine, pinned=True, server_name="127.0.0.1")
    with pytest.raises(requests.exceptions.SSLError):  # the leaf alone is no CA unpinned
        overview(rabbit, ca_pem=mine)
    with pytest.raises(requests.exceptions.SSLError):  # a name it does not carry
        overview(rabbit, ca_pem=mine, pinned=True, server_name="10.9.9.9")
    other = issue(theirs, "127.0.0.1", "other")
    with pytest.raises(requests.exceptions.SSLError):  # another server's certificate
        overview(rabbit, ca_pem=leaf(other[0]), pinned=True, server_name="127.0.0.1")
    # a certificate for the node's address, dialled on loopback: the name checked is the
    # address (how a node's provisioner reaches its own broker)
    on_node = issue(ours, "10.9.9.9", "node-address")
    rabbit.use_certificate(on_node)
    try:
        assert overview(rabbit, ca_pem=leaf(on_node[0]), pinned=True, server_name="10.9.9.9")
        with pytest.raises(requests.exceptions.SSLError):
            overview(rabbit, ca_pem=leaf(on_node[0]), pinned=True)  # 127.0.0.1 is not it
    finally:
        rabbit.use_certificate(served)


def test_a_control_verb_says_the_api_is_not_the_mesh_cas_before_sending_the_password(world):
    rabbit, ours, theirs, served = world
    done = mesh("enrol", "token", theirs, "n2", "--broker", rabbit.amqp, "--broker-api",
                rabbit.api, "--broker-admin", "admin", "--broker-admin-password-file",
                rabbit.password_file, check=False)
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert f"the broker's management API at {rabbit.api}: its TLS certificate is not the " \
           f"mesh CA's" in last, last
    assert "refused before the admin's password was sent" in last, last
    assert rabbit.password not in done.stdout + done.stderr
