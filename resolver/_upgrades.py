"""Guarded upgrades: an image change of an instance that owns state is snapshotted first, and a
change across the version its module's data format follows is refused until it is confirmed.

Invariants:
- An instance needs a pre-upgrade snapshot exactly when its module owns state directories and
  one of its containers was last declared on another image digest than it is now (same
  container name; a new or removed container is no upgrade). The node decides when to take
  it by what runs (an UpgradeGuard in its declaration), so a second plan before the apply
  loses nothing.
- A module's `upgrades: version:` is a regular expression over its artifact's tag; its first
  group is the data's version. The version an instance was at is read from the ledger's pins
  (every tag pinned to the digest it was last declared on); a change is a crossing only when
  that version is known and the new tag's differs. A crossing blocks the instance (held at
  its last declaration) until mesh.yaml's `upgrade: {to: <new version>, by: fresh | <one of
  the module's migrations>}` names it; a confirmation of a version already reached is noted
  (info), never acted on twice by the node (it acts only while another image runs).
- Guards are emitted only for live (not held) instances with state when mesh.yaml names a
  backup target on another node; without one the plan says no snapshot is taken (a change,
  not a refusal). A refused instance's image does not change, and no change is noted for it.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Mapping, Optional

import attrs
from pyrsistent import pvector

from . import _codes as codes
from ._artifacts import artifact_digest, artifact_key, pin_key
from ._backup_target import target_node
from ._frozen import FrozenMap
from ._declaration import Change, InstanceRendering, Problem, UpgradeGuard
from ._model import Instance, Module
from ._render import state_host_path

if TYPE_CHECKING:  # pragma: no cover
    from ._context import Context, Findings

#: `upgrade: by: fresh`: the new version starts on empty state directories (the old kept aside).
FRESH = "fresh"


def version_of(tag: Optional[str], pattern: str) -> Optional[str]:
    """The data version a tag holds under `pattern` (its first group, or the whole match
    without a group); None when the tag does not match or the pattern is not valid."""
    if tag is None:
        return None
    try:
        found = re.search(pattern, tag)
    except re.error:
        return None
    if found is None:
        return None
    return found.group(1) if found.groups() else found.group(0)


def digest_of(image: str) -> str:
    """The digest part of a declared image (`repo@sha256:…`, or a bare `sha256:…` ID)."""
    return image.rsplit("@", 1)[-1]


def tags_pinned_to(pins: Mapping[str, str], digest: str) -> tuple[str, ...]:
    """Every tag the ledger pins to `digest` (of any repository), sorted."""
    return tuple(sorted({key.rsplit(":", 1)[1] for key, value in pins.items()
                         if value == digest and ":" in key}))


def versions_at(pins: Mapping[str, str], digest: str, pattern: str) -> frozenset[str]:
    """The data versions of the tags pinned to `digest` (empty: unknown)."""
    found = {version_of(tag, pattern) for tag in tags_pinned_to(pins, digest)}
    return frozenset(v for v in found if v is not None)


def crossing(before: frozenset[str], after: Optional[str]) -> bool:
    """Whether moving from an image at versions `before` to one at `after` crosses the
    module's version: both known, and `after` is none of them."""
    return bool(before) and after is not None and after not in before


