"""The delivery key: the Ed25519 key that signs what the control plane hands the nodes.

Invariants:
- It is not the mesh CA's key but a key the CA certifies (`CN=<mesh> delivery`, digital
  signatures only, no CA), kept beside the CA key (`delivery.key`, 0600, and `delivery.crt`).
  Nodes pin the CA (its fingerprint travels in the enrolment token), so this key can be
  replaced without touching a node; the CA key only ever signs certificates.
- Created on first use by whoever publishes (control, publish, enrol accept), which needs the
  CA key once for it; renewed (a new key, a new certificate, both replaced atomically) when
  inside `ca.renew-before-days` of its expiry. Nodes accept any delivery certificate of their
  CA that is valid now.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Optional

import attrs
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from cryptography.x509.oid import NameOID

from resolver import Mesh

from executors.common.atomic import write_atomic
from executors.common.messages import delivery_subject
from executors.control.ca import CaError, ca_key_path, load_ca, utc_now
from executors.control.loading import PathLike

KEY_FILE, CERT_FILE = "delivery.key", "delivery.crt"


@attrs.frozen
class DeliveryKey:
    key: ed25519.Ed25519PrivateKey = attrs.field(repr=False)
    certificate_pem: str
    ca_certificate: x509.Certificate

    @property
    def ca_pem(self) -> str:
        return self.ca_certificate.public_bytes(serialization.Encoding.PEM).decode("ascii")


def paths(mesh_dir: PathLike, mesh: Mesh) -> tuple[Path, Path]:
    directory = ca_key_path(mesh_dir, mesh).parent
    return directory / KEY_FILE, directory / CERT_FILE


def _load(key_path: Path,
          cert_path: Path) -> Optional[tuple[ed25519.Ed25519PrivateKey, x509.Certificate]]:
    try:
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        certificate = x509.load_pem_x509_certificate(cert_path.read_bytes())
    except (OSError, ValueError, TypeError):
        return None
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        return None
    return key, certificate


def _due(certificate: x509.Certificate, mesh: Mesh, now: datetime.datetime) -> bool:
    renew_at = certificate.not_valid_after_utc - datetime.timedelta(days=mesh.ca.renew_before_days)
    return now >= renew_at


def ensure_delivery_key(mesh_dir: PathLike, mesh: Mesh,
                        now: Optional[datetime.datetime] = None) -> DeliveryKey:
    """The delivery key and its certificate, created or renewed with the CA when needed."""
    now = now or utc_now()
    key_path, cert_path = paths(mesh_dir, mesh)
    loaded = _load(key_path, cert_path)
    ca = None
    if loaded is not None:
        key, certificate = loaded
        if not _due(certificate, mesh, now):
            ca_cert_path = ca_key_path(mesh_dir, mesh).with_suffix(".crt")
            try:
                ca_certificate = x509.load_pem_x509_certificate(ca_cert_path.read_bytes())
            except (OSError, ValueError) as exc:
                raise CaError(f"{ca_cert_path}: cannot read the mesh CA certificate: "
                              f"{exc}") from None
            return DeliveryKey(key, certificate.public_bytes(
                serialization.Encoding.PEM).decode("ascii"), ca_certificate)
    ca = load_ca(mesh_dir, mesh)
    key = ed25519.Ed25519PrivateKey.generate()
    certificate = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME,
                                                    delivery_subject(mesh.mesh))]))
        .issuer_name(ca.certificate.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(min(now + datetime.timedelta(days=mesh.ca.validity_days),
                             ca.certificate.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                     key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, key_cert_sign=False, crl_sign=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
            ca.key.public_key()), critical=False)
        .sign(ca.key, None)
    )
    pem = certificate.public_bytes(serialization.Encoding.PEM).decode("ascii")
    write_atomic(key_path, key.private_bytes(serialization.Encoding.PEM,
                                             serialization.PrivateFormat.PKCS8,
                                             serialization.NoEncryption()), mode=0o600)
    write_atomic(cert_path, pem, mode=0o644)
    return DeliveryKey(key, pem, ca.certificate)
