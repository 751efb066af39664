"""Provisioners: make every grant of a node's declaration true on its provider, and check it.

- `registry.py`: the one registry of grant kind → provisioner, of either variant of the family
  (extensions.Provisioner, service-backed; extensions.FileProvisioner, file-backed), used by
  apply and verify alike; a kind it does not list is reported as not provisioned.
- `postgres.py` (database+login) and `amqp.py` (vhost+account, the broker's management API):
  each a query (I/O) → `parse(rows)` → `diff` → `after` → apply, and a binding check; the pure
  half of each (desired and observed state, parse, diff, after) is its `*_plan.py`.
- `htpasswd.py` (registry+account: the mesh registry's accounts, kept in its htpasswd file on
  the registry's node, the file-backed kind the registry lists in FILE_KINDS, which `mesh
  apply` provisions through `provision_files`, bound to the node's file root) with its pure
  half `htpasswd_plan.py`.
- `tokens.py` (bearer-token: a tool server's per-consumer tokens, kept as hashes in its tokens
  file, the same shape and the same pure half as htpasswd; file-backed too) and its binding
  check, MCP `initialize` and `tools/list` with the consumer's token (`mcp_probe.py`).
- `grants.py`: `provision_grants`, the family's one driver (the rules every kind shares:
  no provisioner, no secret values, a credential not issued yet), what `mesh apply` runs on a
  provider's node (`provision`, `provision_files`).
- `admin_login.py`: a provider's admin credential on its running server (the check before
  anything changes, a rotated admin password put in force on the running server).
- `base.py`: what they share (endpoints, outcomes, the readiness wait, which slot holds which
  generation, the one block that carries out a service-backed plan).

Arrows inside: grants → admin_login → registry → base; postgres, amqp and htpasswd → their
plan and base only (the registry imports them by name when their kind is first asked for),
so no module here imports another in a circle. This package re-exports the names callers use.
"""

from executors.node.extensions import SecretSource

from executors.node.provisioners.admin_login import check_admins, read_admin, refused_message
from executors.node.provisioners.base import (
    AMQP_KIND,
    POSTGRES_KIND,
    Admin,
    AdminReading,
    BindingCheck,
    Endpoint,
    GrantOutcome,
    NodeFiles,
    ProvisionError,
    ProvisionResult,
    admin_of,
    derive_endpoint,
    idle_providers,
    needs_provisioning,
    wait_ready,
)
from executors.node.provisioners.grants import (
    provision,
    provision_files,
    provision_grants,
    summarise,
)
from executors.node.provisioners.registry import (
    REGISTRY,
    file_provisioner_for,
    no_provisioner,
    provisioner_for,
)

__all__ = ["AMQP_KIND", "POSTGRES_KIND", "REGISTRY", "Admin", "AdminReading", "BindingCheck",
           "Endpoint", "GrantOutcome", "NodeFiles", "ProvisionError", "ProvisionResult",
           "SecretSource", "admin_of", "check_admins", "derive_endpoint",
           "file_provisioner_for", "idle_providers", "needs_provisioning", "no_provisioner",
           "provision", "provision_files", "provision_grants", "provisioner_for", "read_admin",
           "refused_message", "summarise", "wait_ready"]
