"""Provisioning a node's grants: make every grant in its declaration true on its provider.

Invariants:
- `provision_grants` is the one driver of the provisioner family (extensions.GrantProvisioner):
  `mesh apply` calls it on the provider's node, through `provision` for the kinds a running
  server keeps and through `provision_files` (bound to the node's file root and Docker Engine)
  for the kinds kept in a file. It groups the declaration's grants by provider instance and
  hands each group to the provisioner of its kind, as the registry lists it (registry.py:
  database+login → PostgreSQL, vhost+account → the AMQP management API, registry+account →
  the mesh registry's htpasswd file, bearer-token → a tool server's tokens file).
- The rules every kind shares are applied here once, before a provisioner is called:
  - A grant of a kind the registry lists no provisioner for (bucket+key, client+secret today)
    is reported on every run as a notice naming its kind, the login and resource to create by
    hand and the credential generation, and its outcome is `not-provisioned`: never silently
    passed, never counted as in force. It is a warning: the apply's result is not failed by it.
  - Without secret values (no --secrets and --key) every grant of the provider fails, said once.
  - A provider whose grants are kept in a file (a tool server's tokens) is visited with none
    left too, so the entries of the grants that went are removed (the tokens of consumers
    that left stop working), values or not.
  - A grant whose credential is not issued yet (generation None) is skipped and said so
    (base.issued_grants); the provisioner sees only issued grants.
  - A provider whose provisioner raises a ProvisionError, a MeshError or a KeyError (a value
    this node does not hold) fails, said once, with each of its issued grants.
- For a service-backed kind, before any grant the provider's readiness is awaited logged in as
  its admin, and a rotated admin password is put in force on the running server
  (admin_login); the generation accepted is reported (`ProvisionResult.admins`) so the
  rotation may make it active. A server that accepts neither generation fails the provider,
  naming them; its grants are not touched.
- Secret values come from `secret_source(SecretRef) -> str` and go only to the provider's own
  interface: never into a Report, an exception message or a log line.
- The result lists, per grant, the credential generation now in force on the provider, which
  is what a provider reports back so holders may be moved to it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Mapping, Optional, Sequence

from resolver import Declaration, GrantDecl, MeshError, SecretRef

from executors.common.report import Report

from executors.node.extensions import Provisioner, SecretSource
from executors.node.node_paths import NodePaths

from executors.node.provisioners.admin_login import put_admin_in_force, wait_for_admin
from executors.node.provisioners.base import (
    Endpoint,
    GrantOutcome,
    NodeFiles,
    ProvisionError,
    ProvisionResult,
    _one_line,
    admin_of,
    derive_endpoint,
    idle_providers,
    issued_grants,
)
from executors.node.provisioners.registry import (
    FILE_KINDS,
    REGISTRY,
    file_provisioner_for,
    no_provisioner,
    provisioner_for,
)

if TYPE_CHECKING:  # the Docker Engine client is the node extra's; only its type is named here
    import docker

NO_VALUES = "no secret values to provision with: pass --secrets and --key"


def _providers(declaration: Declaration,
               kinds: Mapping[str, str]) -> dict[tuple[str, str], list[GrantDecl]]:
    groups: dict[tuple[str, str], list[GrantDecl]] = {}
    for grant in declaration.grants:
        groups.setdefault((grant.provider, grant.kind), []).append(grant)
    for provider, kind in kinds.items():  # providers whose last grant went (orphans only)
        groups.setdefault((provider, kind), [])
    for p in declaration.providers:  # a file's provider whose last grant went: emptied
        if p.kind in FILE_KINDS:
            groups.setdefault((p.instance, p.kind), [])
    return dict(sorted(groups.items()))


def _failed(report: Report, result: ProvisionResult, provider: str, kind: str,
            grants: Sequence[GrantDecl], problem: str) -> None:
    """`provider`'s `grants` of `kind` all failed for one `problem`: said once, each outcome."""
    report.record("provision", provider, f"{len(grants)} {kind} grant(s)", f"failed: {problem}",
                  ok=False)
    result.problems.append(f"{provider}: {problem}")
    result.outcomes.extend(GrantOutcome.of(g, "failed", message=problem) for g in grants)


def _nothing_sealed(ref: SecretRef, /) -> str:
    """The secret source of a file's provider with no grant left: it opens nothing."""
    raise KeyError(ref.credential)


def _not_provisioned(report: Report, result: ProvisionResult, provider: str, kind: str,
                     grants: Iterable[GrantDecl]) -> None:
    for grant in grants:
        generation = grant.credential.generation
        report.notice(f"grant {grant.consumer} on {provider}",
                      f"not provisioned: the mesh has {no_provisioner(kind)}; "
                      f"create {grant.resource} for {grant.login} on {provider} by hand with "
                      f"credential {grant.credential.credential} generation "
                      f"{generation if generation is not None else '(not issued yet)'}")
        result.outcomes.append(GrantOutcome.of(grant, "not-provisioned",
                                               message=no_provisioner(kind)))


def _grant_subject(grant: GrantDecl) -> str:
    """How a grant of a service-backed kind is named in a notice."""
    return f"grant {grant.consumer} on {grant.provider}"


