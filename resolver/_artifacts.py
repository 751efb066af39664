"""Artifacts: pins, the build graph, staleness and where an image is named from.

Invariants:
- Every artifact of the catalogue is a node of the build graph ("module/artifact"), built or
  upstream, from the first run: the graph comes from the manifests, never from what was built,
  so the foundation a mesh was raised from is never missing from it.
- Staleness compares artifact digests, never commits: a built artifact is stale exactly when one
  of its bases' current digest differs from the one recorded when it was built (or it was never
  built), and everything built FROM a stale artifact is stale too (reachability).
- A pin ("repository:tag" → digest) is only ever requested when missing or when the operator
  asked for a refresh of it; asking twice without a refresh requests nothing.
- An image is named by digest or not at all: from the mesh's own registry when that registry is
  known to hold the digest (self-hosting), else from its upstream repository (external).
"""

from __future__ import annotations

from typing import Iterable, Mapping, Optional

import attrs
from pyrsistent import pmap, pvector
from pyrsistent.typing import PMap, PVector

from ._errors import Fault
from ._inputs import NO_SOURCES, Catalogue, Sources
from ._ledger import BuildRecord, Ledger
from ._model import Artifact, Mesh

#: Resolution.artifacts when images are pulled from the registries the manifests name.
EXTERNAL = "external"
#: Resolution.artifacts when the mesh pulls from its own registry (the artifact store).
SELF_HOSTING = "self-hosting"
#: The provision a registry module provides to be the mesh's artifact store.
ARTIFACT_STORE = "artifact-store"
DEFAULT_REGISTRY = "docker.io"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]", "::1")


# --------------------------------------------------------------------------- names


def split_repository(repository: str) -> tuple[str, str]:
    """(registry host, path inside it) of a repository as written in a manifest.

    The first component is a registry host when it contains `.` or `:` or is `localhost`
    (Docker's rule); otherwise the repository lives on docker.io, and a single-component
    name is an official image under `library/`.
    """
    first, sep, rest = repository.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return first, rest
    path = repository if "/" in repository else f"library/{repository}"
    return DEFAULT_REGISTRY, path


def is_loopback(registry: str) -> bool:
    """Whether a registry host[:port] is on loopback (served over plain http)."""
    host = registry.rsplit(":", 1)[0] if not registry.startswith("[") else registry.split("]")[0] + "]"
    return host in LOOPBACK_HOSTS or host.startswith("127.")


def pin_key(artifact: Artifact) -> Optional[str]:
    """The ledger key of an upstream artifact's pin, "repository:tag"; None for a build."""
    if artifact.repository is None or artifact.tag is None:
        return None
    return f"{artifact.repository}:{artifact.tag}"


def artifact_key(module: str, artifact: str) -> str:
    """The key of an artifact across the catalogue: `module/artifact`."""
    return f"{module}/{artifact}"


def base_key(module: str, base: str) -> str:
    """A `base` entry as a graph node: `module/artifact` as written, a bare name in `module`."""
    return base if "/" in base else artifact_key(module, base)


def catalogue_artifacts(catalogue: Catalogue) -> dict[str, Artifact]:
    """Every artifact of the catalogue by "module/artifact", sorted."""
    return {
        artifact_key(module_name, name): artifact
        for module_name, module in sorted(catalogue.modules.items())
        for name, artifact in sorted(module.artifacts.items())
    }


# --------------------------------------------------------------------------- pins


@attrs.frozen(order=True)
class PinRequest:
    """One tag the registry must be asked about, and the manifest line that named it."""

    key: str  # "repository:tag"
    repository: str
    tag: str
    artifacts: PVector[str] = pvector()  # every "module/artifact" naming this repository:tag


def used_artifacts(catalogue: Catalogue, mesh: Mesh) -> frozenset[str]:
    """The artifacts the mesh runs: those of assigned modules and, transitively, their bases."""
    wanted = {
        artifact_key(instance.module, name)
        for instance in mesh.instances.values()
        if instance.module in catalogue.modules
        for name in catalogue.modules[instance.module].artifacts
    }
    graph = build_graph(catalogue)
    todo = list(wanted)
    while todo:
        for base in graph.get(todo.pop(), ()):
            if base not in wanted:
                wanted.add(base)
                todo.append(base)
    return frozenset(wanted)


