"""Properties of the artifact graph, staleness, pinning and image naming (resolver/_artifacts.py).

- Staleness equals an oracle: a deliberately simple recursive reading of the rule ("stale if never
  built, if a base's digest is not the recorded one, or if a base is stale"), compared with the
  implementation's forward propagation over the reverse graph.
- Rebuilding a base to the digest it already had makes nothing stale (digests, not commits).
- Pinning is stable: a second pin without --refresh asks nothing and changes nothing, whatever
  the registries now answer; a refresh of one artifact moves only its pin.
- An image is always named by its pinned digest, from the mesh's registry exactly when that
  registry holds the digest and the artifact may be mirrored.
"""

from __future__ import annotations

import attrs
from hypothesis import given
from hypothesis import strategies as st
from pyrsistent import pmap, pvector

from resolver import (Artifact, BuildRecord, Catalogue, Container, Instance, Ledger, Mesh, Module,
                      Node, PortRange, resolve, validate)
from resolver import ProblemCode as codes
from resolver.artifacts import (
    SELF_HOSTING,
    artifact_state,
    build_graph,
    catalogue_artifacts,
    current_digests,
    image_reference,
    pending_mirror,
    pin_key,
    pin_requests,
    split_repository,
    stale,
    used_artifacts,
    with_pins,
)

from .strategies import digest_of, worlds

digests = st.sampled_from([f"sha256:{c * 64}" for c in "0123456789abcdef"])
REGISTRIES = ("127.0.0.1:5000", "ghcr.io", "docker.io", "registry.example:8443")


@st.composite
def catalogues(draw):
    """Modules m0.. with artifacts a0..; an artifact's bases are drawn from artifacts created
    before it (acyclic by construction), named bare in the same module or as module/artifact."""
    created: list[tuple[int, str]] = []  # (module index, artifact name) in creation order
    modules: dict[int, dict[str, Artifact]] = {}
    for index in range(draw(st.integers(1, 12))):
        module = draw(st.integers(0, 2))
        name = f"a{index}"
        if created and draw(st.booleans()):
            picks = draw(st.lists(st.sampled_from(created), min_size=1, max_size=3, unique=True))
            base = pvector(other if m == module else f"m{m}/{other}" for m, other in picks)
            artifact = Artifact(build=name, base=base, mirror=draw(st.booleans()))
        elif draw(st.integers(0, 4)) == 0:
            artifact = Artifact(build=name, mirror=draw(st.booleans()))  # built FROM scratch
        else:
            registry = draw(st.sampled_from(REGISTRIES))
            repository = f"{registry}/lib/r{draw(st.integers(0, 5))}"
            artifact = Artifact(repository=repository, tag=draw(st.sampled_from(["1", "2", "latest"])),
                                mirror=draw(st.booleans()))
        modules.setdefault(module, {})[name] = artifact
        created.append((module, name))
    return Catalogue(modules=pmap({
        f"m{m}": Module(name=f"m{m}", artifacts=pmap(artifacts)) for m, artifacts in modules.items()
    }))


@st.composite
def catalogue_and_ledger(draw):
    """A catalogue and a ledger whose build records sometimes match the bases' current digests,
    sometimes not, and sometimes are missing."""
    catalogue = draw(catalogues())
    every = catalogue_artifacts(catalogue)
    pins = {}
    for artifact in every.values():
        key = pin_key(artifact)
        if key is not None and draw(st.integers(0, 5)) > 0:
            pins[key] = draw(digests)
    builds = {}
    for name, artifact in every.items():  # creation order: bases get their record first
        if artifact.build is not None and draw(st.integers(0, 5)) > 0:
            builds[name] = BuildRecord(digest=draw(digests), bases=pmap())
    ledger = Ledger(pins=pmap(pins), builds=pmap(builds))
    current = current_digests(catalogue, ledger)
    graph = build_graph(catalogue)
    for name, record in list(builds.items()):
        recorded = {}
        for base in graph[name]:
            kept = draw(st.integers(0, 3)) > 0
            if kept and current[base] is not None:
                recorded[base] = current[base]
            elif draw(st.booleans()):
                recorded[base] = draw(digests)
        builds[name] = attrs.evolve(record, bases=pmap(recorded))
    return catalogue, attrs.evolve(ledger, builds=pmap(builds))


