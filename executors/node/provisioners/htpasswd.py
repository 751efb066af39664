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
- This module is the file-backed provisioner of registry+account grants
  (extensions.FileProvisioner): provisioners/grants.py groups the grants by registry, skips
  those whose credential is not issued and fails those with no secret values, as for every
  kind, and hands each registry's issued grants to `provision_file`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import bcrypt

from resolver import Declaration, GrantDecl, SecretRef
from resolver.artifacts import registry_user, HTPASSWD, REGISTRY_ACCOUNT_KIND as ACCOUNT_KIND
from resolver.artifacts import REGISTRY_AUTH_HOST_DIR as AUTH_HOST_DIR

from executors.common.atomic import write_atomic
from executors.common.report import Report

from executors.node.extensions import SecretSource
from executors.node.node_paths import NodePaths

from executors.node.provisioners.base import GrantOutcome, NodeFiles, ProvisionResult
from executors.node.provisioners.htpasswd_plan import after, desired_entries, diff, entries, parse, text

KIND = ACCOUNT_KIND
DESCRIPTION = "registry htpasswd"


def htpasswd_path(paths: NodePaths, provider: str) -> Path:
    return Path(paths.on_node(f"{AUTH_HOST_DIR}/{provider}/{HTPASSWD}"))


def grant_subject(grant: GrantDecl) -> str:
    """How one grant is named in a notice: the account it makes."""
    return f"registry account {grant.login} on {grant.provider}"


def provision_file(declaration: Declaration, provider: str, grants: Sequence[GrantDecl],
                   secret_source: SecretSource, report: Report, result: ProvisionResult,
                   files: NodeFiles, *, dry_run: bool = False) -> None:
    """Make the htpasswd of registry `provider` hold exactly its issued `grants`' accounts (of
    this mesh), and restart the registry when the file changed."""
    path = htpasswd_path(files.paths, provider)
    try:
        current = path.read_text()
    except FileNotFoundError:
        current = ""
    desired = [want for g in grants for want in desired_entries(g)]
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
        _restart(declaration, provider, files, report)
    for grant in grants:
        if registry_user(grant.login, grant.slot) in refused:
            result.outcomes.append(GrantOutcome.of(grant, "failed",
                                                   message="the account is another mesh's"))
        else:
            result.outcomes.append(GrantOutcome.of(
                grant, "planned" if dry_run and changing else "in-force",
                generation=grant.credential.generation))


def _matches(password: str, hashed: str) -> bool:
    try:
        return bcrypt.checkpw(password.encode(), hashed.encode())
    except ValueError:  # not a bcrypt hash (another scheme): it is set anew
        return False


def _restart(declaration: Declaration, provider: str, files: NodeFiles, report: Report) -> None:
    """The registry reads htpasswd when it starts: restart its running containers."""
    if files.engine is None:
        return
    for container in declaration.containers:
        if container.instance == provider and not container.run_once:
            report.record("restart-container", container.name,
                          "its htpasswd changed (read when it starts)", "restarting")
            files.engine.restart(container.name, timeout=10)


# --------------------------------------------------------------------------- the provisioner


# This module is the FileProvisioner of registry+account grants (extensions.FileProvisioner):
# the registry hands out the module itself, whose functions above are the protocol's methods
# and these two names its attributes.
kind = KIND
description = DESCRIPTION
