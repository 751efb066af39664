"""The backup target as a provision: each stateful instance's backup duty, its login on the
mesh's backup store, and the credentials both sides hold.

Invariants:
- mesh.yaml `backups: target: INSTANCE` names a live instance whose module provides
  BACKUP_PROVISION; every stateful instance (its module owns state directories) on another
  node is backed up there, and one on the store's own node is refused (a problem at
  `backups.target`, code backup-target: a backup that dies with its machine is no backup) and
  gets no duty. The mapping form `{node, repository}` names a repository the mesh does not
  run: each stateful instance on another node than `node` gets a duty without a login.
- One login per backed-up instance, named after it (`store_login`): a rename of another
  instance changes no login. Its password is the credential `backup-login/<store>/<instance>`
  sealed to the store's node (whose provisioner keeps its bcrypt hash in the store's
  htpasswd, grant kind LOGIN_KIND, one slot: the login is also the repository's directory
  under `--private-repos`) and to the instance's node (where restic runs). The restic
  repository's password is the credential `backup-key/<instance>`, sealed to the instance's
  node alone: the store never holds what opens the snapshots. Both issued once, kept sealed
  in the ledger like every other credential; a duty holds their `${secret:…}` tokens only.
- The store's node opens its backup-target port to the nodes of the instances it backs up
  (restic runs on the node's host, whose address is the source), and each such node holds the
  mesh CA certificate (CA_HOST_FILE) restic verifies the store's TLS with.
- Pure: the context and the live renderings in, values out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Optional

import attrs
from pyrsistent import pvector

from . import _codes as codes
from ._backups import BackupError, duration_seconds, target_node as mesh_target_node
from ._declaration import (BackupDuty, FileDecl, FirewallAllow, GrantDecl, InstanceRendering,
                           Request)
from ._placeholders import secret_token
from ._render import state_host_path
from ._secrets import secret_ref
from ._tls import CA_HOST_FILE, ca_file
from ._tool_tokens import BACKUP_LOGIN_KIND

if TYPE_CHECKING:  # pragma: no cover
    from ._context import Context, Findings

#: The provision a backup store serves (provisions.yaml) and the grant kind of its logins.
BACKUP_PROVISION = "backup-target"
LOGIN_KIND = BACKUP_LOGIN_KIND


def store_login(instance: str) -> str:
    """The store login (and repository directory) of `instance`'s backups."""
    return instance


def login_credential(store: str, instance: str) -> str:
    return f"backup-login/{store}/{instance}"


def key_credential(instance: str) -> str:
    return f"backup-key/{instance}"


@attrs.frozen
class BackupPlan:
    """What the backup target adds to the declarations: duties by node, the store's grants and
    openings by its node, the nodes that need the mesh CA file, and the requests."""

    duties: Mapping[str, list[BackupDuty]] = attrs.Factory(dict)
    grants: Mapping[str, list[GrantDecl]] = attrs.Factory(dict)
    allows: Mapping[str, list[tuple[str, FirewallAllow]]] = attrs.Factory(dict)
    ca_files: Mapping[str, FileDecl] = attrs.Factory(dict)
    requests: list[Request] = attrs.Factory(list)


def target_node(r: "Context") -> Optional[str]:
    """The node the backup target is on: the store instance's, or the outside one's `node`."""
    return mesh_target_node(r.mesh)


def check_backup_target(r: "Context") -> "Findings":
    """The refusals of `backups: target: INSTANCE`: an instance providing no backup-target,
    and each stateful instance on the store's own node."""
    target = r.mesh.backups.target
    if target is None or target.instance is None or target.instance not in r.instances:
        return ()
    found = []
    module = r.module_of(target.instance)
    if module is not None and not any(p.provision == BACKUP_PROVISION for p in module.provides):
        found.append(r.problem(
            codes.BACKUP_TARGET, f"backups.target {target.instance} (module {module.name}) "
            f"provides no {BACKUP_PROVISION}; expected an instance of a module that does "
            "(the catalogue's backup-store)", path=("backups", "target")))
        return tuple(found)
    node = r.instances[target.instance].node
    for name in r.names:
        inst, stateful = r.instances[name], r.module_of(name)
        if name != target.instance and inst.node == node and stateful is not None \
                and stateful.state:
            found.append(r.problem(
                codes.BACKUP_TARGET, f"{name} runs on {node}, the node of its backup target "
                f"{target.instance}: a backup must be kept on another node; move one of them "
                "(it is not backed up until then)", path=("backups", "target"), instance=name))
    return tuple(found)


