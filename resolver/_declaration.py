"""What resolution produces: per-node declarations, per-instance renderings, bindings, problems.

Invariants:
- A declaration is the whole desired state of one node; it carries no secret value, only
  SecretRef (credential id and generation; generation None means "not issued yet").
- Secret values reach a container through `${secret:<credential id>}` tokens in env values
  and in its secret files' contents; the executor substitutes them after unsealing, so a
  rotated generation changes the container's declaration (and so its config digest) without
  any value appearing here.
- Collections are ordered deterministically (containers in declaration order, everything else
  sorted) so the canonical serialisation, and with it the digest, is byte-stable.
- The digest covers everything in the declaration except `serial` and `digest` themselves.
- A node's declaration is assembled from one InstanceRendering per instance declared on it
  (plus the grants and firewall allows its instances' consumers on other nodes need); a held
  instance's rendering is the one last written for it, byte for byte (resolver/_records.py).
"""

from __future__ import annotations

from typing import Optional

import attrs
from pyrsistent.typing import PVector

from ._frozen import EMPTY_FROZEN, FrozenMap
from ._model import EMPTY_VEC


@attrs.frozen(order=True)
class SecretRef:
    """A credential a container's env refers to, and the generation it is told."""

    credential: str
    generation: Optional[int] = None  # None: pending, the issuer has not issued it yet


@attrs.frozen(order=True)
class PublishedPort:
    """A container port published on the node's address (`host_ip:host_port`)."""

    host_ip: str
    host_port: int
    container_port: int
    protocol: str
    listen: str


@attrs.frozen(order=True)
class MountDecl:
    """A bind mount of a container: a state directory, a shared access or a facility."""

    kind: str  # state | access | facility
    source: str  # host path
    target: str
    read_only: bool = False


@attrs.frozen
class HealthDecl:
    """How the runtime checks a container is healthy: a command, a TCP connect or an
    HTTP GET."""

    kind: str  # command | tcp | http
    command: Optional[PVector[str]] = None
    port: Optional[int] = None  # the container port checked (tcp, http)
    host_port: Optional[int] = None  # the published host port, when published
    path: str = "/"
    timeout: int = 60


@attrs.frozen(order=True)
class LogsDecl:
    """The container's log limits, from mesh.yaml's `logs:`: the runtime's logging driver and
    its rotation options (`max-size`, `max-file`). The default is mesh.yaml's default, so a
    declaration written before containers carried limits loads with them."""

    driver: str = "json-file"
    max_size: str = "10m"
    max_files: int = 3


@attrs.frozen
class ContainerDecl:
    """One container as the node's runtime must run it: image by digest, command, env,
    mounts, published ports, health, and the credentials its env refers to."""

    name: str  # the runtime's container name, unique on the node
    instance: str
    container: str  # the container's name inside its module
    image: str  # repository@sha256:…
    command: Optional[PVector[str]] = None
    env: FrozenMap[str, str] = EMPTY_FROZEN
    secrets: PVector[SecretRef] = EMPTY_VEC  # every credential its env refers to
    ports: PVector[PublishedPort] = EMPTY_VEC
    mounts: PVector[MountDecl] = EMPTY_VEC
    run_once: bool = False
    health: Optional[HealthDecl] = None
    labels: FrozenMap[str, str] = EMPTY_FROZEN
    # The container's MAC address on the runtime's bridge: set for the containers of an
    # instance bound to a provider on its own node, whose firewall opening names it.
    mac: Optional[str] = None
    logs: LogsDecl = LogsDecl()  # what the runtime keeps of its output
    # files in its secret directory (/run/secrets, mounted read-only from the node's
    # <state root>/.mesh/secrets/<name>/): path inside the container, content with
    # `${secret:…}` tokens (their SecretRefs are in `secrets`), mode 0400, owner
    secret_files: PVector["FileDecl"] = EMPTY_VEC


@attrs.frozen(order=True)
class StateDirDecl:
    """A directory the node keeps for an instance's state, with its owner and mode."""

    path: str
    uid: int
    gid: int
    mode: str  # octal, e.g. "0750"
    instance: str
    name: str


