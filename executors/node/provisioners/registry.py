"""The one registry of provisioners: which grant kind the mesh makes true, and with what.

Invariants:
- Two tables, one per variant of the provisioner family: `KNOWN`, grant kind → the module
  that provisions it on a running server (the module itself is the extensions.Provisioner:
  its functions are the protocol's methods), and `FILE_KINDS`, grant kind → the module that
  keeps it in a file on the provider's node (an extensions.FileProvisioner). `mesh apply`
  (the admin checks and provisioning), `mesh verify` (bindings and admins) and anything else
  ask this registry, and only it, whether a kind has a provisioner; there is no second
  dispatch by module name or by a table of checks.
- `binding_checker_for` says what checks a kind's bindings for `mesh verify`: its
  service-backed provisioner, or its file-backed one when that is a BindingChecker (a tool
  server's tokens).
- `probe_for` says what checks the bindings of a provision that grants nothing, by its
  protocol (`PROBES`, provision → module, an extensions.ProtocolProbe: a `metrics` entry must
  answer Prometheus exposition); a provision it does not list is checked as reachable only.
- A kind the registry does not list has no provisioner, and the registry says so in one
  wording (`no_provisioner`): its grants are reported on every apply and every verify as not
  provisioned (a warning naming what to create by hand), never skipped silently.
- A provisioner's module is imported the first time its kind is asked for, so a node whose
  declaration grants nothing of that kind never needs its client library (psycopg,
  requests). A missing client library is an ImportError naming the package, which the
  `mesh` command turns into "install the node extra".
- `register` adds or replaces one kind's service-backed provisioner (another tool embedding
  the executors, or a test); it never removes the kinds known here.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Callable, Mapping, Optional, TypeGuard, TypeVar

from resolver import MeshError

from executors.node.extensions import BindingChecker, FileProvisioner, ProtocolProbe, Provisioner

from executors.node.provisioners.base import AMQP_KIND, POSTGRES_KIND

KNOWN: Mapping[str, str] = {
    POSTGRES_KIND: "executors.node.provisioners.postgres",
    AMQP_KIND: "executors.node.provisioners.amqp",
}

# Grant kinds kept in a file on the provider's node rather than through a server's admin
# interface: the mesh registry's accounts (htpasswd). `mesh apply` runs them as a hook of
# their own, bound to the node's file root (grants.provision_files); provision_grants without
# a file root leaves them to it.
FILE_KINDS: Mapping[str, str] = {
    "registry+account": "executors.node.provisioners.htpasswd",
    "bearer-token": "executors.node.provisioners.tokens",
    "backup-login": "executors.node.provisioners.backup_logins",
}

# Provisions that grant nothing, checked by their protocol (`mesh verify`); imported on first use.
PROBES: Mapping[str, str] = {
    "metrics": "executors.node.provisioners.metrics_probe",
}

_Variant = TypeVar("_Variant", Provisioner, FileProvisioner)


def _is_provisioner(module: ModuleType) -> TypeGuard[Provisioner]:
    return isinstance(module, Provisioner)


def _is_file_provisioner(module: ModuleType) -> TypeGuard[FileProvisioner]:
    return isinstance(module, FileProvisioner)


def _load(module_name: str, kind: str, fits: Callable[[ModuleType], TypeGuard[_Variant]],
          protocol: str) -> _Variant:
    """The provisioner module `module_name`, checked to fit `protocol` for kind `kind`."""
    module = importlib.import_module(module_name)
    if not fits(module):
        raise MeshError(f"{module_name} lacks a member of the {protocol} protocol")
    if module.kind != kind:
        raise MeshError(f"{module_name} provisions {module.kind}, not {kind}")
    return module


class Registry:
    """Grant kind → Provisioner or FileProvisioner, loaded on first use."""

    def __init__(self, modules: Mapping[str, str], files: Mapping[str, str] = FILE_KINDS):
        self._modules = dict(modules)
        self._files = dict(files)
        self._loaded: dict[str, Provisioner] = {}
        self._loaded_files: dict[str, FileProvisioner] = {}

    def kinds(self) -> tuple[str, ...]:
        """Every grant kind with a service-backed provisioner, sorted."""
        return tuple(sorted(set(self._modules) | set(self._loaded)))

    def provides(self, kind: str) -> bool:
        """Whether grants of `kind` have a provisioner (nothing is imported to say so)."""
        return kind in self._loaded or kind in self._modules or kind in self._files

    def in_file(self, kind: str) -> bool:
        """Whether grants of `kind` are kept in a file (nothing is imported to say so)."""
        return kind in self._files

    def get(self, kind: str) -> Optional[Provisioner]:
        """The service-backed provisioner of `kind`, or None when the mesh has none."""
        found = self._loaded.get(kind)
        if found is None and kind in self._modules:
            found = self._loaded[kind] = _load(self._modules[kind], kind, _is_provisioner,
                                                 "Provisioner")
        return found

    def get_file(self, kind: str) -> Optional[FileProvisioner]:
        """The file-backed provisioner of `kind`, or None when it is kept in no file."""
        found = self._loaded_files.get(kind)
        if found is None and kind in self._files:
            found = self._loaded_files[kind] = _load(self._files[kind], kind,
                                                            _is_file_provisioner,
                                                            "FileProvisioner")
        return found

    def register(self, provisioner: Provisioner) -> None:
        """Make `provisioner` the one of its kind."""
        self._loaded[provisioner.kind] = provisioner


REGISTRY = Registry(KNOWN)


def provisioner_for(kind: str) -> Optional[Provisioner]:
    """The service-backed provisioner of grant kind `kind` in the registry, or None."""
    return REGISTRY.get(kind)


def file_provisioner_for(kind: str) -> Optional[FileProvisioner]:
    """The file-backed provisioner of grant kind `kind` in the registry, or None."""
    return REGISTRY.get_file(kind)


def binding_checker_for(kind: str) -> Optional[BindingChecker]:
    """What checks bindings of grant kind `kind` for `mesh verify`: its service-backed
    provisioner, else its file-backed one when that checks bindings too, else None."""
    found = REGISTRY.get(kind)
    if found is not None:
        return found
    in_file = REGISTRY.get_file(kind)
    return in_file if isinstance(in_file, BindingChecker) else None


def no_provisioner(kind: str) -> str:
    """How a grant kind without a provisioner is said, wherever it is reported."""
    return f"no provisioner for grant kind {kind}"


def probe_for(provision: Optional[str]) -> Optional[ProtocolProbe]:
    """What checks bindings of `provision` (one that grants nothing) by its protocol, or None
    when the mesh checks them as reachable only."""
    if provision is None or provision not in PROBES:
        return None
    module = importlib.import_module(PROBES[provision])
    if not isinstance(module, ProtocolProbe):
        raise MeshError(f"{PROBES[provision]} lacks a member of the ProtocolProbe protocol")
    if module.provision != provision:
        raise MeshError(f"{PROBES[provision]} probes {module.provision}, not {provision}")
    return module