def pin_requests(catalogue: Catalogue, ledger: Ledger, artifacts: Iterable[str],
                 refresh: Optional[Iterable[str]] = None) -> list[PinRequest]:
    """The tags to ask the registry about, sorted by key.

    `artifacts` are the "module/artifact" keys to pin (see used_artifacts). A tag already pinned
    is asked about again only when `refresh` names it, by "module/artifact" or by
    "repository:tag"; `refresh=None` refreshes nothing and `refresh=("*",)` everything.
    """
    every = catalogue_artifacts(catalogue)
    refreshing = frozenset(refresh or ())
    by_key: dict[str, list[str]] = {}
    for name in sorted(artifacts):
        artifact = every.get(name)
        key = pin_key(artifact) if artifact is not None else None
        if key is not None:
            by_key.setdefault(key, []).append(name)
    requests = []
    for key, names in sorted(by_key.items()):
        asked = "*" in refreshing or key in refreshing or any(n in refreshing for n in names)
        if key in ledger.pins and not asked:
            continue
        artifact = every[names[0]]
        assert artifact.repository is not None and artifact.tag is not None  # it has a pin key
        requests.append(PinRequest(key, artifact.repository, artifact.tag, pvector(names)))
    return requests


def with_pins(ledger: Ledger, digests: Mapping[str, str]) -> Ledger:
    """The ledger with `digests` ("repository:tag" → digest) recorded; nothing else changes."""
    if all(ledger.pins.get(k) == v for k, v in digests.items()):
        return ledger
    return attrs.evolve(ledger, pins=ledger.pins.update(pmap(digests)))


def artifacts_changed_by_pins(catalogue: Catalogue, before: Ledger, after: Ledger) -> list[str]:
    """"module/artifact" keys whose pinned digest differs between two ledgers, sorted."""
    return sorted(
        name for name, artifact in catalogue_artifacts(catalogue).items()
        if (key := pin_key(artifact)) is not None and before.pins.get(key) != after.pins.get(key)
    )


def containers_using(catalogue: Catalogue, mesh: Mesh, artifacts: Iterable[str]) -> list[str]:
    """"instance/container" of every assigned container running one of `artifacts`, sorted.

    A built artifact counts as used by every container running something built FROM it."""
    graph = build_graph(catalogue)
    affected = set(artifacts)
    affected |= reachable_from(graph, affected)
    found = set()
    for instance_name, instance in mesh.instances.items():
        module = catalogue.modules.get(instance.module)
        if module is None:
            continue
        for container in module.containers:
            if artifact_key(module.name, container.artifact) in affected:
                found.add(f"{instance_name}/{container.name}")
    return sorted(found)


# --------------------------------------------------------------------------- the build graph


def build_graph(catalogue: Catalogue) -> PMap[str, PVector[str]]:
    """Every artifact of the catalogue → the artifacts it builds FROM (empty for upstream)."""
    return pmap({
        name: pvector(sorted({base_key(name.split("/", 1)[0], b) for b in artifact.base}))
        for name, artifact in catalogue_artifacts(catalogue).items()
    })


def dependents(graph: Mapping[str, Iterable[str]]) -> dict[str, set[str]]:
    """The reverse graph: artifact → the artifacts built FROM it."""
    reverse: dict[str, set[str]] = {name: set() for name in graph}
    for name, bases in graph.items():
        for base in bases:
            reverse.setdefault(base, set()).add(name)
    return reverse


def reachable_from(graph: Mapping[str, Iterable[str]], starts: Iterable[str]) -> frozenset[str]:
    """Everything built, directly or not, FROM one of `starts` (the starts themselves excluded
    unless reachable from another start)."""
    reverse = dependents(graph)
    seen: set[str] = set()
    todo = list(starts)
    while todo:
        for dependent in reverse.get(todo.pop(), ()):
            if dependent not in seen:
                seen.add(dependent)
                todo.append(dependent)
    return frozenset(seen)


def current_digests(catalogue: Catalogue, ledger: Ledger) -> PMap[str, Optional[str]]:
    """Each artifact's digest as the ledger knows it now: its pin, or its last build's digest."""
    digests = {}
    for name, artifact in catalogue_artifacts(catalogue).items():
        key = pin_key(artifact)
        if key is not None:
            digests[name] = ledger.pins.get(key)
        else:
            record = ledger.builds.get(name)
            digests[name] = record.digest if record is not None else None
    return pmap(digests)


