"""What resolution produces: per-node declarations, bindings, problems, requests, the new ledger.

Invariants:
- A declaration is the whole desired state of one node; it carries no secret value, only
  SecretRef (credential id and generation; generation None means "not issued yet").
- Secret values reach a container's environment through `${secret:<credential id>}` tokens in
  env values; the executor substitutes them after unsealing, so a rotated generation changes
  the container's declaration (and so its config digest) without any value appearing here.
- Collections are ordered deterministically (containers in declaration order, everything else
  sorted) so the canonical serialisation, and with it the digest, is byte-stable.
- The digest covers everything in the declaration except `serial` and `digest` themselves.
"""

from __future__ import annotations

from typing import Optional

import attrs
from pyrsistent.typing import PMap, PVector

from ._ledger import Ledger
from ._model import EMPTY_MAP, EMPTY_VEC

SECRET_TOKEN = "${{secret:{}}}"  # format with a credential id


def secret_token(credential: str) -> str:
    return SECRET_TOKEN.format(credential)


@attrs.frozen(order=True)
class SecretRef:
    credential: str
    generation: Optional[int] = None  # None: pending, the issuer has not issued it yet


@attrs.frozen(order=True)
class PublishedPort:
    host_ip: str
    host_port: int
    container_port: int
    protocol: str
    listen: str


@attrs.frozen(order=True)
class MountDecl:
    kind: str  # state | access | facility
    source: str  # host path
    target: str
    read_only: bool = False


@attrs.frozen
class HealthDecl:
    kind: str  # command | tcp | http
    command: Optional[PVector[str]] = None
    port: Optional[int] = None  # the container port checked (tcp, http)
    host_port: Optional[int] = None  # the published host port, when published
    path: str = "/"
    timeout: int = 60


@attrs.frozen
class ContainerDecl:
    name: str  # the runtime's container name, unique on the node
    instance: str
    container: str  # the container's name inside its module
    image: str  # repository@sha256:…
    command: Optional[PVector[str]] = None
    env: PMap[str, str] = EMPTY_MAP
    secrets: PVector[SecretRef] = EMPTY_VEC  # every credential its env refers to
    ports: PVector[PublishedPort] = EMPTY_VEC
    mounts: PVector[MountDecl] = EMPTY_VEC
    run_once: bool = False
    health: Optional[HealthDecl] = None
    labels: PMap[str, str] = EMPTY_MAP


@attrs.frozen(order=True)
class StateDirDecl:
    path: str
    uid: int
    gid: int
    mode: str  # octal, e.g. "0750"
    instance: str
    name: str


@attrs.frozen(order=True)
class AccessDecl:
    path: str
    mode: str  # ro | rw (rw if any instance accesses it read-write)
    instances: PVector[str] = EMPTY_VEC


@attrs.frozen(order=True)
class FirewallAllow:
    port: int
    protocol: str
    sources: PVector[str]  # node addresses, sorted
    reason: str
    published: bool = True  # published by the container runtime (needs the forward hook too)


@attrs.frozen(order=True)
class FirewallFloor:
    port: int
    protocol: str
    sources: PVector[str]  # empty means from anywhere
    reason: str


@attrs.frozen
class FirewallIntent:
    address: str  # the node's own address
    allow: PVector[FirewallAllow] = EMPTY_VEC
    floors: PVector[FirewallFloor] = EMPTY_VEC
    # every node address of the mesh, when a floor of this node admits them all (else empty)
    mesh_sources: PVector[str] = EMPTY_VEC


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


@attrs.frozen(order=True)
class BindingDecl:
    """A consumer's view of one binding: the values it is told (password as a token)."""

    consumer: str
    requirement: str
    provider: str
    provision: Optional[str]
    values: PMap[str, str]
    secret: Optional[SecretRef] = None
    kind: str = "none"  # grant kind, for verify


@attrs.frozen
class Declaration:
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
    instances: PVector[str] = EMPTY_VEC  # instances declared here (blocked ones are absent)
    certificate: Optional[str] = None  # the node certificate's PEM (public)


@attrs.frozen(order=True)
class Binding:
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
    blocks: PVector[str] = EMPTY_VEC  # instances left out of their declarations because of it

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}:{self.col}" if self.line else self.file


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


@attrs.frozen
class Resolution:
    declarations: PMap[str, Declaration]
    bindings: PVector[Binding]
    problems: PVector[Problem]
    requests: PVector[Request]
    changes: PVector[Change]
    ledger: Ledger
    artifacts: str = "external"  # external | self-hosting

    @property
    def refused(self) -> bool:
        return any(p.severity == "error" for p in self.problems)
