"""AMQP grants through the broker's management HTTP API (RabbitMQ; LavinMQ serves the same).

Invariants:
- One vhost per consumer login, named by the grant's `resource`; one account, named by its
  `login`, with no tags (no management rights) and configure/write/read `.*` on that vhost
  only. The vhost is the isolation boundary, so the account may declare its own server-named
  reply queues and use `amq.rabbitmq.reply-to`: a module can ask its own question.
- What the mesh manages is marked by a global parameter `mesh-mark:<user|vhost>:<name>` whose
  value is `mesh:<mesh>:<provider>`, put before the object is made (common/broker_api.py: the
  API client and the marks, shared with the mesh's own delivery objects). Global parameters
  take any name and JSON value on RabbitMQ and LavinMQ alike; LavinMQ keeps no unknown user
  tag and no vhost description, so neither can be the mark (a created vhost gets the
  description anyway, for the operator's eyes on RabbitMQ). An unmarked object of a granted
  name is adopted.
- A managed account whose grant is gone is deleted (its login goes); its vhost is kept with its
  queues and messages and reported orphaned on every run, with the command that deletes it.
  An object marked by another mesh or provider is never touched; the admin account, the `/`
  vhost and unmarked administrator accounts are never managed.
- observe (GET) → diff (pure) → apply: a second run issues no PUT or DELETE. A password is
  compared against the broker's salted hash (sha256/sha512/md5 of salt+password, the broker's
  own scheme), never by logging in. One password per account: the grant's generation
  replaces the old one on the broker first; holders follow (the rotation rules state that window).
- A password is only ever a request body: never in a report, a cause or an error message.
- The admin's own password (a rotation of the provider's admin secret) is changed on the
  running broker through the same API, authenticated with the generation in force, keeping the
  account's tags (`set_admin_password`); the broker's data directory is left alone.
"""

from __future__ import annotations

import shlex
from typing import Mapping, Optional, Sequence

import attrs
import requests

from resolver import Declaration, GrantDecl

from .provisioners import (
    AMQP_KIND,
    Endpoint,
    GrantOutcome,
    ProvisionError,
    ProvisionResult,
    SecretSource,
    provision_grants,
    wait_ready,
)
from executors.common.broker_api import (  # noqa: F401  (hash_matches, path, marker: this module's API)
    DEFAULT_VHOST,
    HTTP_TIMEOUT,
    USER,
    VHOST,
    Api,
    ApiError,
    Call,
    hash_matches,
    mark_call,
    mark_name,
    marker,
    path,
    read_marks,
    tags_of,
    unmark_call,
)
from executors.common.report import Report

KIND = AMQP_KIND
DESCRIPTION = "amqp management"
CONNECT_TIMEOUT = 5
FULL = ".*"


@attrs.frozen
class DesiredAccount:
    vhost: str
    user: str
    credential: str
    generation: int
    password: str = attrs.field(repr=False)


@attrs.frozen
class UserFacts:
    name: str
    password_hash: Optional[str] = attrs.field(default=None, repr=False)
    hashing: str = ""
    tags: tuple[str, ...] = ()


@attrs.frozen
class Observed:
    admin: str  # the account the provisioner uses: never managed
    users: Mapping[str, UserFacts]
    vhosts: frozenset[str]
    permissions: Mapping[tuple[str, str], tuple[str, str, str]]  # (vhost, user) → c, w, r
    marks: Mapping[tuple[str, str], str]  # (user|vhost, name) → marker it carries


@attrs.frozen
class Plan:
    calls: tuple[Call, ...] = ()
    refusals: tuple[tuple[str, str], ...] = ()  # (account, reason): grants not provisioned
    orphaned: tuple[str, ...] = ()  # vhosts kept after their grant went
    untouched: tuple[tuple[str, str], ...] = ()  # (subject, why): marked ours, never touched


def delete_vhost_command(vhost: str) -> str:
    return f"rabbitmqctl delete_vhost {shlex.quote(vhost)}"


