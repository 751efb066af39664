"""Artifacts: pins, the build graph, staleness, where an image is named from, and who may pull
from and push to the mesh's own registry (the artifact store).

`Resolution.artifacts` is `EXTERNAL` or `SELF_HOSTING`. The control node's pinning, mirroring
and building, the registry client, the htpasswd provisioner and `mesh stale` are the callers.
"""

from ._artifacts import (EXTERNAL, SELF_HOSTING, PinRequest, artifact_digest, artifact_state,
                         artifacts_changed_by_pins, build_graph, catalogue_artifacts,
                         choose_artifact_store, choose_artifact_store_instance,
                         containers_using, current_digests, image_reference, is_loopback,
                         pending_mirror, pin_key, pin_requests, split_repository, stale,
                         staleness, used_artifacts, validate_artifact_store_modules,
                         validate_build_graph, with_pins)
from ._registry_access import ACCOUNT_KIND as REGISTRY_ACCOUNT_KIND
from ._registry_access import AUTH_HOST_DIR as REGISTRY_AUTH_HOST_DIR
from ._registry_access import HTPASSWD, PUSH_LOGIN, push_credential
from ._registry_access import account_user as registry_user

__all__ = [
    # Where images come from
    "EXTERNAL", "SELF_HOSTING", "choose_artifact_store", "choose_artifact_store_instance",
    "validate_artifact_store_modules", "image_reference", "split_repository", "is_loopback",
    "artifact_state", "pending_mirror",
    # Pins
    "PinRequest", "pin_key", "pin_requests", "with_pins", "artifacts_changed_by_pins",
    "catalogue_artifacts", "used_artifacts", "containers_using",
    # The build graph and staleness
    "build_graph", "validate_build_graph", "current_digests", "artifact_digest", "stale",
    "staleness",
    # The registry's accounts
    "REGISTRY_ACCOUNT_KIND", "REGISTRY_AUTH_HOST_DIR", "HTPASSWD", "PUSH_LOGIN",
    "registry_user", "push_credential",
]
