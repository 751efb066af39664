"""Binding files (`mounts: [{binding: <as>, …}]`) against the documented rule, written out
plainly: a container that mounts a binding's file is re-rendered, and its config digest (what
the node recreates it by) changes, exactly when that binding's values change (its provider moved: another host; its credential rotated and in force: another
generation), and the file it mounts changes with it; a change to another binding, which the
container does not mount, changes neither. A container that only reads the other binding
through env follows that binding, never the mounted one.
"""

from __future__ import annotations

import functools

import attrs

from hypothesis import given
from hypothesis import strategies as st

import resolver
from resolver import load_inputs
from resolver.rotation import record_applied

from executors.control.issuer import issue, rotate
from executors.node.apply.render import render
from executors.node.node_paths import NodePaths

from tests.test_binding_mounts import CA_PEM, LEDGER_WITH_CA, KEYS, _public

FORMATS = ("env", "json", "yaml")
# a login with two slots (a rotation changes `user` too) and one with one (only the generation)
PROVISIONS = """\
postgres-database:
  scope: node
  grant: database+login
  keys: [host, port, database, user, password, url]
  url: "postgres://{user}@{host}:{port}/{database}"
s3-bucket:
  scope: node
  grant: bucket+key
  keys: [host, port, bucket, user, password]
"""
PROVIDER = """\
name: provider
artifacts:
  server: {{repository: example.org/postgres, tag: "16"}}
listens:
  main: {{port: 5432}}
provides:
  - {{provision: {provision}, listen: main}}
containers:
  - name: server
    artifact: server
"""
APP = """\
name: app
artifacts:
  image: {{repository: example.org/app, tag: "1"}}
requires:
  - {{as: db, provision: {provision}, provider: db}}
  - {{as: other, provision: {provision}, provider: db2}}
containers:
  - name: reader
    artifact: image
    mounts:
{mounts}
  - name: envonly
    artifact: image
    env:
      OTHER: "${{other.host}}:${{other.port}}"
"""


def mesh_text(db_on: str, db2_on: str) -> str:
    nodes = "".join(f"  n{i}:\n    address: 10.0.0.{i + 1}\n    public-key: {_public(KEYS[i])}\n"
                    + ("    control: true\n" if i == 0 else "") for i in range(2))
    nodes += "  n2:\n    address: 10.0.0.3\n"
    return ("mesh: m\nnodes:\n" + nodes + "instances:\n"
            f"  db:\n    module: provider\n    node: {db_on}\n"
            f"  db2:\n    module: provider\n    node: {db2_on}\n"
            "  app:\n    module: app\n    node: n1\n")


def load(mesh: str, mounts: tuple[tuple[str, str], ...], ca: bool, provision: str):
    lines = [f"      - {{binding: db, target: /etc/app/db{i}.{fmt}, format: {fmt}}}"
             for i, (_, fmt) in enumerate(mounts)]
    if ca:
        lines.append("      - {ca: true, target: /etc/ssl/mesh-ca.crt}")
    return load_inputs({"mesh": (mesh, "mesh.yaml"),
                        "provisions": (PROVISIONS, "provisions.yaml"),
                        "ledger": (LEDGER_WITH_CA, "ledger.yaml"),
                        "module:provider": (PROVIDER.format(provision=provision),
                                            "provider/module.yaml"),
                        "module:app": (APP.format(mounts="\n".join(lines), provision=provision),
                                       "app/module.yaml")})


def resolve(inputs, ledger):
    return resolver.resolve(inputs.catalogue, inputs.mesh, ledger, sources=inputs.sources)


@functools.cache
def base(provision: str):
    inputs = load(mesh_text("n0", "n0"), (("db", "env"),), False, provision)
    first = resolve(inputs, inputs.ledger)
    return inputs, issue(list(first.requests), inputs.mesh, first.ledger)


@functools.cache
def ledger_rotated(provision: str, rotated: frozenset[str]):
    """The issued ledger with each provider in `rotated`'s credential rotated and put in force
    by its provider (so its holders are told the new generation)."""
    inputs, ledger = base(provision)
    if rotated:
        ledger = rotate(ledger, [f"{provision}/{p}/app" for p in sorted(rotated)], inputs.mesh)
        granting = resolve(inputs, ledger)
        ledger = record_applied(granting.ledger, "n0", granting.declarations["n0"])
    return ledger


