"""The rules a rendered declaration is made and recorded by, which the node side and the
tests share with the resolver: its digest, the serials the ledger keeps for what was written,
the `${secret:…}` tokens its values carry (filled on the node) and the `${…}` placeholders of
a manifest's env values, the ids credentials and own secrets are named by, the state root
instances' state lives under, and the MAC addresses given to containers.
"""

from ._binding_files import BINDING_FILES_DIR, BINDING_FORMATS, is_file_mount
from ._bound import credential_id, secret_id
from ._digest import declaration_digest
from ._firewall import assign_macs
from ._placeholders import (fill_secret_tokens, placeholders, render_placeholders,
                            secret_token, secret_tokens)
from ._records import newest_written, next_serial, record_declared
from ._model import SECRETS_DIR
from ._render import STATE_ROOT
from ._tool_tokens import BACKUP_LOGIN_KIND, TOKEN_KIND, TOKENS_FILE

__all__ = [
    # A declaration's digest, and its serials in the ledger
    "declaration_digest", "next_serial", "newest_written", "record_declared",
    # Secret tokens and placeholders in values
    "secret_token", "secret_tokens", "fill_secret_tokens", "placeholders",
    "render_placeholders",
    # Names
    "credential_id", "secret_id", "STATE_ROOT", "SECRETS_DIR", "assign_macs",
    # Files the mesh writes that containers mount (binding files, the mesh CA)
    "BINDING_FILES_DIR", "BINDING_FORMATS", "is_file_mount",
    # A tool server's bearer tokens: their grant kind and the file its provisioner keeps
    "TOKEN_KIND", "TOKENS_FILE", "BACKUP_LOGIN_KIND",
]