def oracle_stale(catalogue: Catalogue, ledger: Ledger) -> set[str]:
    """The rule read literally, recursively down the bases (the graph is acyclic)."""
    every = catalogue_artifacts(catalogue)

    def module_of(name):
        return name.split("/", 1)[0]

    def bases(name):
        return [b if "/" in b else f"{module_of(name)}/{b}" for b in every[name].base]

    def digest_now(name):
        artifact = every[name]
        if artifact.repository is not None:
            return ledger.pins.get(f"{artifact.repository}:{artifact.tag}")
        record = ledger.builds.get(name)
        return record.digest if record else None

    def is_stale(name):
        artifact = every[name]
        if artifact.build is None:
            return False
        record = ledger.builds.get(name)
        if record is None:
            return bool(artifact.base)  # a FROM-scratch build with no record has no graph edge
        for base in bases(name):
            if digest_now(base) is None or record.bases.get(base) != digest_now(base):
                return True
        return any(is_stale(base) for base in bases(name))

    return {name for name in every if is_stale(name)}


@given(catalogue_and_ledger())
def test_staleness_equals_the_oracle(case):
    catalogue, ledger = case
    graph = build_graph(catalogue)
    assert set(stale(graph, ledger.builds, current_digests(catalogue, ledger))) == oracle_stale(catalogue, ledger)


@given(catalogue_and_ledger())
def test_every_artifact_is_in_the_graph_from_the_first_run(case):
    catalogue, _ = case
    assert set(build_graph(catalogue)) == set(catalogue_artifacts(catalogue))


def _fresh_ledger(catalogue: Catalogue, digest_of) -> Ledger:
    """Everything pinned and built, every build record naming its bases' current digests."""
    every = catalogue_artifacts(catalogue)
    pins = {k: digest_of(k) for a in every.values() if (k := pin_key(a))}
    builds = {n: BuildRecord(digest=digest_of(n)) for n, a in every.items() if a.build is not None}
    ledger = Ledger(pins=pmap(pins), builds=pmap(builds))
    current = current_digests(catalogue, ledger)
    graph = build_graph(catalogue)
    return attrs.evolve(ledger, builds=pmap({
        n: attrs.evolve(r, bases=pmap({b: current[b] for b in graph[n]})) for n, r in builds.items()}))


@given(catalogues(), st.data())
def test_staleness_is_reachability_from_the_changed_digest(catalogue, data):
    ledger = _fresh_ledger(catalogue, lambda key: data.draw(digests))
    graph = build_graph(catalogue)
    assert stale(graph, ledger.builds, current_digests(catalogue, ledger)) == frozenset()
    every = catalogue_artifacts(catalogue)
    changed = data.draw(st.sampled_from(sorted(every)))
    new_digest = data.draw(digests)
    artifact = every[changed]
    if artifact.repository is not None:
        after = attrs.evolve(ledger, pins=ledger.pins.set(pin_key(artifact), new_digest))
        moved = {n for n, a in every.items() if pin_key(a) == pin_key(artifact)}  # one tag, many artifacts
    else:
        after = attrs.evolve(ledger, builds=ledger.builds.set(
            changed, attrs.evolve(ledger.builds[changed], digest=new_digest)))
        moved = {changed}
    now = stale(graph, after.builds, current_digests(catalogue, after))
    if new_digest == current_digests(catalogue, ledger)[changed]:
        assert now == frozenset()  # rebuilt or re-pinned to the same digest: nothing is stale
    else:
        assert now == set().union(*(_dependents_of(graph, m) for m in moved))


def _dependents_of(graph, name):
    found, todo = set(), [name]
    while todo:
        current = todo.pop()
        for other, bases in graph.items():
            if current in bases and other not in found:
                found.add(other)
                todo.append(other)
    return found


