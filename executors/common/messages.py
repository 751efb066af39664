"""Signed messages between the control plane and the nodes (the envelope, not the transport).

Invariants:
- What the control plane hands a node (a declaration, an enrolment answer) travels as an
  envelope `{format, kind, signer, body, signature}`: `body` is the JSON text of the message
  (canonical: sorted keys, no spaces), `signer` the PEM certificate of the Ed25519 delivery
  key that signed it, `signature` the Ed25519 signature of `mesh-message/1 NUL kind NUL body`
  (so a signature made for one kind is never valid for another).
- A node trusts only its pinned mesh CA: the signer's certificate must be issued by that CA
  (checked with the CA's key), be no CA itself, allow digital signatures, be valid now (five
  minutes of clock skew tolerated) and name the mesh (`CN=<mesh> delivery`). Only then is the
  signature checked, and only then is the body parsed.
- A signer whose certificate's serial is on the revocation list the caller passes is
  refused, checked on every message (common/revocation.py).
- Every refusal is a MessageRefused naming its reason in one line (not JSON, not a mesh
  message, another kind, signer not certified by the pinned CA, bad signature…); nothing of a
  refused message is used.
- What a node says back (reports, enrolment requests) is not signed: the broker authenticates
  its account and validates the `user_id` it publishes with, so a node speaks only in its own
  name. Those bodies are plain JSON documents with a `format` field.
- The CA is pinned by the SHA-256 of its raw Ed25519 public key (`sha256:<hex>`), the
  fingerprint the enrolment token carries.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import hashlib
import json
from typing import Mapping, Optional, TypedDict, Union

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from cryptography.x509.oid import NameOID

from resolver import MeshError

from executors.common.message_formats import (  # part of this module's API (__all__)
    BACKUP_ANSWER_FORMAT,
    BACKUP_REQUEST,
    DECLARATION,
    ENROLMENT_ANSWER,
    ENROLMENT_REQUEST_FORMAT,
    FORMAT,
    LOGS_ANSWER_FORMAT,
    LOGS_REQUEST,
    REPORT_FORMAT,
    SIGNED_KINDS,
)

__all__ = [
    "DECLARATION", "ENROLMENT_ANSWER", "ENROLMENT_REQUEST_FORMAT", "FORMAT", "REPORT_FORMAT",
    "LOGS_REQUEST", "LOGS_ANSWER_FORMAT",
    "BACKUP_REQUEST", "BACKUP_ANSWER_FORMAT",
    "SIGNED_KINDS", "CLOCK_SKEW", "Document", "Envelope", "MessageRefused", "canonical",
    "fingerprint", "certificate_fingerprint", "load_certificate", "sign", "open_signed",
    "check_signer", "delivery_subject", "plain", "open_plain",
]

CLOCK_SKEW = datetime.timedelta(minutes=5)

# A message's body as parsed: a JSON object whose fields its reader checks (the declaration
# body, a report, an enrolment request or answer; common/message_schemas.py has their schemas).
Document = dict[str, object]


class Envelope(TypedDict):
    """What a signed message is on the wire (common/message_schemas.ENVELOPE)."""

    format: str
    kind: str
    signer: str  # PEM certificate of the delivery key
    body: str  # the signed JSON text
    signature: str  # base64 of the Ed25519 signature of _signed_bytes(kind, body)


class MessageRefused(MeshError):
    """A message a node does not accept; `reason` is one line, fit for a report and a log."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def canonical(document: object) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False).encode("utf-8")


def _signed_bytes(kind: str, body: str) -> bytes:
    return FORMAT.encode("ascii") + b"\0" + kind.encode("utf-8") + b"\0" + body.encode("utf-8")


def fingerprint(public_key: ed25519.Ed25519PublicKey) -> str:
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def certificate_fingerprint(certificate: x509.Certificate) -> str:
    key = certificate.public_key()
    if not isinstance(key, ed25519.Ed25519PublicKey):
        raise MessageRefused("the certificate's key is not an Ed25519 key")
    return fingerprint(key)


def load_certificate(pem: Union[str, bytes], what: str = "certificate") -> x509.Certificate:
    try:
        certificate = x509.load_pem_x509_certificate(pem.encode("ascii") if isinstance(pem, str)
                                                     else pem)
        # parsed lazily by `cryptography`: read every part now, so a damaged one is refused
        # here and never raises later
        certificate.subject.rfc4514_string(), certificate.issuer.rfc4514_string()
        certificate.extensions, certificate.public_key()
        certificate.not_valid_before_utc, certificate.not_valid_after_utc
    except Exception:  # noqa: BLE001 - cryptography's parser of a damaged DER raises
        # ValueError, UnsupportedAlgorithm, even KeyError: any of them is a refusal
        raise MessageRefused(f"the {what} is not a readable PEM certificate") from None
    return certificate


def sign(kind: str, body: Mapping[str, object], key: ed25519.Ed25519PrivateKey,
         certificate_pem: str) -> bytes:
    """The envelope of `body`, signed by `key` (certified by `certificate_pem`)."""
    if kind not in SIGNED_KINDS:
        raise MeshError(f"no signed message kind {kind!r}")
    text = canonical(body).decode("utf-8")
    signature = key.sign(_signed_bytes(kind, text))
    envelope = Envelope(format=FORMAT, kind=kind, signer=certificate_pem, body=text,
                        signature=base64.b64encode(signature).decode("ascii"))
    return canonical(envelope)