def staleness(graph: Mapping[str, Iterable[str]], ledger_builds: Mapping[str, BuildRecord],
              current: Mapping[str, Optional[str]]) -> PMap[str, str]:
    """Every built artifact that must be (re)built → why, in words.

    Built artifacts are those with bases or a build record. One is stale when it was never built,
    when a base's current digest differs from the digest recorded in its build record (or is not
    known at all), or when it builds FROM a stale artifact. Digests are compared, not commits:
    a base rebuilt to the same digest makes nothing stale.
    """
    reasons: dict[str, str] = {}
    for name, bases in sorted(graph.items()):
        bases = sorted(bases)
        record = ledger_builds.get(name)
        if not bases and record is None:
            continue  # an upstream artifact: pinned, never built
        if record is None:
            reasons[name] = "never built"
            continue
        changed = [b for b in bases if current.get(b) is None or current.get(b) != record.bases.get(b)]
        if changed:
            reasons[name] = "; ".join(_changed_base(b, record.bases.get(b), current.get(b)) for b in changed)
    reverse = dependents(graph)
    todo = sorted(reasons)
    while todo:
        cause = todo.pop()
        for dependent in sorted(reverse.get(cause, ())):
            if dependent not in reasons:
                reasons[dependent] = f"builds from {cause}, which is stale"
                todo.append(dependent)
    return pmap(reasons)


def _changed_base(base: str, recorded: Optional[str], now: Optional[str]) -> str:
    if now is None:
        return f"base {base} has no digest (unpinned or never built)"
    if recorded is None:
        return f"base {base} was not recorded when it was built"
    return f"base {base} changed {_short(recorded)} → {_short(now)}"


def _short(digest: str) -> str:
    return digest.split(":", 1)[-1][:12]


def stale(graph: Mapping[str, Iterable[str]], ledger_builds: Mapping[str, BuildRecord],
          current: Mapping[str, Optional[str]]) -> frozenset[str]:
    """The artifacts that must be rebuilt (see staleness for the rule)."""
    return frozenset(staleness(graph, ledger_builds, current))


# --------------------------------------------------------------------------- self-hosting


def choose_artifact_store_instance(stores: Mapping[str, str],
                                   default: Optional[str]) -> Optional[str]:
    """The instance that is the mesh's own registry, or None while the mesh has none: the one
    rule (choose_artifact_store gives its "host:port").

    `stores` maps each instance that provides `artifact-store` and serves now (declared live
    with a host port, or held at its last good declaration) to its "host:port". The registry is
    the mesh default's (`defaults: {artifact-store: <instance>}`) when it names one of them,
    else the only one. Several and no default naming one of them: None, and the mesh stays on
    external artifacts (never a silent pick: `mesh mirror` and every image reference follow
    this same answer, so they cannot disagree).
    """
    if default is not None and default in stores:
        return default
    if len(stores) == 1:
        return next(iter(stores))
    return None


def choose_artifact_store(stores: Mapping[str, str], default: Optional[str]) -> Optional[str]:
    """"host:port" of the mesh's own registry (choose_artifact_store_instance decides which)."""
    chosen = choose_artifact_store_instance(stores, default)
    return None if chosen is None else stores[chosen]


def artifact_digest(key: str, artifact: Artifact, ledger: Ledger) -> Optional[str]:
    """The digest an artifact runs at: its pin, or its last build; None when unknown."""
    pin = pin_key(artifact)
    if pin is not None:
        return ledger.pins.get(pin)
    record = ledger.builds.get(key)
    return record.digest if record is not None else None


def image_reference(artifact: Artifact, ledger: Ledger, registry_address: Optional[str], *,
                    key: Optional[str] = None) -> Optional[str]:
    """The image a container runs, by digest; None when the artifact has no digest (unpinned).

    Upstream artifact: "<registry address>/<repository path>@<digest>" when `registry_address`
    (the mesh's own registry, see choose_artifact_store) is given, the artifact may be mirrored
    and `ledger.mirrored` records that registry holding the digest; otherwise
    "<repository>@<digest>" (genesis, or a registry that does not hold it yet).
    Built artifact (pass `key`, "module/artifact"): "<registry address>/<key>@<digest>" when the
    mesh's registry holds it (whatever its `mirror:` says: `mirror` governs copying upstream
    images, and a build reaches the registry by its own push); else, for a local build
    (`BuildRecord.local`), the bare image ID "sha256:…", which the Engine that built it resolves
    and nothing pulls; else "<key>@<digest>".
    """
    if artifact.repository is not None:
        digest = artifact_digest("", artifact, ledger)
        if digest is None:
            return None
        if _held_by(digest, artifact, ledger, registry_address):
            return f"{registry_address}/{split_repository(artifact.repository)[1]}@{digest}"
        return f"{artifact.repository}@{digest}"
    if key is None:
        return None
    record = ledger.builds.get(key)
    if record is None:
        return None
    if registry_address is not None and ledger.mirrored.get(record.digest) == registry_address:
        return f"{registry_address}/{key}@{record.digest}"
    if record.local:
        return record.digest  # an image ID: the Engine that built it names it so
    return f"{key}@{record.digest}"