@attrs.frozen(order=True)
class AccessDecl:
    """A host directory a node's instances share (a module's `accesses:`), mounted at `path`."""

    path: str
    mode: str  # ro | rw (rw if any instance accesses it read-write)
    instances: PVector[str] = EMPTY_VEC


@attrs.frozen(order=True)
class FirewallAllow:
    """A port the node's firewall opens to the mesh's nodes named in `sources`."""

    port: int
    protocol: str
    sources: PVector[str]  # node addresses, sorted
    reason: str
    published: bool = True  # published by the container runtime (needs the forward hook too)


@attrs.frozen(order=True)
class FirewallFloor:
    """A port a mesh.yaml floor keeps open whatever the mesh declares (`sources` empty:
    from anywhere)."""

    port: int
    protocol: str
    sources: PVector[str]  # empty means from anywhere
    reason: str


@attrs.frozen(order=True)
class FirewallLocal:
    """A provider port opened to its bound consumers on the same node: their containers, by
    the MAC address each is created with, arriving on the container runtime's bridge."""

    port: int
    protocol: str
    macs: PVector[str]  # the consumers' containers, sorted
    reason: str


@attrs.frozen(order=True)
class FirewallExposure:
    """A listen opened beyond the mesh (mesh.yaml `expose:`): to anywhere (`any`), or to IPv4
    and IPv6 addresses and prefixes, written canonically (`192.168.1.0/24`, `fd00::/64`)."""

    port: int
    protocol: str
    sources: PVector[str]
    reason: str


@attrs.frozen
class FirewallIntent:
    """What the node's firewall must allow: mesh ports by source, floors, same-node
    bindings and openings beyond the mesh."""

    address: str  # the node's own address
    allow: PVector[FirewallAllow] = EMPTY_VEC
    floors: PVector[FirewallFloor] = EMPTY_VEC
    # every node address of the mesh, when a floor of this node admits them all (else empty)
    mesh_sources: PVector[str] = EMPTY_VEC
    local: PVector[FirewallLocal] = EMPTY_VEC  # same-node bindings
    expose: PVector[FirewallExposure] = EMPTY_VEC  # openings beyond the mesh


@attrs.frozen(order=True)
class GrantDecl:
    """What a provider must make exist for one binding."""

    provision: str
    kind: str  # the grant kind: database+login, vhost+account, bucket+key, client+secret
    provider: str
    consumer: str
    consumer_node: str
    login: str  # the role / account name derived once; dual-login kinds add _a / _b
    resource: str  # database / vhost / bucket / client name
    credential: SecretRef
    slot: Optional[str] = None  # the login slot holders are told to use (a | b)
    retiring: Optional[SecretRef] = None  # still accepted until every holder applied `credential`
    retiring_slot: Optional[str] = None
    admin: Optional[SecretRef] = None  # the provider's admin credential the provisioner uses


@attrs.frozen(order=True)
class ProviderDecl:
    """A provision an instance on this node serves, with what its provisioner needs even when
    no grant is left (so logins of grants that went are still found and dropped)."""

    instance: str
    provision: str
    kind: str  # the provision's grant kind
    listen: str
    port: int  # the assigned host port
    container_port: int
    admin: Optional[SecretRef] = None  # the credential the provisioner authenticates with
    # a rotation of that admin credential in progress: the generation the provisioner puts in
    # force on the running server (authenticating with `admin`) before holders are told it
    admin_pending: Optional[SecretRef] = None


@attrs.frozen(order=True)
class BindingEntry:
    """One provider of a binding that takes every provider (`each`): what the consumer is told
    of it (password as a token) and the credential that token refers to."""

    provider: str
    values: FrozenMap[str, str]
    secret: Optional[SecretRef] = None