def _account_calls(want: DesiredAccount, observed: Observed, mark: str) -> list[Call]:
    calls: list[Call] = []
    vhost_exists = want.vhost in observed.vhosts
    if observed.marks.get((VHOST, want.vhost)) != mark:
        calls.append(mark_call(VHOST, want.vhost, mark, "adopted: was not marked as managed"
                                if vhost_exists else "mark as managed, before it is made"))
    if not vhost_exists:
        calls.append(Call("create-vhost", want.vhost, f"vhost of {want.credential}", "PUT",
                          path("vhosts", want.vhost), {"description": mark}))
    user = observed.users.get(want.user)
    if observed.marks.get((USER, want.user)) != mark:
        calls.append(mark_call(USER, want.user, mark, "adopted: was not marked as managed"
                                if user is not None else "mark as managed, before it is made"))
    why = []
    if user is None:
        why.append(f"account of {want.credential} generation {want.generation}")
    else:
        if not hash_matches(user.password_hash, user.hashing, want.password):
            why.append(f"password is not {want.credential} generation {want.generation}")
        if user.tags:
            why.append(f"tags {','.join(user.tags)} → none")
    if why:
        calls.append(Call("create-user" if user is None else "update-user", want.user,
                          "; ".join(why), "PUT", path("users", want.user),
                          {"password": want.password, "tags": ""}))
    if observed.permissions.get((want.vhost, want.user)) != (FULL, FULL, FULL):
        calls.append(Call("set-permissions", f"{want.user} on {want.vhost}",
                          "configure/write/read .* on its own vhost (reply queues included)",
                          "PUT", path("permissions", want.vhost, want.user),
                          {"configure": FULL, "write": FULL, "read": FULL}))
    return calls


def _refusal(want: DesiredAccount, observed: Observed, mark: str) -> Optional[str]:
    if want.user == observed.admin:
        return f"account {want.user} is the broker's admin, which the mesh never manages"
    if want.vhost == DEFAULT_VHOST:
        return "the default vhost / is never managed by the mesh"
    user = observed.users.get(want.user)
    if (user is not None and "administrator" in user.tags
            and observed.marks.get((USER, want.user)) != mark):
        return f"account {want.user} is an unmarked administrator: never adopted"
    foreign = [f"{kind} {name} (marked {observed.marks[(kind, name)]})"
               for kind, name in ((USER, want.user), (VHOST, want.vhost))
               if observed.marks.get((kind, name), mark) != mark]
    if foreign:
        return f"{', '.join(foreign)}: managed by another, not {mark}: not touched"
    return None


def diff(mesh: str, provider: str, desired: Sequence[DesiredAccount],
         observed: Observed) -> Plan:
    """The requests that make each granted account, vhost and permission exist, marked as this
    provider's; the deletion of this provider's accounts whose grant is gone; the vhosts kept
    (orphaned). Objects marked by another mesh or provider are refused, never changed (pure)."""
    mark = marker(mesh, provider)
    calls: list[Call] = []
    refusals: list[tuple[str, str]] = []
    untouched: list[tuple[str, str]] = []
    wanted = {USER: set(), VHOST: set()}
    for want in sorted(desired, key=lambda d: d.user):
        wanted[USER].add(want.user)
        wanted[VHOST].add(want.vhost)
        reason = _refusal(want, observed, mark)
        if reason is not None:
            refusals.append((want.user, reason))
            continue
        calls += _account_calls(want, observed, mark)

    orphaned: list[str] = []
    for (kind, name), carried in sorted(observed.marks.items()):
        if carried != mark or name in wanted[kind]:
            continue
        if (kind, name) in ((USER, observed.admin), (VHOST, DEFAULT_VHOST)):
            untouched.append((f"{kind} {name}", f"marked {mark}, but the mesh never manages "
                                                 "the admin account or the default vhost"))
        elif kind == USER and name in observed.users:
            calls.append(Call("delete-user", name, "grant gone: its login goes (its vhost and "
                              "messages are kept)", "DELETE", path("users", name)))
            calls.append(unmark_call(USER, name, "its account is deleted"))
        elif kind == VHOST and name in observed.vhosts:
            orphaned.append(name)
        else:
            calls.append(unmark_call(kind, name, f"the {kind} is gone (removed by hand): "
                                                  "its mark goes"))
    return Plan(tuple(calls), tuple(refusals), tuple(orphaned), tuple(untouched))


def _api(endpoint: Endpoint, password: str, timeout: float = HTTP_TIMEOUT) -> Api:
    return Api(f"{endpoint.scheme}://{endpoint.host}:{endpoint.port}", endpoint.user, password,
               timeout=timeout)


