"""The channel a move's state travels on: mutual TLS on the two nodes' transfer certificates.

Invariants:
- Only the two nodes of one declared transfer complete it: TLS 1.3, each side presenting its
  transfer certificate from the mesh CA (resolver/_tls: CN `transfer:<node>`, SAN the node's
  address, key sealed to that node alone) and verifying the other's against the mesh CA
  certificate its own declaration holds. The client verifies the chain and the hostname (the
  source's address) and that the certificate is the source node's (CN `transfer:<source>`,
  so no other certificate the CA issued for that address passes); the server requires a
  client certificate verified against the CA and checks it is the target node's
  (`transfer:<target>` of the instance asked for) before it sends anything of its state.
  Everything cryptographic is OpenSSL's (ssl): no MAC, nonce or key exchange of ours.
- A transfer whose certificates are not issued (`waits`) never opens a connection: no
  unauthenticated copy, whatever the caller does.
- The server's key is the file its node's apply wrote (the declaration's `key`); the arriving
  side's apply writes its files only after the arrival, so its key is unsealed in memory and
  handed to OpenSSL through an anonymous memory file (memfd): never written to a disk.
- The payload is records: a kind byte, a 4-byte big-endian length, that many bytes
  (payload.py says which kinds). Control messages are one JSON object per line, never
  holding a secret.
"""

from __future__ import annotations

import json
import os
import ssl
import struct
from typing import BinaryIO, Callable, Mapping

from cryptography import x509
from cryptography.x509.oid import NameOID

from resolver import Declaration, FileDecl, MeshError, SecretRef, StateTransfer
from resolver.certificates import transfer_key

PROTOCOL = "mesh-state-transfer/2"
RECORD = struct.Struct(">cI")  # a record's kind and the length of its body
LINE_LIMIT = 1 << 24  # a manifest line: 16 MiB is some 100,000 files


class TransferError(MeshError):
    """A transfer that cannot go on: the peer refused, was not who it must be, or broke off."""


def ready(transfer: StateTransfer) -> None:
    """Refuse (TransferError) a transfer that waits for its certificates."""
    if transfer.waits or not (transfer.certificate and transfer.key and transfer.ca):
        raise TransferError(f"{transfer.instance}: the transfer waits: "
                            f"{transfer.waits or 'its certificates are not declared'}")


def declared_file(declaration: Declaration, path: str) -> FileDecl:
    found = next((f for f in declaration.files if f.path == path), None)
    if found is None:
        raise TransferError(f"the declaration of {declaration.node} (serial "
                            f"{declaration.serial}) declares no {path}")
    return found


def _secure(context: ssl.SSLContext, ca_pem: str) -> ssl.SSLContext:
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    context.verify_mode = ssl.CERT_REQUIRED
    context.load_verify_locations(cadata=ca_pem)
    return context


def server_context(declaration: Declaration, transfer: StateTransfer,
                   on_node: Callable[[str], str]) -> ssl.SSLContext:
    """The source's TLS context: its transfer certificate and key (the files its apply wrote,
    `on_node` maps a declared path to the node's), a client certificate required and
    verified against the mesh CA."""
    ready(transfer)
    context = _secure(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER),
                      declared_file(declaration, transfer.ca).content)
    certificate, key = on_node(transfer.certificate), on_node(transfer.key)
    try:
        context.load_cert_chain(certificate, key)
    except (OSError, ssl.SSLError) as exc:
        raise TransferError(f"cannot load {declaration.node}'s transfer certificate "
                            f"({certificate}, {key}): {exc}; apply {declaration.node}'s "
                            f"declaration first (it writes them)") from None
    return context


def client_context(declaration: Declaration, transfer: StateTransfer,
                   unseal: Callable[[SecretRef], str]) -> ssl.SSLContext:
    """The arriving side's TLS context: the server verified against the mesh CA, hostname
    checked; this node's transfer certificate with its key, unsealed by `unseal`."""
    ready(transfer)
    context = _secure(ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT),
                      declared_file(declaration, transfer.ca).content)
    context.check_hostname = True
    key_file = declared_file(declaration, transfer.key)
    if key_file.secret is None:
        raise TransferError(f"{transfer.key} in the declaration refers to no sealed key")
    chain = unseal(key_file.secret) + "\n" + declared_file(declaration,
                                                            transfer.certificate).content
    descriptor = os.memfd_create("mesh-transfer-key", os.MFD_CLOEXEC)
    try:
        os.write(descriptor, chain.encode())
        del chain
        context.load_cert_chain(f"/proc/self/fd/{descriptor}")
    except ssl.SSLError as exc:
        raise TransferError(f"{declaration.node}'s transfer key does not load: {exc}") from None
    finally:
        os.close(descriptor)
    return context


def peer_name(connection: ssl.SSLSocket) -> str:
    """The CN of the peer's certificate (verified against the mesh CA by the handshake)."""
    der = connection.getpeercert(binary_form=True)
    if not der:
        return ""
    names = x509.load_der_x509_certificate(der).subject.get_attributes_for_oid(
        NameOID.COMMON_NAME)
    return str(names[0].value) if len(names) == 1 else ""


def check_peer(connection: ssl.SSLSocket, node: str, role: str) -> None:
    """Refuse (TransferError) a peer whose certificate is not `node`'s transfer certificate."""
    name = peer_name(connection)
    if name != transfer_key(node):
        raise TransferError(f"the {role}'s certificate is {name or 'unnamed'!r}, not "
                            f"{transfer_key(node)!r}: it is not {node}")


def send_line(stream: BinaryIO, message: Mapping[str, object]) -> None:
    stream.write(json.dumps(message, sort_keys=True).encode() + b"\n")
    stream.flush()


def read_line(stream: BinaryIO, what: str) -> dict[str, object]:
    line = stream.readline(LINE_LIMIT)
    if not line.endswith(b"\n"):
        raise TransferError(f"the connection broke off before {what}")
    try:
        message = json.loads(line)
    except ValueError:
        raise TransferError(f"{what}: not a JSON line") from None
    if not isinstance(message, dict):
        raise TransferError(f"{what}: not a JSON object")
    error = message.get("error")
    if isinstance(error, str):
        raise TransferError(error)
    return message


RECORD_LIMIT = 1 << 24  # no record the source sends is larger (content goes in 1 MiB pieces)


def write_record(stream: BinaryIO, kind: bytes, body: bytes) -> None:
    """One record: its kind (one byte), its length, its body."""
    stream.write(RECORD.pack(kind, len(body)))
    if body:
        stream.write(body)


def read_exact(stream: BinaryIO, count: int) -> bytes:
    data = stream.read(count)
    if data is None or len(data) != count:
        raise TransferError("the connection broke off in the middle of the copy")
    return data


def read_record(stream: BinaryIO) -> tuple[bytes, bytes]:
    """(kind, body) of the next record."""
    kind, length = RECORD.unpack(read_exact(stream, RECORD.size))
    if length > RECORD_LIMIT:
        raise TransferError(f"a record of {length} bytes: more than the source ever sends")
    return kind, read_exact(stream, length) if length else b""
