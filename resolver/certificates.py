"""Certificates from the mesh CA: which node certificates must be issued and why, and the
artifact store's TLS server certificate (its request, its credential, why it is due), and
which of the mesh's certificates are expired or inside the renewal window (`mesh check`).

Pure, with the time passed in as an ISO 8601 string; the control node's issuer signs.
"""

from ._certs import (
    CertificateKind,
    DueCertificate,
    certificate_reason,
    certificate_requests,
    certificates_due,
    epoch_seconds,
    renewal_due,
)
from ._tls import (CA_CONTAINER_FILE, CA_HOST_FILE, TLS_REQUEST, is_tls_credential, name_reason,
                   server_certificate_path, tls_credential, tls_reason)
from ._tls import TRANSFER_DIR, is_transfer_key, transfer_key, transfer_reason
from ._names import is_name_key, name_key, name_of_key

__all__ = [
    # Node certificates
    "certificate_requests", "certificate_reason", "renewal_due", "epoch_seconds",
    # Certificates expired or inside the renewal window
    "certificates_due", "DueCertificate", "CertificateKind",
    # The artifact store's TLS certificate
    "TLS_REQUEST", "tls_credential", "is_tls_credential", "tls_reason",
    # Where a node holds the mesh CA's certificate, and where a TLS consumer's container sees it
    "CA_HOST_FILE", "CA_CONTAINER_FILE",
    # Where a TLS server instance's certificate is declared on its node
    "server_certificate_path",
    # Web names' certificates (an ingress's, resolver/_names)
    "name_reason", "name_key", "is_name_key", "name_of_key",
    # A state transfer's nodes' certificates (`transfer:<node>`, resolver/_moves)
    "transfer_key", "is_transfer_key", "transfer_reason", "TRANSFER_DIR",
]
