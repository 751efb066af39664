"""Issuing and rotating against generated meshes.

- After issuing a resolution's requests, resolving again asks for nothing more (credentials and,
  with a CA, certificates), and every value is sealed to exactly the holders requested.
- Issuing is idempotent: issuing again, with the old or the new requests, changes nothing.
- A rotation changes no container outside its holders: every container recreated, at either
  step (provider first, then holders), runs on a holder node and refers to the credential.
  A provider's own admin secret is rotated provider first too: nothing changes before the
  provider reports it in force, and then its server's own container is never recreated
  ("in-place": only its env file changes), while another container that uses it is.
"""

from __future__ import annotations

import re
import tempfile
from collections import Counter

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st
from nacl.public import PrivateKey
from pyrsistent import pmap

import resolver
from executors.control.ca import init_ca
from executors.control.issuer import issue, rotate
from executors.common.keys import public_key_b64
from resolver import ProblemCode as codes, container_changes
from resolver.certificates import TLS_REQUEST
from resolver.rotation import (
    holder_nodes,
    provider_applied,
    server_held_credentials,
    server_held_secrets,
)

from .strategies import NODE_NAMES, worlds

NODE_KEYS = {name: PrivateKey.generate() for name in NODE_NAMES}


def _counter():
    count = iter(range(1, 1 << 30))
    return lambda: f"test-secret-{next(count):08d}-" + "x" * 32


def keyed(world):
    nodes = pmap({n: attrs.evolve(node, public_key=public_key_b64(NODE_KEYS[n]))
                  for n, node in world.mesh.nodes.items()})
    return attrs.evolve(world, mesh=attrs.evolve(world.mesh, nodes=nodes))


_CA = None


def mesh_ca(mesh):
    global _CA
    if _CA is None:
        _CA = init_ca(tempfile.mkdtemp(prefix="mesh-ca-"), mesh)
    return _CA


def resolve(world, ledger):
    return resolver.resolve(world.catalogue, world.mesh, ledger)


@given(worlds(with_binding=True), st.data())
def test_each_keyless_node_is_told_how_many_values_wait_for_its_key(world, data):
    """A node without a public key is warned once, with the number of credentials the plan
    asks to seal to it; a node with a key never is. (The generated modules never name one
    provision twice, so no request is made twice and the plan's list is the count.)"""
    keyed_nodes = data.draw(st.sets(st.sampled_from(sorted(world.mesh.nodes))))
    nodes = pmap({n: attrs.evolve(node, public_key=public_key_b64(NODE_KEYS[n]))
                  if n in keyed_nodes else node for n, node in world.mesh.nodes.items()})
    result = resolve(attrs.evolve(world, mesh=attrs.evolve(world.mesh, nodes=nodes)),
                     world.ledger)
    waiting = Counter(node for q in result.requests if q.kind in ("credential", TLS_REQUEST)
                      for node in q.holders if node not in keyed_nodes)
    stated: dict[str, int] = {}
    for problem in result.problems:
        if problem.code == codes.MISSING_PUBLIC_KEY:
            said = re.match(r"node (\S+) must hold (\d+) credential\(s\)", problem.message)
            assert said is not None and said[1] not in stated, problem.message
            stated[said[1]] = int(said[2])
    assert stated == dict(waiting)


@settings(max_examples=min(settings.default.max_examples, 100))  # issuing seals: costly
@given(worlds(with_binding=True))
def test_after_issuing_the_second_resolve_requests_nothing(world):
    world = keyed(world)
    first = resolve(world, world.ledger)
    issued = issue(first.requests, world.mesh, first.ledger, ca=mesh_ca(world.mesh),
                   entropy=_counter())
    second = resolve(world, issued)
    assert list(second.requests) == []
    for request in first.requests:
        if request.kind == "credential":
            cred = issued.credentials[request.id]
            assert sorted(cred.active.sealed) == sorted(request.holders)
            assert cred.active.slot == request.slot
        else:
            assert request.id in issued.certificates
    # idempotent: the old requests and the (empty) new ones change nothing
    assert issue(first.requests, world.mesh, issued, ca=mesh_ca(world.mesh)) == issued
    assert issue(second.requests, world.mesh, issued) == issued
    # and resolving the issued ledger is a fixed point for what the issuer owns
    assert second.ledger.credentials == issued.credentials
    assert second.ledger.certificates == issued.certificates


@settings(max_examples=min(settings.default.max_examples, 100))  # issuing seals: costly
@given(worlds(with_binding=True), st.data())
def test_rotation_changes_no_container_outside_its_holders(world, data):
    world = keyed(world)
    first = resolve(world, world.ledger)
    issued = resolve(world, issue(first.requests, world.mesh, first.ledger,
                                  ca=mesh_ca(world.mesh), entropy=_counter()))
    ledger = issued.ledger
    assert ledger.credentials, "with_binding guarantees a grant, so a credential to rotate"
    chosen = data.draw(st.sampled_from(sorted(ledger.credentials)))
    server_held = server_held_credentials(world.catalogue, world.mesh)
    rotated = rotate(ledger, [chosen], world.mesh, entropy=_counter(), server_held=server_held)
    assert {c for c in rotated.credentials
            if rotated.credentials[c] != ledger.credentials[c]} == {chosen}
    step1 = resolve(world, rotated)
    # every provider reports whatever is pending: only the rotated credential may move holders
    promoted = {c: provider_applied(cred, cred.pending.generation, credential_id=c) if cred.pending else cred
                for c, cred in step1.ledger.credentials.items()}
    step2 = resolve(world, attrs.evolve(step1.ledger, credentials=pmap(promoted)))
    holders = set(holder_nodes(ledger.credentials[chosen]))
    for before, after in ((issued, step1), (step1, step2)):
        for change in container_changes(before.declarations, after.declarations):
            assert change.node in holders, f"{change} is outside the holders {holders}"
            decl = after.declarations[change.node]
            container = next(c for c in decl.containers if c.name == change.container)
            assert chosen in {s.credential for s in container.secrets}, change
            held = chosen in server_held_secrets(decl, container)
            assert change.action == ("in-place" if held else "recreate"), change
            assert not (chosen in server_held and before is issued), \
                f"{change}: a server's admin changed a container before the server had it"
        for node in set(before.declarations) - holders:
            assert before.declarations[node].digest == after.declarations[node].digest, node
