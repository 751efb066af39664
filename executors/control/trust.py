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

from resolver import Inputs, MeshError, Resolution
from resolver import resolve_inputs
from resolver.artifacts import PUSH_LOGIN, push_credential, registry_user

from .ca import ca_cert_path


def ca_bundle(inputs: Inputs) -> Optional[str]:
    """A file holding the mesh CA's certificate, or None when the mesh has no CA yet."""
    path = ca_cert_path(inputs.mesh_dir, inputs.mesh)
    if path.is_file():
        return str(path)
    if not inputs.ledger.ca:
        return None
    handle, name = tempfile.mkstemp(prefix="mesh-ca-", suffix=".crt")
    with os.fdopen(handle, "w") as out:
        out.write(inputs.ledger.ca)
    def remove() -> None:
        if os.path.exists(name):
            os.unlink(name)

    atexit.register(remove)
    return name


def _resolved(inputs: Inputs) -> Resolution:
    """The mesh as resolved now: the resolver alone says which registry is the mesh's
    (resolver.artifacts.choose_artifact_store), so trust and pushes go where images are pulled
    from."""
    return resolve_inputs(inputs)


def registry_trust(inputs: Inputs) -> dict[str, str]:
    """registry address → CA bundle: the mesh's registry, trusted through the mesh CA."""
    address = _resolved(inputs).registry
    bundle = ca_bundle(inputs)
    if address is None or bundle is None:
        return {}
    return {address: bundle}


def push_auth(inputs: Inputs, key_file: Optional[str]) -> dict[str, tuple[str, str]]:
    """registry address → (the push account, its password), opened with `key_file` (the
    control node's private key, to which the push credential is sealed); {} without a key."""
    resolution = _resolved(inputs)
    address, store = resolution.registry, resolution.registry_instance
    if key_file is None or address is None or store is None:
        return {}
    # PyNaCl (the control extra) is needed only to open the push account: `mesh pin` and
    # `mesh mirror` without --key run without it
    from executors.common.keys import UnsealError, load_private_key, unseal

    credential = inputs.ledger.credentials.get(push_credential(store))
    active = credential.active if credential is not None else None
    if active is None:
        raise MeshError(f"the push account of {store} is not issued yet: `mesh plan --issue`")
    key = load_private_key(key_file)
    for box in list(active.sealed.values()) + list(active.escrow.values()):
        try:
            return {address: (registry_user(PUSH_LOGIN, active.slot), unseal(key, box))}
        except UnsealError:
            continue
    raise MeshError(f"{key_file} opens no value of {push_credential(store)} generation "
                    f"{active.generation}: it is sealed to {', '.join(sorted(active.sealed))}")