@attrs.frozen(order=True)
class BindingDecl:
    """A consumer's view of one binding: the values it is told (password as a token).

    A requirement that takes every provider (`each: true`) is one BindingDecl with `each` set,
    `provider` empty, `values` holding `count` (the number of entries, as text) and one entry
    per provider in `entries`, in provider-name order (none is a valid, visible state)."""

    consumer: str
    requirement: str
    provider: str
    provision: Optional[str]
    values: FrozenMap[str, str]
    secret: Optional[SecretRef] = None
    kind: str = "none"  # grant kind, for verify
    each: bool = False
    entries: PVector[BindingEntry] = EMPTY_VEC

    def each_binding(self) -> tuple["BindingDecl", ...]:
        """The binding as one BindingDecl per provider: itself, or for a binding that takes
        every provider, one per entry (what verify checks, one provider at a time)."""
        if not self.each:
            return (self,)
        return tuple(BindingDecl(self.consumer, self.requirement, e.provider, self.provision,
                                 e.values, e.secret, self.kind) for e in self.entries)

    def held_secrets(self) -> tuple[SecretRef, ...]:
        """Every credential the binding's values refer to: its own, or each entry's."""
        if not self.each:
            return (self.secret,) if self.secret is not None else ()
        return tuple(e.secret for e in self.entries if e.secret is not None)


@attrs.frozen(order=True)
class HeldDecl:
    """An instance refused now and held at its last good declaration: one per refusal."""

    instance: str
    code: str  # the refusal's problem code
    message: str
    file: str = ""
    line: int = 0
    col: int = 0


@attrs.frozen
class InstanceRendering:
    """One instance's part of the declarations, as written: its own containers, state
    directories, accesses, what it provides and the binding values it is told on its node, and
    what its providers' nodes hold for it (its grants and the firewall allows it needs, by
    provider node). The ledger keeps the last written one of each instance: what the instance
    keeps, byte for byte, while it is refused (held)."""

    node: str
    containers: PVector[ContainerDecl] = EMPTY_VEC
    state_dirs: PVector[StateDirDecl] = EMPTY_VEC
    accesses: PVector[AccessDecl] = EMPTY_VEC  # instances: itself only, with its own mode
    providers: PVector[ProviderDecl] = EMPTY_VEC
    bindings: PVector[BindingDecl] = EMPTY_VEC  # as the consumer
    grants: FrozenMap[str, PVector[GrantDecl]] = EMPTY_FROZEN  # provider node → grants for it
    allows: FrozenMap[str, PVector[FirewallAllow]] = EMPTY_FROZEN  # provider node → one per binding
    locals: FrozenMap[str, PVector[FirewallLocal]] = EMPTY_FROZEN  # its own node → one per binding
    exposures: PVector[FirewallExposure] = EMPTY_VEC  # its listens opened beyond the mesh
    claims: PVector[str] = EMPTY_VEC  # the singular things it claims on its node, kept held
    files: PVector["FileDecl"] = EMPTY_VEC  # its TLS certificate and key, the CA it verifies with
    carried_from: Optional[str] = None  # a move's old node, its state carried while `state-from` says so


@attrs.frozen(order=True)
class RegistryLogin:
    """The account a node's container runtime pulls from a registry with (its own)."""

    registry: str  # host:port
    user: str
    secret: SecretRef


@attrs.frozen(order=True)
class FileDecl:
    """A file the node must hold, written whole at `path` (under the node's file root): public
    content as written, or a `${secret:<id>}` token the executor unseals (`secret`)."""

    path: str  # absolute
    content: str
    mode: str = "0644"  # octal
    secret: Optional[SecretRef] = None
    reason: str = ""
    owner: Optional[str] = None  # uid:gid the file is chowned to (None: as written, root's)
    # further credentials whose tokens the content holds: a list binding's entries after the first
    more_secrets: PVector[SecretRef] = EMPTY_VEC

    def refs(self) -> tuple[SecretRef, ...]:
        """Every credential whose `${secret:…}` token the content holds, each once."""
        first = (self.secret,) if self.secret is not None else ()
        return first + tuple(r for r in self.more_secrets if r != self.secret)


