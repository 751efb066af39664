"""A provider's admin credential on its running server: logging in, rotating it in place, and
the check that stops an apply before anything changes.

Invariants:
- The generation in force (`admin`) is tried first, then a rotation's pending one
  (`admin_pending`), which may be in force already after an interrupted run. A server that
  refuses every generation tried is auth-failed, and the message names the credential, each
  generation tried and how to recover; nothing is changed on it.
- A pending generation reaches the server only through the running server itself
  (`put_admin_in_force`: ALTER ROLE for PostgreSQL, the management API for the broker),
  authenticated with the generation in force; the run then waits until the server accepts the
  new one before anything uses it. The server is never recreated for it.
- `check_admins` logs in once to each provider's running server before anything changes: a
  refusal fails the check (the apply stops before any container is recreated); a server that
  does not answer yet passes (it is waited for once its containers are up).
- Values come from `secret_source` and go only to the provider's interface.
"""

from __future__ import annotations

import time
from typing import Mapping, Optional, Sequence

from resolver import Declaration, MeshError

from executors.common.report import Report
from executors.node.extensions import Provisioner

from executors.node.extensions import SecretSource

from executors.node.provisioners.base import (
    Admin,
    AdminReading,
    Endpoint,
    ProvisionError,
    _one_line,
    admin_of,
    derive_endpoint,
    wait_ready,
)
from executors.node.provisioners.registry import provisioner_for


def read_admin(provisioner: Provisioner, endpoint: Endpoint, admin: Admin,
               secret_source: SecretSource, timeout: float) -> AdminReading:
    """Log in as the admin with each generation in turn (the one in force first)."""
    tried: list[Optional[int]] = []
    for ref in admin.refs():
        try:
            password = secret_source(ref)
        except Exception as error:  # noqa: BLE001 - not sealed to this node, or damaged
            return AdminReading("unsealed", None, f"{ref.credential} generation "
                                f"{ref.generation} cannot be unsealed here: {_one_line(error)}",
                                tuple(tried))
        try:
            said = provisioner.login(endpoint, password, timeout)
        except Exception as error:  # noqa: BLE001 - the reading is the failure
            if provisioner.auth_refused(error):
                tried.append(ref.generation)
                continue
            return AdminReading("unreachable", None, _one_line(error), tuple(tried))
        return AdminReading("accepted", ref.generation, said or "", tuple(tried))
    return AdminReading("refused", None, "", tuple(tried))


def refused_message(provider: str, endpoint: Endpoint, admin: Admin,
                    tried: Sequence[Optional[int]]) -> str:
    """Why a provider whose server holds neither admin generation is not provisioned."""
    holds = "neither" if len(tried) > 1 else "another password"
    return (f"auth-failed: {provider} refused its admin {endpoint.user} with {admin.credential} "
            f"{admin.tried(tried)}: the server holds {holds} (its password was changed by "
            f"hand, or its data directory was initialised with another one). Nothing was "
            f"changed. Set the admin password on the server back to generation "
            f"{admin.current.generation} (its value is in the env file the mesh writes for "
            f"{provider}'s server container on this node; the server's local socket lets you "
            f"in), then apply again")



def wait_for_admin(provisioner: Provisioner, provider: str, endpoint: Endpoint, admin: Admin,
                   secret_source: SecretSource, report: Report, timeout: float) -> Optional[int]:
    """Wait until the server answers and accepts one admin generation; that generation."""
    subject = f"{provider} ({provisioner.description} {endpoint.host}:{endpoint.port})"
    accepted: list[Optional[int]] = []

    def probe() -> str:
        reading = read_admin(provisioner, endpoint, admin, secret_source,
                             min(provisioner.connect_timeout, max(1.0, timeout)))
        if reading.status == "accepted":
            accepted.append(reading.generation)
            return f"{reading.detail}; admin {admin.credential} generation {reading.generation}"
        if reading.status == "refused":
            raise _AdminRefused(refused_message(provider, endpoint, admin, reading.tried))
        if reading.status == "unsealed":
            raise _AdminRefused(reading.detail)
        raise _NotAnswering(reading.detail)

    wait_ready(report, subject, probe, timeout=timeout,
               fatal=lambda error: isinstance(error, _AdminRefused))
    return accepted[-1]


