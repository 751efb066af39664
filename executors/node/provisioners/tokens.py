"""Tool servers' bearer tokens, the shell: the tokens file on the tool server's node.

Invariants:
- A tool server (a provider of a `bearer-token` provision, the catalogue's `tools`) accepts a
  request whose bearer token's SHA-256 is in `/etc/mesh/auth/<instance>/tokens` on its node
  (under the node's file root), which its containers mount read-only at `/etc/mesh/auth`
  (resolver/_tool_tokens.py). The file is htpasswd-shaped, `<user>:sha256:<hex>` lines under
  the mesh's mark (`# mesh-mark:<mesh>:<provider>`), so the plan is htpasswd_plan.py's (pure):
  two entries per consumer (`<login>_a`, `<login>_b`), the new generation in the idle slot's
  while holders keep the old one; lines the mesh does not manage are kept byte for byte.
- Only hashes are written: a token is a 256-bit random value (the issuer's), so a plain SHA-256
  is what a server compares against (hashlib, constant-time compare in the server); the file
  is written whole (temp, fsync, rename; 0600) only when it changes. The server reads it again
  when it changes, so no container is restarted: a token added works, one removed stops working.
- Every step is reported naming the entry and the credential generation, never a token or a
  hash. A second run with nothing changed changes nothing.
- `check_binding` is `mesh verify`'s check of a tools binding, from the consumer's network
  namespace: the server answers the MCP `initialize` and `tools/list` with this consumer's
  token, and refuses a token that is no one's (mcp_probe.py).
"""

from __future__ import annotations

import hashlib
import secrets
from pathlib import Path
from typing import Sequence

from resolver import BindingDecl, Declaration, GrantDecl, SecretRef
from resolver.artifacts import REGISTRY_AUTH_HOST_DIR as AUTH_HOST_DIR
from resolver.rendering import TOKEN_KIND, TOKENS_FILE

from executors.common.atomic import write_atomic
from executors.common.report import Report

from executors.node.extensions import SecretSource
from executors.node.node_paths import NodePaths

from executors.node.provisioners.base import (
    AUTH_FAILED,
    MISSING,
    OK,
    UNREACHABLE,
    BindingCheck,
    GrantOutcome,
    NodeFiles,
    ProvisionResult,
)
from executors.node.provisioners.htpasswd_plan import after, desired_entries, diff, entries, parse, text
from executors.node.provisioners.mcp_probe import NOT_MCP, REFUSED, list_tools

KIND = TOKEN_KIND
DESCRIPTION = "tool server tokens"
GONE = "no longer granted (its consumer or the binding went): the token stops working"


def tokens_path(paths: NodePaths, provider: str) -> Path:
    return Path(paths.on_node(f"{AUTH_HOST_DIR}/{provider}/{TOKENS_FILE}"))


def token_hash(token: str) -> str:
    """What the tokens file holds for `token` (and what the server compares)."""
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


def grant_subject(grant: GrantDecl) -> str:
    """How one grant is named in a notice: the consumer whose token it is."""
    return f"token of {grant.consumer} on {grant.provider}"


def provision_file(declaration: Declaration, provider: str, grants: Sequence[GrantDecl],
                   secret_source: SecretSource, report: Report, result: ProvisionResult,
                   files: NodeFiles, *, dry_run: bool = False) -> None:
    """Make the tokens file of tool server `provider` hold exactly its issued `grants`' token
    hashes (of this mesh)."""
    path = tokens_path(files.paths, provider)
    try:
        current = path.read_text()
    except FileNotFoundError:
        current = ""
    desired = [want for g in grants for want in desired_entries(g)]
    hashes = {want.user: token_hash(secret_source(SecretRef(want.credential, want.generation)))
              for want in desired}
    stored = entries(parse({"text": current}))
    matches = {user: user in stored and stored[user].hash == hashes[user] for user in hashes}
    observed = parse({"text": current, "matches": matches})
    steps = diff(declaration.mesh, provider, desired, observed, GONE)
    refused = {s.user for s in steps if s.action == "refuse"}
    for step in steps:
        if step.action == "refuse":
            report.notice(f"token {step.user} on {provider}", step.cause)
            continue
        report.record(f"{step.action}-token", f"{step.user} on {provider}", step.cause,
                      "planned" if dry_run else "done")
        if step.action == "remove":
            result.orphaned.append(f"token {step.user} on {provider} (removed)")
    changing = [s for s in steps if s.action != "refuse"]
    if changing and not dry_run:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, text(after(observed, steps, declaration.mesh, provider), hashes),
                     0o600)
        result.statements += len(changing)
    for grant in grants:
        users = {want.user for want in desired_entries(grant)}
        if users & refused:
            result.outcomes.append(GrantOutcome.of(grant, "failed",
                                                   message="the token entry is another mesh's"))
        else:
            result.outcomes.append(GrantOutcome.of(
                grant, "planned" if dry_run and changing else "in-force",
                generation=grant.credential.generation))


def check_binding(binding: BindingDecl, password: str, timeout: float) -> BindingCheck:
    """The tool server at the binding's url answers `initialize` and `tools/list` with this
    consumer's token, and refuses one that is no one's."""
    url = binding.values.get("url", "")
    user = binding.values.get("user", binding.consumer)
    mine = list_tools(url, password, timeout)
    if mine.status == REFUSED:
        return BindingCheck(AUTH_FAILED, f"{binding.provider} refuses {user}'s token at {url} "
                            f"({mine.detail}): run `mesh apply` on {binding.provider}'s node so "
                            f"its tokens file holds it")
    if mine.status == NOT_MCP:
        return BindingCheck(MISSING, f"{url} does not answer MCP with {user}'s token "
                            f"({mine.detail}): is {binding.provider} a tool server?")
    if mine.status != OK:
        return BindingCheck(UNREACHABLE, mine.detail)
    stranger = list_tools(url, secrets.token_urlsafe(32), timeout)
    if stranger.status != REFUSED:
        return BindingCheck(AUTH_FAILED, f"{binding.provider} at {url} does not refuse a token "
                            f"that is no one's ({stranger.status}): its token check is off")
    return BindingCheck(OK, f"{mine.server or binding.provider} at {url} lists "
                        f"{len(mine.tools)} tool(s) ({', '.join(mine.tools) or 'none'}) with "
                        f"{user}'s token and refuses another")


# --------------------------------------------------------------------------- the provisioner


# This module is the FileProvisioner of bearer-token grants (extensions.FileProvisioner) and
# the binding checker of their bindings (extensions.BindingChecker): the registry hands out
# the module itself, whose functions above are the protocols' methods and these two names
# their attributes.
kind = KIND
description = DESCRIPTION
