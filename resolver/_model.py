"""The input documents: module manifests, provision definitions, the mesh description.

Invariants:
- Every class is frozen and every collection immutable (pyrsistent), so a loaded document can
  be shared, hashed and compared; nothing downstream can change what the operator wrote.
- The model holds only what the operator wrote. Positions live in a separate SourceMap, never
  in the model, so `structure(unstructure(x)) == x` holds for every document type.
- Field names are Python spellings of the YAML keys: `run_once` is `run-once`, `as_` is `as`
  (see _convert.yaml_key). The conversion is mechanical so errors can name the key as written.
- Names are plain strings; references between documents are checked by _validate, not here.
"""

from __future__ import annotations

from typing import Any, Optional

import attrs
from pyrsistent import pmap, pvector
from pyrsistent.typing import PMap, PVector

EMPTY_MAP: PMap[Any, Any] = pmap()
EMPTY_VEC: PVector[Any] = pvector()


def _map(default: PMap[Any, Any] = EMPTY_MAP) -> Any:
    return attrs.field(default=default)


# --------------------------------------------------------------------------- module.yaml


@attrs.frozen
class Artifact:
    """An image the module runs: an upstream repository and tag, or a local build.

    `repository`+`tag` name an upstream image; the ledger pins it to a digest.
    `build` names a build context (relative to the module directory) and `base` the artifacts
    it builds FROM (`module/artifact` or a bare name in the same module).
    """

    repository: Optional[str] = None
    tag: Optional[str] = None
    build: Optional[str] = None
    base: PVector[str] = EMPTY_VEC
    mirror: bool = True  # whether the mesh's own registry should carry it once self-hosting
    # The image can serve TLS with the server certificate the mesh mounts at /etc/mesh/tls
    # (server.crt, server.key); its server reads the key as `tls_key_owner` (uid:gid), so the
    # key file is written 0600 owned by it (resolver/_tls.py).
    tls: bool = False
    tls_key_owner: str = "0:0"


@attrs.frozen
class Listen:
    """A port the module's container listens on. `fixed` is a host port a protocol fixes."""

    port: int
    protocol: str = "tcp"
    fixed: Optional[int] = None
    container: Optional[str] = None  # which container serves it; default the first long-running
    # It serves TLS with the instance's certificate from the mesh CA: consumers are told values
    # that require and verify it (the provision's `tls:`), and are given the CA certificate.
    tls: bool = False
    plain_same_node: bool = False  # with tls: consumers on the provider's own node stay plain
    http: bool = False  # it speaks plain HTTP: it may provide an `http-route` (resolver/_names)


@attrs.frozen
class Provide:
    """A provision this module serves through one of its listens."""

    provision: str
    listen: str
    admin: Optional[str] = None  # the module secret the provisioner authenticates with


@attrs.frozen
class Require:
    """A requirement: a provision (by protocol) or a module by name, bound under `as`; with
    `each`, every provider of the provision in its scope (`within`), as a list."""

    as_: str
    provision: Optional[str] = None
    module: Optional[str] = None
    listen: Optional[str] = None  # with `module`: which of its listens (default its first)
    provider: Optional[str] = None  # a provider instance named in the manifest
    part: Optional[str] = None
    optional: bool = False
    each: bool = False  # bind every provider of `provision` in scope (a fan-in), not one
    within: Optional[str] = None  # with `each`: `mesh` (the default) or `node` (its own only)
    at_least: int = 0  # with `each`: fewer providers in scope is a refusal


@attrs.frozen
class StateDir:
    """The module's own directory on the node: created with owner and mode, one owner a path."""

    path: str
    owner: str = "0:0"  # uid:gid
    mode: str = "0750"


@attrs.frozen
class Access:
    """Operator-owned data the mesh never creates, chowns or removes."""

    path: str
    mode: str = "ro"  # ro | rw