def _mesh_running(catalogue: Catalogue) -> Mesh:
    return Mesh(mesh="t", nodes=pmap({"n": Node(address="10.0.0.1")}), instances=pmap({
        f"i-{name}": Instance(module=name, node="n") for name in catalogue.modules}))


def _pin(catalogue, ledger, refresh, registry_answers):
    """One `mesh pin` round, as cmd_pin composes it, with the registries' answers as a dict."""
    wanted = used_artifacts(catalogue, _mesh_running(catalogue))
    requests = pin_requests(catalogue, ledger, wanted, refresh)
    return with_pins(ledger, {r.key: registry_answers[r.key] for r in requests}), requests


@given(catalogue_and_ledger(), st.data())
def test_pinning_is_stable(case, data):
    catalogue, ledger = case
    keys = sorted({k for a in catalogue_artifacts(catalogue).values() if (k := pin_key(a))})
    answers = {k: data.draw(digests) for k in keys}
    first, _ = _pin(catalogue, ledger, None, answers)
    assert set(first.pins) >= set(keys)  # everything the mesh runs is pinned
    moved = {k: data.draw(digests) for k in keys}  # every tag may now point elsewhere
    second, asked = _pin(catalogue, first, None, moved)
    assert asked == [] and second == first
    if keys:
        one = data.draw(st.sampled_from(keys))
        refreshed, _ = _pin(catalogue, first, (one,), moved)
        assert refreshed.pins == first.pins.set(one, moved[one])
        everything, _ = _pin(catalogue, first, ("*",), moved)
        assert dict(everything.pins) == {**first.pins, **moved}


@given(catalogue_and_ledger(), st.sampled_from([None, "10.0.0.1:5000"]), st.data())
def test_images_are_named_by_their_digest_from_the_registry_holding_it(case, registry, data):
    catalogue, ledger = case
    every = catalogue_artifacts(catalogue)
    held = {d: data.draw(st.sampled_from(["10.0.0.1:5000", "10.0.0.2:5000"]))
            for d in set(ledger.pins.values()) if data.draw(st.booleans())}
    ledger = attrs.evolve(ledger, mirrored=pmap(held))
    for name, artifact in every.items():
        reference = image_reference(artifact, ledger, registry, key=name)
        digest = (ledger.pins.get(pin_key(artifact)) if artifact.repository
                  else (ledger.builds[name].digest if name in ledger.builds else None))
        if digest is None:
            assert reference is None
            continue
        assert reference.endswith(f"@{digest}")
        from_mesh = registry is not None and artifact.mirror and held.get(digest) == registry
        if artifact.repository is not None:
            expected = (f"{registry}/{split_repository(artifact.repository)[1]}" if from_mesh
                        else artifact.repository)
            assert reference == f"{expected}@{digest}"
        else:  # a build reaches the registry by its own push: its `mirror:` does not matter
            built_in_mesh = registry is not None and held.get(digest) == registry
            expected = (f"{registry}/{name}@{digest}" if built_in_mesh
                        else digest if ledger.builds[name].local else f"{name}@{digest}")
            assert reference == expected
    mesh = _mesh_running(catalogue)
    state = artifact_state(catalogue, mesh, ledger, registry)
    assert (state == SELF_HOSTING) == (registry is not None and not pending_mirror(catalogue, mesh, ledger, registry))
    assert artifact_state(catalogue, mesh, ledger, None) != SELF_HOSTING  # no registry: external


def test_a_cycle_of_bases_is_refused_and_an_acyclic_graph_is_not():
    from resolver.artifacts import validate_build_graph

    def module(name, artifacts):
        return Module(name=name, artifacts=pmap(artifacts))

    cyclic = Catalogue(modules=pmap({
        "a": module("a", {"x": Artifact(build=".", base=pvector(["b/y"]))}),
        "b": module("b", {"y": Artifact(build=".", base=pvector(["a/x"])),
                          "z": Artifact(build=".", base=pvector(["y"]))}),
    }))
    faults = validate_build_graph(cyclic)
    assert [f.message for f in faults] == [
        "artifact 'a/x' is built, through its bases, from itself (a cycle of bases)",
        "artifact 'b/y' is built, through its bases, from itself (a cycle of bases)",
    ]
    acyclic = attrs.evolve(cyclic, modules=cyclic.modules.set("a", module("a", {"x": Artifact(build=".")})))
    assert validate_build_graph(acyclic) == []


