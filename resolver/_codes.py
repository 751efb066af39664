"""Stable problem codes and the rules that choose a provider, as string enums.

Invariants:
- A code, once published, keeps its meaning and its value; tests, fixtures and programs reading
  plans name them. Members are `str`s (StrEnum), so `code == "no-provider"` holds and they
  serialise as their value.
- Every Problem the resolver emits carries one ProblemCode; unsatisfied requirements carry one
  of REQUIREMENT_STATES as their `state` too.
- Every Binding says which ChosenBy rule picked its provider.
"""

from __future__ import annotations

import enum


class ProblemCode(enum.StrEnum):
    """Why the resolver states a problem. Values are the codes printed by `mesh plan`."""

    # unsatisfied requirements (the `state` of the consumer's requirement)
    NO_PROVIDER = "no-provider"
    """Nothing in the catalogue provides it (or nothing assigned does)."""
    PROVIDER_NOT_ASSIGNED = "provider-not-assigned"
    """A named provider instance does not exist."""
    PROVIDER_NODE_UNKNOWN = "provider-node-unknown"
    """The provider's node is not in the mesh."""
    AMBIGUOUS_PROVIDER = "ambiguous-provider"
    """Several candidates and no rule picks one."""
    NOT_A_PROVIDER = "not-a-provider"
    """A named instance does not provide the provision."""
    TOO_FEW_PROVIDERS = "too-few-providers"
    """A requirement taking every provider (`each`) has fewer in scope than its `at-least`."""
    BIND_ON_EACH = "bind-on-each"
    """An instance's `bind:` names a requirement that takes every provider (`each`)."""

    # refusals of one instance
    UNKNOWN_MODULE = "unknown-module"
    """An instance names a module the catalogue does not have."""
    UNKNOWN_NODE = "unknown-node"
    """An instance is assigned to a node the mesh does not list."""
    UNKNOWN_PART = "unknown-part"
    """An instance installs a part its module does not have."""
    UNKNOWN_PROVISION = "unknown-provision"
    """A provision provided or required that provisions.yaml does not define."""
    DUPLICATE_CLAIM = "duplicate-claim"
    """Two claims of one thing on one node."""
    PORT_CONFLICT = "port-conflict"
    """A fixed host port claimed twice on a node (or a floor's port)."""
    UNDECLARED_MOUNT = "undeclared-mount"
    """A mount the module does not declare."""
    FACILITY_MISSING = "facility-missing"
    """The node does not offer a facility the module needs."""
    STATE_PATH_OWNERS = "state-path-owners"
    """An owned state path with two owners."""
    SECOND_MESH_PROVIDER = "second-mesh-provider"
    """A second provider of a mesh-scoped provision."""
    UNPINNED_ARTIFACT = "unpinned-artifact"
    """An artifact with no digest in the ledger."""
    PORT_RANGE_EXHAUSTED = "port-range-exhausted"
    """No free host port is left in the mesh's range on the node."""
    BLOCKED_BY_PROVIDER = "blocked-by-provider"
    """A required provider is itself blocked."""
    MISSING_PUBLIC_KEY = "missing-public-key"
    """A node holds secrets but has no key to seal them to."""
    UNKNOWN_DEFAULT = "unknown-default"
    """A mesh default or the substrate names a missing instance."""
    UNKNOWN_LISTEN = "unknown-listen"
    """An `expose:` names no listen of the instance's module."""
    MOVE_WITH_STATE = "move-with-state"
    """A move of an instance owning state, the fate of its data unsaid."""
    STATE_FROM_MISMATCH = "state-from-mismatch"
    """`state-from:` names a node the instance was not on."""
    NO_MESH_CA = "no-mesh-ca"
    """A container mounts the mesh CA certificate and the mesh has no CA yet."""

    # refusals of a mesh-wide setting (they block no instance: the setting is not applied)
    FLOOR_CONFLICT = "floor-conflict"
    """A floor (or ssh-port) on a host port kept by an instance."""

    # the state of a refused instance that was declared before (nothing is removed)
    HELD = "held"
    """It keeps its last good declaration until the refusal is fixed."""

    # informational
    PENDING_CREDENTIAL = "pending-credential"
    """A credential waits to be issued."""
    PROVIDER_MOVED = "provider-moved"
    """A provider moved to another node."""
    PORT_RELEASED = "port-released"
    """A host port was released with its instance."""
    EXPOSURE_FAMILY = "exposure-family"
    """An exposure source of the other address family than the node's address."""
    STALE_STATE_FROM = "stale-state-from"
    """`state-from:` with no move to confirm: remove it."""
    UPGRADE_NEEDS_MIGRATION = "upgrade-needs-migration"
    """A pin change crosses the module's `upgrades:` version with no `upgrade:` confirming it."""
    UPGRADE_UNKNOWN_STEP = "upgrade-unknown-step"
    """`upgrade: by:` names neither `fresh` nor one of the module's migrations."""
    STALE_UPGRADE = "stale-upgrade"
    """`upgrade:` confirms a version its image is at already: remove it once applied."""
    BACKUP_TARGET = "backup-target"
    """`backups: target:` names no live provider of `backup-target`, or one on the node of an
    instance it backs up."""


