"""Guarded upgrades (resolver/_upgrades.py, through resolver.backups and resolve()).

Properties:
- `needs_snapshot` agrees with a deliberately simple oracle of the documented rule: the module
  owns state and some container declared before and now runs another digest.
- `version_of` reads the major of any `MAJOR.MINOR…` tag under postgres's pattern; `crossing`
  holds exactly when the version before is known and the new one is not among it; adding a
  pin of another digest never changes the versions read for a digest (metamorphic).
- Through the whole resolver: an instance pinned from tag `A.x` to `B.y` is refused
  (`upgrade-needs-migration`, blocking only it, held on its old image) exactly when A != B and
  mesh.yaml does not confirm `upgrade: {to: B, by: fresh}`; a confirmed one is not refused and
  its node's guard says `fresh`; with a backup target every live stateful instance's node
  carries its guard, without one none does; the plan notes the snapshot (or that none is
  taken) only for an image that does change; an unrelated instance is never refused by it.
- `rollback_pins` sets the pin back exactly when the catalogue names a tag the image before was
  pinned as (or no tag is known for it), and otherwise names the tags to set back.
"""

from __future__ import annotations

import attrs
from hypothesis import given
from hypothesis import strategies as st
from pyrsistent import pmap, pvector

import resolver
from resolver import (Artifact, Catalogue, Backups, BackupTarget, Container, ContainerDecl, Instance,
                      InstanceRendering, Ledger, Mesh, Module, Node, StateDir, UpgradeConfirm,
                      UpgradeRule, resolve)
from resolver.backups import (crossing, needs_snapshot, rollback_pins, version_of,
                              versions_at)
from resolver.rendering import record_declared

PATTERN = r"^([0-9]+)\."
REPO = "registry.example/pg"
NAMES = ("server", "sidecar", "init")

digests = st.sampled_from([f"sha256:{c * 64}" for c in "abcdef"])
majors = st.integers(9, 18)
tags = st.builds(lambda major, minor: f"{major}.{minor}", majors, st.integers(0, 20))


def _module(state: bool, containers=NAMES, rule: bool = True) -> Module:
    return Module(
        name="pg",
        artifacts=pmap({"pg": Artifact(repository=REPO, tag="1.0")}),
        state=pmap({"data": StateDir(path="data")}) if state else pmap(),
        containers=pvector(Container(name=n, artifact="pg") for n in containers),
        upgrades=UpgradeRule(version=PATTERN, artifact="pg") if rule else None)


def _rendering(images: dict[str, str]) -> InstanceRendering:
    return InstanceRendering(node="n1", containers=pvector(
        ContainerDecl(name=f"m-{n}", instance="pg@n1", container=n, image=f"{REPO}@{d}")
        for n, d in sorted(images.items())))


@given(st.booleans(), st.dictionaries(st.sampled_from(NAMES), digests),
       st.dictionaries(st.sampled_from(NAMES), digests))
def test_a_snapshot_is_needed_exactly_when_a_stateful_containers_digest_changes(
        state, before, after):
    expected = state and any(name in after and after[name] != digest
                             for name, digest in before.items())
    assert needs_snapshot(_module(state), _rendering(before), after) == expected
    assert not needs_snapshot(_module(state), None, after)  # a first start is no upgrade


@given(majors, st.integers(0, 99), st.text("-abc", max_size=4))
def test_the_major_is_read_from_any_postgres_tag(major, minor, suffix):
    assert version_of(f"{major}.{minor}{suffix}", PATTERN) == str(major)
    assert version_of(f"latest{suffix}", PATTERN) is None
    assert version_of("16.4", "[") is None  # a pattern that does not compile reads nothing


@given(st.frozensets(st.sampled_from(["14", "15", "16"])),
       st.one_of(st.none(), st.sampled_from(["14", "15", "16"])))
def test_a_crossing_is_a_known_version_left_for_another(before, after):
    assert crossing(before, after) == (len(before) > 0 and after is not None
                                       and after not in before)


@given(st.dictionaries(st.builds(lambda t: f"{REPO}:{t}", tags), digests), digests, digests,
       tags)
def test_a_pin_of_another_digest_changes_no_version_read(pins, digest, other, tag):
    if other == digest:
        return
    more = {**pins, f"{REPO}:{tag}-x": other}
    if f"{REPO}:{tag}-x" in pins:
        return
    assert versions_at(more, digest, PATTERN) == versions_at(pins, digest, PATTERN)


# ----------------------------------------------------------------------- the whole resolver

def _catalogue(tag: str) -> Catalogue:
    pg = Module(name="pg", artifacts=pmap({"pg": Artifact(repository=REPO, tag=tag)}),
                state=pmap({"data": StateDir(path="data")}),
                containers=pvector([Container(name="server", artifact="pg")]),
                upgrades=UpgradeRule(version=PATTERN))
    app = Module(name="app", artifacts=pmap({"app": Artifact(repository="r/app", tag="1")}),
                 containers=pvector([Container(name="web", artifact="app")]))
    return Catalogue(modules=pmap({"pg": pg, "app": app}))


