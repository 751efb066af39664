"""What changes between two sets of declarations, container by container, with causes.

Invariants:
- Pure comparison of declarations: it never looks at a machine. A container is "create"
  when new, "remove" when gone, "recreate" when any part of its definition differs (an
  environment is fixed at creation, so the honest verb is recreate), and absent otherwise;
  except "in-place" when the only difference is a new generation of a secret its provisioner
  puts in force on the running server (a provider's admin, in the server's own container: see
  _rotation.server_held_secrets), which rewrites its env file and never recreates it.
- Every recreate names its causes ("env DB_HOST", "image", "secret <id> generation 1 → 2"),
  so a rotation's plan shows every container it touches and why; values of secrets never
  appear, only credential ids and generations.
"""

from __future__ import annotations

from typing import Mapping, Optional

import attrs
from pyrsistent import pvector
from pyrsistent.typing import PVector

from ._declaration import ContainerDecl, Declaration, LogsDecl
from ._rotation import server_held_secrets


@attrs.frozen(order=True)
class ContainerChange:
    """One container's change between two resolutions: `action` is create,
    recreate, remove or in-place, with its causes."""

    node: str
    container: str
    instance: str
    action: str  # create | recreate | remove | in-place
    causes: PVector[str] = pvector()


def container_causes(old: ContainerDecl, new: ContainerDecl,
                     in_place: frozenset[str] = frozenset()) -> list[str]:
    """Why `old` becomes `new`; a generation change of a credential in `in_place` is left out
    (the caller states it apart)."""
    causes = []
    if old.image != new.image:
        causes.append(f"image {old.image} → {new.image}")
    for key in sorted(set(old.env) | set(new.env)):
        if old.env.get(key) != new.env.get(key):
            causes.append(f"env {key}")
    old_secrets = {s.credential: s.generation for s in old.secrets}
    new_secrets = {s.credential: s.generation for s in new.secrets}
    for cred in sorted(set(old_secrets) | set(new_secrets)):
        before, after = old_secrets.get(cred, "none"), new_secrets.get(cred, "none")
        if before != after and not (cred in in_place and before != "none" and after != "none"):
            before = "pending" if before is None else before
            after = "pending" if after is None else after
            causes.append(f"secret {cred} generation {before} → {after}")
    for field in ("command", "ports", "mounts", "run_once", "health", "labels", "mac",
                  "secret_files"):
        if getattr(old, field) != getattr(new, field):
            causes.append(field.replace("_", "-"))
    if old.logs != new.logs:
        causes.append(f"logs {_limits(old.logs)} → {_limits(new.logs)}")
    return causes


def _limits(logs: LogsDecl) -> str:
    """Log limits as a cause says them: `json-file 10m x 3`."""
    return f"{logs.driver} {logs.max_size} x {logs.max_files}"


def container_changes(old: Mapping[str, Declaration],
                      new: Mapping[str, Declaration]) -> list[ContainerChange]:
    """The plan diff: every container created, removed, recreated (with its causes)
    or changed in place between two sets of declarations (node → Declaration), sorted by node
    and container."""
    changes = []
    for node in sorted(set(old) | set(new)):
        before = {c.name: c for c in (old[node].containers if node in old else ())}
        after = {c.name: c for c in (new[node].containers if node in new else ())}
        for name in sorted(set(before) | set(after)):
            change = container_change(node, old.get(node), new.get(node), before.get(name),
                                      after.get(name))
            if change is not None:
                changes.append(change)
    return changes


def container_change(node: str, old: Optional[Declaration], new: Optional[Declaration],
                     b: Optional[ContainerDecl], a: Optional[ContainerDecl]
                     ) -> Optional[ContainerChange]:
    """What the node does with one container (`b` before, `a` after, by name, in the node's
    declarations `old` and `new`): create, remove, recreate or in-place, with its causes;
    None when nothing changes for it."""
    if b is None:
        assert a is not None  # a name of before or after
        return ContainerChange(node, a.name, a.instance, "create")
    if a is None:
        return ContainerChange(node, b.name, b.instance, "remove")
    assert old is not None and new is not None  # both hold a container of that name
    held = server_held_secrets(new, a) & server_held_secrets(old, b)
    causes = container_causes(b, a, held)
    if causes:
        return ContainerChange(node, a.name, a.instance, "recreate", pvector(causes))
    moved = _in_place_causes(b, a, held)
    return ContainerChange(node, a.name, a.instance, "in-place", pvector(moved)) \
        if moved else None


def _in_place_causes(old: ContainerDecl, new: ContainerDecl, held: frozenset[str]) -> list[str]:
    before = {s.credential: s.generation for s in old.secrets}
    after = {s.credential: s.generation for s in new.secrets}
    return [f"secret {cred} generation {before[cred]} → {after[cred]} is in force on the "
            f"running server; only the file it reads it from (env or secret file) is "
            "rewritten"
            for cred in sorted(held) if cred in before and cred in after
            and before[cred] != after[cred]]


# What the package's root takes from this module (resolver/__init__.py joins these lists).
__all__ = ["container_changes", "ContainerChange"]