def container(resolution, name):
    return next(c for c in resolution.declarations["n1"].containers if c.container == name)


def config_digest(resolution, name):
    """The config digest the node recreates a container by (labelled on it; the secret values
    are not needed: neither container's env holds one)."""
    rendered = render(resolution.declarations["n1"], NodePaths("/nonexistent/state"))
    return next(c.digest for c in rendered.desired.containers if c.name.endswith(f"-{name}"))


def told(resolution, requirement):
    binding = next(b for b in resolution.declarations["n1"].bindings
                   if b.requirement == requirement)
    return binding.values, binding.secret


def mounted_files(resolution):
    return {f.path: f for f in resolution.declarations["n1"].files
            if f.path.startswith("/etc/mesh/bindings/")}


@given(mounts=st.lists(st.sampled_from(FORMATS), min_size=1, max_size=3, unique=True),
       ca=st.booleans(), move_db=st.booleans(), move_db2=st.booleans(),
       rotated=st.frozensets(st.sampled_from(["db", "db2"])),
       provision=st.sampled_from(["postgres-database", "s3-bucket"]))
def test_a_mounting_container_changes_exactly_when_the_mounted_bindings_values_do(
        mounts, ca, move_db, move_db2, rotated, provision):
    shape = tuple(("db", fmt) for fmt in mounts)
    before_inputs = load(mesh_text("n0", "n0"), shape, ca, provision)
    before = resolve(before_inputs, ledger_rotated(provision, frozenset()))
    after_inputs = load(mesh_text("n2" if move_db else "n0", "n2" if move_db2 else "n0"),
                        shape, ca, provision)
    after = resolve(after_inputs, ledger_rotated(provision, rotated))

    db_changed = told(before, "db") != told(after, "db")
    other_changed = told(before, "other") != told(after, "other")
    assert db_changed == (move_db or "db" in rotated)  # the scenario does what it says
    assert (container(before, "reader") != container(after, "reader")) == db_changed
    # what the node recreates by: the container's config digest
    assert (config_digest(before, "reader") != config_digest(after, "reader")) == db_changed
    assert (mounted_files(before) != mounted_files(after)) == db_changed
    assert set(mounted_files(after)) == {f"/etc/mesh/bindings/app/db.{fmt}" for fmt in mounts}
    assert (container(before, "envonly") != container(after, "envonly")) == \
        (other_changed and move_db2)  # env holds other's host and port only
    assert (config_digest(before, "envonly") != config_digest(after, "envonly")) == move_db2
    for f in mounted_files(after).values():  # the token, never a value
        assert "${secret:" + f"{provision}/db/app" + "}" in f.content
    if ca:
        ca_file = next(f for f in after.declarations["n1"].files if f.path.endswith("ca.crt"))
        assert ca_file.content == CA_PEM


def run(inputs, ledger):
    """One resolution of this module's meshes (the reach test counts the codes it states)."""
    return resolve(inputs, ledger)


@given(ca_mount=st.booleans(), ca_recorded=st.booleans(),
       provision=st.sampled_from(["postgres-database", "s3-bucket"]))
def test_a_ca_mount_without_a_mesh_ca_is_stated_and_blocks_nothing(ca_mount, ca_recorded,
                                                                   provision):
    """`no-mesh-ca` is stated exactly when a container mounts the CA and the ledger records
    none; it refuses nothing (the consumer's credentials are still requested) and the CA file
    is declared exactly when the ledger holds the CA."""
    inputs = load(mesh_text("n0", "n0"), (("db", "env"),), ca_mount, provision)
    ledger = inputs.ledger if ca_recorded else attrs.evolve(inputs.ledger, ca=None)
    resolution = run(inputs, ledger)
    stated = [p for p in resolution.problems if p.code == "no-mesh-ca"]
    assert bool(stated) == (ca_mount and not ca_recorded), stated
    assert all(not p.blocks for p in stated)
    assert any(r.id == f"{provision}/db/app" for r in resolution.requests)
    declared = {f.path for f in resolution.declarations["n1"].files}
    assert ("/etc/mesh/ca/ca.crt" in declared) == (ca_mount and ca_recorded), declared
