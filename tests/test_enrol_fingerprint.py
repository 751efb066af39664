"""Enrolment checked by eye: one fingerprint of a node's public key (`SHA256:` and the base64,
unpadded, of the SHA-256 of the raw 32-byte key), printed by `mesh agent enrol` and
`mesh node-key --show` on the node and by `mesh enrol list` on the control node; `mesh enrol
accept --fingerprint` refuses a request carrying another key (exit 1, nothing changed); and
`mesh enrol accept --address` before the node dials puts it into mesh.yaml (comments kept) so
the broker's floor opens to it. The broker flow runs the documented commands against a
RabbitMQ of the test file's own serving AMQP and its management API over TLS with a
certificate from each test mesh's CA (`mesh ca issue-server`; tests/_fleet.SharedTlsBroker)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
import requests
from ruamel.yaml import YAML

from _fleet import Broker, SharedTlsBroker
from _private_rabbit import available
from executors.common.keys import (KeyError_, create_node_key, key_fingerprint,
                                   parse_fingerprint)

REPO = Path(__file__).resolve().parent.parent
RAW = bytes(range(32))
# the same vector, written out once, so a change of form (hex, padding, prefix) is seen too
RAW_FINGERPRINT = "SHA256:Yw3NKWbEM2aRElRIu7JbT/QSpJxzLbLIq8G4WBvXEN0"


def _independent(public_b64: str) -> str:
    raw = base64.b64decode(public_b64)
    return "SHA256:" + base64.b64encode(hashlib.sha256(raw).digest()).decode().rstrip("=")


def mesh(*args, cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "executors.cli", *map(str, args)], cwd=cwd,
                            capture_output=True, text=True, timeout=180,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    if check:
        assert result.returncode == 0, f"mesh {args}:\n{result.stdout}\n{result.stderr}"
    return result


# -- the one function


def test_the_fingerprint_is_sha256_of_the_raw_key_in_unpadded_base64():
    public = base64.b64encode(RAW).decode()
    assert key_fingerprint(public) == _independent(public) == RAW_FINGERPRINT
    other = base64.b64encode(bytes(31) + b"\x01").decode()
    assert key_fingerprint(other) != RAW_FINGERPRINT
    with pytest.raises(KeyError_):
        key_fingerprint(base64.b64encode(bytes(31)).decode())  # 31 bytes: not a key


def test_a_typed_fingerprint_is_read_in_the_one_form_and_anything_else_is_refused():
    bare = RAW_FINGERPRINT.removeprefix("SHA256:")
    for typed in (RAW_FINGERPRINT, "sha256:" + bare, bare, f"  {RAW_FINGERPRINT}\n"):
        assert parse_fingerprint(typed) == RAW_FINGERPRINT
    for bad in ("", "SHA256:", "SHA256:abc", RAW_FINGERPRINT + "=", RAW_FINGERPRINT[:-1],
                "sha256:" + hashlib.sha256(RAW).hexdigest(), RAW_FINGERPRINT[:-1] + "!"):
        with pytest.raises(KeyError_, match="not a key fingerprint"):
            parse_fingerprint(bad)


# -- mesh node-key


def test_node_key_show_prints_an_existing_keys_public_key_and_fingerprint(tmp_path):
    made = mesh("node-key", "n1", "--path", tmp_path / "node.key", cwd=tmp_path)
    public = made.stdout.split("public-key:")[1].strip()
    assert f"fingerprint: {_independent(public)}" in made.stderr
    shown = mesh("node-key", "--show", "--path", tmp_path / "node.key", cwd=tmp_path)
    assert shown.stdout == f"public-key: {public}\nfingerprint: {_independent(public)}\n"
    assert (tmp_path / "node.key").stat().st_mode & 0o777 == 0o600
    # a key made elsewhere (by `mesh agent enrol`, the same function) shows the same way
    other = create_node_key(tmp_path / "other.key")
    assert mesh("node-key", "--show", "--path", tmp_path / "other.key", cwd=tmp_path).stdout \
        .splitlines()[1] == f"fingerprint: {_independent(other)}"


def test_node_key_without_show_on_an_existing_key_says_how_to_show_it(tmp_path):
    create_node_key(tmp_path / "node.key")
    before = (tmp_path / "node.key").read_text()
    again = mesh("node-key", "n1", "--path", tmp_path / "node.key", cwd=tmp_path, check=False)
    assert again.returncode == 2 and "--show" in again.stderr and "Traceback" not in again.stderr
    assert (tmp_path / "node.key").read_text() == before
    missing = mesh("node-key", "--show", "--path", tmp_path / "none.key", cwd=tmp_path,
                   check=False)
    assert missing.returncode == 2 and "no such key file" in missing.stderr
    assert missing.stdout == "" and not (tmp_path / "none.key").exists()
    nameless = mesh("node-key", "--path", tmp_path / "new.key", cwd=tmp_path, check=False)
    assert nameless.returncode == 2 and "NODE" in nameless.stderr
    assert not (tmp_path / "new.key").exists()


# -- the enrolment, as the operator runs it


MESH = """\
# the operator's mesh: these comments stay
mesh: {name}
catalogue: catalogue   # beside this file
nodes:
  n1: {{address: 10.9.0.1, control: true}}   # the control node
