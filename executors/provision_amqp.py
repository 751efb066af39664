"""AMQP grants through the broker's management HTTP API (RabbitMQ; LavinMQ serves the same).

Invariants:
- One vhost per consumer login, named by the grant's `resource`; one account, named by its
  `login`, with no management tags and configure/write/read `.*` on that vhost only. The vhost
  is the isolation boundary, so the account may declare its own server-named reply queues and
  use `amq.rabbitmq.reply-to`: a module can be asked its own question with its own account.
- observe (GET) → diff (pure) → apply (PUT): a second run issues no PUT or DELETE. A password
  is compared against the broker's salted hash (sha256/sha512/md5 of salt+password, the
  broker's own scheme), never by logging in.
- One password per account (single credential): the grant's generation replaces the old one
  on the broker first; holders follow (the rotation rules state that window).
- A password is only ever a request body: never in a report, a cause or an error message.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Mapping, Optional, Sequence
from urllib.parse import quote

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
from .report import Report

FULL = ".*"
HTTP_TIMEOUT = 10
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
class AccountFacts:
    vhost_exists: bool
    user_exists: bool
    password_hash: Optional[str] = attrs.field(default=None, repr=False)
    hashing: str = ""
    tags: tuple[str, ...] = ()
    permissions: Optional[tuple[str, str, str]] = None  # configure, write, read on the vhost


@attrs.frozen
class Call:
    op: str
    subject: str
    cause: str
    method: str
    path: str
    body: Mapping = attrs.field(factory=dict, repr=False, eq=False)


def path(*parts: str) -> str:
    return "/api/" + "/".join(quote(p, safe="") for p in parts)


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


def diff(desired: Sequence[DesiredAccount], observed: Mapping[str, AccountFacts]) -> list[Call]:
    """The PUTs that make each account, vhost and permission what the grants say (pure)."""
    calls: list[Call] = []
    for want in sorted(desired, key=lambda d: d.user):
        facts = observed[want.user]
        if not facts.vhost_exists:
            calls.append(Call("create-vhost", want.vhost, f"vhost of {want.credential}", "PUT",
                              path("vhosts", want.vhost), {}))
        why = []
        if not facts.user_exists:
            why.append(f"account of {want.credential} generation {want.generation}")
        else:
            if not hash_matches(facts.password_hash, facts.hashing, want.password):
                why.append(f"password is not {want.credential} generation {want.generation}")
            if facts.tags:
                why.append(f"tags {','.join(facts.tags)} → none")
        if why:
            calls.append(Call("create-user" if not facts.user_exists else "update-user",
                              want.user, "; ".join(why), "PUT", path("users", want.user),
                              {"password": want.password, "tags": ""}))
        if facts.permissions != (FULL, FULL, FULL):
            calls.append(Call("set-permissions", f"{want.user} on {want.vhost}",
                              "configure/write/read .* on its own vhost (reply queues included)",
                              "PUT", path("permissions", want.vhost, want.user),
                              {"configure": FULL, "write": FULL, "read": FULL}))
    return calls


class Api:
    """The management API as the admin (one HTTP session; never logs a body)."""

    def __init__(self, endpoint: Endpoint, admin_password: str):
        self.base = f"{endpoint.scheme}://{endpoint.host}:{endpoint.port}"
        self.session = requests.Session()
        self.session.auth = (endpoint.user, admin_password)
        self.session.headers["content-type"] = "application/json"

    def get(self, api_path: str) -> Optional[dict]:
        response = self.session.get(self.base + api_path, timeout=HTTP_TIMEOUT)
        if response.status_code == 404:
            return None
        _raise_for(response, "GET", api_path)
        return response.json()

    def send(self, method: str, api_path: str, body: Mapping) -> None:
        response = self.session.request(method, self.base + api_path, json=dict(body),
                                        timeout=HTTP_TIMEOUT)
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


def observe(api: Api, desired: Sequence[DesiredAccount]) -> dict[str, AccountFacts]:
    facts = {}
    for want in desired:
        vhost = api.get(path("vhosts", want.vhost))
        user = api.get(path("users", want.user))
        perms = api.get(path("permissions", want.vhost, want.user)) if vhost else None
        tags = (user or {}).get("tags", [])
        if isinstance(tags, str):  # older brokers answer a comma-separated string
            tags = [t for t in tags.split(",") if t]
        facts[want.user] = AccountFacts(
            vhost_exists=vhost is not None, user_exists=user is not None,
            password_hash=(user or {}).get("password_hash"),
            hashing=(user or {}).get("hashing_algorithm", ""), tags=tuple(sorted(tags)),
            permissions=(perms["configure"], perms["write"], perms["read"]) if perms else None)
    return facts


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
              result: ProvisionResult, *, ready_timeout: float = 60.0,
                       dry_run: bool = False) -> None:
    """Make each grant's vhost, account and permissions exist on the broker of `provider`."""
    subject = f"{provider} (amqp management {endpoint.host}:{endpoint.port})"
    api = Api(endpoint, admin_password)
    failed: Optional[str] = None
    try:
        wait_for_broker(api, report, subject, ready_timeout)
        desired = [desired_account(g, secret_source) for g in grants]
        try:
            calls = diff(desired, observe(api, desired))
        except (ApiError, requests.RequestException) as error:
            raise ProvisionError(f"{subject}: observing failed: {error}") from None
        if dry_run:
            for call in calls:
                report.record(call.op, call.subject, call.cause, "planned")
            result.outcomes.extend(GrantOutcome(g.credential.credential, provider, g.consumer,
                                                "planned") for g in grants)
            return
        for call in calls:
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
    for grant in grants:
        if failed:
            result.outcomes.append(GrantOutcome(grant.credential.credential, provider,
                                                grant.consumer, "failed", message=failed))
        else:
            result.outcomes.append(GrantOutcome(
                grant.credential.credential, provider, grant.consumer, "in-force",
                generation=grant.credential.generation,
                message=f"vhost {grant.resource}, account {grant.login}"))


def provision(declaration: Declaration, secret_source: Optional[SecretSource], report: Report,
              dry_run: bool = False) -> ProvisionResult:
    """`mesh apply`'s provisioner hook (executors/provision_*.py are discovered): this kind's
    grants of the declaration, via provisioners.provision_grants."""
    return provision_grants(declaration, secret_source, report, kinds=(AMQP_KIND,), dry_run=dry_run)
