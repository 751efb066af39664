"""AMQP grants, the shell: the broker's management HTTP API (RabbitMQ; LavinMQ serves the same).

Invariants:
- What the broker must hold and the requests that make it so are amqp_plan.py's (pure); this
  module reads the broker (`query`: three list GETs and each granted account's permissions,
  plain documents), sends the plan's requests in order, stopping at the first failure, and
  reports each as it runs.
- A password is only ever a request body: never in a report, a cause, an error message or a
  log line (the session never logs a body).
- The admin's own password (a rotation of the provider's admin secret) is changed on the
  running broker through the same API, authenticated with the generation in force, keeping the
  account's tags (`set_admin_password`); the broker's data directory is left alone.
"""

from __future__ import annotations

import ssl
from typing import Any, Optional, Sequence

import pika
import requests
from pika import exceptions

from resolver import BindingDecl, GrantDecl

from executors.common.broker_api import HTTP_TIMEOUT, Api, ApiError
from executors.common.report import Report

from executors.node.provisioners.amqp_plan import after, diff, parse  # the protocol's pure methods, re-exported
from executors.common.broker_marks import path, tags_of
from executors.node.provisioners.amqp_plan import (
    DesiredAccount,
    Observed,
    account_name,
    delete_vhost_command,
    desired_accounts,
)
from executors.node.extensions import SecretSource

from executors.node.provisioners.base import (
    AMQP_KIND,
    AUTH_FAILED,
    MISSING,
    OK,
    UNREACHABLE,
    BindingCheck,
    Endpoint,
    ProvisionError,
    ProvisionResult,
    StepRunner,
    _one_line,
    binding_address,
    carry_out,
    credential_name,
)

KIND = AMQP_KIND
DESCRIPTION = "amqp management"
CONNECT_TIMEOUT = 5


def _api(endpoint: Endpoint, password: str, timeout: float = HTTP_TIMEOUT) -> Api:
    """The management API of `endpoint` as its admin."""
    return Api(f"{endpoint.scheme}://{endpoint.host}:{endpoint.port}", endpoint.user, password,
               timeout=timeout, ca_pem=endpoint.pinned_pem, server_name=endpoint.server_name,
               pinned=True)


def query(api: Api, admin: str, desired: Sequence[DesiredAccount]) -> dict[str, Any]:
    """The broker's answers the diff needs (I/O): every account, vhost and global parameter
    (three list GETs), and the permissions of each granted account on its vhost, as the
    management API gives them."""
    users = api.get("/api/users") or []
    vhosts = api.get("/api/vhosts") or []
    parameters = api.get("/api/global-parameters") or []
    known_users, known_vhosts = {u["name"] for u in users}, {v["name"] for v in vhosts}
    permissions = []
    for want in desired:
        if want.vhost in known_vhosts and want.user in known_users:
            perms = api.get(path("permissions", want.vhost, want.user))
            if perms:
                permissions.append({"vhost": want.vhost, "user": want.user, **perms})
    return {"admin": admin, "users": users, "vhosts": vhosts,
            "global-parameters": parameters, "permissions": permissions}


def observe(api: Api, admin: str, desired: Sequence[DesiredAccount]) -> Observed:
    """parse(query(…)): the broker as the diff reads it."""
    return parse(query(api, admin, desired))


def auth_refused(error: Exception) -> bool:
    """Whether a failed request is the broker refusing the credential (not one starting)."""
    return isinstance(error, ApiError) and error.status in (401, 403)


def login(endpoint: Endpoint, password: str, timeout: float = CONNECT_TIMEOUT) -> str:
    """Ask the management API for its overview as the admin; the broker's self-description."""
    api = _api(endpoint, password, timeout=timeout)
    try:
        overview = api.get("/api/overview") or {}
    finally:
        api.close()
    return (f"{overview.get('product_name', 'broker')} "
            f"{overview.get('product_version', overview.get('rabbitmq_version', ''))}").strip()


def set_admin_password(endpoint: Endpoint, password: str, new_password: str) -> None:
    """PUT the admin account with its new password and the tags it has (a PUT replaces them),
    authenticated with its password in force."""
    api = _api(endpoint, password)
    try:
        account = api.get(path("users", endpoint.user))
        if account is None:
            raise ProvisionError(f"the broker has no account {endpoint.user}")
        api.send("PUT", path("users", endpoint.user),
                 {"password": new_password, "tags": ",".join(tags_of(account.get("tags")))})
    finally:
        api.close()


