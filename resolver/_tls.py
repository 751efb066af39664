"""TLS from the mesh CA: a server certificate for every instance that serves TLS (a listen its
module marks `tls: true`, and the mesh's artifact store), consumers of a TLS listen told values
that require and verify it, and every node's container runtime told to trust that CA for the
registry's address.

Invariants:
- A TLS server (tls_servers: a live instance with a `tls` listen, or the artifact store the
  resolution picked) has one server certificate
  for its node's address, signed by the mesh CA outside the resolver (the issuer) and kept in
  `ledger.tls`; its private key is the credential `tls/<instance>`, sealed to that node alone.
  One mechanism for all of them: the registry is one TLS server among others.
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
  certificate recreates them (a server reads its certificate when it starts). The key file is
  0600, owned by the uid:gid the serving artifact says its server reads it as.
- A binding to a TLS listen is a TLS binding unless the consumer is on the provider's node and
  the listen says `plain-same-node`: its values are the provision's `tls:` values and url
  (verify against the mesh CA), and the consumer's containers mount the CA certificate
  read-only at CA_CONTAINER_FILE (the node holds it at CA_HOST_FILE), labelled with its
  fingerprint as a `ca: true` mount is (resolver/_binding_files.with_ca_at: one CA mount). A plain binding is told
  exactly what it was told before TLS existed.
- A web name an ingress serves (resolver/_names) is one more TLS subject of the same rule:
  ledger `tls` key `name:<name>`, SAN the name, its key sealed to the ingresses' nodes; the
  ingress holds `names/<name>.crt` and `.key` in its TLS directory, their serials in a label.
- A node taking part in a declared state transfer (resolver/_moves) is one more TLS subject of
  the same rule: ledger `tls` key `transfer:<node>` (CN that key, SAN the node's address,
  usable as TLS server and client), its key `tls/transfer:<node>` sealed to that node alone;
  the node holds it at TRANSFER_DIR with the mesh CA's certificate while a transfer is declared.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Optional

import attrs
from pyrsistent import pvector

from ._certs import renewal_due
from ._declaration import ContainerDecl, FileDecl, MountDecl, Request, SecretRef
from ._placeholders import secret_token
from ._ledger import Ledger
from ._model import Listen, Mesh, Module
from ._names import name_files, name_key

TLS_HOST_DIR = "/etc/mesh/tls"  # + /<instance>/ on the node
TLS_CONTAINER_DIR = "/etc/mesh/tls"  # where the server finds server.crt and server.key
CERT_FILE, KEY_FILE = "server.crt", "server.key"
#: Where the container runtime looks for a registry's trusted CA (`<dir>/<host:port>/ca.crt`).
TRUST_DIR = "/etc/docker/certs.d"
TLS_LABEL = "mesh.tls-serial"
#: The Request kind of a TLS server's certificate to issue.
TLS_REQUEST = "tls-certificate"
#: Where a node holds the mesh CA's certificate for the containers that verify against it.
CA_HOST_FILE = "/etc/mesh/ca/ca.crt"
#: Where a consumer of a TLS binding finds the mesh CA's certificate (the `{ca}` field).
CA_CONTAINER_FILE = "/etc/mesh/ca.crt"
ROOT_OWNER = "0:0"


def serving_container(module: Module, listen: Listen) -> Optional[str]:
    """The container that serves `listen`: its own `container`, else the module's first
    long-running one (as rendering publishes it)."""
    if listen.container is not None:
        return listen.container
    return next((c.name for c in module.containers if not c.run_once), None)


def tls_key_owner(module: Module) -> Optional[str]:
    """The uid:gid the server of `module`'s first TLS listen reads its key as (its artifact's
    `tls-key-owner`), or None when it has no TLS listen."""
    for _, listen in sorted(module.listens.items()):
        if listen.tls:
            serving = serving_container(module, listen)
            container = next((c for c in module.containers if c.name == serving), None)
            artifact = module.artifacts.get(container.artifact) if container else None
            return artifact.tls_key_owner if artifact is not None else ROOT_OWNER
    return None


def tls_servers(names: Iterable[str], modules: Mapping[str, Module], node_of: Mapping[str, str],
                store: Optional[str]) -> dict[str, tuple[str, str]]:
    """Every TLS server among the live instances `names` → (its node, the uid:gid its key is
    owned by): those whose module marks a listen `tls`, and the artifact store `store`."""
    servers: dict[str, tuple[str, str]] = {}
    owners: dict[str, tuple[Module, Optional[str]]] = {}  # module name → its key's owner
    for name in names:
        module = modules[name]
        known = owners.get(module.name)
        if known is None or known[0] is not module:  # (read once per module)
            known = owners[module.name] = (module, tls_key_owner(module))
        owner = known[1]
        if owner is not None:
            servers[name] = (node_of[name], owner)
        elif name == store:
            servers[name] = (node_of[name], ROOT_OWNER)
    return servers


def tls_binding(listen: Listen, same_node: bool) -> bool:
    """Whether a binding to `listen` requires and verifies TLS."""
    return listen.tls and not (same_node and listen.plain_same_node)


def ca_file(ca_pem: str) -> FileDecl:
    """The mesh CA's certificate on a node whose containers verify a TLS binding."""
    return FileDecl(CA_HOST_FILE, ca_pem, "0644",
                    reason="the mesh CA, which consumers of TLS bindings verify against")



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


