"""The signed envelope a node trusts, the enrolment token, and what a declaration message
carries: pure, with real keys (the `cryptography` package's Ed25519, a real mesh CA)."""

from __future__ import annotations

import base64
import datetime
import json

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ed25519
from cryptography.x509.oid import NameOID
from hypothesis import given, settings
from hypothesis import strategies as st
from pyrsistent import pmap

from executors.common import enrol_token, messages
from executors.common.keys import create_node_key, load_private_key, seal, unseal
from executors.control.ca import init_ca
from executors.control.delivery_key import ensure_delivery_key
from executors.control.publish import declaration_body, sealed_extract
from resolver import Credential, Declaration, Generation, Ledger, Mesh, Node

jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is not installed")

NOW = datetime.datetime(2026, 6, 1, tzinfo=datetime.timezone.utc)


def mesh(name="m"):
    return Mesh(mesh=name, nodes=pmap({"n1": Node(address="10.0.0.1")}))


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    """Two meshes' CAs and delivery keys: `m` (the node's) and `other`."""
    found = {}
    for name in ("m", "other"):
        directory = tmp_path_factory.mktemp(name)
        init_ca(directory, mesh(name), now=NOW - datetime.timedelta(days=1))
        found[name] = ensure_delivery_key(directory, mesh(name),
                                          now=NOW - datetime.timedelta(days=1))
    return found


def signed(key, body=None, kind=messages.DECLARATION):
    return messages.sign(kind, body if body is not None else {"node": "n1", "serial": 3},
                         key.key, key.certificate_pem)


def open_(data, keys, kind=messages.DECLARATION, mesh_name="m"):
    return messages.open_signed(data, kind=kind, ca=keys["m"].ca_certificate, mesh=mesh_name,
                                now=NOW)


def test_a_message_signed_by_the_mesh_delivery_key_opens_to_its_body(keys):
    assert open_(signed(keys["m"]), keys) == {"node": "n1", "serial": 3}


def test_a_message_signed_by_another_mesh_is_refused_naming_the_pinned_ca(keys):
    with pytest.raises(messages.MessageRefused) as refused:
        open_(signed(keys["other"]), keys)
    assert "did not certify" in refused.value.reason
    assert messages.certificate_fingerprint(keys["m"].ca_certificate) in refused.value.reason


def test_a_signer_certificate_swapped_in_from_our_ca_does_not_sign_another_key(keys):
    envelope = json.loads(signed(keys["other"]))
    envelope["signer"] = keys["m"].certificate_pem  # our certificate, another key's signature
    with pytest.raises(messages.MessageRefused, match="bad signature"):
        open_(json.dumps(envelope).encode(), keys)


def test_a_changed_body_is_a_bad_signature(keys):
    envelope = json.loads(signed(keys["m"]))
    envelope["body"] = envelope["body"].replace("3", "4")
    with pytest.raises(messages.MessageRefused, match="bad signature"):
        open_(json.dumps(envelope).encode(), keys)


