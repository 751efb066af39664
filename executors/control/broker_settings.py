"""How the control plane reaches its broker: the AMQP address, the management API and the
broker's admin, and the address nodes are told in their enrolment token.

Invariants:
- Named explicitly (options or MESH_BROKER_* variables), or else derived from the mesh itself,
  each setting on its own (an AMQP address given, say by the control module's binding, with
  the management API and admin left to the mesh): the substrate broker instance (`substrate: broker:` in mesh.yaml) at its node's address and
  the host ports the ledger assigned to its `amqp` and `management` listens; its admin is the
  account its container names (RABBITMQ_DEFAULT_USER, else `admin`), whose password is opened
  from the control node's escrow with the control node's key (`--key`): the control node
  issued it, so it could read it already (README: trust model).
- The mesh's AMQP traffic is TLS verified against the mesh CA (its certificate beside its key,
  `ca.path`): the control plane's own connection and what enrolment tokens tell nodes. Plain
  AMQP only when asked for in so many words (`--broker-plain`); a mesh without its CA yet is
  told to make it (`mesh ca init DIR`) or to ask for plain.
- An https management API (the admin's password crosses to it) is verified against the mesh CA
  too, whatever the AMQP side is; the substrate broker's is https when its module marks the
  `management` listen `tls`.
- The admin password is read from a file or unsealed in memory; it is never printed.
- Whatever is missing is one MeshError saying what to give.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, TypedDict

import attrs

import resolver
from resolver import Inputs, MeshError

from executors.common.amqp import BrokerAddress, BrokerTls
from executors.common.keys import UnsealError, load_private_key, unseal
from executors.control.ca import ca_cert_path

MANAGEMENT_LISTEN = "management"
DEFAULT_ADMIN = "admin"


@attrs.frozen
class BrokerSettings:
    amqp: BrokerAddress  # where the control plane connects
    api: str  # the management API's base URL
    admin: str
    admin_password: str = attrs.field(repr=False)
    for_nodes: BrokerAddress  # what enrolment tokens tell nodes
    tls: BrokerTls = BrokerTls.plain()  # settings_from always says which
    # the mesh CA's certificate an https `api` is verified against (None: http)
    api_ca_pem: Optional[str] = attrs.field(default=None, repr=False)


class _Derived(TypedDict):
    """What the mesh says of its substrate broker (_from_mesh)."""

    amqp: BrokerAddress
    api: str
    admin: str
    credential: Optional[str]  # the admin password's credential id (None: none declared)


def settings_from(inputs: Inputs, *, broker: Optional[str] = None, api: Optional[str] = None,
                  admin: Optional[str] = None, admin_password_file: Optional[str] = None,
                  for_nodes: Optional[str] = None, key: Optional[str] = None,
                  plain: bool = False, admin_password: Optional[str] = None
                  ) -> BrokerSettings:
    """The settings given (None: not given), the rest derived from the mesh; TLS against the
    mesh CA unless `plain`. `admin_password` (kept by control/control_settings.py, opened)
    serves when no password file is given."""
    derived: list[_Derived] = []  # the mesh is resolved once, and only when asked

    def from_mesh() -> _Derived:
        if not derived:
            derived.append(_from_mesh(inputs))
        return derived[0]

    amqp = BrokerAddress.parse(broker) if broker else from_mesh()["amqp"]
    if not api:
        api_from_mesh = True
        try:
            api = from_mesh()["api"]
        except MeshError as error:
            if not broker:
                raise
            raise MeshError(f"--broker-api is needed with --broker (the management API, e.g. "
                            f"https://{amqp.host}:15671): the mesh does not say it ({error})"
                            ) from None
    else:
        api_from_mesh = False
    admin = admin or (from_mesh()["admin"] if api_from_mesh else DEFAULT_ADMIN)
    if admin_password_file:
        try:
            password = Path(admin_password_file).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise MeshError(f"{admin_password_file}: cannot read the broker admin's password: "
                            f"{exc}") from None
    elif admin_password is not None:
        password = admin_password
    else:
        password = _admin_password(from_mesh()["credential"], inputs, key)
    nodes_see = BrokerAddress.parse(for_nodes) if for_nodes else amqp
    tls = BrokerTls.plain() if plain else mesh_ca_tls(inputs)
    return BrokerSettings(amqp, api.rstrip("/"), admin, password, nodes_see, tls,
                          _api_ca(inputs, api, tls))


def _api_ca(inputs: Inputs, api: str, tls: BrokerTls) -> Optional[str]:
    """The mesh CA's certificate an https management API is verified against (None: http)."""
    if not api.lower().startswith("https://"):
        return None
    if tls.ca_pem is not None:
        return tls.ca_pem
    path = ca_cert_path(inputs.mesh_dir, inputs.mesh)
    try:
        return path.read_text(encoding="ascii")
    except FileNotFoundError:
        raise MeshError(f"{path}: no mesh CA certificate; the broker's management API {api} is "
                        f"https, verified against it: `mesh ca init {inputs.mesh_dir}` first"
                        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise MeshError(f"{path}: cannot read the mesh CA certificate: {exc}") from None


def mesh_ca_tls(inputs: Inputs) -> BrokerTls:
    """TLS verified against the mesh CA's certificate (public: read wherever it lies)."""
    path = ca_cert_path(inputs.mesh_dir, inputs.mesh)
    try:
        return BrokerTls(path.read_text(encoding="ascii"))
    except FileNotFoundError:
        raise MeshError(f"{path}: no mesh CA certificate; the broker is reached over TLS "
                        f"verified against it: `mesh ca init {inputs.mesh_dir}` first (or "
                        f"--broker-plain for a broker that speaks plain AMQP)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise MeshError(f"{path}: cannot read the mesh CA certificate: {exc}") from None


def _from_mesh(inputs: Inputs) -> _Derived:
    """The substrate broker as the mesh declares it: amqp, api, admin, and the credential
    id of the admin's password (None when the provider declares no admin)."""
    mesh = inputs.mesh
    broker = mesh.substrate.broker
    if not broker or broker not in mesh.instances:
        raise MeshError("mesh.yaml names no substrate broker instance: give --broker, "
                        "--broker-api, --broker-admin and --broker-admin-password-file")
    node = mesh.instances[broker].node
    resolution = resolver.resolve_inputs(inputs, mesh=mesh)
    declaration = resolution.declarations.get(node)
    provider = next((p for p in (declaration.providers if declaration else ())
                     if p.instance == broker and p.provision == "amqp"), None)
    if declaration is None or provider is None:
        raise MeshError(f"the substrate broker {broker} provides no amqp on {node} (yet): give "
                        f"--broker and --broker-api")
    admin_user, management = DEFAULT_ADMIN, None
    listen = inputs.catalogue.modules[mesh.instances[broker].module].listens.get(
        MANAGEMENT_LISTEN)
    scheme = "https" if listen is not None and listen.tls else "http"
    for container in declaration.containers:
        if container.instance != broker:
            continue
        admin_user = container.env.get("RABBITMQ_DEFAULT_USER", admin_user)
        for port in container.ports:
            if port.listen == MANAGEMENT_LISTEN:
                management = port.host_port
    if management is None:
        raise MeshError(f"the substrate broker {broker} publishes no `management` listen: give "
                        f"--broker-api")
    address = mesh.nodes[node].address
    host = f"[{address}]" if ":" in address else address
    credential = provider.admin.credential if provider.admin is not None else None
    return {"amqp": BrokerAddress(address, provider.port),
            "api": f"{scheme}://{host}:{management}",
            "admin": admin_user, "credential": credential}


def _admin_password(credential: Optional[str], inputs: Inputs, key_file: Optional[str]) -> str:
    """The broker admin's password, opened from the control node's escrow with its key."""
    stored = inputs.ledger.credentials.get(credential) if credential else None
    if stored is None or stored.active is None:
        raise MeshError(f"the broker admin's credential ({credential or 'none declared'}) is not "
                        f"issued: `mesh plan DIR --issue` first, or give "
                        f"--broker-admin-password-file")
    if not key_file:
        raise MeshError(f"the broker admin's password ({credential}) is opened with the control "
                        f"node's key: give --key FILE (or --broker-admin-password-file)")
    private_key = load_private_key(key_file)
    boxes = list(stored.active.escrow.values()) + list(stored.active.sealed.values())
    for box in boxes:
        try:
            return unseal(private_key, box)
        except UnsealError:
            continue
    raise MeshError(f"{key_file} opens neither the escrow nor a sealed value of {credential}: "
                    f"it is not the control node's key")
