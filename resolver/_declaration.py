"""What resolution produces: per-node declarations, per-instance renderings, bindings, problems.

Invariants:
- A declaration is the whole desired state of one node; it carries no secret value, only
  SecretRef (credential id and generation; generation None means "not issued yet").
- Secret values reach a container's environment through `${secret:<credential id>}` tokens in
  env values; the executor substitutes them after unsealing, so a rotated generation changes
  the container's declaration (and so its config digest) without any value appearing here.
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
class BindingDecl:
    """A consumer's view of one binding: the values it is told (password as a token)."""

    consumer: str
    requirement: str
    provider: str
    provision: Optional[str]
    values: FrozenMap[str, str]
    secret: Optional[SecretRef] = None
    kind: str = "none"  # grant kind, for verify


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
    chosen_by: str  # instance override | manifest | recorded | co-located | mesh default | sole provider
    host: str
    port: int
    login: Optional[str] = None
    resource: Optional[str] = None
    url: Optional[str] = None
    secret: Optional[SecretRef] = None


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


@attrs.frozen(order=True)
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
    "AccessDecl", "FileDecl", "SecretRef", "RegistryLogin", "BindingDecl", "GrantDecl",
    "ProviderDecl", "HeldDecl", "FirewallIntent", "FirewallFloor", "FirewallAllow",
    "FirewallLocal", "FirewallExposure", "Binding", "Problem", "Request", "InstanceRendering",
    "Change",
]
