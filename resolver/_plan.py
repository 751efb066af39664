"""What changes between two sets of declarations, container by container, with causes.

Invariants:
- Pure comparison of declarations: it never looks at a machine. A container is "create"
  when new, "remove" when gone, "recreate" when any part of its definition differs (an
  environment is fixed at creation, so the honest verb is recreate), and absent otherwise.
- Every recreate names its causes ("env DB_HOST", "image", "secret <id> generation 1 → 2"),
  so a rotation's plan shows every container it touches and why; values of secrets never
  appear, only credential ids and generations.
"""

from __future__ import annotations

from typing import Mapping, Optional

import attrs
from pyrsistent import pvector
from pyrsistent.typing import PVector

from ._declaration import ContainerDecl, Declaration


@attrs.frozen(order=True)
class ContainerChange:
    node: str
    container: str
    instance: str
    action: str  # create | recreate | remove
    causes: PVector[str] = pvector()


def container_causes(old: ContainerDecl, new: ContainerDecl) -> list[str]:
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
        if before != after:
            before = "pending" if before is None else before
            after = "pending" if after is None else after
            causes.append(f"secret {cred} generation {before} → {after}")
    for field in ("command", "ports", "mounts", "run_once", "health", "labels", "mac"):
        if getattr(old, field) != getattr(new, field):
            causes.append(field.replace("_", "-"))
    return causes


def container_changes(old: Mapping[str, Declaration],
                      new: Mapping[str, Declaration]) -> list[ContainerChange]:
    changes = []
    for node in sorted(set(old) | set(new)):
        before = {c.name: c for c in (old[node].containers if node in old else ())}
        after = {c.name: c for c in (new[node].containers if node in new else ())}
        for name in sorted(set(before) | set(after)):
            b: Optional[ContainerDecl] = before.get(name)
            a: Optional[ContainerDecl] = after.get(name)
            if b is None:
                changes.append(ContainerChange(node, name, a.instance, "create"))
            elif a is None:
                changes.append(ContainerChange(node, name, b.instance, "remove"))
            else:
                causes = container_causes(b, a)
                if causes:
                    changes.append(ContainerChange(node, name, a.instance, "recreate",
                                                   pvector(causes)))
    return changes
