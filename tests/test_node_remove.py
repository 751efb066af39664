"""`mesh node remove DIR NAME` without a broker: refused while instances are assigned (each
named with its mesh.yaml line), mesh.yaml changed only in the node's entry, and the resolver
dropping what it derived for the node (its declaration, its registry pull account, the
firewall openings made for it on other nodes); the revocation list honoured by the inbox and
by the signature check every agent makes."""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography import x509
from ruamel.yaml import YAML

from _meshdir import FIXTURES, prepare
from executors.common import messages
from executors.common.amqp import FleetNames
from executors.common.keys import create_node_key
from executors.control.ca import init_ca
from executors.control.control_state import ControlState
from executors.control.delivery_key import ensure_delivery_key
from executors.common.message_schemas import DECLARATION_BODY
from executors.common.revocation import Revocation, RevocationError
from executors.control import revocations
from executors.control.inbox import handle_enrolment, handle_report
from executors.control.node_removal import without_node
from executors.control.publish import declaration_body
from resolver import Declaration, Ledger
from resolver.documents import load_mesh

REPO = Path(__file__).resolve().parent.parent
SPARE = """\
  # the spare machine in the rack's third slot
  spare:
    address: 10.44.0.30   # its address on the mesh
    # ssh on the usual port
    ssh-port: 22
  # the end of the nodes
"""


def mesh(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "executors.cli", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd or REPO, timeout=120)


@pytest.fixture
def homelab(tmp_path):
    """homelab with a third node `spare` that runs nothing, its key in mesh.yaml."""
    mesh_dir, _, _ = prepare(FIXTURES / "homelab", tmp_path)
    key = create_node_key(tmp_path / "keys" / "spare.key")
    path = mesh_dir / "mesh.yaml"
    text = path.read_text()
    anchor = "\n\ndefaults:"  # after the last node
    assert text.count(anchor) == 1
    spare = SPARE.replace("    ssh-port: 22\n", f'    ssh-port: 22\n    public-key: "{key}"\n')
    path.write_text(text.replace(anchor, "\n" + spare.rstrip("\n") + anchor))
    return mesh_dir, key


def test_refused_while_instances_are_assigned_naming_them_and_nothing_changes(homelab):
    mesh_dir, _ = homelab
    before = (mesh_dir / "mesh.yaml").read_text()
    result = mesh("node", "remove", mesh_dir, "lab")
    assert result.returncode == 1, result.stderr
    lines = before.splitlines()
    for instance in ("postgres@lab", "minio@lab", "registry@lab", "audiobookshelf@lab"):
        line = next(i for i, text in enumerate(lines, 1) if text == f"  {instance}:")
        assert f"mesh.yaml:{line}: {instance}" in result.stderr, result.stderr
    assert "postgres@home" not in result.stderr
    assert (mesh_dir / "mesh.yaml").read_text() == before
    assert not (mesh_dir / ".control" / "revoked.json").exists()


def test_the_control_node_and_an_unknown_node_are_refused(homelab):
    mesh_dir, _ = homelab
    instances = YAML(typ="safe").load((mesh_dir / "mesh.yaml").read_text())["instances"]
    assert all(i["node"] != "spare" for i in instances.values())
    control = mesh("node", "remove", mesh_dir, "home")
    assert control.returncode == 2 and "home is the control node" in control.stderr
    unknown = mesh("node", "remove", mesh_dir, "attic")
    assert unknown.returncode == 2 and "no node attic" in unknown.stderr
    assert "Traceback" not in unknown.stderr


