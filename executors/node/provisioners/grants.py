"""Provisioning a node's grants: make every grant in its declaration true on its provider.

Invariants:
- `provision_grants` is the one entry `mesh apply` calls on the provider's node (through
  `provision`). It groups the declaration's grants by provider instance and hands each group to
  the provisioner of its kind, as the registry lists it (registry.py: database+login →
  PostgreSQL, vhost+account → the AMQP management API).
- A grant of a kind the registry lists no provisioner for (bucket+key, client+secret today) is
  reported on every run as a notice naming its kind, the login and resource to create by hand
  and the credential generation, and its outcome is `not-provisioned`: never silently passed, never
  counted as in force. It is a warning: the apply's result is not failed by it.
- Before any grant, the provider's readiness is awaited logged in as its admin, and a rotated
  admin password is put in force on the running server (admin_login); the generation accepted
  is reported (`ProvisionResult.admins`) so the rotation may make it active. A server that
  accepts neither generation fails the provider, naming them; its grants are not touched.
- A grant whose credential is not issued yet (generation None) is skipped and said so.
- Secret values come from `secret_source(SecretRef) -> str` and go only to the provider's own
  interface: never into a Report, an exception message or a log line.
- The result lists, per grant, the credential generation now in force on the provider, which
  is what a provider reports back so holders may be moved to it.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Optional

from resolver import Declaration, GrantDecl, MeshError, SecretRef

from executors.common.report import Report

from executors.node.extensions import SecretSource

from executors.node.provisioners.admin_login import put_admin_in_force, wait_for_admin
from executors.node.provisioners.base import (
    Endpoint,
    GrantOutcome,
    ProvisionError,
    ProvisionResult,
    _one_line,
    admin_of,
    derive_endpoint,
    idle_providers,
    issued_grants,
)
from executors.node.provisioners.registry import FILE_KINDS, no_provisioner, provisioner_for


def _providers(declaration: Declaration,
               kinds: Mapping[str, str]) -> dict[tuple[str, str], list[GrantDecl]]:
    groups: dict[tuple[str, str], list[GrantDecl]] = {}
    for grant in declaration.grants:
        groups.setdefault((grant.provider, grant.kind), []).append(grant)
    for provider, kind in kinds.items():  # providers whose last grant went (orphans only)
        groups.setdefault((provider, kind), [])
    return dict(sorted(groups.items()))



def _failed(report: Report, result: ProvisionResult, provider: str, kind: str, grants,
            problem: str) -> None:
    """`provider`'s `grants` of `kind` all failed for one `problem`: said once, each outcome."""
    report.record("provision", provider, f"{len(grants)} {kind} grant(s)", f"failed: {problem}",
                  ok=False)
    result.problems.append(f"{provider}: {problem}")
    result.outcomes.extend(GrantOutcome(g.credential.credential, provider, g.consumer, "failed",
                                        message=problem, kind=kind) for g in grants)


def _not_provisioned(report: Report, result: ProvisionResult, provider: str, kind: str,
                     grants: Iterable[GrantDecl]) -> None:
    for grant in grants:
        generation = grant.credential.generation
        report.notice(f"grant {grant.consumer} on {provider}",
                      f"not provisioned: the mesh has {no_provisioner(kind)}; "
                      f"create {grant.resource} for {grant.login} on {provider} by hand with "
                      f"credential {grant.credential.credential} generation "
                      f"{generation if generation is not None else '(not issued yet)'}")
        result.outcomes.append(GrantOutcome(
            grant.credential.credential, provider, grant.consumer, "not-provisioned",
            message=no_provisioner(kind), kind=kind))