def observe(api: Api, admin: str, desired: Sequence[DesiredAccount]) -> Observed:
    """Every account, vhost and mark on the broker (three list GETs), and the permissions of
    each granted account on its vhost."""
    users = {u["name"]: UserFacts(u["name"], u.get("password_hash"),
                                  u.get("hashing_algorithm", ""), tags_of(u.get("tags")))
             for u in api.get("/api/users") or []}
    vhosts = frozenset(v["name"] for v in api.get("/api/vhosts") or [])
    marks = read_marks(api)
    permissions = {}
    for want in desired:
        if want.vhost in vhosts and want.user in users:
            perms = api.get(path("permissions", want.vhost, want.user))
            if perms:
                permissions[(want.vhost, want.user)] = (perms["configure"], perms["write"],
                                                        perms["read"])
    return Observed(admin, users, vhosts, permissions, marks)


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


def wait_for_broker(api: Api, report: Report, subject: str, timeout: float) -> None:
    def probe() -> str:
        overview = api.get("/api/overview") or {}
        return (f"{overview.get('product_name', 'broker')} "
                f"{overview.get('product_version', overview.get('rabbitmq_version', ''))}").strip()

    def fatal(error: Exception) -> bool:
        return isinstance(error, ApiError) and error.status in (401, 403)

    wait_ready(report, subject, probe, timeout=timeout, fatal=fatal)


def desired_account(grant: GrantDecl, secret_source: SecretSource) -> DesiredAccount:
    return DesiredAccount(vhost=grant.resource, user=grant.login,
                          credential=grant.credential.credential,
                          generation=grant.credential.generation or 0,
                          password=secret_source(grant.credential))


def provision_provider(mesh: str, provider: str, endpoint: Endpoint, admin_password: str,
                       grants: Sequence[GrantDecl], secret_source: SecretSource, report: Report,
                       result: ProvisionResult, *, dry_run: bool = False) -> None:
    """Make each grant's vhost, account and permissions exist on the broker of `provider`
    (answering, its admin accepted: provisioners waited for it), delete the accounts of its
    grants that are gone and report their vhosts orphaned."""
    subject = f"{provider} (amqp management {endpoint.host}:{endpoint.port})"
    api = _api(endpoint, admin_password)
    failed: Optional[str] = None
    try:
        desired = [desired_account(g, secret_source) for g in grants]
        try:
            plan = diff(mesh, provider, desired, observe(api, endpoint.user, desired))
        except (ApiError, requests.RequestException) as error:
            raise ProvisionError(f"{subject}: observing failed: {error}") from None
        for account, reason in plan.refusals:
            report.record("grant", account, "refused", f"failed: {reason}", ok=False)
        for what, why in plan.untouched:
            report.notice(f"{what} on {provider}", f"not touched: {why}")
        if dry_run:
            for call in plan.calls:
                report.record(call.op, call.subject, call.cause, "planned")
            result.outcomes.extend(GrantOutcome(g.credential.credential, provider, g.consumer,
                                                "planned", kind=KIND) for g in grants)
            return
        for call in plan.calls:
            op = report.begin(call.op, call.subject, call.cause)
            try:
                api.send(call.method, call.path, call.body)
            except (ApiError, requests.RequestException) as error:
                failed = f"{call.op} {call.subject}: {error}"
                report.end(op, f"failed: {error}", ok=False)
                break
            report.end(op, "done")
            result.statements += 1
    finally:
        api.close()
    refused = dict(plan.refusals)
    for grant in grants:
        reason = refused.get(grant.login) or failed
        if reason:
            result.outcomes.append(GrantOutcome(grant.credential.credential, provider,
                                                grant.consumer, "failed", message=reason,
                                                kind=KIND))
        else:
            result.outcomes.append(GrantOutcome(
                grant.credential.credential, provider, grant.consumer, "in-force",
                generation=grant.credential.generation, kind=KIND,
                message=f"vhost {grant.resource}, account {grant.login}"))
    api_delete = f"DELETE {endpoint.scheme}://{endpoint.host}:{endpoint.port}"
    for vhost in plan.orphaned:
        report.notice(f"vhost {vhost} on {provider}",
                      "orphaned: its grant is gone, its account is deleted and the vhost is "
                      "kept with its queues and messages. Delete it yourself when you are "
                      f"sure: {delete_vhost_command(vhost)} (or {api_delete}"
                      f"{path('vhosts', vhost)} as the admin); the mesh then drops its mark")
        result.orphaned.append(f"{provider}/{vhost}")


def provision(declaration: Declaration, secret_source: Optional[SecretSource], report: Report,
              dry_run: bool = False) -> ProvisionResult:
    """This kind's grants of the declaration, via provisioners.provision_grants."""
    return provision_grants(declaration, secret_source, report, kinds=(KIND,), dry_run=dry_run)
