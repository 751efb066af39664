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
- push_local_builds is the one push of a local build into the mesh's registry: `mesh build`
  calls it, and so does every publish of the control plane (control/self_hosting.py).
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
    used_artifacts,
)

from .ledger_transaction import merge_into_ledger
from .loading import PathLike

Say = Callable[[str], None]
Auth = tuple[str, str]  # the push account: (user, password)
BUILD_TAG = "mesh-build"  # the tag a build is made and pushed under (the record is its digest)
# Where a local build (`mesh build --local`, no registry) is tagged in the Engine: `.local`
# is no registry anyone reaches, so a stray `docker push` of it goes nowhere.
LOCAL_REPOSITORY = "mesh.local"


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


def local_targets(inputs: Inputs) -> list[str]:
    """What `mesh build DIR --local` builds when no artifact is named: every built artifact the
    mesh runs (used_artifacts) that `mesh stale` lists, foundation first."""
    graph = build_graph(inputs.catalogue)
    used = used_artifacts(inputs.catalogue, inputs.mesh)
    wanted = set(staleness(graph, inputs.ledger.builds,
                           current_digests(inputs.catalogue, inputs.ledger))) & used
    return build_order(graph, wanted)


def local_builds(ledger: Ledger) -> list[str]:
    """"module/artifact" of every build recorded as local (no registry holds it), sorted."""
    return sorted(name for name, record in ledger.builds.items() if record.local)


def build(inputs: Inputs, names: Iterable[str] = (), *, stale: bool = False,
          local: bool = False, api: docker.APIClient, auth: Optional[Auth] = None,
          say: Say = lambda line: None) -> Built:
    """Build `names` (and with `stale`, what `mesh stale` lists); `local` with neither builds
    what local_targets gives. Without `local`, every local build is first pushed to the mesh's
    registry (push_local_builds: the self-hosting transition)."""
    registry: Optional[str] = None
    if not local:
        registry = resolve_inputs(inputs).registry  # the resolver's choice, as mirror's
        if registry is None:
            raise MeshError("the mesh has no registry to push builds to: assign one instance of "
                            "a module providing artifact-store (with its port in the ledger), "
                            "or build into this machine's Docker Engine with `--local`")
    named = list(names)
    order = targets(inputs, named, stale) if named or stale or not local else \
        local_targets(inputs)
    built: list[str] = []
    failed: list[str] = []
    ledger = inputs.ledger
    if registry is not None:
        ledger, pushed, push_failed = push_local_builds(inputs, ledger, registry, api, auth, say)
        built += pushed
        failed += push_failed
    if not order:
        if not built and not failed:
            say("nothing to build" + (" (nothing is stale)" if stale or local else ""))
        return Built(tuple(built), tuple(failed))
    where = "this machine's Docker Engine (local: no registry)" if local else registry
    say(f"building {len(order)} artifact(s) into {where}, foundation first: {', '.join(order)}")
    every = catalogue_artifacts(inputs.catalogue)
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
        # built outside the lock: merged into the ledger as it is
        ledger = record_build(inputs.mesh_dir, name, record, registry)
        built.append(name)
        say(f"  recorded {name} = {record.digest}" + (" (local image ID)" if record.local else "")
            + " (bases: " + ", ".join(f"{b} {d}" for b, d in sorted(record.bases.items())) + ")")
    return Built(tuple(built), tuple(failed))


def record_build(mesh_dir: PathLike, name: str, record: BuildRecord,
                 registry: Optional[str] = None) -> Ledger:
    """Record `record` as `name`'s build in the ledger as it is now (one ledger transaction),
    as every build does; with `registry`, also as held by it. The ledger written."""
    return merge_into_ledger(mesh_dir, lambda now: _recorded(now, name, record, registry)).ledger


def _recorded(ledger: Ledger, name: str, record: BuildRecord, registry: Optional[str]) -> Ledger:
    """The ledger with `record` as `name`'s build; a pushed one also as held by `registry`."""
    if registry is None:
        return attrs.evolve(ledger, builds=ledger.builds.set(name, record))
    return attrs.evolve(ledger, builds=ledger.builds.set(name, record),
                        mirrored=ledger.mirrored.set(record.digest, registry))


def push_local_builds(inputs: Inputs, ledger: Ledger, registry: str, api: docker.APIClient,
                      auth: Optional[Auth], say: Say) -> tuple[Ledger, list[str], list[str]]:
    """The self-hosting transition: every local build (`mesh build --local`) pushed from this
    Engine to the mesh's registry, its record moved to the registry's digest (same bases,
    `local` false, and `mirrored`), so declarations name it there. A build whose image this
    Engine does not hold fails and says how to build it here. (ledger, pushed, failed)."""
    pushed: list[str] = []
    failed: list[str] = []
    for name in local_builds(ledger):
        record = ledger.builds[name]
        target = f"{registry}/{name}"
        say(f"→ {name}: pushing the local build {record.digest} to the mesh's registry "
            f"{registry}")
        try:
            _present(api, record.digest)
        except MeshError:
            failed.append(name)
            say(f"  {name}: this Docker Engine does not hold the local build {record.digest} "
                f"(built on another machine?): `mesh build DIR {name}` here builds and pushes it")
            continue
        try:
            api.tag(record.digest, target, tag=BUILD_TAG)
            digest = _push(api, target, auth, say)
        except docker.errors.APIError as exc:
            failed.append(name)
            say(f"  {name}: {exc.explanation or exc}")
            continue
        except MeshError as error:
            failed.append(name)
            say(f"  {name}: {error}")
            continue
        moved = BuildRecord(digest=digest, bases=record.bases)

        def change(now: Ledger, name: str = name, record: BuildRecord = record,
                   moved: BuildRecord = moved) -> Ledger:
            if now.builds.get(name) != record:  # rebuilt meanwhile: that build is kept
                return now
            return _recorded(now, name, moved, registry)

        ledger = merge_into_ledger(inputs.mesh_dir, change).ledger
        pushed.append(name)
        say(f"  recorded {name} = {digest} (was the local image {record.digest})")
    return ledger, pushed, failed


