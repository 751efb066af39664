"""The ledger: what was issued once and is kept.

Invariants:
- The ledger is machine-written and versioned (`version: 1`); an unknown version is refused.
- Nothing in it is a plaintext secret: credentials carry generations and values sealed per
  holder node; the resolver only ever reads ids, generations and slots.
- An entry for a live instance never changes value between resolves (issued once); entries
  change only by an explicit operator act (rotate, refresh, renew, bind) or when their instance
  is gone (released, and the plan says so).
- Every key is a string so the ledger round-trips through YAML unchanged.
- `nodes` and `declared` record what was written out, not what was resolved: only
  resolver.rendering.record_declared (called by whatever writes declarations) changes them, so a
  serial or a held rendering always refers to a declaration a node may have been handed.
"""

from __future__ import annotations

from typing import Optional

import attrs
from pyrsistent.typing import PMap, PVector

from ._declaration import InstanceRendering
from ._frozen import EMPTY_FROZEN, FrozenMap
from ._model import EMPTY_MAP, EMPTY_VEC

#: The ledger format this library reads and writes; another version is refused.
LEDGER_VERSION = 1


@attrs.frozen
class PortAssignment:
    """A host port issued to one listen of an instance, on a node."""

    node: str
    port: int


@attrs.frozen
class Generation:
    """One generation of a credential: its number, its login slot, its value sealed per node."""

    generation: int
    slot: Optional[str] = None  # "a" | "b" for providers that hold two logins, else None
    sealed: PMap[str, str] = EMPTY_MAP  # holder node → base64 sealed box
    # the same value sealed to the control node, which issued it: what lets the issuer re-seal
    # it to new holders when an instance moves (never told to a holder, never a holder itself)
    escrow: PMap[str, str] = EMPTY_MAP


@attrs.frozen
class Credential:
    """A credential's rotation state (the rules are resolver/_rotation.py's).

    `active` is what holders are told. `pending` is a rotated generation the provider must put
    in force before any holder is moved to it. `retiring` is the previous generation, still
    accepted by the provider until every holder node has reported `active` applied. `retired`
    lists the generations the provider must never accept again. The holder nodes are the keys
    of `active.sealed`.
    """

    active: Optional[Generation] = None
    retiring: Optional[Generation] = None
    pending: Optional[Generation] = None
    applied: PMap[str, int] = EMPTY_MAP  # holder node → generation it reported applied
    retired: PVector[int] = EMPTY_VEC
    provider_applied: int = 0  # generation the provider reported in force


@attrs.frozen
class Certificate:
    """A node certificate signed by the mesh CA. Public material only."""

    serial: str
    not_before: str  # ISO 8601, UTC
    not_after: str
    pem: str
    address: str = ""  # the node address in its SubjectAltName; a changed address re-requests
    public_key: str = ""  # the node's X25519 key (base64) it certifies; a changed key re-requests


@attrs.frozen
class NodeSerial:
    """The serial and digest of the last declaration written for a node; the next one written
    keeps the serial when its digest is the same, and takes serial + 1 otherwise."""

    serial: int
    digest: str


@attrs.frozen
class BuildRecord:
    """A built artifact's digest and the digests of the bases it was built from.

    `local`: built by `mesh build --local` into the control node's own Docker Engine, with no
    registry: `digest` is then the Engine's image ID (the SHA-256 of the image's config), which
    names the image there without a registry, and nothing can pull it. A build pushed to the
    mesh's registry (`local` false) records the registry's manifest digest instead.
    """

    digest: str
    bases: PMap[str, str] = EMPTY_MAP
    local: bool = False


@attrs.frozen
class Ledger:
    """What was issued once and is kept between resolutions: host ports, bindings, logins,
    credential generations, certificates, pins, builds and declared renderings."""

    version: int = LEDGER_VERSION
    # what every resolve issues afresh for every instance is kept in FrozenMaps (one object
    # each for the collector, where a PMap is several per entry): ports, bindings, logins
    ports: FrozenMap[str, FrozenMap[str, PortAssignment]] = EMPTY_FROZEN  # instance → listen → assignment
    bindings: FrozenMap[str, FrozenMap[str, str]] = EMPTY_FROZEN  # consumer → requirement → provider
    logins: FrozenMap[str, str] = EMPTY_FROZEN  # credential id → login
    credentials: PMap[str, Credential] = EMPTY_MAP  # credential id → rotation state
    certificates: PMap[str, Certificate] = EMPTY_MAP  # node → certificate
    # the mesh CA's own certificate (public), recorded by the issuer: what every node's
    # container runtime is told to trust for the mesh's registry
    ca: str = ""
    # instance → the TLS server certificate the mesh CA issued it (its key is the sealed
    # credential `tls/<instance>`): the artifact store serves with it
    tls: PMap[str, Certificate] = EMPTY_MAP
    pins: PMap[str, str] = EMPTY_MAP  # "repository:tag" → "sha256:…"
    mirrored: PMap[str, str] = EMPTY_MAP  # digest → registry address that holds it
    builds: PMap[str, BuildRecord] = EMPTY_MAP  # "module/artifact" → build record
    nodes: PMap[str, NodeSerial] = EMPTY_MAP  # node → last declaration written: serial, digest
    declared: PMap[str, InstanceRendering] = EMPTY_MAP  # instance → its last written rendering


#: The ledger of a mesh where nothing was issued yet (a missing ledger file).
EMPTY_LEDGER = Ledger()

# What the package's root takes from this module (resolver/__init__.py joins these lists).
__all__ = [
    "Ledger", "EMPTY_LEDGER", "PortAssignment", "Generation", "Credential", "Certificate",
    "NodeSerial", "BuildRecord",
]