def server_files(instance: str, certificate_pem: str, key: SecretRef,
                 owner: str = ROOT_OWNER) -> list[FileDecl]:
    """The certificate (public) and key (a sealed secret, 0600, owned by `owner`) of a TLS
    server, in its instance's directory."""
    directory = f"{TLS_HOST_DIR}/{instance}"
    return [FileDecl(server_certificate_path(instance), certificate_pem, "0644",
                     reason=f"server certificate of {instance}"),
            FileDecl(f"{directory}/{KEY_FILE}", secret_token(key.credential), "0600", key,
                     reason=f"server key of {instance}",
                     owner=None if owner == ROOT_OWNER else owner)]


def server_certificate_path(instance: str) -> str:
    """Where a TLS server instance's certificate (public) is declared on its node."""
    return f"{TLS_HOST_DIR}/{instance}/{CERT_FILE}"


def with_tls(container: ContainerDecl, instance: str, serial: str) -> ContainerDecl:
    """The container with its instance's certificate directory mounted and the serial labelled."""
    mount = MountDecl("tls", f"{TLS_HOST_DIR}/{instance}", TLS_CONTAINER_DIR, True)
    return attrs.evolve(container, mounts=container.mounts.append(mount),
                        labels=container.labels.set(TLS_LABEL, serial))


# ---------------------------------------------------------------------- names (an ingress's)

def name_reason(mesh: Mesh, ledger: Ledger, full: str, holders: Iterable[str],
                now: Optional[str] = None) -> Optional[str]:
    """Why the certificate of web name `full` (served by ingresses on the nodes `holders`)
    must be issued, or None when kept: the same rule as an instance's (tls_reason), with the
    name as its SubjectAltName and the ingresses' nodes as the key's holders. The nodes of the
    apps behind the name play no part: moving an app keeps its name's certificate."""
    key = name_key(full)
    certificate = ledger.tls.get(key)
    credential = ledger.credentials.get(tls_credential(key))
    wanted = set(holders)
    if certificate is None or credential is None or credential.active is None:
        return "no certificate for the name yet"
    if certificate.address != full:
        return f"its certificate names {certificate.address}"
    if set(credential.active.sealed) != wanted:
        return f"the ingresses serving it are now on {', '.join(sorted(wanted))}: a new key " \
               "sealed to them"
    if now is not None and renewal_due(certificate, now, mesh.ca.renew_before_days):
        return (f"renewal: expires {certificate.not_after}, within the "
                f"{mesh.ca.renew_before_days}-day renewal window")
    return None


