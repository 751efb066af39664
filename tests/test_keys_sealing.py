"""Node keys and sealed values: a value opens for its node only; key files are 0600 and kept."""

from __future__ import annotations

import os
import stat

import pytest
from pyrsistent import pmap, pvector

from executors.control.issuer import IssueError, issue, rotate
from executors.common.keys import (
    KeyError_,
    UnsealError,
    create_node_key,
    load_private_key,
    public_key_b64,
    seal,
    unseal,
    unseal_for_node,
)
from resolver import EMPTY_LEDGER, Mesh, Node, Request


@pytest.fixture
def keys(tmp_path):
    """Three nodes' key files; returns {node: (path, public key)}."""
    made = {}
    for node in ("anchor", "lab", "edge"):
        path = tmp_path / f"{node}.key"
        made[node] = (path, create_node_key(path))
    return made


def mesh_of(keys, *, without=()) -> Mesh:
    nodes = {n: Node(address=f"10.0.0.{i + 1}",
                     public_key=None if n in without else public)
             for i, (n, (_, public)) in enumerate(sorted(keys.items()))}
    return Mesh(mesh="test", nodes=pmap(nodes))


def test_key_file_is_0600_and_never_overwritten(tmp_path):
    path = tmp_path / "node.key"
    public = create_node_key(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    before = path.read_bytes()
    with pytest.raises(KeyError_, match="exists already"):
        create_node_key(path)
    assert path.read_bytes() == before
    assert public_key_b64(load_private_key(path)) == public


def test_key_file_mode_ignores_a_permissive_umask(tmp_path):
    old = os.umask(0)
    try:
        create_node_key(tmp_path / "k")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "k").st_mode) == 0o600


def test_sealed_value_opens_for_its_node_only(keys):
    sealed = seal(keys["anchor"][1], "s3cret-value")
    assert unseal(load_private_key(keys["anchor"][0]), sealed) == "s3cret-value"
    for other in ("lab", "edge"):
        with pytest.raises(UnsealError):
            unseal(load_private_key(keys[other][0]), sealed)


def test_damaged_sealed_value_fails_cleanly(keys):
    private = load_private_key(keys["anchor"][0])
    with pytest.raises(UnsealError):
        unseal(private, "not base64!")
    sealed = bytearray(seal(keys["anchor"][1], "x").encode())
    sealed[10] = ord("A") if sealed[10] != ord("A") else ord("B")
    with pytest.raises(UnsealError):
        unseal(private, bytes(sealed).decode())


def test_bad_key_files_are_named(tmp_path):
    with pytest.raises(KeyError_, match="no such key file"):
        load_private_key(tmp_path / "absent.key")
    (tmp_path / "short.key").write_text("AAAA\n")
    with pytest.raises(KeyError_, match="expected 32 bytes"):
        load_private_key(tmp_path / "short.key")


def test_issue_seals_separately_to_every_holder_and_unseal_for_node_sees_only_its_own(keys):
    mesh = mesh_of(keys)
    requests = [Request("credential", "postgres-database/postgres@anchor/app@lab",
                        pvector(["anchor", "lab"]), "binding", "a"),
                Request("credential", "secret/postgres@anchor/admin", pvector(["anchor"]),
                        "admin")]
    ledger = issue(requests, mesh, EMPTY_LEDGER)
    binding = ledger.credentials["postgres-database/postgres@anchor/app@lab"].active
    assert sorted(binding.sealed) == ["anchor", "lab"]
    assert binding.sealed["anchor"] != binding.sealed["lab"]
    assert binding.slot == "a" and binding.generation == 1

    anchor = unseal_for_node(ledger, "anchor", load_private_key(keys["anchor"][0]))
    lab = unseal_for_node(ledger, "lab", load_private_key(keys["lab"][0]))
    edge = unseal_for_node(ledger, "edge", load_private_key(keys["edge"][0]))
    assert set(anchor) == {"postgres-database/postgres@anchor/app@lab",
                           "secret/postgres@anchor/admin"}
    assert set(lab) == {"postgres-database/postgres@anchor/app@lab"}
    assert edge == {}
    cred = "postgres-database/postgres@anchor/app@lab"
    assert anchor[cred] == lab[cred]  # both ends hold the same value
    assert len(anchor[cred][1]) >= 40  # 32 bytes of entropy, url-safe base64
    assert anchor["secret/postgres@anchor/admin"][1] != anchor[cred][1]

    # another node's key opening what is sealed to `lab` fails, naming the node
    with pytest.raises(UnsealError, match="not lab's key"):
        unseal_for_node(ledger, "lab", load_private_key(keys["edge"][0]))


def test_rotation_seals_the_new_generation_to_the_same_holders(keys):
    mesh = mesh_of(keys)
    cred = "amqp/rabbit@anchor/worker@edge"
    ledger = issue([Request("credential", cred, pvector(["anchor", "edge"]))], mesh,
                   EMPTY_LEDGER)
    rotated = rotate(ledger, [cred], mesh)
    pending = rotated.credentials[cred].pending
    assert pending.generation == 2 and sorted(pending.sealed) == ["anchor", "edge"]
    values = unseal_for_node(rotated, "edge", load_private_key(keys["edge"][0]))[cred]
    assert set(values) == {1, 2} and values[1] != values[2]


def test_a_holder_without_a_public_key_is_named_with_the_way_to_make_one(keys):
    mesh = mesh_of(keys, without=("lab", "edge"))
    with pytest.raises(IssueError) as error:
        issue([Request("credential", "x/p@anchor/c@lab", pvector(["anchor", "lab"])),
               Request("credential", "x/p@anchor/d@edge", pvector(["anchor", "edge"]))],
              mesh, EMPTY_LEDGER)
    assert "edge, lab" in str(error.value) and "mesh node-key" in str(error.value)


def test_issuing_is_idempotent(keys):
    mesh = mesh_of(keys)
    requests = [Request("credential", "x/p@anchor/c@lab", pvector(["anchor", "lab"]))]
    once = issue(requests, mesh, EMPTY_LEDGER)
    assert issue(requests, mesh, once) == once
