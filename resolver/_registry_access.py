"""Who may pull from and push to the mesh's own registry: one account per node, one to push.

Invariants:
- The registry requires authentication. Every node of the mesh pulls (its container runtime
  consumes the artifact store), so each has its own pull account, `node-<node>`, whose password
  is the credential `registry-pull/<registry instance>/<node>`, sealed to the registry's node
  (whose provisioner writes its bcrypt hash) and to that node alone (whose runtime pulls with
  it). Pushing (mirror, build) has one account, `mesh-push`, credential
  `registry-push/<registry instance>/control`, sealed to the registry's node and the control
  node. Issued once, with two slots: the htpasswd file holds `<account>_a` and `<account>_b`,
  the new generation goes to the idle one and the old one keeps working until every holder
  applied (no window, as PostgreSQL's two logins); a credential issued before accounts had
  two slots keeps its one entry `<account>` and rotates provider first.
- The registry's node holds one grant per account (kind `registry+account`), with the newest
  generation to put in force (resolver/_rotation.grant_view); the htpasswd provisioner makes
  them, and nothing else of the mesh's, true in the registry's htpasswd file.
- Each node's declaration names its own pull account only (`registry_logins`): a node never
  holds another node's password, so a node without its account is refused by the registry.
- The registry's containers mount `/etc/mesh/auth/<instance>/` read-only at `/etc/mesh/auth`,
  where the provisioner keeps `htpasswd`.
"""

from __future__ import annotations

from typing import Optional

import attrs

from ._bound import two_slots
from ._context import Context
from ._declaration import ContainerDecl, GrantDecl, MountDecl, RegistryLogin, Request, SecretRef
from ._rotation import LEDGER_CONSUMER, grant_view
from ._secrets import secret_ref

#: The grant kind of a registry account (kept by the registry's htpasswd provisioner).
ACCOUNT_KIND = "registry+account"
PROVISION = "artifact-store"
#: Where the registry's accounts file lives on its node, under `/<instance>/`.
AUTH_HOST_DIR = "/etc/mesh/auth"
AUTH_CONTAINER_DIR = "/etc/mesh/auth"
#: The name of the registry's accounts file, in its auth directory.
HTPASSWD = "htpasswd"
#: The registry login the control node pushes images with.
PUSH_LOGIN = "mesh-push"


@attrs.frozen
class MeshRegistry:
    """The mesh's own artifact store as one resolution chose it (choose_artifact_store_instance):
    its "host:port", the instance serving it and that instance's node. Worked out once, after
    ports are assigned, and passed to the stages that need it (rendering, assembly, TLS)."""

    address: str
    instance: str
    node: str


def pull_credential(store: str, node: str) -> str:
    """The credential id of the account `node`'s container runtime pulls from registry
    `store` with."""
    return f"registry-pull/{store}/{node}"


def push_credential(store: str) -> str:
    """The credential id of the control node's push account at registry `store`."""
    return f"registry-push/{store}/control"


def pull_login(node: str) -> str:
    return f"node-{node}"


def control_node(r: Context) -> Optional[str]:
    return next((name for name, node in sorted(r.mesh.nodes.items()) if node.control), None)


def account_user(login: str, slot: Optional[str]) -> str:
    """The htpasswd user a holder logs in as: `<login>_<slot>`, or `<login>` for an account
    issued before accounts had two slots."""
    return f"{login}_{slot}" if slot else login


def _slot(r: Context, cred_id: str) -> Optional[str]:
    """The slot holders use: the active generation's, `a` for one not issued yet, None for an
    account issued with one slot."""
    credential = r.credentials.get(cred_id)
    active = credential.active if credential is not None else None
    if not two_slots(ACCOUNT_KIND, active.slot if active is not None else None,
                     active is not None):
        return None
    return active.slot if active is not None and active.slot else "a"


def _grant(r: Context, store: str, cred_id: str, consumer: str, consumer_node: str,
           login: str, resource: str, fallback: SecretRef, slot: Optional[str]) -> GrantDecl:
    credential = r.credentials.get(cred_id)
    newest, retiring = grant_view(credential) if credential is not None and \
        credential.active is not None else (None, None)
    return GrantDecl(
        provision=PROVISION, kind=ACCOUNT_KIND, provider=store, consumer=consumer,
        consumer_node=consumer_node, login=login, resource=resource,
        credential=SecretRef(cred_id, newest.generation) if newest else fallback,
        slot=newest.slot if newest else slot,
        retiring=SecretRef(cred_id, retiring.generation) if retiring else None,
        retiring_slot=retiring.slot if retiring else None)


def registry_accounts(r: Context, store: str, store_node: str, registry: str
                      ) -> tuple[list[GrantDecl], dict[str, RegistryLogin], list[Request]]:
    """(grants on the registry's node, node → its RegistryLogin, the requests for what is not
    issued yet or must be re-sealed)."""
    grants: list[GrantDecl] = []
    logins: dict[str, RegistryLogin] = {}
    requests: list[Request] = []
    for node in sorted(r.mesh.nodes):
        cred_id = pull_credential(store, node)
        slot = _slot(r, cred_id)
        ref, needed = secret_ref(r.credentials, cred_id, {store_node, node},
                                 f"pull account of node {node} on the registry {store}", slot)
        requests.extend(needed)
        grants.append(_grant(r, store, cred_id, node, node, pull_login(node), "pull", ref,
                             slot))
        logins[node] = RegistryLogin(registry, account_user(pull_login(node), slot), ref)
    control = control_node(r)
    cred_id = push_credential(store)
    slot = _slot(r, cred_id)
    ref, needed = secret_ref(r.credentials, cred_id,
                             {store_node} | ({control} if control else set()),
                             f"push account on the registry {store} (mirror, build)", slot)
    requests.extend(needed)
    grants.append(_grant(r, store, cred_id, LEDGER_CONSUMER, control or store_node, PUSH_LOGIN,
                         "push", ref, slot))
    return grants, logins, requests


def with_auth(container: ContainerDecl, store: str) -> ContainerDecl:
    mount = MountDecl("auth", f"{AUTH_HOST_DIR}/{store}", AUTH_CONTAINER_DIR, True)
    return attrs.evolve(container, mounts=container.mounts.append(mount))