@attrs.frozen
class Mount:
    """A container mount naming exactly one source: a state dir, an access, a facility, a
    requirement whose binding values are mounted as one file (`binding`, in `format`: env,
    json, yaml or prometheus-file-sd; env when not given), or the mesh CA's certificate
    (`ca: true`). The last two are files the mesh writes (resolver/_binding_files.py), always
    read-only."""

    target: str
    state: Optional[str] = None
    access: Optional[str] = None
    facility: Optional[str] = None
    binding: Optional[str] = None  # a requirement's `as`
    ca: bool = False
    format: Optional[str] = None  # with `binding`: one of BINDING_FORMATS (default env)
    owner: Optional[str] = None  # with `binding`: uid:gid of the file (0400); none: 0444
    read_only: bool = False


@attrs.frozen
class HttpCheck:
    """An HTTP health check: GET `path` on the listen named."""

    listen: str
    path: str = "/"


@attrs.frozen
class Health:
    """Exactly one of a command run in the container, a tcp listen, or an http request."""

    command: Optional[PVector[str]] = None
    tcp: Optional[str] = None
    http: Optional[HttpCheck] = None
    timeout: int = 60  # seconds apply waits for an answer


@attrs.frozen
class Container:
    """One container of a module: the artifact it runs, its command, env (placeholders
    `${…}` filled by the resolver), mounts and health."""

    name: str
    artifact: str
    command: Optional[PVector[str]] = None
    env: PMap[str, str] = EMPTY_MAP
    mounts: PVector[Mount] = EMPTY_VEC
    run_once: bool = False
    part: Optional[str] = None
    health: Optional[Health] = None
    # secrets the container reads from files, not its environment (resolver/_secret_files.py)
    secret_files: PVector["SecretFile"] = EMPTY_VEC


SECRETS_DIR = "/run/secrets"
"""Where a container's secret files appear inside it: the one directory the mesh mounts
read-only for them (Docker's and Compose's convention)."""


@attrs.frozen
class SecretFile:
    """A secret a container reads from a file (`secret-files:`): `content` (placeholders as in
    env) is written to `path`, a file in SECRETS_DIR, mode 0400 and owned by `owner`
    (uid:gid, the user the container's process reads it as); `env`, when given, is a variable
    set to `path` (`POSTGRES_PASSWORD_FILE`), so the value itself is in no environment."""

    path: str
    content: str
    env: Optional[str] = None
    owner: str = "0:0"


@attrs.frozen
class Part:
    """A named part of a module, that containers may belong to."""

    description: str = ""


ROTATION_WAYS = ("restart", "by-hand", "step")
"""How a module's own secret reaches its running app when rotated (SecretRotation.how)."""


@attrs.frozen
class SecretRotation:
    """How a new generation of one of the module's own secrets takes effect (`rotation:`):
    `restart`, the app reads it at every start, so recreating its containers is enough (what a
    secret without an entry gets); `by-hand`, it reads it only when it first initialises, and
    `instruction` is the one line the operator runs to put it in force (`mesh rotate` prints
    it, `mesh applied --by-hand` settles it); `step`, the run-once container named by `step`
    puts it in force (it reruns whenever the secret's generation changes). A provider's admin
    secret whose grant kind has a provisioner is put in force by the provisioner whatever this
    says."""

    how: str = "restart"
    instruction: str = ""
    step: Optional[str] = None


@attrs.frozen
class BackupMethod:
    """How an instance of the module is backed up consistently while it runs: `dump` is run
    inside its container `container` and writes the whole state to its standard output (as
    postgres's `pg_dumpall`); `restore` is run there and reads such a dump on its standard
    input. A module without one is backed up by stopping it and copying its state directories.
    """

    container: str
    dump: PVector[str]
    restore: PVector[str]


@attrs.frozen
class UpgradeRule:
    """Which image changes the module's state survives only through a migration (module.yaml
    `upgrades:`): `version` is a regular expression over the tag of artifact `artifact`
    (default: the module's first artifact by name) whose first group is the version of the
    data's format (postgres: `^([0-9]+)`, its major). A pin change between two tags whose
    versions differ is refused until the instance names one of `migrations` (run-once
    containers of the module that convert the state) or `fresh` (resolver/_upgrades.py)."""

    version: str
    artifact: Optional[str] = None
    migrations: PVector[str] = EMPTY_VEC