def changed_images(before: InstanceRendering, after: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """container (its name in the module) → (digest before, digest now), for each container
    declared both times whose digest differs."""
    changed = {}
    for container in before.containers:
        now = after.get(container.container)
        if now is not None and digest_of(container.image) != now:
            changed[container.container] = (digest_of(container.image), now)
    return changed


def needs_snapshot(module: Module, before: Optional[InstanceRendering],
                   after: Mapping[str, str]) -> bool:
    """The pure rule: an instance owning state whose image digest changes is snapshotted
    first. `after`: container → the digest it is declared on now."""
    return bool(module.state) and before is not None and bool(changed_images(before, after))


def _guarded_artifact(module: Module) -> Optional[str]:
    rule = module.upgrades
    if rule is None:
        return None
    if rule.artifact is not None:
        return rule.artifact
    return min(module.artifacts) if module.artifacts else None


def _digests_now(r: "Context", module: Module) -> dict[str, str]:
    """container → the digest its artifact is pinned (or built) at now."""
    found = {}
    for container in module.containers:
        artifact = module.artifacts.get(container.artifact)
        if artifact is None:
            continue
        digest = artifact_digest(artifact_key(module.name, container.artifact), artifact,
                                 r.ledger)
        if digest is not None:
            found[container.name] = digest
    return found


def check_upgrades(r: "Context") -> tuple["Findings", list[Change]]:
    """Refusals of version changes not confirmed (blocking the instance), confirmations that
    name no step the module has, and the plan's note for each stateful image change."""
    found: list[Problem] = []
    changes: list[Change] = []
    target = r.mesh.backups.target
    store_node = target_node(r)
    digests_now: dict[str, dict[str, str]] = {}  # module → its digests now (read once each)
    instances, modules_of, nodes, declared = r.instances, r.modules_of, r.nodes, r.declared
    for name in r.names:
        inst, module = instances[name], modules_of[name]
        if module is None or inst.node not in nodes:
            continue
        before = declared.get(name)
        if inst.upgrade is None and module.upgrades is None and not module.state:
            continue  # (most: no rule, no confirmation, no state: nothing below applies)
        now = digests_now.get(module.name)
        if now is None:
            now = digests_now[module.name] = _digests_now(r, module)
        refusals = _version_findings(r, name, inst, module, before, now)
        found.extend(refusals)
        if any(p.blocks for p in refusals):
            continue  # held on its image before: no image changes
        if needs_snapshot(module, before, now):
            assert before is not None
            what = ", ".join(f"{c} {old[7:19]} → {new[7:19]}"
                             for c, (old, new) in sorted(changed_images(before, now).items()))
            if target is not None and store_node is not None and store_node != inst.node:
                into = target.repository or f"the backup store {target.instance}"
                changes.append(Change("pre-upgrade-snapshot", name,
                                      f"{name} changes image ({what}): {inst.node} snapshots "
                                      f"it into {into} on {store_node} before "
                                      f"recreating it; `mesh rollback {name}` returns to the "
                                      "image before and that snapshot"))
            else:
                changes.append(Change("unguarded-upgrade", name,
                                      f"{name} changes image ({what}) and mesh.yaml names no "
                                      "backup target on another node (`backups: target:`): "
                                      "no snapshot is taken before it is recreated"))
    return tuple(found), changes


def _version_findings(r: "Context", name: str, inst: Instance, module: Module,
                      before: Optional[InstanceRendering], now: Mapping[str, str]
                      ) -> list[Problem]:
    rule, artifact_name = module.upgrades, _guarded_artifact(module)
    confirm = inst.upgrade
    found: list[Problem] = []
    if confirm is not None and confirm.by != FRESH and \
            (rule is None or confirm.by not in rule.migrations):
        steps = [FRESH, *(rule.migrations if rule is not None else ())]
        found.append(r.problem(
            codes.UPGRADE_UNKNOWN_STEP,
            f"{name}: `upgrade: by: {confirm.by}` names no migration of module {module.name}; "
            f"expected one of: {', '.join(steps)}", path=("instances", name, "upgrade", "by"),
            instance=name, blocks=[name]))
        return found
    if rule is None or artifact_name is None or artifact_name not in module.artifacts:
        return found
    new_version = version_of(module.artifacts[artifact_name].tag, rule.version)
    containers = {c.name for c in module.containers if c.artifact == artifact_name}
    previous = frozenset[str]()
    if before is not None:
        for container in before.containers:
            if container.container in containers:
                previous = previous | versions_at(r.ledger.pins, digest_of(container.image),
                                                  rule.version)
    if crossing(previous, new_version):
        if confirm is not None and confirm.to == new_version:
            return found
        was = "/".join(sorted(previous))
        how = " or ".join([FRESH, *rule.migrations])
        found.append(r.problem(
            codes.UPGRADE_NEEDS_MIGRATION,
            f"{name} would move from version {was} to {new_version} of module "
            f"{module.name} (artifact {artifact_name}, tag "
            f"{module.artifacts[artifact_name].tag}): its state needs a migration; add "
            f"`upgrade: {{to: \"{new_version}\", by: {how}}}` to the instance (a snapshot "
            f"is taken first); until then {name} stays on version {was}",
            path=("instances", name), instance=name, blocks=[name]))
    elif confirm is not None and (not previous or confirm.to in previous):
        found.append(r.problem(
            codes.STALE_UPGRADE,
            f"{name}: `upgrade: {{to: \"{confirm.to}\"}}` confirms no version change now; "
            "remove it once the node applied it, so that the next one asks again",
            path=("instances", name, "upgrade"), instance=name, severity="info"))
    return found


def guards(r: "Context", live: Mapping[str, InstanceRendering]
           ) -> dict[str, list[UpgradeGuard]]:
    """node → the upgrade guards of its live stateful instances (sorted by instance), when
    mesh.yaml names a backup target on another node; empty otherwise."""
    target = r.mesh.backups.target
    store_node = target_node(r)
    found: dict[str, list[UpgradeGuard]] = {}
    if target is None or store_node is None:
        return found
    for name in sorted(live):
        rendering, module = live[name], r.module_of(name)
        inst = r.instances.get(name)
        if module is None or inst is None or not module.state \
                or rendering.node == store_node or name == target.instance:
            continue
        rule, artifact_name = module.upgrades, _guarded_artifact(module)
        version = None
        if rule is not None and artifact_name is not None \
                and artifact_name in module.artifacts:
            version = version_of(module.artifacts[artifact_name].tag, rule.version)
        confirm = inst.upgrade
        fresh = confirm is not None and confirm.by == FRESH and version is not None \
            and confirm.to == version
        method = module.backup
        found.setdefault(rendering.node, []).append(UpgradeGuard(
            instance=name, module=module.name, repository=target.repository,
            target_node=store_node,
            state=pvector(state_host_path(name, module.state[s].path)
                          for s in sorted(module.state)),
            container=method.container if method is not None else None,
            dump=method.dump if method is not None else pvector(),
            restore=method.restore if method is not None else pvector(),
            version=version, fresh=fresh))
    return found


@attrs.frozen
class Rollback:
    """What `mesh rollback` changes in the ledger: each pin set back to the digest it had
    before the upgrade (`pins`), or, when the catalogue names another tag for an artifact now
    than the image before was pinned as, that artifact with the tags to set back
    (`retag`: artifact → (tag now, the tags the image before was pinned as))."""

    pins: FrozenMap[str, str] = FrozenMap()
    retag: FrozenMap[str, tuple[Optional[str], tuple[str, ...]]] = FrozenMap()


def rollback_pins(module: Module, pins: Mapping[str, str],
                  before: Mapping[str, str]) -> Rollback:
    """The rollback of an upgrade whose containers ran `before` (container → image): each
    container's artifact pinned back to that image's digest, when the catalogue still names
    the tag it was pinned as (or the ledger no longer says which tag that was)."""
    back: dict[str, str] = {}
    retag: dict[str, tuple[Optional[str], tuple[str, ...]]] = {}
    for container in module.containers:
        image = before.get(container.name)
        artifact = module.artifacts.get(container.artifact)
        if image is None or artifact is None:
            continue
        key = pin_key(artifact)
        if key is None:
            retag[container.artifact] = (None, ())  # a build: no pin to set back
            continue
        digest = digest_of(image)
        was = tags_pinned_to(pins, digest)
        if was and artifact.tag not in was:
            retag[container.artifact] = (artifact.tag, was)
        else:
            back[key] = digest
    return Rollback(FrozenMap(back), FrozenMap(retag))