def provision_grants(declaration: Declaration, secret_source: Optional[SecretSource],
                     report: Report, *, endpoints: Optional[Mapping[str, Endpoint]] = None,
                     admin_refs: Optional[Mapping[str, SecretRef]] = None,
                     provider_kinds: Optional[Mapping[str, str]] = None,
                     kinds: Optional[Iterable[str]] = None, files: Optional[NodeFiles] = None,
                     dry_run: bool = False, ready_timeout: float = 60.0) -> ProvisionResult:
    """Provision every grant of `declaration` on its provider (this node), put a rotated admin
    password in force first, and remove the logins of grants that disappeared (their data is
    kept and reported orphaned).

    endpoints: provider instance → Endpoint, overriding the one derived from its published
    ports. admin_refs / provider_kinds: the admin credential and grant kind of providers that
    have no grant left, so their orphans are still found (the declaration's `providers` name
    them without these: see idle_providers). kinds: only grants of these kinds (None: every
    kind; a kind with no provisioner is reported). files: the node's file root and Docker
    Engine, for the kinds kept in a file (None: those kinds are left to provision_files).
    dry_run: observe and list the statements, change nothing. `mesh apply` reports the results
    of its hooks (apply/pipeline.py)."""
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
        if files is None and REGISTRY.in_file(kind):  # kept by provision_files' hook
            continue
        service = provisioner_for(kind)
        kept = file_provisioner_for(kind) if service is None else None
        if service is None and kept is None:
            _not_provisioned(report, result, provider, kind, grants)
            continue
        if secret_source is None and (grants or kept is None):
            _failed(report, result, provider, kind, grants, NO_VALUES)
            continue
        issued = issued_grants(grants, report, result,
                               kept.grant_subject if kept is not None else _grant_subject)
        ops_before = len(report.ops)
        try:
            if kept is not None and files is not None:
                kept.provision_file(declaration, provider, issued,
                                    secret_source or _nothing_sealed, report, result, files,
                                    dry_run=dry_run)
            elif service is not None and secret_source is not None:
                _on_server(service, declaration, provider, kind, grants, issued, secret_source,
                           report, result, endpoint=endpoints.get(provider),
                           fallback_admin=admin_refs.get(provider), dry_run=dry_run,
                           ready_timeout=ready_timeout)
        except (ProvisionError, MeshError, KeyError) as error:  # KeyError: a missing value
            if all(op.ok for op in report.ops[ops_before:]) and \
                    all(c.ok for c in report.checks):  # not said yet: say it
                report.record("provision", provider, f"{len(issued)} {kind} grant(s)",
                              f"failed: {_one_line(error)}", ok=False)
            result.problems.append(f"{provider}: {_one_line(error)}")
            result.outcomes.extend(GrantOutcome.of(g, "failed", message=str(error))
                                   for g in issued
                                   if not any(o.credential == g.credential.credential
                                              for o in result.outcomes))
    return result


def _on_server(provisioner: Provisioner, declaration: Declaration, provider: str, kind: str,
               grants: Sequence[GrantDecl], issued: Sequence[GrantDecl],
               secret_source: SecretSource, report: Report, result: ProvisionResult, *,
               endpoint: Optional[Endpoint], fallback_admin: Optional[SecretRef],
               dry_run: bool, ready_timeout: float) -> None:
    """A service-backed provider's grants: its admin interface reached and its admin accepted
    (a rotated admin password put in force first), then the provisioner's plan."""
    endpoint = endpoint or derive_endpoint(declaration, provider, kind)
    admin = admin_of(declaration, provider, kind, grants, fallback_admin)
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
        return
    if problem is not None or endpoint is None or admin is None:
        _failed(report, result, provider, kind, issued, problem or "")
        return
    generation: Optional[int] = wait_for_admin(provisioner, provider, endpoint, admin,
                                               secret_source, report, ready_timeout)
    in_use = next(r for r in admin.refs() if r.generation == generation)
    if admin.pending is not None and generation != admin.pending.generation:
        if dry_run:
            report.record("set-admin-password", f"{endpoint.user} on {provider}",
                          f"rotation of {admin.credential}: generation {generation} → "
                          f"{admin.pending.generation} on the running server", "planned")
        else:
            put_admin_in_force(provisioner, provider, endpoint, admin, secret_source, report,
                               ready_timeout)
            generation, in_use = admin.pending.generation, admin.pending
    if not dry_run and generation is not None:
        result.admins[admin.credential] = generation
    provisioner.provision_provider(declaration.mesh, provider, endpoint, secret_source(in_use),
                                   issued, secret_source, report, result, dry_run=dry_run)


def summarise(outcomes: Iterable[GrantOutcome]) -> str:
    counts: dict[str, int] = {}
    for outcome in outcomes:
        counts[outcome.status] = counts.get(outcome.status, 0) + 1
    return ", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "no grants"


def provision(declaration: Declaration, secret_source: Optional[SecretSource], report: Report,
              dry_run: bool = False) -> ProvisionResult:
    """`mesh apply`'s provisioner hook (extensions.ProvisionHook) for the kinds a running
    server keeps: every grant of the declaration of such a kind."""
    return provision_grants(declaration, secret_source, report, dry_run=dry_run)


def provision_files(declaration: Declaration, secret_source: Optional[SecretSource],
                    report: Report, *, paths: NodePaths,
                    api: Optional[docker.APIClient] = None,
                    dry_run: bool = False) -> ProvisionResult:
    """The provisioning of the kinds kept in a file on this node (the mesh registry's
    htpasswd) under `paths`' file root, restarting through `api` (None: nothing restarted)
    the containers that read a file that changed: provision_grants for those kinds only."""
    return provision_grants(declaration, secret_source, report, kinds=FILE_KINDS,
                            files=NodeFiles(paths, api), dry_run=dry_run)
