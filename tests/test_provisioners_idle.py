"""A provider whose last grant went is still found, from what its declaration says it
provides, so the logins of the grants that went are dropped (their data kept)."""

from __future__ import annotations

import attrs

import resolver
from executors.control.loading import load_mesh_dir
from executors.node.provisioners import AMQP_KIND, POSTGRES_KIND, idle_providers

from _genesis import built_genesis


def test_providers_with_no_grant_left_are_named_with_kind_and_admin_credential(tmp_path):
    inputs = load_mesh_dir(built_genesis(tmp_path))  # the control plane built: it holds grants
    full = resolver.resolve(inputs.catalogue, inputs.mesh, inputs.ledger)
    (node,) = full.declarations
    assert idle_providers(full.declarations[node]) == {}  # the control plane holds grants
    mesh = inputs.mesh
    for consumer in {b.consumer for b in full.bindings}:
        mesh = attrs.evolve(mesh, instances=mesh.instances.discard(consumer))
    bare = resolver.resolve(inputs.catalogue, mesh, full.ledger).declarations[node]
    assert not bare.grants
    idle = idle_providers(bare)
    kinds = {instance: kind for instance, (kind, _) in idle.items()}
    assert kinds == {"postgres@genesis": POSTGRES_KIND, "lavinmq@genesis": AMQP_KIND}
    for instance, (_, admin) in idle.items():
        assert admin.credential == f"secret/{instance}/admin"