@attrs.frozen(order=True)
class StateTransfer:
    """A move that carries its data (`state-from:`): the same record in the declarations of
    both nodes. On `source` (role `leave`) the instance is not declared; that node serves its
    state directories on `port` to `target_address` only. On `target` (role `arrive`) the
    instance's containers start only once the copy is verified and in place. The two nodes
    authenticate each other by mutual TLS on their transfer certificates from the mesh CA
    (resolver/_tls.transfer_files): `certificate`, `key` and `ca` name this node's declared
    files; while either node's certificate is not issued they are "" and `waits` says why (the
    target does not start the instance, the source serves nothing)."""

    instance: str
    role: str  # leave | arrive: what this node does
    source: str  # the node the instance was on (its state stays there)
    source_address: str
    target: str  # the node it moves to
    target_address: str
    port: int  # the source node's transfer port, open to the target's address only
    dirs: PVector[StateDirDecl] = EMPTY_VEC  # the directories carried, as declared on target
    certificate: str = ""  # this node's transfer certificate (a declared file's path)
    key: str = ""  # its key (a declared file holding a `${secret:…}` token)
    ca: str = ""  # the mesh CA's certificate the peer is verified against
    waits: str = ""  # why the transfer cannot run yet ("" once both certificates are issued)


@attrs.frozen(order=True)
class UpgradeGuard:
    """What the node does before it recreates a container of a stateful instance on another
    image (resolver/_upgrades.py): snapshot it into the backup target's restic `repository`
    (by the module's dump run in `container`, or stop-copy of `state` when `container` is
    None), and, with `fresh`, set the old state directories aside (kept) once the snapshot is
    written, so version `version` starts on empty ones. The node acts only when a running
    container of the instance runs another image than declared; nothing secret is in it."""

    instance: str
    module: str
    repository: str
    target_node: str
    state: PVector[str] = EMPTY_VEC  # the node's paths of its state directories, by name
    container: Optional[str] = None  # the module's `backup:` container (None: stop-copy)
    dump: PVector[str] = EMPTY_VEC
    restore: PVector[str] = EMPTY_VEC
    version: Optional[str] = None  # the version of its state's format the new image holds
    fresh: bool = False  # `upgrade: {to: version, by: fresh}`: start on empty state dirs


@attrs.frozen(order=True)
class BackupDuty:
    """How this node backs up one of its stateful instances (resolver/_backup_target.py): the
    restic `repository` WITHOUT credentials (`rest:https://ADDR:PORT/LOGIN/` for a store the
    mesh runs), the store `login` (None: an outside repository), the `${secret:…}` tokens of
    the login's `password` and of the restic repository `key`, `refs` their generations, the
    node's path of the mesh CA that verifies the store (`ca`, "" none), and how the state is
    read (the module's dump in `container`, or stop-copy of `state`). No value is in it."""

    instance: str
    module: str
    repository: str
    target_node: str
    login: Optional[str] = None
    password: str = ""
    key: str = ""
    ca: str = ""
    every: Optional[int] = None  # seconds between scheduled backups (mesh.yaml backups.every)
    state: PVector[str] = EMPTY_VEC
    container: Optional[str] = None
    dump: PVector[str] = EMPTY_VEC
    restore: PVector[str] = EMPTY_VEC
    refs: PVector[SecretRef] = EMPTY_VEC  # the generations of `password` and `key` told