instances: {{}}
"""


@pytest.fixture(scope="module")
def shared_broker():
    why = available()
    if why:
        pytest.skip(f"private RabbitMQ: {why}")
    broker = SharedTlsBroker()
    try:
        yield broker
    finally:
        broker.remove()


@pytest.fixture
def control(tmp_path, shared_broker):
    name = f"fp{secrets.token_hex(4)}"
    directory = tmp_path / "mesh"
    (directory / "catalogue").mkdir(parents=True)
    (directory / "catalogue" / "provisions.yaml").write_text("{}\n")
    (directory / "mesh.yaml").write_text(MESH.format(name=name))
    mesh("ca", "init", ".", cwd=directory)
    # the broker's certificate from this mesh's CA, as an operator issues one for a broker the
    # mesh does not run; the verbs verify it (AMQP and the management API) against that CA
    out = tmp_path / "broker-tls"
    mesh("ca", "issue-server", ".", "broker", "--address", "127.0.0.1", "--out", out,
         cwd=directory)
    rabbit = shared_broker.serve((out / "broker.crt", out / "broker.key", out / "ca.crt"))
    fleet_broker = Broker.private(rabbit)
    assert fleet_broker.api.startswith("https://") and not fleet_broker.plain
    try:
        yield directory, fleet_broker.options(), name, fleet_broker
    finally:
        fleet_broker.remove_mesh(name)


def _node_account_exists(fleet_broker, name: str, node: str) -> bool:
    reply = requests.get(f"{fleet_broker.api}/api/users/mesh.{name}.node.{node}",
                         auth=(fleet_broker.admin, fleet_broker.password), timeout=10,
                         verify=fleet_broker.verify)
    return reply.status_code == 200


def test_admit_then_enrol_then_accept_only_the_key_the_node_printed(control, tmp_path):
    directory, broker, name, api_admin = control
    node_dir = tmp_path / "n2"
    token = mesh("enrol", "token", ".", "n2", *broker, cwd=directory).stdout.strip()

    # before n2 dials: its address into mesh.yaml, comments and layout kept, no key yet
    before = (directory / "mesh.yaml").read_text()
    admitted = mesh("enrol", "accept", ".", "n2", "--address", "10.9.0.2", *broker,
                    cwd=directory)
    assert "admitted at 10.9.0.2" in admitted.stdout and "floor" in admitted.stdout
    after = (directory / "mesh.yaml").read_text()
    assert after == before.replace(
        "   # the control node\n", "   # the control node\n  n2: {address: 10.9.0.2}\n")
    assert not _node_account_exists(api_admin, name, "n2")
    # admitting again changes nothing; admitting a node with no token is refused
    mesh("enrol", "accept", ".", "n2", "--address", "10.9.0.2", *broker, cwd=directory)
    assert (directory / "mesh.yaml").read_text() == after
    stray = mesh("enrol", "accept", ".", "n9", "--address", "10.9.0.9", *broker,
                 cwd=directory, check=False)
    assert stray.returncode == 2 and "no open enrolment token for n9" in stray.stderr
    assert (directory / "mesh.yaml").read_text() == after

    # on n2: the key is made and its public key and fingerprint are printed
    enrolled = mesh("agent", "enrol", token, "--config", node_dir / "agent.yaml", "--key",
                    node_dir / "node.key", "--address", "10.9.0.2", "--state-root",
                    node_dir / "state", "--no-firewall", "--no-wait", cwd=tmp_path)
    public = re.search(r"public key: (\S+)", enrolled.stderr).group(1)
    fingerprint = _independent(public)
    assert f"key fingerprint: {fingerprint}" in enrolled.stderr
    assert f"--fingerprint {fingerprint}" in enrolled.stderr
    assert mesh("node-key", "--show", "--path", node_dir / "node.key", cwd=tmp_path) \
        .stdout == f"public-key: {public}\nfingerprint: {fingerprint}\n"

    # on the control node: the list shows the same full fingerprint
    listed = mesh("enrol", "list", ".", *broker, cwd=directory).stdout
    assert f"key fingerprint {fingerprint}" in listed, listed
    rows = json.loads(mesh("enrol", "list", ".", "--json", "--offline", cwd=directory).stdout)
    assert [r["key_fingerprint"] for r in rows if r["node"] == "n2"] == [fingerprint]

    # a mistyped fingerprint is a usage error; another key's is refused; nothing changes
    typo = mesh("enrol", "accept", ".", "n2", "--fingerprint", "SHA256:abc", *broker,
                cwd=directory, check=False)
    assert typo.returncode == 2 and "not a key fingerprint" in typo.stderr
    wrong = _independent(base64.b64encode(bytes(32)).decode())
    refused = mesh("enrol", "accept", ".", "n2", "--fingerprint", wrong, *broker,
                   cwd=directory, check=False)
    assert refused.returncode == 1, refused.stderr
    assert fingerprint in refused.stderr and wrong in refused.stderr
    assert "Traceback" not in refused.stderr
    assert (directory / "mesh.yaml").read_text() == after
    assert not _node_account_exists(api_admin, name, "n2")
    rows = json.loads(mesh("enrol", "list", ".", "--json", "--offline", cwd=directory).stdout)
    assert [r["state"] for r in rows if r["node"] == "n2"] == ["requested"]

    # the right one: key written beside the address, comments kept, the account made
    accepted = mesh("enrol", "accept", ".", "n2", "--fingerprint", fingerprint, *broker,
                    cwd=directory)
    assert f"{fingerprint} is the one given" in accepted.stdout
    written = (directory / "mesh.yaml").read_text()
    for line in before.splitlines():
        assert line in written, f"lost: {line}"
    assert YAML(typ="safe").load(written)["nodes"]["n2"] == {"address": "10.9.0.2",
                                                             "public-key": public}
    assert _node_account_exists(api_admin, name, "n2")
    rows = json.loads(mesh("enrol", "list", ".", "--json", "--offline", cwd=directory).stdout)
    assert [r["state"] for r in rows if r["node"] == "n2"] == ["accepted"]


def test_accept_adds_a_node_not_in_mesh_yaml_at_the_address_given(control, tmp_path):
    directory, broker, name, api_admin = control
    node_dir = tmp_path / "n3"
    token = mesh("enrol", "token", ".", "n3", *broker, cwd=directory).stdout.strip()
    enrolled = mesh("agent", "enrol", token, "--config", node_dir / "agent.yaml", "--key",
                    node_dir / "node.key", "--address", "10.9.0.33", "--state-root",
                    node_dir / "state", "--no-firewall", "--no-wait", cwd=tmp_path)
    public = re.search(r"public key: (\S+)", enrolled.stderr).group(1)
    before = (directory / "mesh.yaml").read_text()
    mesh("enrol", "accept", ".", "n3", "--address", "10.9.0.3", "--fingerprint",
         _independent(public), *broker, cwd=directory)
    written = (directory / "mesh.yaml").read_text()
    for line in before.splitlines():
        assert line in written, f"lost: {line}"
    assert YAML(typ="safe").load(written)["nodes"]["n3"] == {"address": "10.9.0.3",
                                                             "public-key": public}
