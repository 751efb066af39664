"""Certificates from the mesh CA: which node certificates must be issued and why, and the
artifact store's TLS server certificate (its request, its credential, why it is due).

Pure, with the time passed in as an ISO 8601 string; the control node's issuer signs.
"""

from ._certs import certificate_reason, certificate_requests, epoch_seconds, renewal_due
from ._tls import TLS_REQUEST, is_tls_credential, tls_credential, tls_reason

__all__ = [
    # Node certificates
    "certificate_requests", "certificate_reason", "renewal_due", "epoch_seconds",
    # The artifact store's TLS certificate
    "TLS_REQUEST", "tls_credential", "is_tls_credential", "tls_reason",
]
