"""Verify a node's registry accounts: does the mesh's registry let this node's container runtime
in with the pull account its declaration names?

Invariants:
- Checked from the node's runtime, not from this process: the Docker Engine is asked to log in
  (`POST /auth`), so the check goes through the engine's own network namespace, its trust of
  the mesh CA (/etc/docker/certs.d/<registry>/ca.crt) and the registry's firewall opening for
  this node, exactly as the engine's pulls do. Nothing is stored: the engine keeps no
  credential from a login over its API, and the client keeps it in memory only.
- One result per `registry_logins` entry, with the statuses of every other verify result: ok,
  auth-failed (the registry refuses the account: names the account, its credential and
  generation), unreachable (the registry, its TLS or the engine cannot be reached: the engine's
  own reason), not-yet-provisioned (the credential is not issued or not sealed here).
- The password is used to log in and nowhere else: never in a result or message.
"""

from __future__ import annotations

import functools
import re
from typing import Callable, Optional, Protocol

from resolver import Declaration

from executors.node.extensions import SecretSource
from executors.node.provisioners.base import AUTH_FAILED, OK, UNREACHABLE, _one_line

from executors.node.verify.result import NOT_PROVISIONED, Result

KIND = "registry+account"


class RegistryLogin(Protocol):
    """What a registry account's check asks of the node's Docker Engine client (a
    docker.APIClient): log in to a registry with an account (`POST /auth`)."""

    def login(self, *, username: str, password: str, registry: str, reauth: bool) -> object:
        """Raise when the engine or the registry refuses the account."""
        ...


Engine = Callable[[], RegistryLogin]  # the node's Docker Engine client, connected when called


def _engine_reason(error: Exception, password: str) -> str:
    text = getattr(error, "explanation", None) or str(error)
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return _one_line(Exception(str(text).replace(password, "…")))


# How the Engine says a registry refused the account: Docker answers `POST /auth` with 500 for
# every failure and puts the registry's answer in the message ("login attempt to
# http://r:5000/v2/ failed with status: 401 Unauthorized", or a token registry's
# "unauthorized: authentication required"); newer engines answer 401 themselves.
_REFUSED = re.compile(r"status:\s*401\b|\bunauthori[sz]ed\b", re.IGNORECASE)


def refused_by_registry(why: str, registry: str, status: Optional[int] = None) -> bool:
    """Whether the Engine's reason says the registry refused the account (not that it could not
    be reached). The registry's own address is taken out of the text first, so a port such as
    40101 or a host named `unauthorized.lan` is never read as the refusal."""
    if status == 401:
        return True
    text = why
    for name in sorted({registry, registry.rsplit(":", 1)[0]}, key=len, reverse=True):
        if name:
            text = text.replace(name, "<registry>")
    return _REFUSED.search(text) is not None


def verify_registry_logins(declaration: Declaration, secret_source: Optional[SecretSource],
                           engine: Engine) -> list[Result]:
    """A result per pull account the declaration gives this node's container runtime."""
    results: list[Result] = []
    runtime = f"{declaration.node}'s container runtime"
    for login in declaration.registry_logins:
        secret = login.secret
        said = functools.partial(Result, consumer=runtime, requirement=f"pull as {login.user}",
                                 provider=login.registry, kind=KIND, credential=secret.credential,
                                 generation=secret.generation, address=login.registry)
        if secret.generation is None:
            results.append(said(status=NOT_PROVISIONED,
                                message=f"credential {secret.credential} is not issued yet: "
                                f"run `mesh plan --issue`, then `mesh apply` on the "
                                f"registry's node and on this one"))
            continue
        if secret_source is None:
            results.append(said(status=NOT_PROVISIONED,
                                message=f"{secret.credential} generation {secret.generation} "
                                f"not checked: pass --secrets and --key"))
            continue
        try:
            password = secret_source(secret)
        except Exception:  # noqa: BLE001 - not sealed to this node in the secrets given
            results.append(said(status=NOT_PROVISIONED,
                                message=f"{secret.credential} generation {secret.generation} "
                                f"is not sealed to {declaration.node} in the secrets given: "
                                f"run `mesh plan --issue`"))
            continue
        try:
            api = engine()
        except Exception as error:  # noqa: BLE001 - the engine's own reason, named
            results.append(said(status=UNREACHABLE,
                                message=f"cannot ask {runtime} to log in to {login.registry}: "
                                f"{_one_line(error)}"))
            continue
        try:
            api.login(username=login.user, password=password, registry=login.registry,
                      reauth=True)
        except Exception as error:  # noqa: BLE001 - classified below, said plainly
            why = _engine_reason(error, password)
            status = getattr(getattr(error, "response", None), "status_code", None)
            if refused_by_registry(why, login.registry, status):
                results.append(said(status=AUTH_FAILED,
                                    message=f"{login.registry} refuses {login.user} with "
                                    f"{secret.credential} generation {secret.generation} "
                                    f"({why}): run `mesh apply` on the registry's node (its "
                                    f"htpasswd provisioner puts the account in force), and "
                                    f"`mesh applied` so this node is told the generation "
                                    f"in force"))
            else:
                results.append(said(status=UNREACHABLE,
                                    message=f"{runtime} cannot log in to {login.registry} "
                                    f"({why}): check that the registry runs, that its "
                                    f"node's firewall lets {declaration.node} in, and that "
                                    f"/etc/docker/certs.d/{login.registry}/ca.crt holds the "
                                    f"mesh CA (`mesh apply` on this node writes it)"))
            continue
        results.append(said(status=OK,
                            message=f"{login.registry} lets {login.user} in with "
                            f"{secret.credential} generation {secret.generation}, logged in "
                            f"by {runtime} over TLS, as its pulls are"))
    return results