@attrs.frozen
class Module:
    """A module manifest (module.yaml): what it runs, listens on, provides and requires."""

    name: str
    description: str = ""
    artifacts: PMap[str, Artifact] = EMPTY_MAP
    listens: PMap[str, Listen] = EMPTY_MAP
    provides: PVector[Provide] = EMPTY_VEC
    requires: PVector[Require] = EMPTY_VEC
    claims: PVector[str] = EMPTY_VEC
    secrets: PVector[str] = EMPTY_VEC  # module-own credentials, e.g. `admin` → ${self.admin.password}
    state: PMap[str, StateDir] = EMPTY_MAP
    accesses: PMap[str, Access] = EMPTY_MAP
    facilities: PVector[str] = EMPTY_VEC
    parts: PMap[str, Part] = EMPTY_MAP
    containers: PVector[Container] = EMPTY_VEC
    rotation: PMap[str, SecretRotation] = EMPTY_MAP  # secret → how a new generation takes effect
    backup: Optional[BackupMethod] = None  # how a consistent snapshot is taken (None: stop-copy)
    upgrades: Optional[UpgradeRule] = None  # which version changes need a migration


# --------------------------------------------------------------------------- provisions.yaml

#: Every kind of grant a provision may ask its provider for (provisions.yaml `grant`).
GRANT_KINDS = ("database+login", "vhost+account", "bucket+key", "client+secret", "bearer-token",
               "backup-login", "none")


@attrs.frozen
class ProvisionTls:
    """What a consumer of a TLS listen is told besides the plain keys: `values` added to its
    binding values and `url` in place of the plain one, templates over the keys and `{ca}`
    (the mesh CA certificate's path inside the consumer's containers)."""

    url: Optional[str] = None
    values: PMap[str, str] = EMPTY_MAP


@attrs.frozen
class Provision:
    """How a provision is served: how many providers, what a consumer is told, what is granted."""

    scope: str = "node"  # node | mesh
    grant: str = "none"  # one of GRANT_KINDS
    keys: PVector[str] = pvector(["host", "port"])
    url: Optional[str] = None  # template over the keys, e.g. postgres://{user}@{host}:{port}/{database}
    description: str = ""
    tls: Optional[ProvisionTls] = None  # what a consumer of a TLS listen is told (None: no TLS)
    # values every consumer is told as they are written, for keys the mesh does not derive
    # (`transport: streamable-http` of a tool server); each must be in `keys`
    values: PMap[str, str] = EMPTY_MAP


@attrs.frozen
class Provisions:
    """The provision definitions of a catalogue (provisions.yaml)."""

    provisions: PMap[str, Provision] = EMPTY_MAP


# --------------------------------------------------------------------------- mesh.yaml


@attrs.frozen
class Node:
    """A machine of the mesh: its address, facilities, public key, and whether it is the
    control node."""

    address: str
    ssh_port: int = 22
    facilities: PVector[str] = EMPTY_VEC
    public_key: Optional[str] = None  # X25519, base64; secrets are sealed to it
    control: bool = False  # the node that holds the mesh CA and issues


@attrs.frozen
class Exposure:
    """A listen opened beyond the mesh: to anywhere (`any`) or to named IPv4/IPv6 addresses and
    prefixes. It opens the listen's assigned host port; it never assigns or moves one."""

    to: PVector[str]
    reason: str = ""


@attrs.frozen
class Instance:
    """A module assigned to a node. The instance's name is its identity; its node may change.

    Moving an instance whose module owns state directories is refused until the instance says
    what happens to the data: `state-from: <old node>` (the operator copied it from there) or
    `fresh: true` (it may start empty, on this and any later move)."""

    module: str
    node: str
    parts: PVector[str] = EMPTY_VEC
    bind: PMap[str, str] = EMPTY_MAP  # requirement name (`as`) → provider instance
    expose: PMap[str, Exposure] = EMPTY_MAP  # listen name → who beyond the mesh may reach it
    state_from: Optional[str] = None  # the node its state directories were copied from
    name: Optional[str] = None  # its web name: a label of the mesh `domain`, or a name in it
    fresh: bool = False  # its state may start empty when it moves
    upgrade: Optional["UpgradeConfirm"] = None  # a version change of its state, confirmed