def open_signed(data: bytes, *, kind: str, ca: x509.Certificate, mesh: str,
                now: Optional[datetime.datetime] = None,
                revoked: frozenset[str] = frozenset()) -> Document:
    """The body of a signed envelope of `kind`, after every check; MessageRefused otherwise.
    `revoked`: serial numbers (lowercase hex) of the mesh's revocation list, whose signers
    are refused (common/revocation.py)."""
    try:
        envelope = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise MessageRefused("not JSON: the message is not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise MessageRefused(f"not JSON ({exc.msg} at character {exc.pos}): truncated or "
                             f"not a mesh message") from None
    except ValueError:  # parsed, but a number past the interpreter's limit on digits
        raise MessageRefused("not JSON this reader takes: a number too long") from None
    if not isinstance(envelope, dict) or envelope.get("format") != FORMAT:
        raise MessageRefused(f"not a mesh message (no `format: {FORMAT}`)")
    if envelope.get("kind") != kind:
        raise MessageRefused(f"a {envelope.get('kind')!r} message where a {kind!r} was expected")
    body, signature, signer = (envelope.get("body"), envelope.get("signature"),
                               envelope.get("signer"))
    if not (isinstance(body, str) and isinstance(signature, str) and isinstance(signer, str)):
        raise MessageRefused("the envelope lacks its body, signature or signer")
    certificate = _checked_signer(signer, ca, mesh, now)
    serial = format(certificate.serial_number, "x")
    if serial in revoked:
        raise MessageRefused(f"the signer's certificate (serial {serial}) is on the mesh's "
                             f"revocation list")
    signer_key = certificate.public_key()
    if not isinstance(signer_key, ed25519.Ed25519PublicKey):  # _checked_signer saw to it
        raise MessageRefused("the signer's key is not an Ed25519 key")
    try:
        raw = base64.b64decode(signature, validate=True)
        signer_key.verify(raw, _signed_bytes(kind, body))
    except (binascii.Error, ValueError, InvalidSignature):
        raise MessageRefused("bad signature: the body is not what the delivery key signed "
                             "(altered or damaged on the way)") from None
    try:
        document = json.loads(body)
    except ValueError:
        raise MessageRefused("the signed body is not JSON") from None
    if not isinstance(document, dict):
        raise MessageRefused("the signed body is not a JSON object")
    return document


# (signer PEM, CA fingerprint, mesh) → certificate issued by that CA
_SIGNERS: dict[tuple[str, str, str], x509.Certificate] = {}


def _checked_signer(pem: str, ca: x509.Certificate, mesh: str,
                    now: Optional[datetime.datetime]) -> x509.Certificate:
    """The signer's certificate, checked; the CA's signature over a PEM already seen is not
    checked again (every message carries the same one), its validity always is."""
    key = (pem, certificate_fingerprint(ca), mesh)
    certificate = _SIGNERS.get(key)
    if certificate is None:
        certificate = load_certificate(pem, "signer's certificate")
        check_signer(certificate, ca, mesh, now)
        if len(_SIGNERS) > 16:
            _SIGNERS.clear()
        _SIGNERS[key] = certificate
    else:
        _check_validity(certificate, now)
    return certificate


def check_signer(certificate: x509.Certificate, ca: x509.Certificate, mesh: str,
                 now: Optional[datetime.datetime] = None) -> None:
    """The signer's certificate is the pinned CA's delivery certificate for `mesh`, valid now."""
    try:
        certificate.verify_directly_issued_by(ca)
    except (InvalidSignature, ValueError, TypeError):
        raise MessageRefused(f"signed by a key the pinned mesh CA ({certificate_fingerprint(ca)})"
                             f" did not certify: {certificate.subject.rfc4514_string()}, issued "
                             f"by {certificate.issuer.rfc4514_string()}") from None
    if not isinstance(certificate.public_key(), ed25519.Ed25519PublicKey):
        raise MessageRefused("the signer's key is not an Ed25519 key")
    try:
        constraints = certificate.extensions.get_extension_for_class(x509.BasicConstraints).value
        usage = certificate.extensions.get_extension_for_class(x509.KeyUsage).value
    except x509.ExtensionNotFound:
        raise MessageRefused("the signer's certificate does not state its use") from None
    if constraints.ca or not usage.digital_signature:
        raise MessageRefused("the signer's certificate is not a delivery certificate")
    names = certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    expected = delivery_subject(mesh)
    if [n.value for n in names] != [expected]:
        named = names[0].value if names else "?"  # a common name is text (bytes: never seen)
        if isinstance(named, bytes):
            named = named.decode("utf-8", "replace")
        raise MessageRefused(f"the signer's certificate names {named}, not {expected!r}")
    _check_validity(certificate, now)


def _check_validity(certificate: x509.Certificate, now: Optional[datetime.datetime]) -> None:
    now = now or datetime.datetime.now(datetime.timezone.utc)
    if not (certificate.not_valid_before_utc - CLOCK_SKEW <= now
            <= certificate.not_valid_after_utc + CLOCK_SKEW):
        raise MessageRefused(f"the signer's certificate is not valid now (valid "
                             f"{certificate.not_valid_before_utc:%Y-%m-%dT%H:%M:%SZ} .. "
                             f"{certificate.not_valid_after_utc:%Y-%m-%dT%H:%M:%SZ})")


def delivery_subject(mesh: str) -> str:
    return f"{mesh} delivery"


def plain(document: Mapping[str, object]) -> bytes:
    """An unsigned message body (reports, enrolment requests)."""
    return canonical(document)


def open_plain(data: bytes, fmt: str) -> Document:
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise MessageRefused("not JSON") from None
    if not isinstance(document, dict) or document.get("format") != fmt:
        raise MessageRefused(f"not a {fmt} document")
    return document
