"""Provisioners: make every grant in a node's declaration true on its provider, and say so.

Invariants:
- `provision_grants` is the one entry `mesh apply` calls on the provider's node. It groups the
  declaration's grants by provider instance and hands each group to the provisioner of its
  kind (database+login → PostgreSQL, vhost+account → the AMQP management API).
- Each provider's readiness is awaited first (bounded, with progress lines), so a server that
  is still starting is reported as starting, never as broken.
- A grant whose credential is not issued yet (generation None) is skipped and said so; a kind
  with no provisioner is reported, never silently treated as provisioned.
- Secret values come from `secret_source(SecretRef) -> str` and go only to the provider's own
  interface: never into a Report, an exception message or a log line.
- The result lists, per grant, the credential generation now in force on the provider, which
  is what a provider reports back so holders may be moved to it.
"""

from __future__ import annotations

import time
from typing import Callable, Iterable, Mapping, Optional

import attrs

from resolver import Declaration, GrantDecl, MeshError, SecretRef

from .report import Report

SecretSource = Callable[[SecretRef], str]

POSTGRES_KIND = "database+login"
AMQP_KIND = "vhost+account"

# Where each kind's admin interface listens inside its container, and who the admin is, when
# the declaration does not say otherwise (the catalogue's postgres and lavinmq modules).
DEFAULT_ADMIN_PORT = {POSTGRES_KIND: 5432, AMQP_KIND: 15672}
DEFAULT_ADMIN_LISTEN = {POSTGRES_KIND: "postgres", AMQP_KIND: "management"}
DEFAULT_ADMIN_USER = {POSTGRES_KIND: "postgres", AMQP_KIND: "admin"}
ADMIN_USER_ENV = {POSTGRES_KIND: "POSTGRES_USER", AMQP_KIND: "RABBITMQ_DEFAULT_USER"}


class ProvisionError(MeshError):
    """A provider that cannot be provisioned (unreachable admin interface, refused admin…)."""


@attrs.frozen
class Endpoint:
    """How the provisioner reaches a provider's admin interface from the provider's node."""

    host: str
    port: int
    user: str
    database: str = "postgres"  # postgres only: the database the admin connects to
    scheme: str = "http"  # amqp management API only


@attrs.frozen
class GrantOutcome:
    """Where one grant stands after a run (what `mesh apply` reports back)."""

    credential: str
    provider: str
    consumer: str
    status: str  # in-force | planned | pending-credential | unsupported | failed
    generation: Optional[int] = None  # the generation now in force on the provider
    message: str = ""

    def to_json(self) -> dict:
        return attrs.asdict(self)


@attrs.define
class ProvisionResult:
    outcomes: list[GrantOutcome] = attrs.field(factory=list)
    statements: int = 0  # changing statements / requests issued (0 on an idempotent re-run)
    orphaned: list[str] = attrs.field(factory=list)  # resources kept after their grant went

    @property
    def failed(self) -> bool:
        return any(o.status == "failed" for o in self.outcomes)

    def to_json(self) -> dict:
        return {"outcomes": [o.to_json() for o in self.outcomes],
                "statements": self.statements, "orphaned": list(self.orphaned)}


def _loopback(host_ip: str) -> str:
    return "127.0.0.1" if host_ip in ("", "0.0.0.0", "::") else host_ip


def derive_endpoint(declaration: Declaration, provider: str, kind: str) -> Optional[Endpoint]:
    """The provider's admin endpoint from its published ports on this node (host side), or
    None when the declaration publishes none for it."""
    ports, user = [], DEFAULT_ADMIN_USER[kind]
    for container in declaration.containers:
        if container.instance != provider:
            continue
        ports.extend(container.ports)
        user = container.env.get(ADMIN_USER_ENV[kind], user)
    if not ports:
        return None
    wanted = [p for p in ports if p.listen == DEFAULT_ADMIN_LISTEN[kind]] or \
        [p for p in ports if p.container_port == DEFAULT_ADMIN_PORT[kind]] or ports
    chosen = sorted(wanted)[0]
    return Endpoint(host=_loopback(chosen.host_ip), port=chosen.host_port, user=user)