def _held_by(digest: str, artifact: Artifact, ledger: Ledger, registry_address: Optional[str]) -> bool:
    return (registry_address is not None and artifact.mirror
            and ledger.mirrored.get(digest) == registry_address)


def artifact_state(catalogue: Catalogue, mesh: Mesh, ledger: Ledger,
                   registry_address: Optional[str]) -> str:
    """"self-hosting" or "external": which state the mesh's artifacts are in.

    Self-hosting: the mesh has its own registry (`registry_address`) and it holds the digest of
    every pinned or built artifact the mesh runs that may be mirrored. Otherwise external. One
    missing mirror keeps the mesh external, though image_reference already names the mirrored
    ones from the mesh's registry (each container moves when its own image is there).
    """
    return SELF_HOSTING if registry_address is not None and not pending_mirror(
        catalogue, mesh, ledger, registry_address) else EXTERNAL


def pending_mirror(catalogue: Catalogue, mesh: Mesh, ledger: Ledger,
                   registry_address: Optional[str]) -> list[str]:
    """"module/artifact" of every artifact the mesh runs, with a digest and `mirror: true`,
    that `registry_address` does not hold yet (all of them when there is no registry), and
    every one built locally (`mesh build --local`, held by no registry), sorted."""
    every = catalogue_artifacts(catalogue)
    pending = []
    for name in sorted(used_artifacts(catalogue, mesh)):
        artifact = every.get(name)
        record = ledger.builds.get(name)
        if record is not None and record.local:
            pending.append(name)  # built with no registry: its next non-local build pushes it
            continue
        if artifact is None or not artifact.mirror:
            continue
        digest = artifact_digest(name, artifact, ledger)
        if digest is not None and not _held_by(digest, artifact, ledger, registry_address):
            pending.append(name)
    return pending


# --------------------------------------------------------------------------- validation


def validate_artifact_store_modules(catalogue: Catalogue, sources: Sources = NO_SOURCES) -> list[Fault]:
    """Refuse a module that provides `artifact-store` yet has an artifact the mesh builds
    (`build:`) or one with `mirror: true`.

    The mesh's registry cannot run from an image only the mesh's registry serves (it would need
    itself to exist), so every artifact of such a module must say `mirror: false` and run from
    its upstream digest. Nor can the mesh build it: a build is pushed to the mesh's registry,
    the one thing not there yet; `mirror: false` on a build does not make it upstream.
    """
    faults = []
    for module_name, module in sorted(catalogue.modules.items()):
        if not any(p.provision == ARTIFACT_STORE for p in module.provides):
            continue
        for name, artifact in sorted(module.artifacts.items()):
            if artifact.build is not None:
                file, line, col = sources.where(f"module:{module_name}", "artifacts", name,
                                                "build", at_key=True)
                faults.append(Fault(
                    file, line, col,
                    f"module {module_name!r} provides artifact-store, so its artifact {name!r} "
                    "cannot be built by the mesh: a build goes to the mesh's own registry, "
                    "which would need itself to exist",
                    "an upstream `repository:` and `tag:` with `mirror: false`"))
            elif artifact.mirror:
                file, line, col = sources.where(f"module:{module_name}", "artifacts", name, at_key=True)
                faults.append(Fault(
                    file, line, col,
                    f"module {module_name!r} provides artifact-store, so its artifact {name!r} cannot "
                    "be mirrored into the mesh's own registry: the registry would need itself to exist",
                    "`mirror: false` on every artifact of an artifact-store provider"))
    return faults


def validate_build_graph(catalogue: Catalogue, sources: Sources = NO_SOURCES) -> list[Fault]:
    """Refuse a cycle of bases through two or more artifacts (an artifact built FROM something
    built FROM it). Single bases naming nothing, or the artifact itself, are _validate's."""
    faults = []
    for member in sorted(_in_cycles(build_graph(catalogue))):
        module_name, name = member.split("/", 1)
        file, line, col = sources.where(f"module:{module_name}", "artifacts", name, "base")
        faults.append(Fault(file, line, col, f"artifact {member!r} is built, through its bases, from itself (a cycle of bases)",
                            "bases that form no cycle"))
    return faults


def _in_cycles(graph: Mapping[str, Iterable[str]]) -> set[str]:
    """Nodes that reach themselves through at least one other node."""
    return {name for name in graph
            if any(name in _reachable_down(graph, base) for base in graph[name] if base != name)}


def _reachable_down(graph: Mapping[str, Iterable[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = list(graph.get(start, ()))
    while todo:
        node = todo.pop()
        if node not in seen:
            seen.add(node)
            todo.extend(graph.get(node, ()))
    return seen
