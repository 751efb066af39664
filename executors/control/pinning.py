"""Pinning: record what each upstream tag points at, by digest, in the ledger.

Invariants:
- Nothing is pulled: each tag is asked of its registry (a manifest HEAD, registry.py) and the
  digest recorded as "repository:tag" → digest. A tag already pinned is asked again only when
  `refresh` names it (or is EVERYTHING), so pins never move by themselves.
- A registry that did not answer is not asked again in the same run; every tag that could not
  be resolved is said with the file:line:col of its artifact, and the others are recorded.
- The registries are asked outside the ledger lock; the pins are merged into the ledger as it
  is then, in one ledger transaction (ledger_transaction.merge_into_ledger), written
  (atomically, read back first) only when a pin changed. Every step is said through `say` as it happens; the caller prints it.
"""

from __future__ import annotations

from typing import Callable, Optional

import attrs

from resolver import Inputs, Ledger, MeshError
from resolver.artifacts import (
    artifacts_changed_by_pins,
    catalogue_artifacts,
    containers_using,
    pin_key,
    pin_requests,
    split_repository,
    used_artifacts,
    with_pins,
)

from .ledger_transaction import merge_into_ledger
from .registry import RegistryClient, RegistryError

EVERYTHING = "*"


@attrs.frozen
class Pinned:
    """What a pin run did."""

    wanted: tuple[str, ...]  # the artifacts considered (module/artifact)
    asked: int  # tags asked of their registries
    failures: int  # tags that could not be resolved
    ledger: Ledger  # the ledger with the new pins (written when it changed)
    written: bool
    moved: tuple[str, ...] = ()  # artifacts whose pin moved (a refresh)
    changed: tuple[str, ...] = ()  # containers those moved pins change


def pin(inputs: Inputs, *, client: RegistryClient, refresh: Optional[str] = None,
        every_artifact: bool = False, say: Callable[[str], None] = lambda line: None) -> Pinned:
    """Pin the tags of the artifacts the mesh runs (every artifact of the catalogue with
    `every_artifact`), asking again about `refresh` (an artifact, a repository:tag, or
    EVERYTHING); MeshError for a `refresh` that names nothing of the catalogue."""
    catalogue, ledger, sources = inputs.catalogue, inputs.ledger, inputs.sources
    every = catalogue_artifacts(catalogue)
    wanted = sorted(every) if every_artifact else sorted(used_artifacts(catalogue, inputs.mesh))
    asked_again = None
    if refresh is not None:
        known = set(every) | {pin_key(a) for a in every.values() if pin_key(a)}
        if refresh != EVERYTHING and refresh not in known:
            raise MeshError(f"--refresh {refresh}: no such artifact; expected module/artifact or "
                            f"repository:tag of the catalogue")
        asked_again = (refresh,)
        if refresh != EVERYTHING:  # refreshing one artifact pins it even if the mesh runs none
            wanted = sorted(set(wanted) | {k for k, a in every.items()
                                           if refresh in (k, pin_key(a))})
    requests_ = pin_requests(catalogue, ledger, wanted, asked_again)
    if not requests_:
        return Pinned(tuple(wanted), 0, 0, ledger, False)

    digests: dict[str, str] = {}
    unreachable: dict[str, str] = {}  # registry → the tag it failed for: not asked again
    failures = 0
    for request in requests_:
        registry = split_repository(request.repository)[0]
        say(f"→ {request.key}: asking {registry}")
        try:
            if registry in unreachable:
                raise RegistryError("unreachable", f"not asked: {registry} did not answer for "
                                    f"{unreachable[registry]} (above)")
            digest = client.resolve(request.repository, request.tag)
        except RegistryError as error:
            if error.kind == "unreachable" and registry not in unreachable:
                unreachable[registry] = request.key
            failures += 1
            for name in request.artifacts:
                module, artifact = name.split("/", 1)
                file, line, col = sources.where(f"module:{module}", "artifacts", artifact, "tag")
                say(f"{file}:{line}:{col}: artifact {artifact} ({request.key}): {error}")
            continue
        before = ledger.pins.get(request.key)
        digests[request.key] = digest
        if before is None:
            say(f"  pinned {request.key} → {digest}")
        elif before == digest:
            say(f"  unchanged {request.key} = {digest}")
        else:
            say(f"  refreshed {request.key}: {before} → {digest}")

    updated = with_pins(ledger, digests)
    written = updated != ledger
    if written:  # the registries were asked outside the lock: merged into the ledger as it is
        merge_into_ledger(inputs.mesh_dir, lambda now: with_pins(now, digests))
        say(f"ledger written: {inputs.ledger_path}")
    moved = tuple(k for k in artifacts_changed_by_pins(catalogue, ledger, updated)
                  if (key := pin_key(every[k])) is not None and ledger.pins.get(key))
    changed = tuple(containers_using(catalogue, inputs.mesh, list(moved))) if moved else ()
    return Pinned(tuple(wanted), len(requests_), failures, updated, written, moved, changed)
