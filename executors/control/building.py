"""Building: the artifacts with a `build:` context, through the Docker Engine API, pushed to the
mesh's own registry by digest and recorded in the ledger.

Invariants:
- What to build is named (`module/artifact`, each a built artifact of the catalogue) or is
  exactly what `mesh stale` lists (resolver._artifacts.staleness); either way in build order,
  foundation first (a base before everything built FROM it), and an artifact whose base could
  not be built is not built either (said so).
- Every base is named by its digest: an upstream base by its pin, a built base by its recorded
  build; it is pulled by that digest first (from the mesh's registry when it holds it, with the
  push account, else from upstream) and handed to the build as `BASE_IMAGE` (one base) and
  `BASE_<NAME>` (each base by artifact name). A base without a digest refuses the build.
- The result is pushed to `<registry>/<module>/<artifact>` of the mesh's registry (verified TLS
  through the engine's trust of the mesh CA, the push account) and its pushed digest, with the
  bases' digests, recorded in the ledger (`builds`, and `mirrored`: the registry holds it), so
  declarations name it by digest and `mesh stale` answers from it. Each build is made outside
  the ledger lock and merged into the ledger as it is then, in one ledger transaction
  (ledger_transaction.merge_into_ledger: read back first, atomically), so a failure later keeps
  the builds before it. The record is a frozen value (its bases a pmap), as the ledger's types
  say.
- Every step is said through `say` as it happens (pulls, each build output line, the push).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable, Iterable, Mapping, Optional, Sequence

import attrs
import docker
import docker.errors
from pyrsistent import pmap

from resolver import Artifact, BuildRecord, Inputs, Ledger, MeshError, resolve_inputs
from resolver.artifacts import (
    artifact_digest,
    build_graph,
    catalogue_artifacts,
    current_digests,
    image_reference,
    staleness,
)

from .ledger_transaction import merge_into_ledger

Say = Callable[[str], None]
Auth = tuple[str, str]  # the push account: (user, password)


@attrs.frozen
class Built:
    built: tuple[str, ...]  # "module/artifact" built and recorded
    failed: tuple[str, ...]  # could not be built (said through `say`)


def build_order(graph: Mapping[str, Iterable[str]], wanted: Iterable[str]) -> list[str]:
    """`wanted` ordered so that each artifact comes after every wanted artifact it builds FROM,
    directly or not (ties by name)."""
    chosen = set(wanted)

    def below(name: str, seen: frozenset[str]) -> set[str]:
        found: set[str] = set()
        for base in graph.get(name, ()):
            if base not in seen:
                found.add(base)
                found |= below(base, seen | {base})
        return found

    depth = {name: len(below(name, frozenset({name})) & chosen) for name in chosen}
    return sorted(chosen, key=lambda n: (depth[n], n))


def targets(inputs: Inputs, names: Iterable[str], stale: bool) -> list[str]:
    """What `mesh build` builds, in order; MeshError for a name that is not a built artifact."""
    every = catalogue_artifacts(inputs.catalogue)
    graph = build_graph(inputs.catalogue)
    named = list(names)
    if stale:
        named += sorted(staleness(graph, inputs.ledger.builds,
                                  current_digests(inputs.catalogue, inputs.ledger)))
    refused = [n for n in named if n not in every or every[n].build is None]
    if refused:
        raise MeshError("not a built artifact of the catalogue (module/artifact with `build:`): "
                        + ", ".join(refused))
    return build_order(graph, named)


def build(inputs: Inputs, names: Iterable[str] = (), *, stale: bool = False,
          api: docker.APIClient, auth: Optional[Auth] = None,
          say: Say = lambda line: None) -> Built:
    registry = resolve_inputs(inputs).registry  # the resolver's choice, as mirror's
    if registry is None:
        raise MeshError("the mesh has no registry to push builds to: assign one instance of a "
                        "module providing artifact-store (with its port in the ledger)")
    order = targets(inputs, names, stale)
    if not order:
        say("nothing to build" + (" (nothing is stale)" if stale else ""))
        return Built((), ())
    say(f"building {len(order)} artifact(s), foundation first: {', '.join(order)}")
    every = catalogue_artifacts(inputs.catalogue)
    built: list[str] = []
    failed: list[str] = []
    ledger = inputs.ledger
    for name in order:
        artifact = every[name]
        module, artifact_name = name.split("/", 1)
        file, line, col = inputs.sources.where(f"module:{module}", "artifacts", artifact_name,
                                               "build")
        bases = sorted(build_graph(inputs.catalogue)[name])
        blocked = [b for b in bases if b in failed]
        if blocked:
            failed.append(name)
            say(f"{file}:{line}:{col}: {name}: not built: its base {', '.join(blocked)} failed")
            continue
        try:
            record = _build_one(inputs, ledger, registry, name, artifact, bases, api, auth, say)
        except MeshError as error:
            failed.append(name)
            say(f"{file}:{line}:{col}: {name}: {error}")
            continue
        ledger = merge_into_ledger(  # built outside the lock: merged into the ledger as it is
            inputs.mesh_dir, lambda now: attrs.evolve(
                now, builds=now.builds.set(name, record),
                mirrored=now.mirrored.set(record.digest, registry))).ledger
        built.append(name)
        say(f"  recorded {name} = {record.digest} (bases: "
            + ", ".join(f"{b} {d}" for b, d in sorted(record.bases.items())) + ")")
    return Built(tuple(built), tuple(failed))


def _module_dir(inputs: Inputs, module: str) -> Path:
    return Path(inputs.sources.where(f"module:{module}")[0]).parent


def _build_one(inputs: Inputs, ledger: Ledger, registry: str, name: str, artifact: Artifact,
               bases: Sequence[str], api: docker.APIClient, auth: Optional[Auth],
               say: Say) -> BuildRecord:
    every = catalogue_artifacts(inputs.catalogue)
    if artifact.build is None:  # targets() let only built artifacts through
        raise MeshError(f"{name} is not a built artifact (no `build:`)")
    context = (_module_dir(inputs, name.split("/", 1)[0]) / artifact.build).resolve()
    if not (context / "Dockerfile").is_file():
        raise MeshError(f"the build context {context} has no Dockerfile")
    digests: dict[str, str] = {}
    args: dict[str, str] = {}
    for base in bases:
        digest = artifact_digest(base, every[base], ledger)
        if digest is None:
            raise MeshError(f"base {base} has no digest: `mesh pin DIR --refresh {base}` "
                            f"pins it (`--all` pins every artifact of the catalogue), or build "
                            f"it first")
        reference = image_reference(every[base], ledger, registry, key=base)
        if reference is None:  # a digest is known, so the resolver names the image by it
            raise MeshError(f"base {base} has no image reference")
        digests[base] = digest
        repository, _, _ = reference.partition("@")
        say(f"→ {name}: pulling base {base} by digest: {reference}")
        try:
            for event in api.pull(repository, tag=digest, stream=True, decode=True,
                                  auth_config=_auth(auth) if reference.startswith(
                                      registry + "/") else None):
                if "error" in event:
                    raise MeshError(f"pulling base {reference}: {event['error']}")
        except docker.errors.APIError as exc:
            raise MeshError(f"pulling base {reference}: {exc.explanation or exc}") from None
        args[f"BASE_{re.sub(r'[^A-Z0-9]', '_', base.split('/', 1)[1].upper())}"] = reference
    if len(bases) == 1:
        args["BASE_IMAGE"] = next(iter(args.values()))
    target = f"{registry}/{name}"
    tag = "mesh-build"
    say(f"→ {name}: building {context} with " + ", ".join(f"{k}={v}" for k, v in
                                                           sorted(args.items())))
    try:
        for event in api.build(path=str(context), tag=f"{target}:{tag}", buildargs=args,
                               rm=True, forcerm=True, pull=False, decode=True):
            if "error" in event:
                raise MeshError(f"the build failed: {event['error'].strip()}")
            text = event.get("stream", "").rstrip()
            if text:
                say(f"    {text}")
        say(f"→ {name}: pushing {target}:{tag}")
        digest = None
        for event in api.push(target, tag=tag, stream=True, decode=True,
                              auth_config=_auth(auth)):
            if "error" in event:
                raise MeshError(f"pushing {target}: {event['error']}")
            digest = (event.get("aux") or {}).get("Digest") or digest
    except docker.errors.APIError as exc:
        raise MeshError(f"{exc.explanation or exc}") from None
    if not digest or not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        raise MeshError(f"pushing {target}: the engine reported no digest")
    say(f"  pushed {target}@{digest}")
    return BuildRecord(digest=digest, bases=pmap(digests))  # a frozen value: no dict in it


def _auth(auth: Optional[Auth]) -> Optional[dict[str, str]]:
    return {"username": auth[0], "password": auth[1]} if auth else None
