"""AMQP grants through the broker's management HTTP API (RabbitMQ; LavinMQ serves the same).

Invariants:
- One vhost per consumer login, named by the grant's `resource`; one account, named by its
  `login`, with no tags (no management rights) and configure/write/read `.*` on that vhost
  only. The vhost is the isolation boundary, so the account may declare its own server-named
  reply queues and use `amq.rabbitmq.reply-to`: a module can ask its own question.
- What the mesh manages is marked by a global parameter `mesh-mark:<user|vhost>:<name>` whose
  value is `mesh:<mesh>:<provider>`, put before the object is made. Global parameters take any
  name and JSON value on RabbitMQ and LavinMQ alike; LavinMQ keeps no unknown user tag and no
  vhost description, so neither can be the mark (a created vhost gets the description anyway,
  for the operator's eyes on RabbitMQ). An unmarked object of a granted name is adopted.
- A managed account whose grant is gone is deleted (its login goes); its vhost is kept with its
  queues and messages and reported orphaned on every run, with the command that deletes it.
  An object marked by another mesh or provider is never touched; the admin account, the `/`
  vhost and unmarked administrator accounts are never managed.
- query (GET, I/O) → parse(rows) → diff → after (pure) → apply: a second run issues no PUT or
  DELETE; `after` is what the broker holds once a plan's requests succeeded, read from each
  request's method, path and body (tests/diff_cases/amqp). A password is
  compared against the broker's salted hash (sha256/sha512/md5 of salt+password, the broker's
  own scheme), never by logging in. One password per account: the grant's generation
  replaces the old one on the broker first; holders follow (the rotation rules state that window).
- A password is only ever a request body: never in a report, a cause or an error message.
- The admin's own password (a rotation of the provider's admin secret) is changed on the
  running broker through the same API, authenticated with the generation in force, keeping the
  account's tags (`set_admin_password`); the broker's data directory is left alone.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import shlex
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence
from urllib.parse import quote, unquote

import attrs
import requests

from resolver import BindingDecl, GrantDecl

from executors.common.report import Report

if TYPE_CHECKING:
    from executors.node.extensions import Provisioner

from .base import (
    AMQP_KIND,
    AUTH_FAILED,
    MISSING,
    OK,
    UNREACHABLE,
    BindingCheck,
    Endpoint,
    GrantOutcome,
    ProvisionError,
    ProvisionResult,
    SecretSource,
    _one_line,
    binding_address,
    credential_name,
    wait_ready,
)

KIND = AMQP_KIND
DESCRIPTION = "amqp management"
CONNECT_TIMEOUT = 5
FULL = ".*"
HTTP_TIMEOUT = 10
DEFAULT_VHOST = "/"
MARK_PREFIX = "mesh-mark:"
USER, VHOST = "user", "vhost"
HASHES = {"rabbit_password_hashing_sha256": hashlib.sha256,
          "rabbit_password_hashing_sha512": hashlib.sha512,
          "rabbit_password_hashing_md5": hashlib.md5,
          "SHA256": hashlib.sha256, "SHA512": hashlib.sha512, "MD5": hashlib.md5}


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
class Call:
    op: str
    subject: str
    cause: str
    method: str
    path: str
    body: Mapping = attrs.field(factory=dict, repr=False, eq=False)


@attrs.frozen
class Plan:
    calls: tuple[Call, ...] = ()
    refusals: tuple[tuple[str, str], ...] = ()  # (account, reason): grants not provisioned
    orphaned: tuple[str, ...] = ()  # vhosts kept after their grant went
    untouched: tuple[tuple[str, str], ...] = ()  # (subject, why): marked ours, never touched


def path(*parts: str) -> str:
    return "/api/" + "/".join(quote(p, safe="") for p in parts)


def marker(mesh: str, provider: str) -> str:
    return f"mesh:{mesh}:{provider}"


def mark_name(kind: str, name: str) -> str:
    return f"{MARK_PREFIX}{kind}:{name}"


def hash_matches(password_hash: Optional[str], hashing: str, password: str) -> bool:
    """Whether the broker's stored hash base64(salt[4] + H(salt + password)) is `password`'s."""
    algorithm = HASHES.get(hashing)
    if not password_hash or algorithm is None:
        return False
    try:
        raw = base64.b64decode(password_hash, validate=True)
    except ValueError:
        return False
    salt, digest = raw[:4], raw[4:]
    return hmac.compare_digest(algorithm(salt + password.encode("utf-8")).digest(), digest)


def delete_vhost_command(vhost: str) -> str:
    return f"rabbitmqctl delete_vhost {shlex.quote(vhost)}"


def _mark_call(kind: str, name: str, mark: str, cause: str) -> Call:
    return Call("mark", f"{kind} {name}", cause, "PUT",
                path("global-parameters", mark_name(kind, name)), {"value": mark})


def _unmark_call(kind: str, name: str, cause: str) -> Call:
    return Call("unmark", f"{kind} {name}", cause, "DELETE",
                path("global-parameters", mark_name(kind, name)))


def _account_calls(want: DesiredAccount, observed: Observed, mark: str) -> list[Call]:
    calls: list[Call] = []
    vhost_exists = want.vhost in observed.vhosts
    if observed.marks.get((VHOST, want.vhost)) != mark:
        calls.append(_mark_call(VHOST, want.vhost, mark, "adopted: was not marked as managed"
                                if vhost_exists else "mark as managed, before it is made"))
    if not vhost_exists:
        calls.append(Call("create-vhost", want.vhost, f"vhost of {want.credential}", "PUT",
                          path("vhosts", want.vhost), {"description": mark}))
    user = observed.users.get(want.user)
    if observed.marks.get((USER, want.user)) != mark:
        calls.append(_mark_call(USER, want.user, mark, "adopted: was not marked as managed"
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
            calls.append(_unmark_call(USER, name, "its account is deleted"))
        elif kind == VHOST and name in observed.vhosts:
            orphaned.append(name)
        else:
            calls.append(_unmark_call(kind, name, f"the {kind} is gone (removed by hand): "
                                                  "its mark goes"))
    return Plan(tuple(calls), tuple(refusals), tuple(orphaned), tuple(untouched))


class Api:
    """The management API as the admin (one HTTP session; never logs a body)."""

    def __init__(self, endpoint: Endpoint, admin_password: str, timeout: float = HTTP_TIMEOUT):
        self.timeout = timeout
        self.base = f"{endpoint.scheme}://{endpoint.host}:{endpoint.port}"
        self.session = requests.Session()
        self.session.auth = (endpoint.user, admin_password)
        self.session.headers["content-type"] = "application/json"

    def get(self, api_path: str) -> Optional[dict]:
        response = self.session.get(self.base + api_path, timeout=self.timeout)
        if response.status_code == 404:
            return None
        _raise_for(response, "GET", api_path)
        return response.json()

    def send(self, method: str, api_path: str, body: Mapping) -> None:
        payload = dict(body) if method != "DELETE" else None
        response = self.session.request(method, self.base + api_path, json=payload,
                                        timeout=self.timeout)
        _raise_for(response, method, api_path)

    def close(self) -> None:
        self.session.close()


class ApiError(ProvisionError):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def _raise_for(response: requests.Response, method: str, api_path: str) -> None:
    if response.status_code < 300:
        return
    try:
        reason = response.json().get("reason", "")
    except ValueError:
        reason = response.text[:200]
    raise ApiError(response.status_code,
                   f"{method} {api_path} answered {response.status_code}: {reason}".strip())


def _tags(value) -> tuple[str, ...]:
    if isinstance(value, str):  # older brokers answer a comma-separated string
        value = value.split(",")
    return tuple(sorted(t for t in (value or []) if t))


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


def parse(rows: Mapping[str, Any]) -> Observed:
    """The observed broker from `query`'s answers (pure)."""
    users = {u["name"]: UserFacts(u["name"], u.get("password_hash"),
                                  u.get("hashing_algorithm", ""), _tags(u.get("tags")))
             for u in rows["users"]}
    vhosts = frozenset(v["name"] for v in rows["vhosts"])
    marks: dict[tuple[str, str], str] = {}
    for parameter in rows["global-parameters"]:
        name, value = parameter.get("name", ""), parameter.get("value")
        kind, _, subject = name[len(MARK_PREFIX):].partition(":")
        if name.startswith(MARK_PREFIX) and kind in (USER, VHOST) and subject:
            marks[(kind, subject)] = value if isinstance(value, str) else json.dumps(value)
    permissions = {(p["vhost"], p["user"]): (p["configure"], p["write"], p["read"])
                   for p in rows["permissions"]}
    return Observed(rows["admin"], users, vhosts, permissions, marks)


