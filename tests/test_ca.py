"""The mesh CA: node certificates verified with `cryptography`, issued once and kept, renewed only
inside the window or by `mesh renew`."""

from __future__ import annotations

import base64
import datetime
import ipaddress
import os
import stat

import attrs
import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ed25519, x25519
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from cryptography.x509.oid import NameOID
from pyrsistent import pmap

import resolver
from resolver import documents
from executors.control.ca import CaError, init_ca, load_ca, sign_node, verify_node_certificate
from executors.control.issuer import issue, renew
from executors.common.keys import create_node_key
from executors.control.loading import load_mesh_dir
from resolver import EMPTY_LEDGER, CaConfig, Mesh, Node
from resolver.certificates import certificate_requests, epoch_seconds

from _meshdir import FIXTURES, prepare, run_cli

T0 = datetime.datetime(2026, 3, 1, 12, 0, 0, tzinfo=datetime.timezone.utc)


@pytest.fixture
def mesh(tmp_path) -> Mesh:
    nodes = {name: Node(address=address, public_key=create_node_key(tmp_path / f"{name}.key"))
             for name, address in (("anchor", "10.0.0.1"), ("lab", "10.0.0.2"))}
    return Mesh(mesh="test", nodes=pmap(nodes), ca=CaConfig(validity_days=90,
                                                             renew_before_days=20))


def test_ca_init_creates_a_0600_ed25519_key_and_refuses_to_overwrite(tmp_path, mesh):
    ca = init_ca(tmp_path, mesh)
    key_path = tmp_path / "ca" / "mesh-ca.key"
    assert stat.S_IMODE(os.stat(key_path).st_mode) == 0o600
    assert isinstance(load_ca(tmp_path, mesh).key, ed25519.Ed25519PrivateKey)
    assert ca.certificate.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    before = key_path.read_bytes()
    with pytest.raises(CaError, match="exists already"):
        init_ca(tmp_path, mesh)
    assert key_path.read_bytes() == before


def test_node_certificate_verifies_against_the_ca_and_names_the_node(tmp_path, mesh):
    ca = init_ca(tmp_path, mesh)
    record = sign_node(ca, mesh, "lab", now=T0)
    certificate = verify_node_certificate(ca.certificate, record.pem)
    ca.certificate.public_key().verify(certificate.signature, certificate.tbs_certificate_bytes)
    assert certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "lab"
    san = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("10.0.0.2")]
    assert isinstance(certificate.public_key(), x25519.X25519PublicKey)
    raw = certificate.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    assert base64.b64encode(raw).decode() == mesh.nodes["lab"].public_key
    assert certificate.not_valid_after_utc - certificate.not_valid_before_utc \
        == datetime.timedelta(days=90)
    assert record.not_after == "2026-05-30T12:00:00Z" and record.address == "10.0.0.2"
    assert int(record.serial, 16) == certificate.serial_number


def test_a_certificate_from_another_ca_is_refused(tmp_path, mesh):
    ours = init_ca(tmp_path / "ours", mesh)
    theirs = init_ca(tmp_path / "theirs", mesh)
    forged = sign_node(theirs, mesh, "anchor", now=T0)
    with pytest.raises(CaError, match="not signed by this mesh CA"):
        verify_node_certificate(ours.certificate, forged.pem)


def test_a_node_without_a_public_key_is_named(tmp_path, mesh):
    ca = init_ca(tmp_path, mesh)
    bare = Mesh(mesh="test", nodes=pmap({"edge": Node(address="10.0.0.9")}))
    with pytest.raises(CaError, match="node edge has no public-key.*mesh node-key edge"):
        sign_node(ca, bare, "edge")


def test_issued_once_and_kept_renewed_only_inside_the_window(tmp_path, mesh):
    ca = init_ca(tmp_path, mesh)
    requests = certificate_requests(mesh, EMPTY_LEDGER)
    assert [r.id for r in requests] == ["anchor", "lab"]
    ledger = issue(requests, mesh, EMPTY_LEDGER, ca=ca)
    assert certificate_requests(mesh, ledger) == []
    assert issue(certificate_requests(mesh, ledger), mesh, ledger, ca=ca) == ledger
    not_after = epoch_seconds(ledger.certificates["lab"].not_after)

    def at(seconds):
        return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc) \
            .strftime("%Y-%m-%dT%H:%M:%SZ")

    window_opens = not_after - 20 * 86400
    assert certificate_requests(mesh, ledger, at(window_opens - 1)) == []
    due = certificate_requests(mesh, ledger, at(window_opens))
    assert [r.id for r in due] == ["anchor", "lab"] or [r.id for r in due] == ["lab"]
    assert "renewal" in due[-1].reason and ledger.certificates["lab"].not_after in due[-1].reason
    renewed = renew(ledger, mesh, ca, "lab")
    assert renewed.certificates["lab"] != ledger.certificates["lab"]
    assert renewed.certificates["anchor"] == ledger.certificates["anchor"]


