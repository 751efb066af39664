"""Provisioners: make every grant of a node's declaration true on its provider, and check it.

- `registry.py`: the one table of grant kind → provisioner (extensions.Provisioner), used by
  apply and verify alike; a kind it does not list is reported as not provisioned.
- `postgres.py` (database+login) and `amqp.py` (vhost+account, the broker's management API):
  each a query (I/O) → `parse(rows)` → `diff` → `after` → apply, and a binding check; the pure
  half of each (desired and observed state, parse, diff, after) is its `*_plan.py`.
- `htpasswd.py` (registry+account: the mesh registry's accounts, kept in its htpasswd file on
  the registry's node, a file kind the registry lists in FILE_KINDS and `mesh apply` runs as a
  hook of its own, runner.file_hooks) with its pure half `htpasswd_plan.py`.
- `grants.py`: `provision_grants`, what `mesh apply` runs on a provider's node.
- `admin_login.py`: a provider's admin credential on its running server (the check before
  anything changes, a rotated admin password put in force on the running server).
- `base.py`: what they share (endpoints, outcomes, the readiness wait).

Arrows inside: grants → admin_login → registry → base; postgres and amqp → their plan and
base only (the registry imports them by name when their kind is first asked for), so no
module here imports another in a circle. This package re-exports the names callers use.
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
    ProvisionError,
    ProvisionResult,
    admin_of,
    derive_endpoint,
    idle_providers,
    needs_provisioning,
    wait_ready,
)
from executors.node.provisioners.grants import provision, provision_grants, summarise
from executors.node.provisioners.registry import REGISTRY, no_provisioner, provisioner_for

__all__ = ["AMQP_KIND", "POSTGRES_KIND", "REGISTRY", "Admin", "AdminReading", "BindingCheck",
           "Endpoint", "GrantOutcome", "ProvisionError", "ProvisionResult", "SecretSource",
           "admin_of", "check_admins", "derive_endpoint", "idle_providers",
           "needs_provisioning", "no_provisioner", "provision", "provision_grants",
           "provisioner_for", "read_admin", "refused_message", "summarise", "wait_ready"]