def wait_ready(report: Report, subject: str, probe: Callable[[], Optional[str]], *,
               timeout: float, fatal: Callable[[Exception], bool],
               clock: Callable[[], float] = time.monotonic,
               sleep: Callable[[float], None] = time.sleep, every: float = 5.0) -> None:
    """Call `probe` until it returns without raising (bounded by `timeout` seconds), with a
    progress line at least every `every` seconds. An exception `fatal` says is not about
    starting up (a refused admin password) ends the wait at once. Raises ProvisionError."""
    op = report.begin("wait-ready", subject, f"readiness before provisioning (up to {timeout:g}s)")
    start = clock()
    next_progress = start + every
    while True:
        try:
            said = probe()
        except Exception as error:  # noqa: BLE001 - the probe's failure is the reading
            reason = _one_line(error)
            if fatal(error):
                report.end(op, f"failed: {reason}", ok=False)
                raise ProvisionError(f"{subject}: {reason}") from None
            now = clock()
            if now - start >= timeout:
                report.end(op, f"failed: not ready after {timeout:g}s: {reason}", ok=False)
                raise ProvisionError(f"{subject}: not ready after {timeout:g}s: {reason}") from None
            if now >= next_progress:
                report.progress(op, f"not ready yet ({now - start:.0f}s/{timeout:g}s): {reason}")
                next_progress = now + every
            sleep(0.5)
            continue
        report.end(op, f"ready after {clock() - start:.1f}s" + (f": {said}" if said else ""))
        return


def _one_line(error: Exception) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return text[:300]


def idle_providers(declaration: Declaration) -> dict[str, tuple[str, SecretRef]]:
    """Providers on this node with no grant left: {instance: (kind, admin ref)}. Their managed
    logins, whose grants all went, must still be dropped.

    The declaration says what each instance provides (`providers`). A declaration written
    without that list (by hand, in tests) falls back to the shape of the catalogue's postgres
    module: a published container port 5432 and its own `admin` secret."""
    granted = {g.provider for g in declaration.grants}
    found: dict[str, tuple[str, SecretRef]] = {}
    for provider in declaration.providers:
        if provider.instance not in granted and provider.admin is not None and \
                provider.kind in (POSTGRES_KIND, AMQP_KIND):
            found[provider.instance] = (provider.kind, provider.admin)
    if declaration.providers:
        return found
    for container in declaration.containers:
        if container.instance in granted:
            continue
        admin = next((ref for ref in container.secrets
                      if ref.credential == f"secret/{container.instance}/admin"), None)
        serves = any(p.listen == DEFAULT_ADMIN_LISTEN[POSTGRES_KIND]
                     and p.container_port == DEFAULT_ADMIN_PORT[POSTGRES_KIND]
                     for p in container.ports)
        if admin is not None and serves:
            found[container.instance] = (POSTGRES_KIND, admin)
    return found


def _providers(declaration: Declaration,
               kinds: Mapping[str, str]) -> dict[tuple[str, str], list[GrantDecl]]:
    groups: dict[tuple[str, str], list[GrantDecl]] = {}
    for grant in declaration.grants:
        groups.setdefault((grant.provider, grant.kind), []).append(grant)
    for provider, kind in kinds.items():  # providers whose last grant went (orphans only)
        groups.setdefault((provider, kind), [])
    return dict(sorted(groups.items()))