def test_truncated_and_not_json_are_refused_before_anything_else(keys):
    data = signed(keys["m"])
    for broken in (data[: len(data) // 2], b"hello", b"\xff\xfe", b"[1, 2]", b"{}"):
        with pytest.raises(messages.MessageRefused) as refused:
            open_(broken, keys)
        assert refused.value.reason.startswith(("not JSON", "not a mesh message"))


def test_json_with_a_number_past_the_digit_limit_is_a_refusal_not_a_crash(keys):
    """json.loads raises a plain ValueError (no position) for a number longer than the
    interpreter converts: refused like any other message that is not JSON."""
    with pytest.raises(messages.MessageRefused) as refused:
        open_(b'{"format": ' + b"1" * 5000 + b"}", keys)
    assert refused.value.reason.startswith("not JSON")


def test_a_signature_for_one_kind_is_not_valid_for_another(keys):
    envelope = json.loads(signed(keys["m"], kind=messages.ENROLMENT_ANSWER))
    envelope["kind"] = messages.DECLARATION
    with pytest.raises(messages.MessageRefused, match="bad signature"):
        open_(json.dumps(envelope).encode(), keys)


def test_the_ca_key_itself_or_an_expired_or_foreign_named_certificate_is_no_signer(keys):
    ca = keys["m"].ca_certificate
    ca_pem = keys["m"].ca_pem
    with pytest.raises(messages.MessageRefused, match="not a delivery certificate|did not"):
        messages.check_signer(ca, ca, "m", NOW)  # a CA is not a delivery certificate
    certificate = x509.load_pem_x509_certificate(keys["m"].certificate_pem.encode())
    with pytest.raises(messages.MessageRefused, match="not valid now"):
        messages.check_signer(certificate, ca, "m", NOW + datetime.timedelta(days=4000))
    with pytest.raises(messages.MessageRefused, match="names"):
        messages.check_signer(certificate, ca, "another-mesh", NOW)
    assert ca_pem.startswith("-----BEGIN CERTIFICATE")


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_any_single_byte_changed_in_a_signed_message_is_refused(keys, data):
    original = signed(keys["m"], {"node": "n1", "serial": 7, "x": "abc"})
    index = data.draw(st.integers(0, len(original) - 1))
    value = data.draw(st.integers(0, 255).filter(lambda b: b != original[index]))
    changed = original[:index] + bytes([value]) + original[index + 1:]
    try:
        body = open_(changed, keys)
    except messages.MessageRefused:
        return
    # only a change JSON does not see (whitespace in the envelope, an escape of the same
    # character) may open, and then to exactly the signed body
    assert body == {"node": "n1", "serial": 7, "x": "abc"}


def test_the_envelope_matches_its_schema(keys):
    from executors.common.message_schemas import ENVELOPE

    jsonschema.Draft202012Validator(ENVELOPE).validate(json.loads(signed(keys["m"])))


# --------------------------------------------------------------------------- the token


def test_a_token_round_trips_and_a_damaged_one_is_one_clear_error(keys):
    ca = keys["m"].ca_certificate
    token = enrol_token.EnrolToken(mesh="m", node="n1", broker="10.0.0.9:5671", vhost="mesh.m",
                                   token_id="ab12cd34", secret="s3cr3t",
                                   ca_fingerprint=messages.certificate_fingerprint(ca),
                                   expires="2026-06-01T00:00:00Z", ca_certificate=keys["m"].ca_pem)
    text = enrol_token.encode(token)
    assert enrol_token.decode(text) == token and enrol_token.decode(f"  {text}\n") == token
    assert token.tls and token.transport == "amqps"
    assert "s3cr3t" not in repr(token)
    assert len(text) < 1000  # one line to paste: the Ed25519 CA certificate is small
    for damaged in (text[:-5], "hello", text.replace("mesh-enrol:", "mesh-enrol:x"),
                    enrol_token.PREFIX + base64.urlsafe_b64encode(b'{"m": 1}').decode()):
        with pytest.raises(enrol_token.TokenError):
            enrol_token.decode(damaged)


def test_a_token_whose_ca_certificate_is_not_the_pinned_ca_is_refused(keys):
    """The node verifies the broker against the certificate the token carries: it must be the
    CA the token pins, or the token is refused before anything is written or sent."""
    import attrs

    token = enrol_token.EnrolToken(
        mesh="m", node="n1", broker="10.0.0.9:5671", vhost="mesh.m", token_id="ab12cd34",
        secret="s3cr3t", ca_fingerprint=messages.certificate_fingerprint(
            keys["m"].ca_certificate), expires="2026-06-01T00:00:00Z",
        ca_certificate=keys["other"].ca_pem)
    with pytest.raises(enrol_token.TokenError, match="does not have the fingerprint it pins"):
        enrol_token.decode(enrol_token.encode(token))
    plain = attrs.evolve(token, ca_certificate=keys["m"].ca_pem, transport="amqp")
    assert not enrol_token.decode(enrol_token.encode(plain)).tls
    with pytest.raises(enrol_token.TokenError, match="transport"):
        enrol_token.decode(enrol_token.encode(attrs.evolve(plain, transport="http")))


# --------------------------------------------------------------------------- what travels


def test_a_declaration_message_carries_only_its_nodes_boxes_never_the_escrow(tmp_path):
    keys_ = {n: create_node_key(tmp_path / f"{n}.key") for n in ("n1", "n2", "ctl")}

    def generation(number, holders):
        return Generation(generation=number, sealed=pmap({h: seal(keys_[h], f"v{number}{h}")
                                                          for h in holders}),
                          escrow=pmap({"ctl": seal(keys_["ctl"], f"v{number}")}))

    ledger = Ledger(credentials=pmap({
        "db/p/a": Credential(active=generation(2, ["n1", "n2"]),
                             retiring=generation(1, ["n1", "n2"])),
        "db/p/b": Credential(active=generation(1, ["n2"])),
        "secret/x/y": Credential(active=generation(1, ["n1"]), pending=generation(2, ["n1"])),
    }))
    extract = sealed_extract(ledger, "n1")
    assert set(extract.credentials) == {"db/p/a", "secret/x/y"}
    for credential in extract.credentials.values():
        for g in (credential.active, credential.retiring, credential.pending):
            if g is not None:
                assert set(g.sealed) == {"n1"} and not g.escrow
    key = load_private_key(tmp_path / "n1.key")
    assert unseal(key, extract.credentials["db/p/a"].retiring.sealed["n1"]) == "v1n1"
    decl = Declaration(mesh="m", node="n1", address="10.0.0.1", serial=4, digest="sha256:" + "a" * 64)
    body = declaration_body(decl, ledger, "2026-06-01T00:00:00Z")
    text = json.dumps(body)
    for credential in ledger.credentials.values():
        for g in (credential.active, credential.retiring, credential.pending):
            if g is None:
                continue
            assert all(box not in text for box in g.escrow.values())
            assert all(box not in text for node, box in g.sealed.items() if node != "n1")
    from executors.common.message_schemas import DECLARATION_BODY

    jsonschema.Draft202012Validator(DECLARATION_BODY).validate(body)


def test_ed25519_key_type_is_checked_for_fingerprints():
    key = ed25519.Ed25519PrivateKey.generate()
    assert messages.fingerprint(key.public_key()).startswith("sha256:")
    assert len(messages.fingerprint(key.public_key())) == len("sha256:") + 64
    assert NameOID.COMMON_NAME  # the module's names are x509's
