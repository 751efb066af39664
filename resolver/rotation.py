"""Rotation: the generations of a credential or an own secret as pure state over the ledger.

A rotation begins (`begin_rotation`), waits for the provider to report the new generation in
force (`provider_applied`), then for every holder (`holder_applied`, `record_applied`); dual
logins take the idle slot of two (`SLOTS`) and rotate with no window. `secret_way` says how a
new generation of a module's own secret takes effect on the running app. Every refusal is a
`resolver.RotationError`. The control node's issuer and the `mesh rotate` verb are the
callers.
"""

from ._rotation import (SLOTS, accepted_generations, begin_rotation, declared_grants,
                        describe_rotation, first_generation, grant_view, holder_applied,
                        holder_generation, holder_nodes, in_progress, is_dual,
                        next_generation_number, provider_applied, provider_first,
                        record_applied, report_applied, reseal, server_held_credentials,
                        server_held_secrets, waiting_holders, window_holders)
from ._secret_ways import SecretWay, secret_way

__all__ = [
    # Starting and recording a rotation
    "first_generation", "next_generation_number", "begin_rotation", "reseal",
    "provider_applied", "holder_applied", "record_applied", "report_applied",
    # Where a rotation stands
    "in_progress", "is_dual", "provider_first", "SLOTS", "holder_nodes", "waiting_holders",
    "window_holders", "holder_generation", "accepted_generations", "grant_view",
    "describe_rotation", "declared_grants",
    # What the provider's server holds (and the node side keeps out of files)
    "server_held_credentials", "server_held_secrets",
    # How a rotated own secret takes effect
    "SecretWay", "secret_way",
]