@attrs.frozen
class Declaration:
    """Everything one node must run and allow, as `mesh plan` writes it and the node's
    agent applies it: containers, state directories, firewall intent, provider grants, bindings."""

    mesh: str
    node: str
    address: str
    serial: int = 0
    digest: str = ""
    containers: PVector[ContainerDecl] = EMPTY_VEC
    state_dirs: PVector[StateDirDecl] = EMPTY_VEC
    accesses: PVector[AccessDecl] = EMPTY_VEC
    firewall: Optional[FirewallIntent] = None
    grants: PVector[GrantDecl] = EMPTY_VEC
    providers: PVector[ProviderDecl] = EMPTY_VEC  # what the instances here provide
    bindings: PVector[BindingDecl] = EMPTY_VEC  # bindings whose consumer runs on this node
    instances: PVector[str] = EMPTY_VEC  # instances declared here, held ones included
    certificate: Optional[str] = None  # the node certificate's PEM (public)
    held: PVector[HeldDecl] = EMPTY_VEC  # instances refused now, kept at their last good state
    files: PVector[FileDecl] = EMPTY_VEC  # files outside the state root (trust, TLS), by path
    registry_logins: PVector[RegistryLogin] = EMPTY_VEC  # this node's pull account(s)
    transfers: PVector[StateTransfer] = EMPTY_VEC  # moves carrying state from or to here
    upgrades: PVector[UpgradeGuard] = EMPTY_VEC  # stateful instances snapshotted before a new image
    backups: PVector[BackupDuty] = EMPTY_VEC  # stateful instances here and their backup target


@attrs.frozen(order=True)
class Binding:
    """One consumer's requirement bound to its provider: where it dials (host, port) and
    why that provider was chosen (`chosen_by`, a ChosenBy value)."""

    consumer: str
    requirement: str
    provider: str
    provision: Optional[str]
    module: Optional[str]
    consumer_node: str
    provider_node: str
    chosen_by: str  # instance override | manifest | recorded | co-located | mesh default | sole provider | each
    host: str
    port: int
    login: Optional[str] = None
    resource: Optional[str] = None
    url: Optional[str] = None
    secret: Optional[SecretRef] = None
    each: bool = False  # one entry of a requirement that takes every provider


@attrs.frozen(order=True)
class Problem:
    """Something the resolution refuses, warns about or states: a ProblemCode, its Severity,
    the instance and requirement it concerns, and where the input says it (file:line:col)."""

    code: str
    severity: str  # error | warning | info
    message: str
    instance: Optional[str] = None
    requirement: Optional[str] = None
    file: str = ""
    line: int = 0
    col: int = 0
    state: Optional[str] = None  # for unsatisfied requirements: no-provider, provider-not-assigned, …
    candidates: PVector[str] = EMPTY_VEC
    blocks: PVector[str] = EMPTY_VEC  # instances refused because of it (absent, or held)
    also: PVector[str] = EMPTY_VEC  # `file:line:col` of the other inputs it involves

    @property
    def where(self) -> str:
        """`file:line:col` of the input that says it (the file alone when the line is
        unknown)."""
        return f"{self.file}:{self.line}:{self.col}" if self.line else self.file

    @property
    def seen_at(self) -> str:
        """`where`, followed by the other inputs the problem involves (`also`): every position
        an operator needs to read to resolve it."""
        return f"{self.where} (and {', '.join(self.also)})" if self.also else self.where


@attrs.frozen(order=True, cache_hash=True)  # (hashed once: sets of tens of thousands of them)
class Request:
    """Something the issuer (outside the resolver) must issue: a credential or a certificate."""

    kind: str  # credential | certificate
    id: str  # credential id, or node name for a certificate
    holders: PVector[str] = EMPTY_VEC  # nodes the value is sealed to
    reason: str = ""
    slot: Optional[str] = None


@attrs.frozen(order=True)
class Change:
    """A notable difference against the ledger the plan must state (moves, releases, pins…)."""

    kind: str
    subject: str
    message: str


# What the package's root takes from this module (resolver/__init__.py joins these lists).
__all__ = [
    "Declaration", "ContainerDecl", "PublishedPort", "HealthDecl", "MountDecl", "StateDirDecl",
    "LogsDecl", "AccessDecl", "FileDecl", "SecretRef", "RegistryLogin", "BindingDecl", "BindingEntry", "GrantDecl",
    "ProviderDecl", "HeldDecl", "FirewallIntent", "FirewallFloor", "FirewallAllow",
    "FirewallLocal", "FirewallExposure", "Binding", "Problem", "Request", "InstanceRendering",
    "Change", "StateTransfer", "UpgradeGuard",
]
