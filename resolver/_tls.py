"""TLS for the mesh's artifact store: a server certificate from the mesh CA, and every node's
container runtime told to trust that CA for the registry's address.

Invariants:
- The artifact store (the instance `choose_artifact_store_instance` picks, once per resolution) has one server certificate
  for its node's address, signed by the mesh CA outside the resolver (the issuer) and kept in
  `ledger.tls`; its private key is the credential `tls/<instance>`, sealed to that node alone.
  It is requested only when missing, when the node's address changed, when the key is sealed to
  another node (the instance moved) or inside the CA's renewal window (`now` given): a kept
  certificate is never signed anew.
- The key never appears in a declaration: the key file's content is a `${secret:…}` token the
  node unseals at apply. The certificate and the CA's are public and written as they are.
- Every node of the mesh pulls from the registry, so every node declares
  `/etc/docker/certs.d/<host:port>/ca.crt` holding the CA certificate the ledger records; no
  runtime is ever told to treat the registry as insecure.
- The instance's containers mount `/etc/mesh/tls/<instance>/` read-only at `/etc/mesh/tls`
  (`server.crt`, `server.key`) and carry the certificate's serial in a label, so a new
  certificate recreates them (a server reads its certificate when it starts).
"""

from __future__ import annotations

from typing import Optional

import attrs
from pyrsistent import pvector

from ._certs import renewal_due
from ._declaration import ContainerDecl, FileDecl, MountDecl, Request, SecretRef
from ._placeholders import secret_token
from ._ledger import Ledger
from ._model import Mesh

TLS_HOST_DIR = "/etc/mesh/tls"  # + /<instance>/ on the node
TLS_CONTAINER_DIR = "/etc/mesh/tls"  # where the server finds server.crt and server.key
CERT_FILE, KEY_FILE = "server.crt", "server.key"
#: Where the container runtime looks for a registry's trusted CA (`<dir>/<host:port>/ca.crt`).
TRUST_DIR = "/etc/docker/certs.d"
TLS_LABEL = "mesh.tls-serial"
#: The Request kind of a registry's server certificate to issue.
TLS_REQUEST = "tls-certificate"


def tls_credential(instance: str) -> str:
    """The credential id of an instance's TLS key."""
    return f"tls/{instance}"


def is_tls_credential(credential: str) -> bool:
    """Whether a credential id names an instance's TLS key (see tls_credential)."""
    return credential.startswith("tls/")


def tls_reason(mesh: Mesh, ledger: Ledger, instance: str, node: str,
               now: Optional[str] = None) -> Optional[str]:
    """Why `instance` (on `node`) needs its server certificate issued, or None when kept."""
    certificate = ledger.tls.get(instance)
    credential = ledger.credentials.get(tls_credential(instance))
    address = mesh.nodes[node].address
    if certificate is None or credential is None or credential.active is None:
        return "no server certificate yet"
    if certificate.address != address:
        return f"its node's address changed from {certificate.address} to {address}"
    if set(credential.active.sealed) != {node}:
        return f"it moved to {node}: a new key sealed to {node} alone"
    if now is not None and renewal_due(certificate, now, mesh.ca.renew_before_days):
        return (f"renewal: expires {certificate.not_after}, within the "
                f"{mesh.ca.renew_before_days}-day renewal window")
    return None


def tls_request(instance: str, node: str, reason: str) -> Request:
    return Request(kind=TLS_REQUEST, id=instance, holders=pvector([node]),
                   reason=f"server certificate of {instance}: {reason}")


def tls_ref(ledger: Ledger, instance: str) -> Optional[SecretRef]:
    """The key's reference when the certificate and its key are issued, else None."""
    credential = ledger.credentials.get(tls_credential(instance))
    if instance not in ledger.tls or credential is None or credential.active is None:
        return None
    return SecretRef(tls_credential(instance), credential.active.generation)


def trust_file(registry: str, ca_pem: str) -> FileDecl:
    """The file that makes a node's container runtime trust the mesh CA for `registry`."""
    return FileDecl(f"{TRUST_DIR}/{registry}/ca.crt", ca_pem, "0644",
                    reason=f"the container runtime trusts the mesh CA for {registry}")


def server_files(instance: str, certificate_pem: str, key: SecretRef) -> list[FileDecl]:
    directory = f"{TLS_HOST_DIR}/{instance}"
    return [FileDecl(f"{directory}/{CERT_FILE}", certificate_pem, "0644",
                     reason=f"server certificate of {instance}"),
            FileDecl(f"{directory}/{KEY_FILE}", secret_token(key.credential), "0600", key,
                     reason=f"server key of {instance}")]


def with_tls(container: ContainerDecl, instance: str, serial: str) -> ContainerDecl:
    """The container with its instance's certificate directory mounted and the serial labelled."""
    mount = MountDecl("tls", f"{TLS_HOST_DIR}/{instance}", TLS_CONTAINER_DIR, True)
    return attrs.evolve(container, mounts=container.mounts.append(mount),
                        labels=container.labels.set(TLS_LABEL, serial))