def backup_plan(r: "Context", live: Mapping[str, InstanceRendering]) -> BackupPlan:
    """The duties, grants, openings, CA files and requests of the mesh's backups."""
    target = r.mesh.backups.target
    store_node = target_node(r)
    if target is None or store_node is None:
        return BackupPlan()
    store = target.instance
    address, port = "", 0
    if store is not None:
        rendering = live.get(store)
        provided = [p for p in rendering.providers if p.provision == BACKUP_PROVISION] \
            if rendering is not None else []
        if not provided or store_node not in r.mesh.nodes:
            return BackupPlan()  # held, refused or not a store: stated elsewhere
        address, port = r.mesh.nodes[store_node].address, provided[0].port
    plan = BackupPlan()
    duties: dict[str, list[BackupDuty]] = {}
    grants: dict[str, list[GrantDecl]] = {}
    allows: dict[str, list[tuple[str, FirewallAllow]]] = {}
    ca_files: dict[str, FileDecl] = {}
    for name in sorted(live):
        rendering, module = live[name], r.module_of(name)
        if module is None or not module.state or rendering.node == store_node \
                or name == store:
            continue
        method = module.backup
        every = r.mesh.backups.every.get(name)
        try:
            seconds = duration_seconds(every) if every is not None else None
        except BackupError:
            seconds = None  # refused at mesh.yaml's validation
        duty = BackupDuty(
            instance=name, module=module.name, repository=target.repository,
            target_node=store_node, every=seconds,
            state=pvector(state_host_path(name, module.state[s].path)
                          for s in sorted(module.state)),
            container=method.container if method is not None else None,
            dump=method.dump if method is not None else pvector(),
            restore=method.restore if method is not None else pvector())
        if store is not None:
            login = store_login(name)
            login_id, key_id = login_credential(store, name), key_credential(name)
            login_ref, needed = secret_ref(
                r.credentials, login_id, {store_node, rendering.node},
                f"{name}'s login on the backup store {store}")
            plan.requests.extend(needed)
            key_ref, needed = secret_ref(r.credentials, key_id, {rendering.node},
                                         f"{name}'s restic repository password")
            plan.requests.extend(needed)
            duty = attrs.evolve(
                duty, repository=f"rest:https://{address}:{port}/{login}/", login=login,
                password=secret_token(login_id), key=secret_token(key_id),
                ca=CA_HOST_FILE if r.ledger.ca else "", refs=pvector([login_ref, key_ref]))
            grants.setdefault(store_node, []).append(GrantDecl(
                provision=BACKUP_PROVISION, kind=LOGIN_KIND, provider=store, consumer=name,
                consumer_node=rendering.node, login=login, resource=login,
                credential=login_ref))
            allows.setdefault(store_node, []).append((name, FirewallAllow(
                port, "tcp", pvector([r.mesh.nodes[rendering.node].address]),
                f"{store}/{BACKUP_PROVISION}")))
            if r.ledger.ca:
                ca_files[rendering.node] = ca_file(r.ledger.ca)
        duties.setdefault(rendering.node, []).append(duty)
    return attrs.evolve(plan, duties=duties, grants=grants, allows=allows, ca_files=ca_files)


def guard_repository(plan: BackupPlan, node: str, instance: str, fallback: str) -> str:
    """The repository an upgrade guard of `instance` snapshots into: its duty's."""
    return next((d.repository for d in plan.duties.get(node, ()) if d.instance == instance),
                fallback)