@attrs.frozen
class UpgradeConfirm:
    """An instance's confirmation of one version change its module's `upgrades:` guards
    (mesh.yaml `upgrade: {to: "16", by: fresh}`): the version it confirms moving to, and how
    its state gets there: one of the module's `migrations`, or `fresh` (the node sets the old
    state directories aside, kept, and starts the new version on empty ones)."""

    to: str
    by: str


@attrs.frozen
class PortRange:
    """The host ports the resolver assigns from (inclusive)."""

    first: int = 20000
    last: int = 29999


@attrs.frozen
class Floor:
    """A port every node keeps open. ssh and the broker's port are always floors."""

    port: int
    protocol: str = "tcp"
    sources: str = "any"  # any | mesh
    reason: str = ""


@attrs.frozen
class Substrate:
    """The instances the control plane itself relies on: its store and its broker."""

    store: Optional[str] = None  # the postgres instance the control plane reads
    broker: Optional[str] = None  # the amqp provider every node enrols through


@attrs.frozen
class CaConfig:
    """The mesh CA: where its key lives on the control node, and its certificates' validity."""

    path: str = "ca/mesh-ca.key"  # relative to the mesh directory, on the control node
    validity_days: int = 365
    renew_before_days: int = 30


@attrs.frozen
class Logs:
    """How much of its output the node's container runtime keeps per container: the logging
    driver and its rotation (files of at most `max_size`, `max_files` of them)."""

    driver: str = "json-file"  # json-file | local: both rotate, both are read by `mesh logs`
    max_size: str = "10m"  # a positive whole number with k, m or g (Docker's size syntax)
    max_files: int = 3


@attrs.frozen
class BackupTarget:
    """Where snapshots are written: the instance of the mesh that provides `backup-target`
    (`instance`; mesh.yaml `target: INSTANCE`), or a restic repository the mesh does not run
    (any location restic reaches: a path, `sftp:user@host:/path`, `rest:https://...`) held by
    `node`. Either is on another node than each instance it backs up."""

    node: str = ""
    repository: str = ""
    instance: Optional[str] = None  # a backup store of the mesh (then node/repository unset)


@attrs.frozen
class Backups:
    """Backups of stateful instances: their target and how often each instance is backed up
    (`every`: instance → a duration such as 6h, 1d; `mesh status` shows one overdue)."""

    target: Optional[BackupTarget] = None
    every: PMap[str, str] = EMPTY_MAP


@attrs.frozen
class Acme:
    """Certificates for the web names from a public ACME CA instead of the mesh CA
    (resolver/_names): the ingress (Caddy) obtains and renews them itself, registering with
    `email`, and keeps them in its state directory."""

    email: str


@attrs.frozen
class Mesh:
    """The mesh description (mesh.yaml): nodes, instances of modules on them, defaults, and
    where the catalogue and ledger are."""

    mesh: str
    nodes: PMap[str, Node]
    instances: PMap[str, Instance] = EMPTY_MAP
    catalogue: str = "catalogue"  # relative to the mesh directory
    ledger: str = "ledger.yaml"
    defaults: PMap[str, str] = EMPTY_MAP  # provision → provider instance
    substrate: Substrate = Substrate()
    host_ports: PortRange = PortRange()
    floors: PVector[Floor] = EMPTY_VEC
    ca: CaConfig = CaConfig()
    logs: Logs = Logs()  # every container's log limits (mesh-wide)
    backups: Backups = Backups()  # the backup target and each instance's schedule
    domain: Optional[str] = None  # the DNS domain instances' `name`s live in (resolver/_names)
    acme: Optional[Acme] = None  # names' certificates from ACME, not the mesh CA (_names)


# What the package's root takes from this module (resolver/__init__.py joins these lists).
__all__ = [
    "Mesh", "Node", "Instance", "Exposure", "Floor", "PortRange", "CaConfig", "Substrate", "Logs",
    "Backups", "BackupTarget", "Acme", "BackupMethod", "UpgradeRule", "UpgradeConfirm",
    "Module", "Container", "Listen", "Provide", "Require", "Access", "Mount", "StateDir", "Health",
    "HttpCheck", "Artifact", "Part", "SecretRotation", "SecretFile",
    "Provisions", "Provision", "ProvisionTls",
    "GRANT_KINDS",
]
