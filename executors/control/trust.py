"""What the control node trusts when it speaks to the mesh's own registry: the mesh CA alone.

Invariants:
- The mesh's registry (its artifact-store instance's address) is verified against the mesh
  CA's certificate: the one beside the CA key (`ca.path` with `.crt`), else the one the ledger
  records (`ca:`), written to a private temporary file for this process. Never unverified.
- Every other registry keeps the system's roots (registry.RegistryClient's default).
"""

from __future__ import annotations

import atexit
import os
import tempfile
from typing import Optional

from resolver._artifacts import artifact_store_address

from .ca import ca_cert_path


def ca_bundle(inputs) -> Optional[str]:
    """A file holding the mesh CA's certificate, or None when the mesh has no CA yet."""
    path = ca_cert_path(inputs.mesh_dir, inputs.mesh)
    if path.is_file():
        return str(path)
    if not inputs.ledger.ca:
        return None
    handle, name = tempfile.mkstemp(prefix="mesh-ca-", suffix=".crt")
    with os.fdopen(handle, "w") as out:
        out.write(inputs.ledger.ca)
    atexit.register(lambda: os.path.exists(name) and os.unlink(name))
    return name


def registry_trust(inputs) -> dict[str, str]:
    """registry address → CA bundle: the mesh's registry, trusted through the mesh CA."""
    address = artifact_store_address(inputs.catalogue, inputs.mesh, inputs.ledger)
    bundle = ca_bundle(inputs)
    if address is None or bundle is None:
        return {}
    return {address: bundle}
