"""The mesh CA: an Ed25519 key on the control node that signs one certificate per node.

Invariants:
- The CA key is created once (mode 0600, whole or not at all, never overwritten:
  common/atomic.write_exclusive) at `ca.path`
  relative to the mesh directory; its self-signed certificate lies beside it (`.crt`).
- A node certificate names the node (CN), its address (SubjectAltName) and certifies the
  node's own X25519 public key from mesh.yaml; it is signed only when the issuer is asked to,
  so a recorded certificate is kept byte for byte until renewal.
- A TLS server certificate (the artifact store's) certifies a fresh ECDSA P-256 key made here;
  the key leaves only sealed (the issuer's business), never written in plaintext.
- All cryptography is the `cryptography` package's; the clock is read here, never in resolver/.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
from pathlib import Path
from typing import Optional, Union

import attrs
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, x25519
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from resolver import Certificate, Mesh, MeshError

from executors.common.atomic import write_exclusive
from executors.control.loading import PathLike

CA_VALIDITY_DAYS = 3650


class CaError(MeshError):
    """The CA cannot be created, read or used."""


@attrs.frozen
class MeshCa:
    key: ed25519.Ed25519PrivateKey = attrs.field(repr=False)
    certificate: x509.Certificate


def ca_key_path(mesh_dir: PathLike, mesh: Mesh) -> Path:
    return Path(mesh_dir) / mesh.ca.path


def ca_cert_path(mesh_dir: PathLike, mesh: Mesh) -> Path:
    return ca_key_path(mesh_dir, mesh).with_suffix(".crt")


def iso(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)


def init_ca(mesh_dir: PathLike, mesh: Mesh, now: Optional[datetime.datetime] = None) -> MeshCa:
    """Create the CA key (0600) and its self-signed certificate; refuse if either exists."""
    key_path, cert_path = ca_key_path(mesh_dir, mesh), ca_cert_path(mesh_dir, mesh)
    for path in (key_path, cert_path):
        if path.exists():
            raise CaError(f"{path}: exists already; the mesh CA is created once and kept "
                          f"(not overwritten)")
    key_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    now = now or utc_now()
    key = ed25519.Ed25519PrivateKey.generate()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{mesh.mesh} mesh CA")])
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=CA_VALIDITY_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False,
                                     key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, key_cert_sign=True, crl_sign=True,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                       critical=False)
        .sign(key, None)
    )
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    try:
        write_exclusive(key_path, key_pem, 0o600)
    except FileExistsError:
        raise CaError(f"{key_path}: exists already; not overwritten") from None
    try:
        write_exclusive(cert_path, certificate.public_bytes(serialization.Encoding.PEM), 0o644)
    except FileExistsError:
        raise CaError(f"{cert_path}: exists already; not overwritten") from None
    return MeshCa(key, certificate)


def load_ca(mesh_dir: PathLike, mesh: Mesh) -> MeshCa:
    key_path, cert_path = ca_key_path(mesh_dir, mesh), ca_cert_path(mesh_dir, mesh)
    if not key_path.exists():
        raise CaError(f"{key_path}: the mesh CA key is missing; `mesh ca init {mesh_dir}` "
                      f"creates it")
    try:
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        certificate = x509.load_pem_x509_certificate(cert_path.read_bytes())
    except (OSError, ValueError, TypeError) as exc:
        raise CaError(f"{key_path}: cannot load the mesh CA: {exc}") from None
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise CaError(f"{key_path}: the mesh CA key is not an Ed25519 key")
    return MeshCa(key, certificate)


def _subject_alt_name(address: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(address))
    except ValueError:
        return x509.DNSName(address)


def _leaf(ca: MeshCa, common_name: str,
          public_key: Union[x25519.X25519PublicKey, ec.EllipticCurvePublicKey], address: str,
          now: datetime.datetime, not_after: datetime.datetime, *, signs: bool, agrees: bool,
          purposes: list[x509.ObjectIdentifier]) -> tuple[int, x509.Certificate]:
    """(serial, certificate): one end-entity certificate issued by the mesh CA for the node at
    `address` (CN=common_name, SAN=address, never a CA), used as `signs`/`agrees` and
    `purposes` (extended key usages) say."""
    serial = x509.random_serial_number()
    certificate = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca.certificate.subject)
        .public_key(public_key)
        .serial_number(serial)
        .not_valid_before(now).not_valid_after(not_after)
        .add_extension(x509.SubjectAlternativeName([_subject_alt_name(address)]),
                       critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=signs, content_commitment=False,
                                     key_encipherment=False, data_encipherment=False,
                                     key_agreement=agrees, key_cert_sign=False, crl_sign=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage(purposes), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
            ca.key.public_key()), critical=False)
        .sign(ca.key, None)
    )
    return serial, certificate


def sign_node(ca: MeshCa, mesh: Mesh, node: str,
              now: Optional[datetime.datetime] = None) -> Certificate:
    """Sign `node`'s certificate: CN=node, SAN=its address, its X25519 key, ca.validity-days."""
    described = mesh.nodes.get(node)
    if described is None:
        raise CaError(f"node {node} is not in mesh.yaml")
    if not described.public_key:
        raise CaError(f"node {node} has no public-key in mesh.yaml; `mesh node-key {node} "
                      f"--path FILE` on that node creates its key and prints the line to add")
    try:
        raw = base64.b64decode(described.public_key, validate=True)
        subject_key = x25519.X25519PublicKey.from_public_bytes(raw)
    except ValueError:
        raise CaError(f"node {node}: public-key is not a base64 X25519 public key") from None
    now = now or utc_now()
    not_after = now + datetime.timedelta(days=mesh.ca.validity_days)
    serial, certificate = _leaf(
        ca, node, subject_key, described.address, now, not_after, signs=False, agrees=True,
        purposes=[ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH])
    return Certificate(
        serial=format(serial, "x"),
        not_before=iso(now),
        not_after=iso(not_after),
        pem=certificate.public_bytes(serialization.Encoding.PEM).decode("ascii"),
        address=described.address,
        public_key=described.public_key,
    )


