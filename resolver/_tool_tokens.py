"""Tool servers' bearer tokens: one per consumer, kept in a file the tool server reads.

Invariants:
- A provision whose grant is `bearer-token` (the catalogue's `tools`) gives each consumer of
  each provider its own token: the credential `<provision>/<provider>/<consumer>`, issued once,
  sealed to the provider's node and the consumer's, told to the consumer as its binding's
  `token` (a `${secret:…}` token, never a value here) and to the provider as a grant of kind
  TOKEN_KIND. Two slots, as the other logins: the grant carries the newest generation and,
  while a rotation is in progress, the retiring one, so the server accepts both until every
  holder applied.
- The provider's containers mount its accounts directory `/etc/mesh/auth/<instance>/`
  read-only at `/etc/mesh/auth` (the same mount kind `auth` as the registry's htpasswd), where
  the node's tokens provisioner keeps TOKENS_FILE: only hashes of tokens, never a token.
"""

from __future__ import annotations

from typing import Iterable

from ._declaration import ProviderDecl

#: The grant kind of a per-consumer bearer token (provisions.yaml `grant: bearer-token`).
TOKEN_KIND = "bearer-token"
#: The file of accepted token hashes in a token provider's accounts directory.
TOKENS_FILE = "tokens"


def serves_tokens(provided: Iterable[ProviderDecl]) -> bool:
    """Whether an instance providing `provided` checks bearer tokens (so mounts its file)."""
    return any(p.kind == TOKEN_KIND for p in provided)


#: The grant kind of a backup store's per-instance login (resolver/_backup_target.py), kept
#: bcrypt-hashed in the store's htpasswd in the same accounts directory.
BACKUP_LOGIN_KIND = "backup-login"


def serves_backup_logins(provided: Iterable[ProviderDecl]) -> bool:
    """Whether an instance providing `provided` checks backup store logins (so mounts its
    htpasswd)."""
    return any(p.kind == BACKUP_LOGIN_KIND for p in provided)