def _mesh(confirm: UpgradeConfirm | None, target: bool) -> Mesh:
    return Mesh(mesh="m", nodes=pmap({"n1": Node(address="10.0.0.1"),
                                      "n2": Node(address="10.0.0.2")}),
                instances=pmap({"pg@n1": Instance(module="pg", node="n1", upgrade=confirm),
                                "app@n1": Instance(module="app", node="n1")}),
                backups=Backups(target=BackupTarget(node="n2", repository="/r")
                                if target else None))


@given(tags, tags, st.booleans(), st.booleans(), st.data())
def test_a_major_change_is_refused_until_it_is_confirmed(first, second, confirmed, target,
                                                          data):
    old, new = "sha256:" + "1" * 64, "sha256:" + "2" * 64
    pins = pmap({f"{REPO}:{first}": old, "r/app:1": "sha256:" + "3" * 64})
    before = run(_catalogue(first), _mesh(None, target), Ledger(pins=pins))
    ledger = record_declared(before)
    ledger = attrs.evolve(ledger, pins=ledger.pins.set(f"{REPO}:{second}", new))
    major = second.split(".")[0]
    to = major if data.draw(st.booleans()) or not confirmed else str(int(major) + 1)
    confirm = UpgradeConfirm(to=to, by="fresh") if confirmed else None
    after = run(_catalogue(second), _mesh(confirm, target), ledger)
    refused = [p for p in after.problems if p.code == "upgrade-needs-migration"]
    crosses = first.split(".")[0] != major
    expect_refused = crosses and not (confirmed and to == major)
    assert bool(refused) == expect_refused, (first, second, confirm, refused)
    assert all(list(p.blocks) == ["pg@n1"] for p in refused)
    assert not [p for p in after.problems if "app@n1" in p.blocks]  # unrelated: untouched
    images = [c.image for c in after.declarations["n1"].containers if c.instance == "pg@n1"]
    assert images == [f"{REPO}@{old if expect_refused else new}"]  # held on its old image
    guards = list(after.declarations["n1"].upgrades)
    assert [g.instance for g in guards] == (["pg@n1"] if target and not expect_refused
                                            else [])  # a held instance changes nothing
    for guard in guards:
        assert guard.version == major
        assert guard.fresh == (confirmed and to == guard.version)
    assert not after.declarations["n2"].upgrades
    changed = [c for c in after.changes if c.subject == "pg@n1"
               and c.kind in ("pre-upgrade-snapshot", "unguarded-upgrade")]
    assert len(changed) == (0 if expect_refused else 1)


@given(tags, tags, st.booleans())
def test_a_rollback_pins_back_only_the_tag_the_image_before_was_pinned_as(before_tag,
                                                                          now_tag, known):
    old = "sha256:" + "1" * 64
    pins = {f"{REPO}:{before_tag}": old} if known else {}
    module = _module(True, ("server",), rule=False)
    module = Module(name=module.name, state=module.state, containers=module.containers,
                    artifacts=pmap({"pg": Artifact(repository=REPO, tag=now_tag)}))
    rollback = rollback_pins(module, pins, {"server": f"{REPO}@{old}"})
    if known and before_tag != now_tag:
        assert dict(rollback.pins) == {}
        assert dict(rollback.retag) == {"pg": (now_tag, (before_tag,))}
    else:
        assert dict(rollback.pins) == {f"{REPO}:{now_tag}": old}
        assert dict(rollback.retag) == {}


def run(catalogue: Catalogue, mesh: Mesh, ledger: Ledger) -> "resolver.Resolution":
    """One resolution of this module's meshes (the reach test counts the codes it states)."""
    return resolve(catalogue, mesh, ledger)


@given(tags, st.sampled_from(["fresh", "pg_upgrade", "dump-restore"]), st.booleans())
def test_a_confirmation_names_a_known_step_and_is_stale_once_nothing_crosses(tag, by, same):
    """`by:` naming neither `fresh` nor a migration of the module is refused at the instance
    (upgrade-unknown-step); a confirmation left in mesh.yaml for the version already running
    is only noted (stale-upgrade, info) and refuses nothing."""
    old = "sha256:" + "1" * 64
    pins = pmap({f"{REPO}:{tag}": old, "r/app:1": "sha256:" + "3" * 64})
    first = run(_catalogue(tag), _mesh(None, True), Ledger(pins=pins))
    ledger = record_declared(first)
    major = tag.split(".")[0]
    to = major if same else str(int(major) + 1)
    after = run(_catalogue(tag), _mesh(UpgradeConfirm(to=to, by=by), True), ledger)
    unknown = [p for p in after.problems if p.code == "upgrade-unknown-step"]
    assert bool(unknown) == (by != "fresh"), unknown  # the test module declares no migration
    assert all(list(p.blocks) == ["pg@n1"] for p in unknown)
    stale = [p for p in after.problems if p.code == "stale-upgrade"]
    if by == "fresh":
        assert bool(stale) == same, stale
        assert all(p.severity == "info" and not p.blocks for p in stale)