def _present(api: docker.APIClient, reference: str) -> str:
    """The image ID of `reference` in this Engine; MeshError when it has no such image."""
    try:
        found: Mapping[str, object] = api.inspect_image(reference)  # type: ignore[no-untyped-call]
        return str(found["Id"])
    except docker.errors.ImageNotFound:
        raise MeshError(f"no image {reference} in this Docker Engine") from None
    except docker.errors.APIError as exc:
        raise MeshError(f"inspecting {reference}: {exc.explanation or exc}") from None


def _push(api: docker.APIClient, target: str, auth: Optional[Auth], say: Say) -> str:
    """Push `target:BUILD_TAG`; the digest the registry gave it."""
    say(f"→ pushing {target}:{BUILD_TAG}")
    digest = None
    for event in api.push(target, tag=BUILD_TAG, stream=True, decode=True,
                          auth_config=_auth(auth)):
        if "error" in event:
            raise MeshError(f"pushing {target}: {event['error']}")
        digest = (event.get("aux") or {}).get("Digest") or digest
    if not digest or not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        raise MeshError(f"pushing {target}: the engine reported no digest")
    say(f"  pushed {target}@{digest}")
    return str(digest)


def _module_dir(inputs: Inputs, module: str) -> Path:
    return Path(inputs.sources.where(f"module:{module}")[0]).parent


def _base(api: docker.APIClient, name: str, base: str, reference: str, registry: Optional[str],
          auth: Optional[Auth], say: Say) -> None:
    """Make the base `reference` (by digest, or a local build's image ID) present in the
    Engine: used as it is when the Engine holds it, pulled by digest otherwise."""
    try:
        _present(api, reference)
        say(f"→ {name}: base {base} by digest: {reference} (present in this Docker Engine)")
        return
    except MeshError:
        pass
    if "@" not in reference:  # an image ID: a local build, which nothing can pull
        raise MeshError(f"base {base} is a local build ({reference}) this Docker Engine does not "
                        f"hold: `mesh build DIR --local {base}` builds it here")
    repository, _, digest = reference.partition("@")
    say(f"→ {name}: pulling base {base} by digest: {reference}")
    try:
        for event in api.pull(repository, tag=digest, stream=True, decode=True,
                              auth_config=_auth(auth) if registry is not None and
                              reference.startswith(registry + "/") else None):
            if "error" in event:
                raise MeshError(f"pulling base {reference}: {event['error']}")
    except docker.errors.APIError as exc:
        raise MeshError(f"pulling base {reference}: {exc.explanation or exc}") from None


def _build_one(inputs: Inputs, ledger: Ledger, registry: Optional[str], name: str,
               artifact: Artifact, bases: Sequence[str], api: docker.APIClient,
               auth: Optional[Auth], say: Say) -> BuildRecord:
    """Build `name` and push it to `registry` (its record: the pushed digest), or with no
    registry (`--local`) keep it in this Engine (its record: the image ID, `local`)."""
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
        _base(api, name, base, reference, registry, auth, say)
        args[f"BASE_{re.sub(r'[^A-Z0-9]', '_', base.split('/', 1)[1].upper())}"] = reference
    if len(bases) == 1:
        args["BASE_IMAGE"] = next(iter(args.values()))
    target = f"{registry}/{name}" if registry is not None else f"{LOCAL_REPOSITORY}/{name}"
    say(f"→ {name}: building {context} with " + ", ".join(f"{k}={v}" for k, v in
                                                           sorted(args.items())))
    try:
        for event in api.build(path=str(context), tag=f"{target}:{BUILD_TAG}", buildargs=args,
                               rm=True, forcerm=True, pull=False, decode=True):
            if "error" in event:
                raise MeshError(f"the build failed: {event['error'].strip()}")
            text = event.get("stream", "").rstrip()
            if text:
                say(f"    {text}")
        if registry is None:
            image_id = _present(api, f"{target}:{BUILD_TAG}")
            kept = image_id.split(":", 1)[1][:12]
            api.tag(image_id, target, tag=kept)  # each recorded build stays tagged (never pruned)
            say(f"  built {image_id}, tagged {target}:{kept} in this Docker Engine (no registry)")
            return BuildRecord(digest=image_id, bases=pmap(digests), local=True)
        digest = _push(api, target, auth, say)
    except docker.errors.APIError as exc:
        raise MeshError(f"{exc.explanation or exc}") from None
    return BuildRecord(digest=digest, bases=pmap(digests))  # a frozen value: no dict in it


def _auth(auth: Optional[Auth]) -> Optional[dict[str, str]]:
    return {"username": auth[0], "password": auth[1]} if auth else None
