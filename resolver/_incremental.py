"""resolve_from(): a resolution that reuses what the previous one made, as an explicit value.

Invariants:
- resolve_from(previous, inputs) returns a Resolution equal to resolve(inputs) in every field,
  whatever `previous` is (None, or the Reuse of any earlier resolution of any inputs): the
  declarations byte for byte, serials and digests included (property_tests/
  test_incremental_props.py checks it for random meshes and random edits).
- Reuse is a frozen value handed in and handed back; nothing is cached anywhere else, and
  nothing in it is ever changed. A run reuses only what is keyed by exactly what made it:
  a consumer's bindings by its Instance and recorded bindings in a run whose candidates (and
  their nodes, refusals and modules) are the same (resolver/_resolve.py, bind_all_reusing); a
  consumer's parts of the bindings (resolver/_render_bindings.py); a consumer's same-node
  openings and a node's MACs (resolver/_render.py, local_openings_reusing: for a consumer
  whose parts of the bindings were reused, whose key holds every part of the openings' key
  but the MACs, only the MACs are compared); an instance's
  rendering by a key holding every input its rendering reads (render_instances_reusing); a
  node's declaration and digest by a key holding every value the declaration is made from
  (resolver/_assemble.py, assemble_reusing); the order of the requests by the set of them
  (the requests still made keep their order, new ones are put in their places). A
  consumer with a problem is not kept (problems are located through Sources, no key's part).
  A keyed stage that holds the maps its run read its keys' parts from does not make the key
  of a consumer or instance none of whose parts differs from them (by identity, or by
  equality for plain values): that key would be made of the very parts, or equal ones, of
  the kept key, so it equals it (render_bindings_reusing: _suspect_consumers;
  render_instances_reusing: _suspects). Likewise by node: the same-node openings and MACs
  are worked out again only for the consumers whose parts of the bindings are not the kept
  ones and the nodes they were or are on (resolver/_render.py, _local_again), the kept host
  ports only on the nodes an entry that is not the very one read was or is on
  (resolver/_held.py, kept_ports_reusing), and the instances by node the declarations are
  assembled from only on the nodes a changed rendering was or is on, or reaches
  (resolver/_assemble.py, Layout).
  The validation of the ledger and of the catalogue is skipped when it is the very same
  object an earlier run found clean (the catalogue: or an equal one; of another ledger, the
  maps and host port entries it holds of the clean one by identity), and the Context's
  lookups made from the ledger (map by map), the instances and the nodes are shared when
  they are made from the very same objects (the inputs are frozen values: the same object
  is the same value; resolver/_check.py validate_reusing, resolver/_context.py
  Context.of_reusing). The new ledger keeps each map of the ledger handed in that it holds
  equal (ports, bindings, logins), so the ledger the next run is handed (the one this run's
  was recorded into) shares them by identity. Everything else (the mesh's validation, the
  refusals, ports, logins, held instances, the new ledger) is computed anew each run:
  those stages read the whole mesh.
- Pure, as the rest of the resolver: no clock, no randomness, no I/O, no logging.
"""

from __future__ import annotations

from typing import Optional

import attrs

from ._check import Clean, validate_reusing
from ._collector import collector_paused
from ._context import Context
from ._errors import InputError
from ._inputs import NO_SOURCES, Catalogue, Sources
from ._ledger import Ledger
from ._model import Mesh
from ._resolution import Resolution
from ._resolve import Reused, resolution_reusing


@attrs.frozen(eq=False, repr=False)
class Reuse:
    """What one resolve_from() run made that the next may reuse: opaque to callers (hand the
    one a run returned to the next run; any Reuse, or None, gives the same Resolution, only
    sooner or later). It holds what each keyed stage made with the key it was made from
    (resolver/_resolve.py, Reused)."""

    kept: Reused = Reused()
    context: Optional[Context] = None
    """The run's Context: the next shares its lookups of the very same inputs
    (Context.of_reusing)."""
    clean: Clean = Clean()
    """The inputs the run found without a fault (resolver/_check.py, validate_reusing)."""

    def __repr__(self) -> str:
        return (f"Reuse({len(self.kept.renderings.instances)} renderings, "
                f"{len(self.kept.digests)} digests)")


def resolve_from(previous: Optional[Reuse], catalogue: Catalogue, mesh: Mesh, ledger: Ledger,
                 *, sources: Sources = NO_SOURCES, now: Optional[str] = None
                 ) -> tuple[Resolution, Reuse]:
    """(the Resolution resolve(catalogue, mesh, ledger, sources=sources, now=now) returns, the
    Reuse the next run may be handed). `previous`: what an earlier run returned (None: reuse
    nothing). The inputs are validated as resolve() validates them (InputError with every
    fault), and the collector is paused as resolve() pauses it."""
    with collector_paused():
        faults, clean = validate_reusing(catalogue, mesh, ledger, sources,
                                         previous.clean if previous is not None else None)
        if faults:
            raise InputError(faults)
        context = Context.of_reusing(catalogue, mesh, ledger, sources, now,
                                     previous.context if previous is not None else None)
        resolution, kept = resolution_reusing(
            context, previous.kept if previous is not None else Reused())
        return resolution, Reuse(kept, context, clean)
