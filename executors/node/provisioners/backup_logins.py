"""A backup store's logins (grant kind `backup-login`, resolver/_backup_target.py): one
htpasswd entry per backed-up instance in the store's accounts file, the same file, plan and
shell as the mesh registry's accounts (htpasswd.py, htpasswd_plan.py).

Invariants:
- One entry per grant, named the login (no slots: under rclone's `--private-repos` the login
  is the repository's directory, so it never changes); its bcrypt hash is made by the
  `bcrypt` library from the sealed password, never by the mesh's own code.
- The file is written whole (temp, fsync, rename) only when it changes, and the store is NOT
  restarted: rclone 1.60 (Debian bookworm's) reads its htpasswd again when the file changes
  (checked: a login added by a rename is accepted without a restart), so a backup running
  into the store is never cut by another instance's new login.
"""

from __future__ import annotations

from typing import Sequence

import attrs

from resolver import Declaration, GrantDecl
from resolver.rendering import BACKUP_LOGIN_KIND

from executors.common.report import Report
from executors.node.extensions import SecretSource
from executors.node.provisioners import htpasswd
from executors.node.provisioners.base import NodeFiles, ProvisionResult

KIND = BACKUP_LOGIN_KIND
DESCRIPTION = "backup store htpasswd"


def grant_subject(grant: GrantDecl) -> str:
    """How one grant is named in a notice: the login it makes."""
    return f"backup login {grant.login} on {grant.provider}"


def provision_file(declaration: Declaration, provider: str, grants: Sequence[GrantDecl],
                   secret_source: SecretSource, report: Report, result: ProvisionResult,
                   files: NodeFiles, *, dry_run: bool = False) -> None:
    """Make the htpasswd of backup store `provider` hold exactly its issued `grants`' logins
    (of this mesh); rclone reads the file again when it changes (no restart)."""
    htpasswd.provision_file(declaration, provider, grants, secret_source, report, result,
                            attrs.evolve(files, engine=None), dry_run=dry_run)


# The FileProvisioner of backup-login grants (extensions.FileProvisioner): the module itself.
kind = KIND
description = DESCRIPTION