def observe(api: Api, admin: str, desired: Sequence[DesiredAccount]) -> Observed:
    """parse(query(…)): the broker as the diff reads it."""
    return parse(query(api, admin, desired))


# --------------------------------------------------------------------------- the model (pure)

MODEL_HASHING = "rabbit_password_hashing_sha256"
MODEL_SALT = b"mesh"


def model_hash(password: str) -> str:
    """The broker's stored hash of `password` as the model makes it: base64(salt + sha256(salt
    + password)), the scheme hash_matches reads (a fixed salt: the model is deterministic)."""
    return base64.b64encode(MODEL_SALT + hashlib.sha256(MODEL_SALT + password.encode("utf-8"))
                            .digest()).decode("ascii")


def after(observed: Observed, plan: Plan) -> Observed:
    """What the broker holds once every request of `plan` succeeded (pure), read from each
    request's method, path and body as the management API reads them. A request this model
    does not know raises ProvisionError."""
    users, vhosts = dict(observed.users), set(observed.vhosts)
    permissions, marks = dict(observed.permissions), dict(observed.marks)
    for call in plan.calls:
        parts = [unquote(p) for p in call.path.split("/")[2:]]  # "/api/<what>/…"
        what, args = (parts[0], parts[1:]) if parts else ("", [])
        if (call.method, what, len(args)) == ("PUT", "global-parameters", 1) and \
                args[0].startswith(MARK_PREFIX):
            kind, _, name = args[0][len(MARK_PREFIX):].partition(":")
            marks[(kind, name)] = call.body["value"]
        elif (call.method, what, len(args)) == ("DELETE", "global-parameters", 1):
            kind, _, name = args[0][len(MARK_PREFIX):].partition(":")
            marks.pop((kind, name), None)
        elif (call.method, what, len(args)) == ("PUT", "vhosts", 1):
            vhosts.add(args[0])
        elif (call.method, what, len(args)) == ("PUT", "users", 1):
            users[args[0]] = UserFacts(args[0], model_hash(call.body["password"]),
                                       MODEL_HASHING, _tags(call.body.get("tags")))
        elif (call.method, what, len(args)) == ("DELETE", "users", 1):
            if args[0] not in users:
                raise ProvisionError(f"{call.method} {call.path}: no such account")
            del users[args[0]]
            permissions = {k: v for k, v in permissions.items() if k[1] != args[0]}
        elif (call.method, what, len(args)) == ("PUT", "permissions", 2):
            vhost, user = args
            if vhost not in vhosts or user not in users:
                raise ProvisionError(f"{call.method} {call.path}: no such vhost or account")
            permissions[(vhost, user)] = (call.body["configure"], call.body["write"],
                                          call.body["read"])
        else:
            raise ProvisionError(f"the model of the broker cannot read {call.method} "
                                 f"{call.path}")
    return Observed(observed.admin, users, frozenset(vhosts), permissions, marks)