def test_a_changed_address_or_key_asks_for_a_new_certificate(tmp_path, mesh):
    ca = init_ca(tmp_path, mesh)
    ledger = issue(certificate_requests(mesh, EMPTY_LEDGER), mesh, EMPTY_LEDGER, ca=ca)
    moved = attrs.evolve(mesh, nodes=mesh.nodes.set(
        "lab", attrs.evolve(mesh.nodes["lab"], address="10.0.0.7")))
    [request] = certificate_requests(moved, ledger)
    assert request.id == "lab" and "10.0.0.2 to 10.0.0.7" in request.reason
    rekeyed = attrs.evolve(mesh, nodes=mesh.nodes.set(
        "anchor", attrs.evolve(mesh.nodes["anchor"], public_key=create_node_key(tmp_path / "n"))))
    [request] = certificate_requests(rekeyed, ledger)
    assert request.id == "anchor" and "public key changed" in request.reason


def test_resolving_many_times_never_re_signs_declarations_byte_identical(tmp_path):
    """Through the CLI on a real fixture: issue once, then resolve 100 times."""
    mesh_dir, _, _ = prepare(FIXTURES / "homelab", tmp_path)
    assert run_cli("ca", "init", mesh_dir)[0] == 0
    assert run_cli("plan", "--issue", mesh_dir)[0] == 0
    inputs = load_mesh_dir(mesh_dir)
    first = resolver.resolve(inputs.catalogue, inputs.mesh, inputs.ledger, sources=inputs.sources)
    assert first.requests == resolver.resolve(inputs.catalogue, inputs.mesh, inputs.ledger).requests
    assert not [r for r in first.requests if r.kind == "certificate"]
    ca = load_ca(mesh_dir, inputs.mesh)
    for node, declaration in first.declarations.items():
        assert declaration.certificate == inputs.ledger.certificates[node].pem
        verify_node_certificate(ca.certificate, declaration.certificate)
    expected = {n: documents.unstructure(d) for n, d in first.declarations.items()}
    for _ in range(100):
        again = resolver.resolve(inputs.catalogue, inputs.mesh, inputs.ledger,
                                 sources=inputs.sources, now="2026-03-01T00:00:00Z")
        assert {n: documents.unstructure(d) for n, d in again.declarations.items()} == expected
        assert again.ledger.certificates == inputs.ledger.certificates
    assert run_cli("plan", "--issue", mesh_dir)[0] == 0  # nothing to issue: nothing re-signed
    assert load_mesh_dir(mesh_dir).ledger.certificates == inputs.ledger.certificates


def test_plan_issue_twice_writes_the_same_ledger(tmp_path):
    mesh_dir, _, _ = prepare(FIXTURES / "homelab", tmp_path)
    run_cli("ca", "init", mesh_dir)
    assert run_cli("plan", "--issue", mesh_dir)[0] == 0
    before = (mesh_dir / "ledger.yaml").read_bytes()
    assert run_cli("plan", "--issue", mesh_dir)[0] == 0
    assert (mesh_dir / "ledger.yaml").read_bytes() == before


def test_mesh_renew_signs_anew_and_the_plan_names_it(tmp_path):
    mesh_dir, _, _ = prepare(FIXTURES / "homelab", tmp_path)
    run_cli("ca", "init", mesh_dir)
    run_cli("plan", "--issue", mesh_dir)
    before = load_mesh_dir(mesh_dir).ledger.certificates
    code, output = run_cli("renew", mesh_dir, "lab")
    assert code == 0, output
    after = load_mesh_dir(mesh_dir).ledger.certificates
    assert after["lab"].serial != before["lab"].serial and after["home"] == before["home"]
    assert "renew lab" in output and "declaration of lab changes" in output
    code, output = run_cli("plan", mesh_dir, "--now", "2099-01-01T00:00:00Z")
    assert "certificate home" in output and "renewal" in output