def test_removal_changes_only_the_nodes_entry_and_says_what_stays_on_the_machine(homelab):
    mesh_dir, key = homelab
    path = mesh_dir / "mesh.yaml"
    before = path.read_text()
    result = mesh("node", "remove", mesh_dir, "spare")
    assert result.returncode == 0, result.stderr
    entry = SPARE.splitlines()[1:5] + [f'    public-key: "{key}"']
    expected = [line for line in before.splitlines() if line not in entry]
    assert path.read_text().splitlines() == expected
    assert "# the spare machine in the rack's third slot" in path.read_text()
    assert "# the end of the nodes" in path.read_text()
    for said in ("removed node spare (10.44.0.30)", "revoked spare's key",
                 "left on spare's machine", "/var/lib/mesh", "node.key"):
        assert said in result.stdout, result.stdout
    kept = revocations.load(ControlState(mesh_dir))
    assert [(r.node, r.public_key) for r in kept] == [("spare", key)]
    again = mesh("node", "remove", mesh_dir, "spare")  # gone: said, nothing else changes
    assert again.returncode == 0 and "already gone" in again.stdout
    assert path.read_text().splitlines() == expected


def test_a_node_on_a_shared_flow_style_line_is_cut_by_the_round_trip():
    text = ("mesh: m  # ours\ncatalogue: catalogue\n"
            "nodes: {a: {address: 10.0.0.1, control: true}, b: {address: 10.0.0.2}}\n"
            "# instances follow\ninstances: {}\n")
    cut = without_node(text, "b", "mesh.yaml")
    assert cut == ("mesh: m  # ours\ncatalogue: catalogue\n"
                   "nodes: {a: {address: 10.0.0.1, control: true}}\n"
                   "# instances follow\ninstances: {}\n")
    last = ("mesh: m\nnodes:\n  a:\n    address: 10.0.0.1\n  b:\n    address: 10.0.0.2\n"
            "  # after b\n# instances\ninstances: {}\n")
    assert without_node(last, "b", "mesh.yaml") == (
        "mesh: m\nnodes:\n  a:\n    address: 10.0.0.1\n  # after b\n# instances\n"
        "instances: {}\n")


def _declarations(mesh_dir: Path, out: Path) -> dict[str, str]:
    result = mesh("plan", mesh_dir, "--out", out)
    assert result.returncode in (0, 1), result.stderr
    return {p.name.split(".")[0]: p.read_text() for p in out.glob("*.declaration.json")}


def test_the_resolver_drops_its_declaration_pull_account_and_firewall_openings(homelab, tmp_path):
    mesh_dir, _ = homelab
    before = _declarations(mesh_dir, tmp_path / "before")
    assert "spare" in before
    lab = json.loads(before["lab"])  # the registry's node: a pull account per mesh node
    assert any("spare" in json.dumps(g) for g in lab["grants"]), "no pull account for spare"
    assert any("10.44.0.30" in json.dumps(json.loads(before[n])["firewall"])
               for n in ("home", "lab")), "no firewall opening for spare"
    assert mesh("node", "remove", mesh_dir, "spare").returncode == 0
    after = _declarations(mesh_dir, tmp_path / "after")
    assert sorted(after) == ["home", "lab"]
    for node, text in after.items():
        assert "spare" not in text and "10.44.0.30" not in text, node


# --------------------------------------------------------------------------- revocation


def test_a_declaration_signed_by_a_revoked_certificate_is_refused_by_the_agents_check(tmp_path):
    mesh_model, _ = load_mesh("mesh: m\ncatalogue: c\nnodes: {a: {address: 10.0.0.1, "
                              "control: true}}\ninstances: {}\n", "mesh.yaml")
    init_ca(tmp_path, mesh_model)
    key = ensure_delivery_key(tmp_path, mesh_model)
    data = messages.sign(messages.DECLARATION, {"mesh": "m"}, key.key, key.certificate_pem)
    assert messages.open_signed(data, kind=messages.DECLARATION, ca=key.ca_certificate,
                                mesh="m")["mesh"] == "m"
    serial = format(x509.load_pem_x509_certificate(key.certificate_pem.encode())
                    .serial_number, "x")
    with pytest.raises(messages.MessageRefused, match=f"serial {serial}.*revocation list"):
        messages.open_signed(data, kind=messages.DECLARATION, ca=key.ca_certificate, mesh="m",
                             revoked=frozenset({serial, "abc"}))
    assert messages.open_signed(data, kind=messages.DECLARATION, ca=key.ca_certificate,
                                mesh="m", revoked=frozenset({"abc"}))  # another serial