def auth_refused(error: Exception) -> bool:
    """Whether a failed request is the broker refusing the credential (not one starting)."""
    return isinstance(error, ApiError) and error.status in (401, 403)


def login(endpoint: Endpoint, password: str, timeout: float = CONNECT_TIMEOUT) -> str:
    """Ask the management API for its overview as the admin; the broker's self-description."""
    api = Api(endpoint, password, timeout=timeout)
    try:
        overview = api.get("/api/overview") or {}
    finally:
        api.close()
    return (f"{overview.get('product_name', 'broker')} "
            f"{overview.get('product_version', overview.get('rabbitmq_version', ''))}").strip()


def set_admin_password(endpoint: Endpoint, password: str, new_password: str) -> None:
    """PUT the admin account with its new password and the tags it has (a PUT replaces them),
    authenticated with its password in force."""
    api = Api(endpoint, password)
    try:
        account = api.get(path("users", endpoint.user))
        if account is None:
            raise ProvisionError(f"the broker has no account {endpoint.user}")
        api.send("PUT", path("users", endpoint.user),
                 {"password": new_password, "tags": ",".join(_tags(account.get("tags")))})
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
    api = Api(endpoint, admin_password)
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


# --------------------------------------------------------------------------- verify


def check_binding(binding: BindingDecl, password: str, timeout: float) -> BindingCheck:
    """Log in as the binding's account to its vhost and declare a reply queue of its own."""
    import pika  # imported here: only `mesh verify` speaks AMQP itself
    from pika import exceptions

    host, port = binding_address(binding)
    user, vhost = binding.values.get("user", ""), binding.values.get("vhost", "")
    name = credential_name(binding.secret)
    provider = binding.provider
    parameters = pika.ConnectionParameters(
        host=host, port=port, virtual_host=vhost,
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


class Amqp:
    """The Provisioner of vhost+account grants (extensions.Provisioner), this module's
    functions bound together for the registry."""

    kind = KIND
    description = DESCRIPTION
    connect_timeout: float = CONNECT_TIMEOUT

    def login(self, endpoint: Endpoint, password: str, timeout: float) -> str:
        return login(endpoint, password, timeout)

    def auth_refused(self, error: Exception) -> bool:
        return auth_refused(error)

    def set_admin_password(self, endpoint: Endpoint, password: str, new_password: str) -> None:
        set_admin_password(endpoint, password, new_password)

    def parse(self, rows: Mapping[str, Any]) -> Observed:
        return parse(rows)

    def diff(self, mesh: str, provider: str, desired: Sequence[DesiredAccount],
             observed: Observed) -> Plan:
        return diff(mesh, provider, desired, observed)

    def after(self, observed: Observed, plan: Plan) -> Observed:
        return after(observed, plan)

    def provision_provider(self, mesh: str, provider: str, endpoint: Endpoint,
                           admin_password: str, grants: Sequence[GrantDecl],
                           secret_source: SecretSource, report: Report,
                           result: ProvisionResult, *, dry_run: bool = False) -> None:
        provision_provider(mesh, provider, endpoint, admin_password, grants, secret_source,
                           report, result, dry_run=dry_run)

    def check_binding(self, binding: BindingDecl, password: str, timeout: float) -> BindingCheck:
        return check_binding(binding, password, timeout)


PROVISIONER: Provisioner = Amqp()
