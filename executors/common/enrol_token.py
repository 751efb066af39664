"""The one-time enrolment token: made on the control node (`mesh enrol token DIR NODE`), typed
(pasted) on the new node (`mesh agent enrol TOKEN`).

Invariants:
- One string, `mesh-enrol:` + base64url of a JSON object: the mesh, the node it enrols, the
  broker address as nodes reach it and the mesh's vhost, the token's id, its secret (the
  password of a broker account that may only send one enrolment request and read its answer),
  the SHA-256 fingerprint of the mesh CA's key (what the node pins: it accepts the answer, and
  every declaration after it, only when signed by a key that CA certified), the CA's
  certificate itself (DER, base64: the node verifies the broker's TLS certificate against it
  before the secret leaves; a token whose certificate does not have the pinned fingerprint
  is refused as damaged), whether the broker is reached with TLS (`amqps`, the default) or,
  only when the control node was told so, plain AMQP, and its expiry.
- The secret is never printed by anything but `mesh enrol token`, which exists to print it;
  the control node keeps only its SHA-256; the node keeps it only sealed to its own key.
- A malformed token is one clear MeshError, never a traceback.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re

import attrs
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from resolver import MeshError

PREFIX = "mesh-enrol:"
FINGERPRINT = re.compile(r"^sha256:[0-9a-f]{64}$")


class TokenError(MeshError):
    """Not an enrolment token this version understands."""


@attrs.frozen
class EnrolToken:
    mesh: str
    node: str
    broker: str  # host:port as nodes reach it
    vhost: str
    token_id: str
    secret: str = attrs.field(repr=False)
    ca_fingerprint: str = ""
    expires: str = ""  # ISO 8601, UTC
    ca_certificate: str = ""  # PEM: what the broker's TLS certificate must chain to
    transport: str = "amqps"  # or "amqp": plain, only when the control node was told so

    @property
    def tls(self) -> bool:
        return self.transport == "amqps"


_FIELDS = {"m": "mesh", "n": "node", "b": "broker", "v": "vhost", "i": "token_id", "s": "secret",
           "k": "ca_fingerprint", "e": "expires", "c": "ca_certificate", "t": "transport"}
TRANSPORTS = ("amqps", "amqp")


def encode(token: EnrolToken) -> str:
    document = {short: getattr(token, name) for short, name in _FIELDS.items()}
    document["c"] = _pem_to_b64(token.ca_certificate)
    raw = json.dumps(document, sort_keys=True, separators=(",", ":")).encode("utf-8")
    return PREFIX + base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode(text: str) -> EnrolToken:
    text = text.strip()
    if not text.startswith(PREFIX):
        raise TokenError(f"not an enrolment token (it starts with {PREFIX!r}; `mesh enrol "
                         f"token DIR NODE` on the control node prints one)")
    body = text[len(PREFIX):]
    try:
        raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        document = json.loads(raw.decode("utf-8"))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise TokenError("the enrolment token is damaged (copy it whole, on one line)") from None
    if not isinstance(document, dict) or set(document) != set(_FIELDS) or \
            not all(isinstance(v, str) and v for v in document.values()):
        raise TokenError("the enrolment token is damaged or from another version")
    values = {name: document[short] for short, name in _FIELDS.items()}
    values["ca_certificate"] = _b64_to_pem(document["c"])
    token = EnrolToken(**values)
    if not FINGERPRINT.match(token.ca_fingerprint):
        raise TokenError("the enrolment token's CA fingerprint is not sha256:<64 hex digits>")
    if token.transport not in TRANSPORTS:
        raise TokenError(f"the enrolment token's transport is {token.transport!r}, not one "
                         f"of {', '.join(TRANSPORTS)}")
    if ca_key_fingerprint(token.ca_certificate) != token.ca_fingerprint:
        raise TokenError("the enrolment token's CA certificate does not have the fingerprint it "
                         "pins: the token is damaged or forged")
    return token


def ca_key_fingerprint(pem: str) -> str:
    """`sha256:<hex>` of the raw Ed25519 public key of the CA certificate `pem` (the form
    tokens and agent configurations pin; common/messages.certificate_fingerprint)."""
    try:
        certificate = x509.load_pem_x509_certificate(pem.encode("ascii"))
    except (ValueError, UnicodeEncodeError):
        raise TokenError("the enrolment token's CA certificate cannot be read") from None
    key = certificate.public_key()
    if not isinstance(key, ed25519.Ed25519PublicKey):
        raise TokenError("the enrolment token's CA certificate has no Ed25519 key")
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def _pem_to_b64(pem: str) -> str:
    try:
        der = x509.load_pem_x509_certificate(pem.encode("ascii")).public_bytes(
            serialization.Encoding.DER)
    except (ValueError, UnicodeEncodeError):
        raise TokenError("the mesh CA certificate given to the token cannot be read") from None
    return base64.b64encode(der).decode("ascii")


def _b64_to_pem(text: str) -> str:
    try:
        der = base64.b64decode(text, validate=True)
        certificate = x509.load_der_x509_certificate(der)
    except (binascii.Error, ValueError):
        raise TokenError("the enrolment token's CA certificate is damaged (copy the token "
                         "whole)") from None
    return certificate.public_bytes(serialization.Encoding.PEM).decode("ascii")