# ---------------------------------------------------------------------------- names, pins, the store


LOOPBACK = ["127.0.0.1:5000", "127.8.9.1:443", "localhost:5000", "[::1]:5000", "localhost",
            "127.0.0.1"]
ELSEWHERE = ["10.0.0.1:5000", "registry.example:8443", "[fd00::1]:5000", "ghcr.io",
             "localhost.example:5000", "128.0.0.1:5000", "10.127.0.1:5000"]


@given(st.sampled_from(LOOPBACK + ELSEWHERE))
def test_a_registry_is_on_loopback_exactly_when_its_host_is(registry):
    from resolver.artifacts import is_loopback

    assert is_loopback(registry) == (registry in LOOPBACK)


@given(catalogue_and_ledger())
def test_every_stale_artifact_says_which_base_moved(case):
    """Each reason names the bases that moved and, when both are known, the digests (their
    first twelve hex digits); what is stale only through a base says which one."""
    from resolver.artifacts import staleness

    catalogue, ledger = case
    graph = build_graph(catalogue)
    current = current_digests(catalogue, ledger)
    reasons = staleness(graph, ledger.builds, current)
    assert set(reasons) == set(stale(graph, ledger.builds, current))
    for name, reason in reasons.items():
        record = ledger.builds.get(name)
        if record is None:
            assert reason == "never built"
            continue
        moved = [b for b in sorted(graph[name]) if current.get(b) is None
                 or current.get(b) != record.bases.get(b)]
        if not moved:
            assert reason.startswith("builds from ") and reason.endswith(", which is stale")
            assert reason[len("builds from "):-len(", which is stale")] in reasons
            continue
        parts = reason.split("; ")
        assert len(parts) == len(moved)
        for base, part in zip(moved, parts):
            assert part.startswith(f"base {base} ")
            was, now = record.bases.get(base), current.get(base)
            if now is None:
                assert part.endswith("has no digest (unpinned or never built)")
            elif was is None:
                assert part.endswith("was not recorded when it was built")
            else:
                assert part.endswith(f"changed {was.split(':')[1][:12]} → {now.split(':')[1][:12]}")


@given(catalogue_and_ledger(), catalogue_and_ledger(), st.data())
def test_changed_pins_name_exactly_the_artifacts_whose_digest_moved(case, other, data):
    from resolver.artifacts import artifacts_changed_by_pins, containers_using

    catalogue, before = case
    every = catalogue_artifacts(catalogue)
    keys = sorted({k for a in every.values() if (k := pin_key(a))})
    moved = {k: data.draw(digests) for k in keys if data.draw(st.booleans())}
    after = with_pins(before, moved)
    changed = artifacts_changed_by_pins(catalogue, before, after)
    assert changed == sorted(n for n, a in every.items()
                             if pin_key(a) and before.pins.get(pin_key(a)) != after.pins.get(pin_key(a)))
    assert with_pins(after, moved) is after  # recording the same pins again changes nothing
    # the containers running them, or running something built FROM them
    modules = {}
    for module_name, module in catalogue.modules.items():
        containers = [Container(name=f"c-{a}", artifact=a) for a in sorted(module.artifacts)]
        modules[module_name] = attrs.evolve(module, containers=pvector(containers))
    catalogue = attrs.evolve(catalogue, modules=pmap(modules))
    mesh = _mesh_running(catalogue)
    graph = build_graph(catalogue)
    affected = set(changed) | set().union(*(_dependents_of(graph, c) for c in changed))
    assert containers_using(catalogue, mesh, changed) == sorted(
        f"i-{n.split('/')[0]}/c-{n.split('/')[1]}" for n in affected)