def provision_grants(declaration: Declaration, secret_source: Optional[SecretSource],
                     report: Report, *, endpoints: Optional[Mapping[str, Endpoint]] = None,
                     admin_refs: Optional[Mapping[str, SecretRef]] = None,
                     provider_kinds: Optional[Mapping[str, str]] = None,
                     kinds: Optional[Iterable[str]] = None, dry_run: bool = False,
                     ready_timeout: float = 60.0) -> ProvisionResult:
    """Provision every grant of `declaration` on its provider (this node), put a rotated admin
    password in force first, and remove the logins of grants that disappeared (their data is
    kept and reported orphaned).

    endpoints: provider instance → Endpoint, overriding the one derived from its published
    ports. admin_refs / provider_kinds: the admin credential and grant kind of providers that
    have no grant left, so their orphans are still found (the declaration's `providers` name
    them without these: see idle_providers). kinds: only grants of these kinds (None: every
    kind; a kind with no provisioner is reported). dry_run: observe and list the statements,
    change nothing. The result is also added to `report.facts["provisioned"]`."""
    endpoints = dict(endpoints or {})
    idle = idle_providers(declaration)
    admin_refs = {**{p: ref for p, (_, ref) in idle.items()}, **(admin_refs or {})}
    provider_kinds = {**{p: kind for p, (kind, _) in idle.items()}, **(provider_kinds or {})}
    result = ProvisionResult()
    wanted_kinds = set(kinds) if kinds is not None else None
    if dry_run:
        ready_timeout = min(ready_timeout, 5.0)
    for (provider, kind), grants in _providers(declaration, provider_kinds).items():
        if wanted_kinds is not None and kind not in wanted_kinds:
            continue
        if kind in FILE_KINDS:  # kept in a file by a hook of its own (runner)
            continue
        provisioner = provisioner_for(kind)
        if provisioner is None:
            _not_provisioned(report, result, provider, kind, grants)
            continue
        if secret_source is None:
            _failed(report, result, provider, kind, grants,
                    "no secret values to provision with: pass --secrets and --key")
            continue
        issued = issued_grants(grants, provider, kind, report, result,
                               lambda g: f"grant {g.consumer} on {provider}")
        endpoint = endpoints.get(provider) or derive_endpoint(declaration, provider, kind)
        admin = admin_of(declaration, provider, kind, grants, admin_refs.get(provider))
        problem = None
        if endpoint is None:
            problem = (f"the declaration publishes no port of {provider} on this node, so its "
                       f"admin interface cannot be reached")
        elif admin is None:
            problem = f"{provider} names no admin credential for {kind} grants"
        elif admin.current.generation is None:
            problem = f"the admin credential {admin.credential} of {provider} is not issued yet"
        if problem is not None and not grants:  # only a sweep for orphans was possible
            report.notice(provider, f"not checked for orphaned logins: {problem}")
            continue
        if problem is not None:
            _failed(report, result, provider, kind, issued, problem)
            continue
        ops_before = len(report.ops)
        try:
            generation = wait_for_admin(provisioner, provider, endpoint, admin, secret_source,
                                        report, ready_timeout)
            in_use = next(r for r in admin.refs() if r.generation == generation)
            if admin.pending is not None and generation != admin.pending.generation:
                if dry_run:
                    report.record("set-admin-password", f"{endpoint.user} on {provider}",
                                  f"rotation of {admin.credential}: generation {generation} → "
                                  f"{admin.pending.generation} on the running server",
                                  "planned")
                else:
                    put_admin_in_force(provisioner, provider, endpoint, admin, secret_source,
                                       report, ready_timeout)
                    generation, in_use = admin.pending.generation, admin.pending
            if not dry_run:
                result.admins[admin.credential] = generation
            provisioner.provision_provider(declaration.mesh, provider, endpoint,
                                           secret_source(in_use), issued, secret_source,
                                           report, result, dry_run=dry_run)
        except (ProvisionError, MeshError, KeyError) as error:  # KeyError: a missing value
            if all(op.ok for op in report.ops[ops_before:]) and \
                    all(c.ok for c in report.checks):  # not said yet: say it
                report.record("provision", provider, f"{len(issued)} {kind} grant(s)",
                              f"failed: {_one_line(error)}", ok=False)
            result.problems.append(f"{provider}: {_one_line(error)}")
            result.outcomes.extend(GrantOutcome(g.credential.credential, provider, g.consumer,
                                                "failed", message=str(error), kind=kind)
                                   for g in issued
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


def provision(declaration: Declaration, secret_source: Optional[SecretSource], report: Report,
              dry_run: bool = False) -> ProvisionResult:
    """`mesh apply`'s provisioner hook: every grant of the declaration, of every kind."""
    return provision_grants(declaration, secret_source, report, dry_run=dry_run)
