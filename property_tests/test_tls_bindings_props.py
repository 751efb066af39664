"""TLS bindings (resolver/_tls.py) against the documented rule, written out plainly:

- a consumer of a listen that says `tls: true` is told the provision's TLS values
  (`sslmode=verify-full`, `sslrootcert` the CA's path in its container, the verify-full url)
  and has the mesh CA mounted read-only in every container, whenever it is on another node
  than its provider, and on the provider's node too unless the listen says `plain-same-node`;
- every other consumer is told exactly the plain keys, with no CA mounted;
- the provider is a TLS server exactly when its listen says `tls`: one certificate request
  for its node while none is issued.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

import resolver
from resolver import load_inputs

from tests.test_tls_bindings import APP, PINS, POSTGRES, PROVISIONS

CA_PEM = "-----BEGIN CERTIFICATE-----\\nMESH\\n-----END CERTIFICATE-----\\n"
PLAIN_KEYS = {"host", "port", "database", "user", "password", "url"}


@st.composite
def meshes(draw):
    nodes = draw(st.integers(1, 3))
    provider = draw(st.integers(0, nodes - 1))
    tls = draw(st.booleans())
    plain_same_node = tls and draw(st.booleans())
    consumers = draw(st.lists(st.integers(0, nodes - 1), min_size=1, max_size=4))
    return nodes, provider, tls, plain_same_node, consumers


def resolve(nodes, provider, tls, plain_same_node, consumers):
    node_text = "".join(f"  n{i}: {{address: 10.1.0.{i + 1}}}\n" for i in range(nodes))
    instances = f"  pg: {{module: postgres, node: n{provider}}}\n" + "".join(
        f"  app{i}: {{module: app, node: n{node}}}\n" for i, node in enumerate(consumers))
    postgres = POSTGRES.format(tls="true",
                               plain=", plain-same-node: true" if plain_same_node else "")
    if not tls:
        postgres = postgres.replace(", tls: true}", "}")  # the listen's, not the artifact's
    ledger = PINS + f'ca: "{CA_PEM}"\n'
    inputs = load_inputs({"mesh": (f"mesh: m\nnodes:\n{node_text}instances:\n{instances}",
                                   "mesh.yaml"),
                          "provisions": (PROVISIONS, "provisions.yaml"),
                          "ledger": (ledger, "ledger.yaml"),
                          "module:postgres": (postgres, "postgres/module.yaml"),
                          "module:app": (APP, "app/module.yaml")})
    assert inputs.mesh.instances["pg"] is not None
    return resolver.resolve(inputs.catalogue, inputs.mesh, inputs.ledger,
                            sources=inputs.sources)


@given(meshes())
def test_a_binding_verifies_tls_exactly_when_the_rule_says(drawn):
    nodes, provider, tls, plain_same_node, consumers = drawn
    resolution = resolve(*drawn)
    assert not [p for p in resolution.problems if p.severity == "error"], resolution.problems
    for i, node in enumerate(consumers):
        consumer = f"app{i}"
        verifies = tls and (node != provider or not plain_same_node)  # the oracle
        declaration = resolution.declarations[f"n{node}"]
        (binding,) = [b for b in declaration.bindings if b.consumer == consumer]
        values = dict(binding.values)
        containers = [c for c in declaration.containers if c.instance == consumer]
        ca_mounts = [(m.kind, m.source, m.target, m.read_only) for c in containers
                     for m in c.mounts if m.kind == "ca"]
        if verifies:
            assert values["sslmode"] == "verify-full", values
            assert values["sslrootcert"] == "/etc/mesh/ca.crt"
            assert "?sslmode=verify-full&sslrootcert=/etc/mesh/ca.crt&" in values["url"]
            assert ca_mounts == [("ca", "/etc/mesh/ca/ca.crt", "/etc/mesh/ca.crt", True)] \
                * len(containers)
            assert "/etc/mesh/ca/ca.crt" in {f.path for f in declaration.files}
        else:
            assert set(values) == PLAIN_KEYS, values
            assert "sslmode" not in values["url"]
            assert ca_mounts == []
    requested = [(r.id, list(r.holders)) for r in resolution.requests
                 if r.kind == "tls-certificate"]
    assert requested == ([("pg", [f"n{provider}"])] if tls else [])