def sign_server(ca: MeshCa, mesh: Mesh, instance: str, node: str,
                now: Optional[datetime.datetime] = None, *,
                client: bool = False) -> tuple[Certificate, str]:
    """A TLS server certificate for `instance` on `node` (CN=instance, SAN=the node's address,
    serverAuth, and clientAuth with `client`: a node's transfer certificate, both ends of a
    state transfer) with a fresh ECDSA P-256 key: (certificate, the key's PEM). The key is a
    secret: the caller seals it and forgets it."""
    described = mesh.nodes.get(node)
    if described is None:
        raise CaError(f"node {node} is not in mesh.yaml")
    key = ec.generate_private_key(ec.SECP256R1())
    now = now or utc_now()
    not_after = now + datetime.timedelta(days=mesh.ca.validity_days)
    serial, certificate = _leaf(
        ca, instance, key.public_key(), described.address, now, not_after, signs=True,
        agrees=False, purposes=[ExtendedKeyUsageOID.SERVER_AUTH]
        + ([ExtendedKeyUsageOID.CLIENT_AUTH] if client else []))
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode("ascii")
    return Certificate(
        serial=format(serial, "x"), not_before=iso(now), not_after=iso(not_after),
        pem=certificate.public_bytes(serialization.Encoding.PEM).decode("ascii"),
        address=described.address), key_pem


def sign_name(ca: MeshCa, mesh: Mesh, name: str,
              now: Optional[datetime.datetime] = None) -> tuple[Certificate, str]:
    """A TLS server certificate for web name `name` (CN and DNS SubjectAltName the name,
    serverAuth) with a fresh ECDSA P-256 key, as sign_server makes an instance's: (certificate,
    the key's PEM); the certificate's `address` is the name."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = now or utc_now()
    not_after = now + datetime.timedelta(days=mesh.ca.validity_days)
    serial, certificate = _leaf(ca, name, key.public_key(), name, now, not_after, signs=True,
                                agrees=False, purposes=[ExtendedKeyUsageOID.SERVER_AUTH])
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode("ascii")
    return Certificate(
        serial=format(serial, "x"), not_before=iso(now), not_after=iso(not_after),
        pem=certificate.public_bytes(serialization.Encoding.PEM).decode("ascii"),
        address=name), key_pem


def sign_external_server(ca: MeshCa, mesh: Mesh, name: str, address: str,
                         now: Optional[datetime.datetime] = None) -> tuple[str, str]:
    """(certificate PEM, key PEM) for a TLS server the mesh does not run (a broker of the
    operator's: `mesh ca issue-server`): CN=name, SAN=address, serverAuth, a fresh ECDSA P-256
    key, ca.validity-days. Not recorded in the ledger; the key is the caller's to keep."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = now or utc_now()
    not_after = now + datetime.timedelta(days=mesh.ca.validity_days)
    _serial, certificate = _leaf(ca, name, key.public_key(), address, now, not_after,
                                 signs=True, agrees=False,
                                 purposes=[ExtendedKeyUsageOID.SERVER_AUTH])
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode("ascii")
    return certificate.public_bytes(serialization.Encoding.PEM).decode("ascii"), key_pem


def ca_pem(ca: MeshCa) -> str:
    return ca.certificate.public_bytes(serialization.Encoding.PEM).decode("ascii")


def verify_node_certificate(ca_certificate: x509.Certificate, pem: str) -> x509.Certificate:
    """The node certificate, after checking the CA signed it; CaError otherwise."""
    certificate = x509.load_pem_x509_certificate(pem.encode("ascii"))
    try:
        certificate.verify_directly_issued_by(ca_certificate)
    except (InvalidSignature, ValueError, TypeError) as exc:
        raise CaError(f"certificate {certificate.subject.rfc4514_string()} was not signed by "
                      f"this mesh CA ({exc or 'bad signature'})") from None
    return certificate
