"""Stable problem codes. A code, once published, keeps its meaning; tests and fixtures name them.

Invariants:
- Every Problem the resolver emits carries one of these codes.
- Unsatisfied requirements carry one of the REQUIREMENT_STATES as their `state` too.
"""

# unsatisfied requirements (the `state` of the consumer's requirement)
NO_PROVIDER = "no-provider"  # nothing in the catalogue provides it (or nothing assigned does)
PROVIDER_NOT_ASSIGNED = "provider-not-assigned"  # a named provider instance does not exist
PROVIDER_NODE_UNKNOWN = "provider-node-unknown"  # the provider's node is not in the mesh
AMBIGUOUS_PROVIDER = "ambiguous-provider"  # several candidates, no rule picks one
NOT_A_PROVIDER = "not-a-provider"  # a named instance does not provide the provision
REQUIREMENT_STATES = (NO_PROVIDER, PROVIDER_NOT_ASSIGNED, PROVIDER_NODE_UNKNOWN, AMBIGUOUS_PROVIDER,
                      NOT_A_PROVIDER)

# refusals of one instance
UNKNOWN_MODULE = "unknown-module"
UNKNOWN_NODE = "unknown-node"
UNKNOWN_PART = "unknown-part"
UNKNOWN_PROVISION = "unknown-provision"
DUPLICATE_CLAIM = "duplicate-claim"  # two claims of one thing on one node
PORT_CONFLICT = "port-conflict"  # a fixed host port claimed twice on a node (or a floor's port)
UNDECLARED_MOUNT = "undeclared-mount"
FACILITY_MISSING = "facility-missing"  # the node does not offer a facility the module needs
STATE_PATH_OWNERS = "state-path-owners"  # an owned state path with two owners
SECOND_MESH_PROVIDER = "second-mesh-provider"  # a second provider of a mesh-scoped provision
UNPINNED_ARTIFACT = "unpinned-artifact"  # an artifact with no digest in the ledger
PORT_RANGE_EXHAUSTED = "port-range-exhausted"
BLOCKED_BY_PROVIDER = "blocked-by-provider"  # a required provider is itself blocked
MISSING_PUBLIC_KEY = "missing-public-key"  # a node holds secrets but has no key to seal to
UNKNOWN_DEFAULT = "unknown-default"  # a mesh default / substrate names a missing instance
UNKNOWN_LISTEN = "unknown-listen"  # an `expose:` names no listen of the instance's module
MOVE_WITH_STATE = "move-with-state"  # a move of an instance owning state, data fate unsaid
STATE_FROM_MISMATCH = "state-from-mismatch"  # state-from names a node it was not on

# refusals of a mesh-wide setting (they block no instance: the setting is not applied)
FLOOR_CONFLICT = "floor-conflict"  # a floor (or ssh-port) on a host port kept by an instance

# the state of a refused instance that was declared before (a warning: nothing is removed)
HELD = "held"  # it keeps its last good declaration until the refusal is fixed

# informational
PENDING_CREDENTIAL = "pending-credential"
PROVIDER_MOVED = "provider-moved"
PORT_RELEASED = "port-released"
EXPOSURE_FAMILY = "exposure-family"  # an exposure source of the other family than the node's address
STALE_STATE_FROM = "stale-state-from"  # state-from with no move to confirm: remove it