def provision_provider(mesh: str, provider: str, endpoint: Endpoint, admin_password: str,
                       grants: Sequence[GrantDecl], secret_source: SecretSource, report: Report,
                       result: ProvisionResult, *, dry_run: bool = False) -> None:
    """Make each grant's vhost, account and permissions exist on the broker of `provider`
    (answering, its admin accepted: provisioners waited for it), delete the accounts of its
    grants that are gone and report their vhosts orphaned."""
    subject = f"{provider} (amqp management {endpoint.host}:{endpoint.port})"
    api = _api(endpoint, admin_password)
    try:
        desired = [want for g in grants for want in desired_accounts(g, secret_source)]
        try:
            plan = diff(mesh, provider, desired, observe(api, endpoint.user, desired))
        except (ApiError, requests.RequestException) as error:
            raise ProvisionError(f"{subject}: observing failed: {error}") from None
        carry_out(plan.calls, StepRunner(lambda call: api.send(call.method, call.path, call.body),
                                         errors=(ApiError, requests.RequestException)),
                  grants, report, result, refusals=plan.refusals, refusal_key=account_name,
                  in_force=_in_force, provider=provider, untouched=plan.untouched,
                  dry_run=dry_run)
    finally:
        api.close()
    if dry_run:
        return
    api_delete = f"DELETE {endpoint.scheme}://{endpoint.host}:{endpoint.port}"
    for vhost in plan.orphaned:
        report.notice(f"vhost {vhost} on {provider}",
                      "orphaned: its grant is gone, its account is deleted and the vhost is "
                      "kept with its queues and messages. Delete it yourself when you are "
                      f"sure: {delete_vhost_command(vhost)} (or {api_delete}"
                      f"{path('vhosts', vhost)} as the admin); the mesh then drops its mark")
        result.orphaned.append(f"{provider}/{vhost}")


def _in_force(grant: GrantDecl) -> str:
    """What holds a grant in force on the broker (its outcome's message)."""
    retiring = (f" (and {grant.login}_{grant.retiring_slot} for generation "
                f"{grant.retiring.generation} until every holder moved)"
                if grant.slot and grant.retiring and grant.retiring_slot else "")
    return f"vhost {grant.resource}, account {account_name(grant)}{retiring}"


# --------------------------------------------------------------------------- verify


def _tls_of(binding: BindingDecl, host: str) -> Optional[pika.SSLOptions]:
    """TLS for a binding whose values say amqps (a broker that serves TLS only, such as the
    catalogue's lavinmq), as the consumer connects: the broker's certificate and name verified
    against the CA file its values name (`cacertfile`, the mesh CA's)."""
    if not binding.values.get("url", "").startswith("amqps://"):
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verify + check_hostname on
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_verify_locations(cafile=binding.values.get("cacertfile", ""))
    return pika.SSLOptions(context, server_hostname=host)


def check_binding(binding: BindingDecl, password: str, timeout: float) -> BindingCheck:
    """Log in as the binding's account to its vhost and declare a reply queue of its own."""
    host, port = binding_address(binding)
    user, vhost = binding.values.get("user", ""), binding.values.get("vhost", "")
    name = credential_name(binding.secret) if binding.secret is not None else "its credential"
    provider = binding.provider
    try:
        tls = _tls_of(binding, host)
    except (OSError, ssl.SSLError) as error:
        return BindingCheck(UNREACHABLE, f"the mesh CA file its values name cannot be read "
                            f"({_one_line(error)}): run `mesh apply` on this node")
    parameters = pika.ConnectionParameters(
        host=host, port=port, virtual_host=vhost, ssl_options=tls,
        credentials=pika.PlainCredentials(user, password, erase_on_connect=True),
        connection_attempts=1, socket_timeout=timeout, stack_timeout=timeout * 2,
        blocked_connection_timeout=timeout)
    try:
        connection = pika.BlockingConnection(parameters)
    except (exceptions.ProbableAuthenticationError, exceptions.AuthenticationError):
        return BindingCheck(AUTH_FAILED,
                            f"{provider} refused account {user} with {name}: the broker holds "
                            f"another password for it or the account does not exist. Run "
                            f"`mesh apply` on {provider}'s node so its provisioner sets it")
    except exceptions.ProbableAccessDeniedError:
        return BindingCheck(MISSING,
                            f"account {user} was accepted but vhost {vhost} on {provider} "
                            f"does not exist or grants it nothing: run `mesh apply` on "
                            f"{provider}'s node")
    except ssl.SSLCertVerificationError as error:
        return BindingCheck(UNREACHABLE,
                            f"{provider}'s TLS certificate at {host}:{port} does not verify "
                            f"against the mesh CA ({binding.values.get('cacertfile')}): "
                            f"{_one_line(error)}; refused before the password was sent",
                            untrusted=True)
    except (exceptions.AMQPError, OSError) as error:
        return BindingCheck(UNREACHABLE, _one_line(error))
    try:
        channel = connection.channel()
        # what a tool call needs: a reply queue of its own (seed 004)
        channel.queue_declare("", exclusive=True, auto_delete=True)
    except exceptions.AMQPError as error:
        return BindingCheck(MISSING,
                            f"account {user} may not declare a reply queue on vhost {vhost} of "
                            f"{provider} ({_one_line(error)}): its permissions are not the "
                            f"grant's; run `mesh apply` on {provider}'s node")
    finally:
        try:
            connection.close()
        except exceptions.AMQPError:
            pass
    return BindingCheck(OK, f"vhost {vhost} as {user} at {host}:{port}, reply queue declared "
                            f"({name})")


# --------------------------------------------------------------------------- the provisioner


# This module is the Provisioner of vhost+account grants (extensions.Provisioner): the registry
# hands out the module itself, whose functions above are the protocol's methods and these
# three names its attributes.
kind = KIND
description = DESCRIPTION
connect_timeout: float = CONNECT_TIMEOUT