def name_requests(mesh: Mesh, ledger: Ledger, now: Optional[str],
                  holders: Mapping[str, tuple[str, ...]]) -> list[Request]:
    """The certificate of each served name (name → its ingresses' nodes) to issue."""
    requests: list[Request] = []
    for full, nodes in sorted(holders.items()):
        reason = name_reason(mesh, ledger, full, nodes, now)
        if reason is not None:
            requests.append(Request(kind=TLS_REQUEST, id=name_key(full), holders=pvector(nodes),
                                    reason=f"certificate of the name {full}: {reason}"))
    return requests


def name_parts(ledger: Ledger, instance: str, names: Iterable[str], owner: str = ROOT_OWNER
               ) -> tuple[list[FileDecl], list[str]]:
    """The certificate and key files of each name an ingress serves that is issued, in its TLS
    directory (`names/<name>.crt`, `.key`, the key a sealed secret 0600 owned by `owner`),
    and `<name>=<serial>` of each, for the label that recreates its containers on a new one."""
    files: list[FileDecl] = []
    serials: list[str] = []
    directory = f"{TLS_HOST_DIR}/{instance}"
    for full in sorted(names):
        key = name_key(full)
        ref = tls_ref(ledger, key)
        if ref is None:
            continue
        certificate = ledger.tls[key]
        cert_file, key_file = name_files(full)
        files.append(FileDecl(f"{directory}/{cert_file}", certificate.pem, "0644",
                              reason=f"certificate of {full}, served by {instance}"))
        files.append(FileDecl(f"{directory}/{key_file}", secret_token(ref.credential), "0600",
                              ref, reason=f"key of {full}, served by {instance}",
                              owner=None if owner == ROOT_OWNER else owner))
        serials.append(f"{full}={certificate.serial}")
    return files, serials


# ---------------------------------------------------------------------- transfers (a move's nodes)

#: The prefix of a node's transfer certificate in the ledger's `tls` (node names hold no ':').
TRANSFER_PREFIX = "transfer:"
#: Where a node taking part in a state transfer holds its transfer certificate and key.
TRANSFER_DIR = "/etc/mesh/transfer"


def transfer_key(node: str) -> str:
    """The ledger `tls` key (and request id, and certificate CN) of `node`'s transfer
    certificate: one per node, whatever it carries, since one server on the node's transfer
    port serves every departure (its certificate is shown before the client names one)."""
    return TRANSFER_PREFIX + node


def is_transfer_key(key: str) -> bool:
    """Whether a ledger `tls` key (or request id) names a node's transfer certificate."""
    return key.startswith(TRANSFER_PREFIX)


def transfer_reason(mesh: Mesh, ledger: Ledger, node: str,
                    now: Optional[str] = None) -> Optional[str]:
    """Why `node`'s transfer certificate must be issued, or None when kept: the rule of an
    instance's server certificate (tls_reason), SAN the node's address, key sealed to it alone."""
    return tls_reason(mesh, ledger, transfer_key(node), node, now)


def transfer_request(node: str, reason: str, instances: Iterable[str]) -> Request:
    carried = ", ".join(sorted(set(instances)))
    return Request(kind=TLS_REQUEST, id=transfer_key(node), holders=pvector([node]),
                   reason=f"transfer certificate of {node} (the state of {carried} waits "
                          f"for it): {reason}")


def transfer_files(ledger: Ledger, node: str) -> Optional[list[FileDecl]]:
    """`node`'s transfer certificate (public), its key (a sealed secret, 0600) and the mesh
    CA's certificate it verifies its peer with; None until all three are issued."""
    key = transfer_key(node)
    ref = tls_ref(ledger, key)
    if ref is None or not ledger.ca:
        return None
    return [FileDecl(f"{TRANSFER_DIR}/{CERT_FILE}", ledger.tls[key].pem, "0644",
                     reason=f"transfer certificate of {node}"),
            FileDecl(f"{TRANSFER_DIR}/{KEY_FILE}", secret_token(ref.credential), "0600", ref,
                     reason=f"transfer key of {node}"),
            ca_file(ledger.ca)]