def test_a_removed_nodes_report_and_its_key_enrolling_again_are_refused(homelab):
    mesh_dir, key = homelab
    state = ControlState(mesh_dir)
    names = FleetNames("homelab")
    state.write_account("spare", {"user": names.node_user("spare"), "public_key": key})
    report = messages.plain({"format": messages.REPORT_FORMAT, "mesh": "homelab",
                             "node": "spare", "at": "2026-01-01T00:00:00Z",
                             "trigger": "message", "result": "failed", "reason": "a test"})
    assert not handle_report(mesh_dir, state, names, names.node_user("spare"), report).refused
    assert mesh("node", "remove", mesh_dir, "spare").returncode == 0
    assert "spare" not in state.accounts()
    outcome = handle_report(mesh_dir, state, names, names.node_user("spare"), report)
    assert outcome.refused and "removed from the mesh" in outcome.line, outcome.line
    expires = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(minutes=10)
               ).strftime("%Y-%m-%dT%H:%M:%SZ")
    state.write_token({"id": "t1", "node": "spare", "mesh": "homelab", "state": "issued",
                       "expires": expires, "secret_sha256": "0" * 64})
    request = messages.plain({"format": messages.ENROLMENT_REQUEST_FORMAT, "mesh": "homelab",
                              "node": "spare", "token": "t1", "public_key": key,
                              "address": "10.44.0.31", "hostname": "spare"})
    refused = handle_enrolment(mesh_dir, state, names, names.enrol_user("t1"), request)
    assert refused.refused and "revoked" in refused.line and "spare" in refused.line
    assert state.tokens()["t1"]["state"] == "issued"
    fresh = create_node_key(mesh_dir.parent / "keys" / "spare-new.key")
    accepted = handle_enrolment(mesh_dir, state, names, names.enrol_user("t1"),
                                request.replace(key.encode(), fresh.encode()))
    assert not accepted.refused, accepted.line  # a new key may come back


def test_an_unreadable_revocation_list_is_said_with_its_path(tmp_path):
    state = ControlState(tmp_path)
    state.ensure()
    revocations.path(state).write_text("{\"format\": \"mesh-revoked/1\", \"revoked\": 3}")
    with pytest.raises(RevocationError, match="revoked.json: `revoked` is not a list"):
        revocations.load(state)


def test_the_key_is_only_revoked_public_data(homelab):
    mesh_dir, _ = homelab
    assert mesh("node", "remove", mesh_dir, "spare").returncode == 0
    document = json.loads((mesh_dir / ".control" / "revoked.json").read_text())
    assert set(document["revoked"][0]) <= {"at", "reason", "serials", "node", "public_key"}
    assert oct((mesh_dir / ".control" / "revoked.json").stat().st_mode & 0o777) == "0o644"


def test_a_declaration_body_carrying_the_list_matches_its_schema():
    jsonschema = pytest.importorskip("jsonschema")

    declaration = Declaration(mesh="m", node="a", address="10.0.0.1", serial=3,
                              digest="sha256:" + "0" * 64)
    entry = Revocation(at="2026-01-01T00:00:00Z", reason="node b removed", serials=("1f",),
                       node="b", public_key="A" * 43 + "=")
    body = json.loads(json.dumps(declaration_body(declaration, Ledger(),
                                                  "2026-01-01T00:00:00Z", revoked=[entry])))
    jsonschema.Draft202012Validator(DECLARATION_BODY).validate(body)
    assert body["revoked"] == [entry.as_json()]
    assert "revoked" not in declaration_body(declaration, Ledger(), "2026-01-01T00:00:00Z")
