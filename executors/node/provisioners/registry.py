"""The one registry of provisioners: which grant kind the mesh makes true, and with what.

Invariants:
- One table, `KNOWN`: grant kind → the module that provisions it (the module itself is the
  extensions.Provisioner: its functions are the protocol's methods). `mesh apply` (the admin checks and provisioning), `mesh verify`
  (bindings and admins) and anything else ask this registry, and only it, whether a kind has
  a provisioner; there is no second dispatch by module name or by a table of checks.
- A kind the registry does not list has no provisioner, and the registry says so in one
  wording (`no_provisioner`): its grants are reported on every apply and every verify as not
  provisioned (a warning naming what to create by hand), never skipped silently.
- A provisioner's module is imported the first time its kind is asked for, so a node whose
  declaration grants nothing of that kind never needs its client library (psycopg,
  requests). A missing client library is an ImportError naming the package, which the
  `mesh` command turns into "install the node extra".
- `register` adds or replaces one kind's provisioner (another tool embedding the executors,
  or a test); it never removes the kinds known here.
"""

from __future__ import annotations

import importlib
from typing import Mapping, Optional

from resolver import MeshError

from executors.node.extensions import Provisioner

from executors.node.provisioners.base import AMQP_KIND, POSTGRES_KIND

KNOWN: Mapping[str, str] = {
    POSTGRES_KIND: "executors.node.provisioners.postgres",
    AMQP_KIND: "executors.node.provisioners.amqp",
}


class Registry:
    """Grant kind → Provisioner, loaded on first use."""

    def __init__(self, modules: Mapping[str, str]):
        self._modules = dict(modules)
        self._loaded: dict[str, Provisioner] = {}

    def kinds(self) -> tuple[str, ...]:
        """Every grant kind with a provisioner, sorted."""
        return tuple(sorted(set(self._modules) | set(self._loaded)))

    def provides(self, kind: str) -> bool:
        """Whether grants of `kind` have a provisioner (nothing is imported to say so)."""
        return kind in self._loaded or kind in self._modules or kind in FILE_KINDS

    def get(self, kind: str) -> Optional[Provisioner]:
        """The provisioner of `kind`, or None when the mesh has none."""
        found = self._loaded.get(kind)
        if found is None and kind in self._modules:
            module = importlib.import_module(self._modules[kind])
            if not isinstance(module, Provisioner):
                raise MeshError(f"{self._modules[kind]} lacks a member of the Provisioner protocol")
            found = module
            if found.kind != kind:
                raise MeshError(f"{self._modules[kind]} provisions {found.kind}, not {kind}")
            self._loaded[kind] = found
        return found

    def register(self, provisioner: Provisioner) -> None:
        """Make `provisioner` the one of its kind."""
        self._loaded[provisioner.kind] = provisioner


# Grant kinds kept in a file on the provider's node rather than through a server's admin
# interface: the mesh registry's accounts (htpasswd). `mesh apply` runs them as a hook of
# their own (runner.provisioning_hooks); provision_grants leaves them to it.
FILE_KINDS: Mapping[str, str] = {
    "registry+account": "executors.node.provisioners.htpasswd",
}

REGISTRY = Registry(KNOWN)


def provisioner_for(kind: str) -> Optional[Provisioner]:
    """The provisioner of grant kind `kind` in the registry, or None."""
    return REGISTRY.get(kind)


def no_provisioner(kind: str) -> str:
    """How a grant kind without a provisioner is said, wherever it is reported."""
    return f"no provisioner for grant kind {kind}"