@given(st.dictionaries(st.sampled_from(["reg@n1", "reg@n2", "web@n1", "b@n9"]),
                       st.sampled_from(["10.0.0.1:5000", "[fd00::2]:5001", "10.0.0.3:20000"]),
                       max_size=4),
       st.one_of(st.none(), st.sampled_from(["reg@n1", "reg@n2", "web@n1", "nothing"])))
def test_the_mesh_registry_is_the_default_store_else_the_only_one(stores, default):
    """The mesh default when it names a serving store, else the only store, else none (never a
    silent pick among several); the address is that store's own."""
    from resolver.artifacts import choose_artifact_store, choose_artifact_store_instance

    if default is not None and default in stores:
        expected = default
    elif len(stores) == 1:
        [expected] = stores
    else:
        expected = None
    assert choose_artifact_store_instance(stores, default) == expected
    assert choose_artifact_store(stores, default) == (None if expected is None
                                                      else stores[expected])


@given(worlds(), st.data())
def test_a_built_artifact_runs_at_its_recorded_digest_and_an_unbuilt_one_is_refused(world, data):
    """Modules whose image is built here (`build:`, no repository): an instance runs the digest
    the ledger's builds record for it, and one whose build is not recorded is refused
    (unpinned-artifact, naming the build) instead of running an image nobody built."""
    names = sorted(world.catalogue.modules)
    built = data.draw(st.sets(st.sampled_from(names)))
    recorded = data.draw(st.sets(st.sampled_from(sorted(built)))) if built else set()
    modules = world.catalogue.modules
    for name in built:
        modules = modules.set(name, attrs.evolve(modules[name], artifacts=pmap(
            {"image": Artifact(build="image")})))
    builds = pmap({f"{name}/image": BuildRecord(digest_of(f"build {name}")) for name in recorded})
    result = resolve(attrs.evolve(world.catalogue, modules=modules), world.mesh,
                     attrs.evolve(world.ledger, builds=builds))
    for instance, placed in world.mesh.instances.items():
        if placed.module not in built:
            continue
        refused = [p for p in result.problems
                   if p.code == codes.UNPINNED_ARTIFACT and p.instance == instance]
        if placed.module in recorded:
            assert refused == []
            rendering = result.renderings.get(instance)
            for container in rendering.containers if rendering is not None else ():
                assert container.image.endswith("@" + digest_of(f"build {placed.module}"))
        else:
            assert len(refused) == 1 and f"build {placed.module}/image" in refused[0].message
            assert instance not in result.renderings


NO_MESH = Mesh(mesh="m", nodes=pmap(), instances=pmap(), host_ports=PortRange(20000, 20999))


@given(catalogues(), st.sampled_from(["missing", "m9/missing", "m0/missing"]), st.data())
def test_a_base_is_found_bare_in_its_module_or_qualified_and_a_missing_one_is_a_fault(
        catalogue, wrong, data):
    """The generated catalogues name every base bare (an artifact of the same module) or as
    module/artifact, each one that exists: validate() finds nothing. One base changed to name
    an artifact nobody has is a fault that names it."""
    assert validate(catalogue, NO_MESH) == []
    based = sorted((m, a) for m, module in catalogue.modules.items()
                   for a, artifact in module.artifacts.items() if artifact.base)
    if not based:
        return
    module_name, artifact_name = data.draw(st.sampled_from(based))
    module = catalogue.modules[module_name]
    artifact = module.artifacts[artifact_name]
    index = data.draw(st.integers(0, len(artifact.base) - 1))
    broken = attrs.evolve(artifact, base=artifact.base.set(index, wrong))
    catalogue = attrs.evolve(catalogue, modules=catalogue.modules.set(module_name, attrs.evolve(
        module, artifacts=module.artifacts.set(artifact_name, broken))))
    faults = validate(catalogue, NO_MESH)
    assert faults and all(wrong in fault.message for fault in faults), faults
