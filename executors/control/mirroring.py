"""Mirroring: copy pinned images into the mesh's own registry, by digest, and record them.

Invariants:
- Registry to registry over the HTTP API (registry.py): manifests and blobs move as exact
  bytes, so the digest at the target is the pinned one; no Docker Engine is involved.
- Only pinned upstream artifacts are copied; a built artifact (pushed by its build) and one
  marked `mirror: false` are skipped and said so; an unpinned one is a failure located at its
  tag (file:line:col), and the others still go.
- Each copied digest is recorded in the ledger (`mirrored`: digest → registry address), which
  is what lets declarations name the mesh's registry (self-hosting). The copies are made
  outside the ledger lock and merged into the ledger as it is then, in one ledger transaction
  (ledger_transaction.merge_into_ledger): written (atomically, read back first) only when
  something new was recorded.
- The target is the mesh's own registry as the resolver chooses it (Resolution.registry, the
  one image references name) unless the caller names one. Every step is
  said through `say` as it happens.
"""

from __future__ import annotations

from typing import Callable, Optional

import attrs

from resolver import Inputs, Ledger, MeshError, resolve_inputs
from resolver.artifacts import (
    catalogue_artifacts,
    pin_key,
    used_artifacts,
)

from .ledger_transaction import merge_into_ledger
from .registry import RegistryClient, RegistryError


@attrs.frozen
class Mirrored:
    """What a mirror run did."""

    target: str  # the registry copied into
    failures: int  # artifacts that could not be mirrored
    ledger: Ledger  # with what was mirrored (written when it changed)
    written: bool
    state: str  # the mesh's artifacts state with the new ledger (Resolution.artifacts)
    registry_of_mesh: Optional[str]  # the mesh's own registry (may differ from target)


def mirror(inputs: Inputs, *, client: RegistryClient, registry: Optional[str] = None,
           every_artifact: bool = False,
           say: Callable[[str], None] = lambda line: None) -> Mirrored:
    """Copy every pinned artifact the mesh runs (of the catalogue, with `every_artifact`) into
    `registry` (default: the mesh's artifact-store instance); MeshError when there is none."""
    catalogue, mesh, ledger, sources = inputs.catalogue, inputs.mesh, inputs.ledger, inputs.sources
    # the mesh's own registry is the resolver's answer (Resolution.registry), the one every
    # image reference names: mirroring can never fill another registry than the one pulled from
    target = registry or resolve_inputs(inputs).registry
    if target is None:
        raise MeshError("the mesh has no registry to mirror into: assign one instance of a module "
                        "providing artifact-store (with its port in the ledger), or pass --registry HOST:PORT")
    every = catalogue_artifacts(catalogue)
    wanted = sorted(every) if every_artifact else sorted(used_artifacts(catalogue, mesh))
    say(f"mirroring into {target}")
    client.ping(target)

    mirrored = dict(ledger.mirrored)
    done: set[tuple[str, str]] = set()
    failures = 0
    for name in wanted:
        artifact = every[name]
        key = pin_key(artifact)
        module, artifact_name = name.split("/", 1)
        if key is None or not artifact.mirror or artifact.repository is None:
            why = "built artifact: pushed by its build" if key is None else "mirror: false"
            say(f"  skip {name}: {why}")
            continue
        digest = ledger.pins.get(key)
        if digest is None:
            failures += 1
            file, line, col = sources.where(f"module:{module}", "artifacts", artifact_name, "tag")
            say(f"{file}:{line}:{col}: artifact {artifact_name} ({key}) is not pinned; run "
                "`mesh pin` first")
            continue
        if (artifact.repository, digest) in done:
            continue
        say(f"→ {name}: {artifact.repository}@{digest}")
        try:
            path = client.copy_image(artifact.repository, digest, target, progress=say)
        except RegistryError as error:
            failures += 1
            file, line, col = sources.where(f"module:{module}", "artifacts", artifact_name,
                                            "repository")
            say(f"{file}:{line}:{col}: artifact {artifact_name} ({key}): {error}")
            continue
        done.add((artifact.repository, digest))
        mirrored[digest] = target
        say(f"  {target}/{path}@{digest}: held")

    updated = attrs.evolve(ledger, mirrored=ledger.mirrored.update(mirrored))
    written = updated != ledger
    if written:  # copied outside the lock: merged into the ledger as it is now
        merge_into_ledger(inputs.mesh_dir, lambda now: attrs.evolve(
            now, mirrored=now.mirrored.update(mirrored)))
        say(f"ledger written: {inputs.ledger_path}")
    after = resolve_inputs(inputs, updated)
    return Mirrored(target, failures, updated, written, after.artifacts, after.registry)
