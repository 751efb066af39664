"""Bindings while they are being resolved, and the names of the credentials they carry.

Invariants:
- One place names credentials: `credential_id` for a consumer's binding to a provider,
  `secret_id` for a module's own secret; the ledger, the issuer and rotation read these ids.
- A Bound is frozen: binding makes it whole (provider, rule, listen, grant kind, credential
  id); rendering turns it into the plan's Binding with `binding_record`. A requirement that
  takes every provider is one Bound per provider, each with its own credential id (the
  provider is part of it), so two providers never share a login.
- Imports only the model and the declaration types: the resolution stages (selection,
  refusals, rendering, assembly) all import it, and it imports none of them.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

import attrs

from ._declaration import Binding
from ._model import Require

DUAL_LOGIN_KINDS = ("database+login", "vhost+account", "registry+account", "bearer-token")
"""Grant kinds whose provider keeps two login slots for a credential (rotation without a gap):
PostgreSQL's two logins of one role, the broker's two accounts on one vhost, the mesh
registry's two htpasswd entries per account, a tool server's two tokens per consumer."""


def two_slots(kind: str, active_slot: Optional[str], issued: bool) -> bool:
    """Whether a credential of grant kind `kind` has two login slots: a dual kind's credential
    issued with a slot, or not issued yet (it is issued with one); a credential issued before
    its kind had two slots keeps its one login (`issued` without `active_slot`)."""
    return kind in DUAL_LOGIN_KINDS and (active_slot is not None or not issued)
RESOURCE_KEYS = {"database+login": "database", "vhost+account": "vhost",
                 "bucket+key": "bucket", "client+secret": "client"}
"""Grant kind → the binding value that names the resource granted."""
SECRET_KEYS = {"bearer-token": "token"}
"""Grant kind → the binding value its credential is told under, when not `password`."""


def credential_id(provision: str, provider: str, consumer: str) -> str:
    """The ledger's id of the credential `consumer` holds for `provision` at `provider`."""
    return f"{provision}/{provider}/{consumer}"


def secret_id(instance: str, name: str) -> str:
    """The ledger's id of module-own secret `name` of `instance`."""
    return f"secret/{instance}/{name}"


BoundKey = tuple[str, str, str]
"""A binding while it is resolved: (consumer, requirement `as`, provider). A requirement binds
one provider, or with `each: true` every provider in its scope: one key each, so a consumer's
bindings, and each requirement's entries in provider-name order, are consecutive when sorted."""


@attrs.frozen
class Bound:
    """A binding as the resolution stages pass it: the requirement, its provider and how it
    was chosen, the listen that serves it, the grant kind and the credential it carries."""

    consumer: str
    requirement: Require
    provider: str
    chosen_by: str
    listen: str
    kind: str = "none"
    credential: Optional[str] = None


def binding_record(b: Bound, consumer_node: str, provider_node: str, port: int,
                   values: Mapping[str, Any], secret: Any) -> Binding:
    """The plan's Binding of `b` (its consumer on `consumer_node`, its provider on
    `provider_node`, dialled at `port`), with the values rendered for its consumer."""
    return Binding(
        b.consumer, b.requirement.as_, b.provider, b.requirement.provision,
        b.requirement.module, consumer_node, provider_node, b.chosen_by, values["host"], port,
        values.get("user"), values.get(RESOURCE_KEYS.get(b.kind, "")) or None,
        values.get("url"), secret, b.requirement.each)
