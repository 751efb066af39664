"""The mesh registry's accounts, the shell: its htpasswd file on the registry's node.

Invariants:
- What the file must hold is htpasswd_plan.py's (pure); this module reads the file under the
  node's file root (`/etc/mesh/auth/<registry instance>/htpasswd`, mounted read-only into the
  registry's containers), checks each granted account's stored hash against its password with
  bcrypt (the `bcrypt` library: never a hash of our own making), runs the plan, writes the file
  whole (temp, fsync, rename; 0600) and restarts the registry's containers only when it
  changed, since the registry reads the file when it starts.
- Every step is reported as it runs, naming the account and the credential generation, never a
  password or a hash. A second run with nothing changed changes nothing (no write, no restart).
- Outcomes: each grant in force with its generation (what a rotation waits for), refused
  (another mesh's account), or pending its credential.
- Two entries per account (htpasswd_plan.desired_entries): a rotation puts the new generation in
  the idle slot's entry while holders keep logging in with the old one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import bcrypt

from resolver import Declaration, SecretRef, registry_user
from resolver import HTPASSWD
from resolver import REGISTRY_ACCOUNT_KIND as ACCOUNT_KIND
from resolver import REGISTRY_AUTH_HOST_DIR as AUTH_HOST_DIR

from executors.common.atomic import write_atomic
from executors.common.report import Report

from executors.node.extensions import SecretSource

from executors.node.provisioners.base import GrantOutcome, ProvisionResult, issued_grants
from executors.node.provisioners.htpasswd_plan import after, desired_entries, diff, entries, parse, text

KIND = ACCOUNT_KIND


def htpasswd_path(paths, provider: str) -> Path:
    return Path(paths.on_node(f"{AUTH_HOST_DIR}/{provider}/{HTPASSWD}"))


def provision_accounts(declaration: Declaration, secret_source: Optional[SecretSource],
                       report: Report, *, paths, api=None, dry_run: bool = False
                       ) -> ProvisionResult:
    """Make the registry's htpasswd hold exactly its grants' accounts (of this mesh)."""
    result = ProvisionResult()
    by_provider: dict[str, list] = {}
    for grant in declaration.grants:
        if grant.kind == KIND:
            by_provider.setdefault(grant.provider, []).append(grant)
    for provider, grants in sorted(by_provider.items()):
        _provision(declaration, provider, grants, secret_source, report, result, paths, api,
                   dry_run)
    facts = report.facts.setdefault("provisioned", {"outcomes": [], "statements": 0,
                                                    "orphaned": []})
    facts["outcomes"].extend(o.to_json() for o in result.outcomes)
    facts["statements"] += result.statements
    return result


def _provision(declaration, provider, grants, secret_source, report, result, paths, api,
               dry_run) -> None:
    path = htpasswd_path(paths, provider)
    issued = issued_grants(grants, provider, KIND, report, result,
                           lambda g: f"registry account {g.login} on {provider}")
    if issued and secret_source is None:
        report.record("provision", provider, f"{len(issued)} registry account(s)",
                      "failed: no secret values to provision with: pass --secrets and --key",
                      ok=False)
        result.problems.append(f"{provider}: no secret values")
        return
    try:
        current = path.read_text()
    except FileNotFoundError:
        current = ""
    desired = [want for g in issued for want in desired_entries(g)]
    passwords = {want.user: secret_source(SecretRef(want.credential, want.generation))
                 for want in desired}
    stored = entries(parse({"text": current}))
    matches = {user: user in stored and _matches(passwords[user], stored[user].hash)
               for user in passwords}
    observed = parse({"text": current, "matches": matches})
    steps = diff(declaration.mesh, provider, desired, observed)
    refused = {s.user for s in steps if s.action == "refuse"}
    for step in steps:
        if step.action == "refuse":
            report.notice(f"registry account {step.user} on {provider}", step.cause)
            continue
        report.record(f"{step.action}-account", f"{step.user} on {provider}", step.cause,
                      "planned" if dry_run else "done")
        if step.action == "remove":
            result.orphaned.append(f"registry account {step.user} on {provider} (removed)")
    changing = [s for s in steps if s.action != "refuse"]
    if changing and not dry_run:
        hashes = {s.user: bcrypt.hashpw(passwords[s.user].encode(), bcrypt.gensalt()).decode()
                  for s in changing if s.action == "set"}
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, text(after(observed, steps, declaration.mesh, provider), hashes),
                     0o600)
        result.statements += len(changing)
        _restart(declaration, provider, api, report)
    for grant in issued:
        if registry_user(grant.login, grant.slot) in refused:
            result.outcomes.append(GrantOutcome(grant.credential.credential, provider,
                                                grant.consumer, "failed", kind=KIND,
                                                message="the account is another mesh's"))
        else:
            result.outcomes.append(GrantOutcome(
                grant.credential.credential, provider, grant.consumer,
                "planned" if dry_run and changing else "in-force",
                generation=grant.credential.generation, kind=KIND))


def _matches(password: str, hashed: str) -> bool:
    try:
        return bcrypt.checkpw(password.encode(), hashed.encode())
    except ValueError:  # not a bcrypt hash (another scheme): it is set anew
        return False


def _restart(declaration, provider, api, report) -> None:
    """The registry reads htpasswd when it starts: restart its running containers."""
    if api is None:
        return
    for container in declaration.containers:
        if container.instance == provider and not container.run_once:
            report.record("restart-container", container.name,
                          "its htpasswd changed (read when it starts)", "restarting")
            api.restart(container.name, timeout=10)