class Severity(enum.StrEnum):
    """How much a problem weighs: an error fails `mesh check` and refuses what it blocks."""

    ERROR = "error"
    """Refuses what it blocks (or the setting it names); fails `mesh check`."""
    WARNING = "warning"
    """Stated in the plan; refuses nothing."""
    INFO = "info"
    """Stated in the plan for the operator's attention."""


class ChosenBy(enum.StrEnum):
    """The rule that picked a binding's provider, in the order the rules are tried
    (DESIGN.md, decision 1)."""

    INSTANCE_OVERRIDE = "instance override"
    """mesh.yaml names it on the consumer instance: `bind: {<as>: <provider>}`."""
    MANIFEST = "manifest"
    """The consumer's module names it: `requires[].provider`."""
    RECORDED = "recorded"
    """The ledger's recorded binding keeps it where the automatic rules would now pick
    otherwise (or nothing)."""
    CO_LOCATED = "co-located"
    """The only candidate on the consumer's own node."""
    MESH_DEFAULT = "mesh default"
    """mesh.yaml's `defaults:` names it for the provision."""
    SOLE_PROVIDER = "sole provider"
    """The only candidate in the mesh."""
    EACH = "each"
    """The requirement takes every provider in its scope (`each: true`): one of them."""


# The codes as module constants (`codes.HELD`), the spelling the resolver's stages use; outside
# resolver/ they are spelled as members of the public enum (`resolver.ProblemCode.HELD`).
NO_PROVIDER = ProblemCode.NO_PROVIDER
PROVIDER_NOT_ASSIGNED = ProblemCode.PROVIDER_NOT_ASSIGNED
PROVIDER_NODE_UNKNOWN = ProblemCode.PROVIDER_NODE_UNKNOWN
AMBIGUOUS_PROVIDER = ProblemCode.AMBIGUOUS_PROVIDER
NOT_A_PROVIDER = ProblemCode.NOT_A_PROVIDER
TOO_FEW_PROVIDERS = ProblemCode.TOO_FEW_PROVIDERS
BIND_ON_EACH = ProblemCode.BIND_ON_EACH
UNKNOWN_MODULE = ProblemCode.UNKNOWN_MODULE
UNKNOWN_NODE = ProblemCode.UNKNOWN_NODE
UNKNOWN_PART = ProblemCode.UNKNOWN_PART
UNKNOWN_PROVISION = ProblemCode.UNKNOWN_PROVISION
DUPLICATE_CLAIM = ProblemCode.DUPLICATE_CLAIM
PORT_CONFLICT = ProblemCode.PORT_CONFLICT
UNDECLARED_MOUNT = ProblemCode.UNDECLARED_MOUNT
FACILITY_MISSING = ProblemCode.FACILITY_MISSING
STATE_PATH_OWNERS = ProblemCode.STATE_PATH_OWNERS
SECOND_MESH_PROVIDER = ProblemCode.SECOND_MESH_PROVIDER
UNPINNED_ARTIFACT = ProblemCode.UNPINNED_ARTIFACT
PORT_RANGE_EXHAUSTED = ProblemCode.PORT_RANGE_EXHAUSTED
BLOCKED_BY_PROVIDER = ProblemCode.BLOCKED_BY_PROVIDER
MISSING_PUBLIC_KEY = ProblemCode.MISSING_PUBLIC_KEY
UNKNOWN_DEFAULT = ProblemCode.UNKNOWN_DEFAULT
UNKNOWN_LISTEN = ProblemCode.UNKNOWN_LISTEN
MOVE_WITH_STATE = ProblemCode.MOVE_WITH_STATE
STATE_FROM_MISMATCH = ProblemCode.STATE_FROM_MISMATCH
NO_MESH_CA = ProblemCode.NO_MESH_CA
FLOOR_CONFLICT = ProblemCode.FLOOR_CONFLICT
HELD = ProblemCode.HELD
PENDING_CREDENTIAL = ProblemCode.PENDING_CREDENTIAL
PROVIDER_MOVED = ProblemCode.PROVIDER_MOVED
PORT_RELEASED = ProblemCode.PORT_RELEASED
EXPOSURE_FAMILY = ProblemCode.EXPOSURE_FAMILY
STALE_STATE_FROM = ProblemCode.STALE_STATE_FROM
UPGRADE_NEEDS_MIGRATION = ProblemCode.UPGRADE_NEEDS_MIGRATION
UPGRADE_UNKNOWN_STEP = ProblemCode.UPGRADE_UNKNOWN_STEP
STALE_UPGRADE = ProblemCode.STALE_UPGRADE
BACKUP_TARGET = ProblemCode.BACKUP_TARGET

#: The codes a refused requirement's Selection.state takes.
REQUIREMENT_STATES: tuple[ProblemCode, ...] = (
    NO_PROVIDER, PROVIDER_NOT_ASSIGNED, PROVIDER_NODE_UNKNOWN, AMBIGUOUS_PROVIDER, NOT_A_PROVIDER)
"""The codes an unsatisfied requirement carries as its `state`."""


# What the package's root takes from this module (resolver/__init__.py joins these lists).
__all__ = ["ProblemCode", "Severity", "ChosenBy"]