def provision_grants(declaration: Declaration, secret_source: Optional[SecretSource],
                     report: Report, *, endpoints: Optional[Mapping[str, Endpoint]] = None,
                     admin_refs: Optional[Mapping[str, SecretRef]] = None,
                     provider_kinds: Optional[Mapping[str, str]] = None,
                     kinds: Optional[Iterable[str]] = None, dry_run: bool = False,
                     ready_timeout: float = 60.0) -> ProvisionResult:
    """Provision every grant of `declaration` on its provider (this node) and remove the
    logins of grants that disappeared (their data is kept and reported orphaned).

    endpoints: provider instance → Endpoint, overriding the one derived from its published
    ports. admin_refs / provider_kinds: the admin credential and grant kind of providers that
    have no grant left, so their orphans are still found (the declaration's `providers` name
    them without these: see idle_providers). kinds: only grants of these kinds
    (None: every kind, and kinds with no provisioner are reported). dry_run: observe and list
    the statements, change nothing. The result is also added to `report.facts["provisioned"]`."""
    from . import provision_amqp, provision_postgres  # noqa: WPS433 - kinds load their clients

    endpoints = dict(endpoints or {})
    idle = idle_providers(declaration)
    admin_refs = {**{p: ref for p, (_, ref) in idle.items()}, **(admin_refs or {})}
    provider_kinds = {**{p: kind for p, (kind, _) in idle.items()}, **(provider_kinds or {})}
    result = ProvisionResult()
    by_kind = {POSTGRES_KIND: provision_postgres.provision_provider,
               AMQP_KIND: provision_amqp.provision_provider}
    wanted_kinds = set(kinds) if kinds is not None else None
    if dry_run:
        ready_timeout = min(ready_timeout, 5.0)
    for (provider, kind), grants in _providers(declaration, provider_kinds).items():
        if wanted_kinds is not None and kind not in wanted_kinds:
            continue
        if secret_source is None:
            problem = "no secret values to provision with: pass --secrets and --key"
            report.record("provision", provider, f"{len(grants)} {kind} grant(s)",
                          f"failed: {problem}", ok=False)
            result.outcomes.extend(GrantOutcome(g.credential.credential, provider, g.consumer,
                                                "failed", message=problem) for g in grants)
            continue
        issued = [g for g in grants if g.credential.generation is not None]
        for grant in grants:
            if grant.credential.generation is None:
                report.record("grant", f"{grant.consumer} on {provider}",
                              f"credential {grant.credential.credential} is not issued yet",
                              "skipped: run `mesh plan --issue` to issue it")
                result.outcomes.append(GrantOutcome(
                    grant.credential.credential, provider, grant.consumer, "pending-credential",
                    message="credential not issued yet"))
        handler = by_kind.get(kind)
        if handler is None:
            for grant in issued:
                report.record("grant", f"{grant.consumer} on {provider}",
                              f"grant kind {kind}", "not provisioned: no provisioner for this "
                              "kind yet; create it by hand", ok=True)
                result.outcomes.append(GrantOutcome(
                    grant.credential.credential, provider, grant.consumer, "unsupported",
                    message=f"no provisioner for grant kind {kind}"))
            continue
        endpoint = endpoints.get(provider) or derive_endpoint(declaration, provider, kind)
        admin = next((g.admin for g in grants if g.admin is not None), admin_refs.get(provider))
        problem = None
        if endpoint is None:
            problem = (f"the declaration publishes no port of {provider} on this node, so its "
                       f"admin interface cannot be reached")
        elif admin is None:
            problem = f"{provider} names no admin credential for {kind} grants"
        elif admin.generation is None:
            problem = f"the admin credential {admin.credential} of {provider} is not issued yet"
        if problem is not None and not grants:  # only a sweep for orphans was possible
            report.notice(provider, f"not checked for orphaned logins: {problem}")
            continue
        if problem is not None:
            report.record("provision", provider, f"{len(issued)} {kind} grant(s)",
                          f"failed: {problem}", ok=False)
            result.outcomes.extend(GrantOutcome(g.credential.credential, provider, g.consumer,
                                                "failed", message=problem) for g in issued)
            continue
        ops_before = len(report.ops)
        try:
            handler(declaration.mesh, provider, endpoint, secret_source(admin), issued,
                    secret_source, report, result, ready_timeout=ready_timeout, dry_run=dry_run)
        except (ProvisionError, MeshError, KeyError) as error:  # KeyError: a missing value
            if all(op.ok for op in report.ops[ops_before:]):  # not said yet: say it
                report.record("provision", provider, f"{len(issued)} {kind} grant(s)",
                              f"failed: {_one_line(error)}", ok=False)
            result.outcomes.extend(GrantOutcome(g.credential.credential, provider, g.consumer,
                                                "failed", message=str(error)) for g in issued
                                   if not any(o.credential == g.credential.credential
                                              for o in result.outcomes))
    _merge_facts(report, result)
    return result


def _merge_facts(report: Report, result: ProvisionResult) -> None:
    """Add to what an earlier call (another kind's hook in the same apply) recorded."""
    facts = report.facts.setdefault("provisioned",
                                    {"outcomes": [], "statements": 0, "orphaned": []})
    facts["outcomes"].extend(o.to_json() for o in result.outcomes)
    facts["statements"] += result.statements
    facts["orphaned"].extend(result.orphaned)


def summarise(outcomes: Iterable[GrantOutcome]) -> str:
    counts: dict[str, int] = {}
    for outcome in outcomes:
        counts[outcome.status] = counts.get(outcome.status, 0) + 1
    return ", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "no grants"


__all__ = ["Endpoint", "GrantOutcome", "ProvisionError", "ProvisionResult", "SecretSource",
           "derive_endpoint", "provision_grants", "wait_ready", "summarise"]
