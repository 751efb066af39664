"""Enrolment's rules without a broker: mesh.yaml written by a round trip that keeps what the
operator wrote, one request per token and none after expiry, and a node that believes only an
answer its pinned CA stands behind."""

from __future__ import annotations

import datetime
import hashlib
import json

import pytest
from pyrsistent import pmap
from ruamel.yaml import YAML

from _meshdir import FIXTURES, prepare
from executors.common import messages
from executors.common.amqp import FleetNames
from executors.common.keys import create_node_key
from executors.control.ca import init_ca
from executors.control.control_state import ControlState
from executors.control.delivery_key import ensure_delivery_key
from executors.control.enrolment import write_node_into_mesh
from executors.control.inbox import handle_enrolment
from executors.node.agent.config import AgentConfig, PendingEnrolment
from executors.node.agent.enrol import EnrolmentRefused, believe
from resolver import InputError, Mesh, Node


def test_accept_writes_the_key_keeping_comments_order_and_layout(tmp_path):
    mesh_dir, _, _ = prepare(FIXTURES / "homelab", tmp_path)
    before = (mesh_dir / "mesh.yaml").read_text()
    said = write_node_into_mesh(mesh_dir, "attic", "A" * 43 + "=", "10.44.0.30")
    said += write_node_into_mesh(mesh_dir, "lab", "B" * 43 + "=", "10.44.0.21")
    after = (mesh_dir / "mesh.yaml").read_text()
    for line in before.splitlines():
        if line.startswith("#") or line.strip().startswith("# ---"):
            assert line in after, f"comment lost: {line}"
    assert after.index("\n  home:") < after.index("\n  lab:") < after.index("\n  attic:") \
        < after.index("\ndefaults:")
    nodes = YAML(typ="safe").load(after)["nodes"]
    assert nodes["attic"] == {"address": "10.44.0.30", "public-key": "A" * 43 + "="}
    assert nodes["lab"]["public-key"] == "B" * 43 + "=" and nodes["lab"]["ssh-port"] == 2222
    assert any("10.44.0.20 → 10.44.0.21" in line for line in said)
    assert any("public key is replaced" in line for line in said), said


def test_a_flow_style_node_list_gets_a_flow_style_node_and_a_bad_result_is_not_written(tmp_path):
    text = ("mesh: m  # ours\ncatalogue: catalogue\nnodes:\n  a: {address: 10.0.0.1}\n"
            "instances: {}\n")
    (tmp_path / "mesh.yaml").write_text(text)
    write_node_into_mesh(tmp_path, "b", "C" * 43 + "=", "10.0.0.2")
    written = (tmp_path / "mesh.yaml").read_text()
    assert "mesh: m  # ours" in written and "  b: {address: 10.0.0.2, public-key:" in written
    with pytest.raises(InputError):
        write_node_into_mesh(tmp_path, "c", "C" * 43 + "=", "not an address")
    assert (tmp_path / "mesh.yaml").read_text() == written


def _token(state: ControlState, token_id: str, minutes: int = 10, status="issued") -> None:
    now = datetime.datetime.now(datetime.timezone.utc)
    state.write_token({"id": token_id, "node": "n1", "mesh": "m", "state": status,
                       "created": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
                       "expires": (now + datetime.timedelta(minutes=minutes))
                       .strftime("%Y-%m-%dT%H:%M:%SZ"),
                       "secret_sha256": hashlib.sha256(b"x").hexdigest()})


def _request(key: str, node="n1", token="t1", address="10.0.0.5") -> bytes:
    return messages.plain({"format": messages.ENROLMENT_REQUEST_FORMAT, "mesh": "m",
                           "node": node, "token": token, "public_key": key,
                           "address": address})


def test_one_request_per_token_none_after_expiry_none_for_another_node(tmp_path):
    state, names = ControlState(tmp_path), FleetNames("m")
    key = create_node_key(tmp_path / "n1.key")
    _token(state, "t1")
    _token(state, "t2", minutes=-1)
    _token(state, "t3")
    user = names.enrol_user
    first = handle_enrolment(tmp_path, state, names, user("t1"), _request(key))
    assert not first.refused and state.tokens()["t1"]["state"] == "requested"
    again = handle_enrolment(tmp_path, state, names, user("t1"), _request(key, address="6.6.6.6"))
    assert again.refused and "used already" in again.line
    assert state.tokens()["t1"]["request"]["address"] == "10.0.0.5"
    late = handle_enrolment(tmp_path, state, names, user("t2"), _request(key, token="t2"))
    assert late.refused and "expired" in late.line
    other = handle_enrolment(tmp_path, state, names, user("t3"),
                             _request(key, node="n9", token="t3"))
    assert other.refused and "n9" in other.line
    stranger = handle_enrolment(tmp_path, state, names, names.node_user("n1"),
                                _request(key, token="t3"))
    assert stranger.refused and "no enrolment account" in stranger.line
    bad_key = handle_enrolment(tmp_path, state, names, user("t3"),
                               _request("not-a-key", token="t3"))
    assert bad_key.refused and "public_key" in bad_key.line
    assert state.tokens()["t3"]["state"] == "issued"


@pytest.fixture(scope="module")
def cas(tmp_path_factory):
    found = {}
    for name in ("ours", "theirs"):
        directory = tmp_path_factory.mktemp(name)
        mesh = Mesh(mesh="m", nodes=pmap({"n1": Node(address="10.0.0.1")}))
        init_ca(directory, mesh)
        found[name] = ensure_delivery_key(directory, mesh)
    return found


def _config(tmp_path, fingerprint) -> AgentConfig:
    return AgentConfig(path=str(tmp_path / "agent.yaml"), mesh="m", node="n1",
                       key=str(tmp_path / "k"), ca_fingerprint=fingerprint,
                       broker_host="10.0.0.9", broker_port=5672, vhost="mesh.m",
                       enrolment=PendingEnrolment("t1", "mesh.m.enrol.t1", "sealed"))


def _answer(key, **fields) -> bytes:
    body = {"mesh": "m", "node": "n1", "token": "t1", "result": "accepted",
            "ca_certificate": key.ca_pem, **fields}
    return messages.sign(messages.ENROLMENT_ANSWER, body, key.key, key.certificate_pem)


def test_the_node_believes_only_an_answer_from_the_ca_the_token_pinned(cas, tmp_path):
    ours = messages.certificate_fingerprint(cas["ours"].ca_certificate)
    config = _config(tmp_path, ours)
    assert believe(_answer(cas["ours"]), config)["result"] == "accepted"
    with pytest.raises(EnrolmentRefused, match="not the CA the token pinned"):
        believe(_answer(cas["theirs"]), config)
    # their delivery key, our CA's certificate inside: the signature does not chain
    forged = json.loads(_answer(cas["theirs"]))
    body = json.loads(forged["body"])
    body["ca_certificate"] = cas["ours"].ca_pem
    forged["body"] = json.dumps(body)
    with pytest.raises((EnrolmentRefused, messages.MessageRefused)):
        believe(json.dumps(forged).encode(), config)
    with pytest.raises(EnrolmentRefused, match="another node or token"):
        believe(_answer(cas["ours"], token="t2"), config)
