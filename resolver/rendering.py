"""The rules a rendered declaration is made and recorded by, which the node side and the
tests share with the resolver: its digest, the serials the ledger keeps for what was written,
the `${secret:…}` tokens its values carry (filled on the node) and the `${…}` placeholders of
a manifest's env values, the ids credentials and own secrets are named by, the state root
instances' state lives under, and the MAC addresses given to containers.
"""

from ._bound import credential_id, secret_id
from ._digest import declaration_digest
from ._firewall import assign_macs
from ._placeholders import (fill_secret_tokens, placeholders, render_placeholders,
                            secret_token, secret_tokens)
from ._records import newest_written, next_serial, record_declared
from ._render import STATE_ROOT

__all__ = [
    # A declaration's digest, and its serials in the ledger
    "declaration_digest", "next_serial", "newest_written", "record_declared",
    # Secret tokens and placeholders in values
    "secret_token", "secret_tokens", "fill_secret_tokens", "placeholders",
    "render_placeholders",
    # Names
    "credential_id", "secret_id", "STATE_ROOT", "assign_macs",
]
