"""How a new generation of a module's own secret takes effect on the running app.

Invariants:
- One decision, `secret_way`, for every own secret (`secret/<instance>/<name>`): a provider's
  admin whose grant kind has a provisioner is put in force by that provisioner on the running
  server; otherwise the module's `rotation:` entry says it (restart, by-hand with its
  instruction, or a run-once step); a secret without an entry is read at every start
  (restart); a provider's admin with no provisioner and no entry is refused, since nothing
  would put the new generation in force and the rotation could never settle.
- Which grant kinds have a provisioner is the caller's knowledge (the executors' one
  registry), handed in: the resolver names no provisioner.
- A refusal says why, where the module says it (file:line:col of its `secrets` entry) and the
  way out. Pure: values in, a value out.
"""

from __future__ import annotations

from typing import AbstractSet, Optional

import attrs

from ._inputs import NO_SOURCES, Catalogue, Sources
from ._model import Mesh
from ._rotation import OWN_SECRET_PREFIX

PROVISIONER, RESTART, BY_HAND, STEP, REFUSED = "provisioner", "restart", "by-hand", "step", "refused"


@attrs.frozen
class SecretWay:
    """How rotating `credential` takes effect: `how` is provisioner, restart, by-hand, step
    or refused; `instruction` (by-hand) and `step` (a run-once container) say what does it,
    `why` what is wrong and the way out (refused), `where` the module's line for it."""

    credential: str
    how: str
    instruction: str = ""
    step: Optional[str] = None
    why: str = ""
    where: str = ""


def secret_way(catalogue: Catalogue, mesh: Mesh, credential: str,
               provisioned: AbstractSet[str], sources: Sources = NO_SOURCES
               ) -> Optional[SecretWay]:
    """How a new generation of the own secret `credential` reaches its running app; None for
    a credential that is not an own secret of an instance in mesh.yaml (a grant's rotation is
    its provisioner's, or the operator's by hand). `provisioned`: the grant kinds that have a
    provisioner."""
    if not credential.startswith(OWN_SECRET_PREFIX):
        return None
    instance_name, _, secret = credential[len(OWN_SECRET_PREFIX):].rpartition("/")
    instance = mesh.instances.get(instance_name)
    module = catalogue.modules.get(instance.module) if instance is not None else None
    if module is None or secret not in module.secrets:
        return None
    doc = f"module:{module.name}"
    declared = module.rotation.get(secret)
    admin_of = [p for p in module.provides if p.admin == secret]
    kinds = sorted({catalogue.provisions[p.provision].grant for p in admin_of
                    if p.provision in catalogue.provisions})
    if admin_of and any(kind in provisioned for kind in kinds):
        return SecretWay(credential, PROVISIONER, where=_where(sources, doc, "provides"))
    if declared is not None:
        at = _where(sources, doc, "rotation", secret)
        return SecretWay(credential, declared.how, declared.instruction, declared.step, where=at)
    at = _where(sources, doc, "secrets", list(module.secrets).index(secret))
    if admin_of:
        what = ", ".join(p.provision for p in admin_of)
        return SecretWay(
            credential, REFUSED, where=at,
            why=(f"{credential} is the admin of {instance_name}'s {what} server ({at}), and the "
                 f"mesh has no provisioner for {' or '.join(kinds) or 'its grants'} to put a new "
                 f"generation in force on the running server: the rotation would record a "
                 f"generation nothing uses. Say how it takes effect in module {module.name}: "
                 f"`rotation: {{{secret}: {{how: by-hand, instruction: ...}}}}` (then `mesh "
                 f"applied NODE --report ... --by-hand {credential}` once done), or a run-once "
                 f"step (`how: step`)"))
    return SecretWay(credential, RESTART, where=at)


def _where(sources: Sources, doc: str, *path: object) -> str:
    file, line, col = sources.where(doc, *path)
    return f"{file}:{line}:{col}" if line else file