class _AdminRefused(MeshError):
    """The server refused every admin generation: ends a readiness wait at once."""


class _NotAnswering(MeshError):
    """The server does not answer yet: the readiness wait tries again."""


def put_admin_in_force(provisioner: Provisioner, provider: str, endpoint: Endpoint,
                       admin: Admin, secret_source: SecretSource, report: Report,
                       timeout: float) -> None:
    """Change the admin password on the running server from the generation in force to the
    pending one, then wait until the server accepts the new one."""
    old, new = admin.current, admin.pending
    if new is None:
        raise ProvisionError(f"{provider}: {admin.credential} has no pending generation to put "
                             "in force")
    op = report.begin("set-admin-password", f"{endpoint.user} on {provider}",
                      f"rotation of {admin.credential}: generation {old.generation} → "
                      f"{new.generation} on the running server, authenticated with "
                      f"generation {old.generation}")
    started = time.monotonic()
    try:
        provisioner.set_admin_password(endpoint, secret_source(old), secret_source(new))
    except Exception as error:  # noqa: BLE001 - said, then the provider fails
        report.end(op, f"failed: {_one_line(error)}", ok=False)
        raise ProvisionError(f"{provider}: changing its admin password failed: "
                             f"{_one_line(error)}") from None
    deadline = started + timeout
    while True:
        reading = read_admin(provisioner, endpoint, Admin(new), secret_source,
                             provisioner.connect_timeout)
        if reading.status == "accepted":
            report.end(op, f"done: the server accepts generation {new.generation} "
                           f"({time.monotonic() - started:.1f}s)")
            return
        if time.monotonic() >= deadline:
            report.end(op, f"failed: the server does not accept generation {new.generation} "
                           f"after {timeout:g}s ({reading.status}: {reading.detail})", ok=False)
            raise ProvisionError(f"{provider}: the new admin password is not accepted")
        report.progress(op, f"waiting for the server to accept generation {new.generation}")
        time.sleep(0.5)



def check_admins(declaration: Declaration, secret_source: Optional[SecretSource],
                 report: Report, *, endpoints: Optional[Mapping[str, Endpoint]] = None,
                 timeout: float = 5.0) -> None:
    """Before anything changes: log in once to each provider's running server with its admin
    credential (the generation in force, then a pending one). A server that refuses every
    generation fails the check, so the apply stops before any container is recreated; one
    that does not answer yet passes (it is waited for after the containers are up)."""
    if secret_source is None:
        return
    seen = set()
    kinds = {(g.provider, g.kind) for g in declaration.grants}
    kinds |= {(p.instance, p.kind) for p in declaration.providers if p.admin is not None}
    for provider, kind in sorted(kinds):
        provisioner = provisioner_for(kind)
        if provisioner is None or provider in seen:
            continue
        endpoint = (endpoints or {}).get(provider) or derive_endpoint(declaration, provider, kind)
        grants = [g for g in declaration.grants if g.provider == provider and g.kind == kind]
        admin = admin_of(declaration, provider, kind, grants)
        if endpoint is None or admin is None or admin.current.generation is None:
            continue
        seen.add(provider)
        check = report.begin("check-admin", f"{provider} ({provisioner.description} "
                             f"{endpoint.host}:{endpoint.port})",
                             f"its running server accepts {admin.credential} before anything "
                             "changes", check=True)
        reading = read_admin(provisioner, endpoint, admin, secret_source, timeout)
        if reading.status == "accepted":
            report.end(check, f"accepted: generation {reading.generation}")
        elif reading.status == "refused":
            report.end(check, refused_message(provider, endpoint, admin, reading.tried),
                       ok=False)
        elif reading.status == "unsealed":
            report.end(check, f"failed: {reading.detail}", ok=False)
        else:
            report.end(check, f"not answering yet ({reading.detail}); waited for once its "
                              "containers are up")


