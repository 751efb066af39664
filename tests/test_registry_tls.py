"""The mesh's registry as the resolver and the issuer see it: its TLS certificate from the mesh
CA (issued once, kept, sealed key), every node's runtime trusting the CA for it, and every
pulling node allowed to its port by the firewall. Pure resolutions and the real issuer; the
two-namespace test (test_registry_tls_netns.py) shows the same on real dockerds.
"""

from __future__ import annotations

import json

import attrs
import pytest
from cryptography import x509
from hypothesis import HealthCheck, given, settings, strategies as st
from nacl.public import PrivateKey

import resolver
from resolver import load_inputs, documents
from resolver.documents import unstructure
from resolver.certificates import tls_credential

from executors.common.keys import unseal
from executors.control.ca import init_ca, verify_node_certificate
from executors.control.issuer import IssueError, issue, renew, rotate

PROVISIONS = """\
artifact-store:
  scope: node
  grant: none
  keys: [host, port, url]
  url: "https://{host}:{port}"
"""
REGISTRY = """\
name: registry
artifacts:
  server: {repository: example.org/registry, tag: "2", mirror: false}
listens:
  http: {port: 5000}
provides:
  - {provision: artifact-store, listen: http}
containers:
  - name: registry
    artifact: server
"""
APP = """\
name: app
artifacts:
  image: {repository: example.org/app, tag: "1"}
containers:
  - name: main
    artifact: image
"""
PINS = ("version: 1\npins:\n  example.org/registry:2: sha256:" + "1" * 64 + "\n"
        "  example.org/app:1: sha256:" + "2" * 64 + "\n")


def mesh_text(addresses: list[str], keys: list[str], registry_on: int, apps=(),
              with_registry=True) -> str:
    nodes = "".join(f"  n{i}:\n    address: {a}\n    public-key: {k}\n"
                    + ("    control: true\n" if i == 0 else "")
                    for i, (a, k) in enumerate(zip(addresses, keys)))
    instances = "".join(f"  app{i}:\n    module: app\n    node: n{i}\n" for i in apps)
    if with_registry:
        instances += f"  registry:\n    module: registry\n    node: n{registry_on}\n"
    return f"mesh: m\nnodes:\n{nodes}instances:\n{instances or '  {}'}\n"


def load(text: str, ledger: str = PINS):
    return load_inputs({"mesh": (text, "mesh.yaml"), "provisions": (PROVISIONS, "provisions.yaml"),
                        "ledger": (ledger, "ledger.yaml"),
                        "module:registry": (REGISTRY, "registry/module.yaml"),
                        "module:app": (APP, "app/module.yaml")})


def resolve(inputs, ledger=None, now=None):
    return resolver.resolve(inputs.catalogue, inputs.mesh, ledger or inputs.ledger,
                            sources=inputs.sources, now=now)


@pytest.fixture(scope="module")
def keys():
    return [PrivateKey.generate() for _ in range(4)]


def public(key: PrivateKey) -> str:
    import base64
    return base64.b64encode(bytes(key.public_key)).decode()


@pytest.fixture(scope="module")
def ca(tmp_path_factory, keys):
    directory = tmp_path_factory.mktemp("ca")
    inputs = load(mesh_text(["10.0.0.1"], [public(keys[0])], 0))
    return init_ca(directory, inputs.mesh)


def issued(inputs, ca, control_key=None):
    resolution = resolve(inputs)
    ledger = issue(list(resolution.requests), inputs.mesh, resolution.ledger, ca=ca,
                   now="2026-01-01T00:00:00Z", control_key=control_key)
    return ledger, resolve(inputs, ledger)


def test_the_registry_certificate_is_issued_once_sealed_to_its_node(keys, ca):
    inputs = load(mesh_text(["10.0.0.1", "10.0.0.2"], [public(k) for k in keys[:2]], 1, apps=[0]))
    first = resolve(inputs)
    assert [(r.kind, r.id, list(r.holders)) for r in first.requests
            if r.kind == "tls-certificate"] == [("tls-certificate", "registry", ["n1"])]
    ledger, again = issued(inputs, ca)
    assert [r for r in again.requests if r.kind == "tls-certificate"] == []  # a fixed point
    certificate = ledger.tls["registry"]
    parsed = verify_node_certificate(ca.certificate, certificate.pem)  # signed by the mesh CA
    names = parsed.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(a) for a in names.get_values_for_type(x509.IPAddress)] == ["10.0.0.2"]
    credential = ledger.credentials[tls_credential("registry")]
    assert set(credential.active.sealed) == {"n1"}  # the registry's node alone
    key_pem = unseal(keys[1], credential.active.sealed["n1"])
    assert "PRIVATE KEY" in key_pem
    # issuing again issues nothing: the same certificate, the same sealed key
    assert issue(list(again.requests), inputs.mesh, ledger, ca=ca,
                 now="2026-01-01T00:00:00Z") == ledger
    # nowhere in plaintext: not the ledger, not a declaration
    text = documents.dump_ledger(ledger)
    assert "PRIVATE KEY" not in text and key_pem.splitlines()[1] not in text
    for declaration in again.declarations.values():
        assert "PRIVATE KEY" not in json.dumps(unstructure(declaration))
    # the registry serves with it: files on its node, mounted into its container
    n1 = again.declarations["n1"]
    files = {f.path: f for f in n1.files}
    assert files["/etc/mesh/tls/registry/server.crt"].content == certificate.pem
    key_file = files["/etc/mesh/tls/registry/server.key"]
    assert key_file.content == "${secret:tls/registry}" and key_file.mode == "0600"
    assert key_file.secret.generation == credential.active.generation
    (container,) = n1.containers
    assert [(m.kind, m.source, m.target, m.read_only) for m in container.mounts] == [
        ("tls", "/etc/mesh/tls/registry", "/etc/mesh/tls", True),
        ("auth", "/etc/mesh/auth/registry", "/etc/mesh/auth", True)]
    assert container.labels["mesh.tls-serial"] == certificate.serial
    # a TLS key is not rotated apart from its certificate
    with pytest.raises(IssueError, match="TLS key"):
        rotate(ledger, [tls_credential("registry")], inputs.mesh)


def test_the_certificate_follows_the_node_address_and_a_move(keys, ca):
    addresses = ["10.0.0.1", "10.0.0.2"]
    inputs = load(mesh_text(addresses, [public(k) for k in keys[:2]], 1))
    ledger, _ = issued(inputs, ca)
    ledger_text = documents.dump_ledger(ledger)
    moved = load(mesh_text(["10.0.0.1", "10.0.0.9"], [public(k) for k in keys[:2]], 1),
                 ledger_text)
    (request,) = [r for r in resolve(moved).requests if r.kind == "tls-certificate"]
    assert "address changed from 10.0.0.2 to 10.0.0.9" in request.reason
    elsewhere = load(mesh_text(addresses, [public(k) for k in keys[:2]], 0), ledger_text)
    (request,) = [r for r in resolve(elsewhere).requests if r.kind == "tls-certificate"]
    assert list(request.holders) == ["n0"]
    renewed, _ = issued(elsewhere, ca, control_key=keys[0])  # the accounts re-sealed too
    credential = renewed.credentials[tls_credential("registry")]
    assert set(credential.active.sealed) == {"n0"} and credential.active.generation == 2
    assert list(credential.retired) == [1]
    # inside the renewal window it is requested again, never before
    kept = load(mesh_text(addresses, [public(k) for k in keys[:2]], 1), ledger_text)
    not_after = ledger.tls["registry"].not_after
    assert not [r for r in resolve(kept, now="2026-01-02T00:00:00Z").requests
                if r.kind == "tls-certificate"]
    assert [r.id for r in resolve(kept, now=not_after).requests
            if r.kind == "tls-certificate"] == ["registry"]


def test_mesh_renew_re_signs_the_registry_certificate_with_a_new_key(keys, ca):
    from cryptography.hazmat.primitives import serialization

    inputs = load(mesh_text(["10.0.0.1", "10.0.0.2"], [public(k) for k in keys[:2]], 1, apps=[0]))
    ledger, before = issued(inputs, ca)
    # renewing the other node leaves the registry's certificate and key alone
    assert renew(ledger, inputs.mesh, ca, "n0").tls == ledger.tls
    notes: list = []
    renewed = renew(ledger, inputs.mesh, ca, "n1", notes)
    old, new = ledger.tls["registry"], renewed.tls["registry"]
    assert new.serial != old.serial and new.address == old.address
    assert renewed.certificates["n1"].serial != ledger.certificates["n1"].serial
    verify_node_certificate(ca.certificate, new.pem)
    credential = renewed.credentials[tls_credential("registry")]
    assert credential.active.generation == 2 and list(credential.retired) == [1]
    assert set(credential.active.sealed) == {"n1"}
    key_pem = unseal(keys[1], credential.active.sealed["n1"])
    served = x509.load_pem_x509_certificate(new.pem.encode()).public_key()
    key = serialization.load_pem_private_key(key_pem.encode(), password=None)
    assert key.public_key().public_numbers() == served.public_numbers()  # the pair matches
    assert key_pem != unseal(keys[1], ledger.credentials[tls_credential("registry")]
                             .active.sealed["n1"])  # a new key, not the old one re-signed
    assert any("renewed by mesh renew" in note for note in notes)
    # the registry's node declares the new pair and its container is recreated for it;
    # the other node's declaration (trust in the CA, not the certificate) is unchanged
    after = resolve(inputs, renewed)
    n1 = after.declarations["n1"]
    files = {f.path: f for f in n1.files}
    assert files["/etc/mesh/tls/registry/server.crt"].content == new.pem
    assert files["/etc/mesh/tls/registry/server.key"].secret.generation == 2
    assert n1.containers[0].labels["mesh.tls-serial"] == new.serial
    assert after.declarations["n0"].files == before.declarations["n0"].files
    assert not [r for r in after.requests if r.kind == "tls-certificate"]  # kept from now on


def test_no_registry_no_trust_no_opening(keys, ca):
    inputs = load(mesh_text(["10.0.0.1", "10.0.0.2"], [public(k) for k in keys[:2]], 1,
                            apps=[0], with_registry=False))
    ledger, resolution = issued(inputs, ca)
    assert ledger.ca  # recorded all the same, for when a registry comes
    for declaration in resolution.declarations.values():
        assert not declaration.files and not declaration.firewall.allow


addresses = st.lists(st.integers(1, 250), min_size=1, max_size=4, unique=True)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(hosts=addresses, data=st.data())
def test_every_pulling_node_may_reach_the_registry_and_trusts_the_mesh_ca(keys, ca, hosts, data):
    """Whatever the nodes and wherever the registry runs: its node allows each other node's
    address to the registry's port (and nothing else), and every node, its own included,
    declares the trust file of exactly that host:port holding the mesh CA's certificate."""
    count = len(hosts)
    on = data.draw(st.integers(0, count - 1))
    apps = data.draw(st.lists(st.integers(0, count - 1), unique=True))
    node_addresses = [f"10.1.0.{h}" for h in hosts]
    inputs = load(mesh_text(node_addresses, [public(k) for k in keys[:count]], on, apps=apps))
    ledger, resolution = issued(inputs, ca)
    registry_node = resolution.declarations[f"n{on}"]
    port = next(c for c in registry_node.containers if c.instance == "registry").ports[0].host_port
    address = f"{node_addresses[on]}:{port}"
    allowed = {(a.port, s) for a in registry_node.firewall.allow for s in a.sources}
    assert allowed == {(port, a) for i, a in enumerate(node_addresses) if i != on}
    for name, declaration in resolution.declarations.items():
        trust = [f for f in declaration.files if f.path.startswith("/etc/docker/certs.d/")]
        assert [(f.path, f.content) for f in trust] == [
            (f"/etc/docker/certs.d/{address}/ca.crt", ledger.ca)]
        if name != f"n{on}":
            assert not declaration.firewall.allow  # pulling opens nothing on the puller
    for i in apps:  # mirrored, each app names the registry by that same host:port
        mirrored = attrs.evolve(ledger, mirrored=ledger.mirrored.set("sha256:" + "2" * 64,
                                                                     address))
        image = next(c.image for c in resolve(inputs, mirrored).declarations[f"n{i}"].containers
                     if c.instance == f"app{i}")
        assert image == f"{address}/app@sha256:" + "2" * 64


def test_each_node_pulls_with_its_own_account_and_the_control_node_pushes(keys, ca):
    inputs = load(mesh_text(["10.0.0.1", "10.0.0.2", "10.0.0.3"], [public(k) for k in keys[:3]],
                            1, apps=[0, 2]))
    ledger, resolution = issued(inputs, ca)
    for node in ("n0", "n1", "n2"):
        credential = ledger.credentials[f"registry-pull/registry/{node}"]
        assert set(credential.active.sealed) == {"n1", node}  # the registry's node, its own
        (login,) = resolution.declarations[node].registry_logins
        assert (login.user, login.secret.credential) == (f"node-{node}_a",
                                                         f"registry-pull/registry/{node}")
    push = ledger.credentials["registry-push/registry/control"]
    assert set(push.active.sealed) == {"n0", "n1"}  # the control node n0 and the registry's
    grants = resolution.declarations["n1"].grants
    assert sorted((g.kind, g.login, g.resource, g.slot) for g in grants) == [
        ("registry+account", "mesh-push", "push", "a"),
        ("registry+account", "node-n0", "pull", "a"),
        ("registry+account", "node-n1", "pull", "a"), ("registry+account", "node-n2", "pull", "a")]
    assert all(not resolution.declarations[n].grants for n in ("n0", "n2"))
    registry_container = resolution.declarations["n1"].containers[0]
    assert ("auth", "/etc/mesh/auth/registry", "/etc/mesh/auth", True) in [
        (m.kind, m.source, m.target, m.read_only) for m in registry_container.mounts]
    # a rotated pull account: the registry is given the new generation first, in the idle
    # slot's entry, beside the one n2 keeps using until the registry applied it
    rotated = rotate(ledger, ["registry-pull/registry/n2"], inputs.mesh)
    after = resolve(inputs, rotated)
    grant = next(g for g in after.declarations["n1"].grants if g.login == "node-n2")
    assert (grant.credential.generation, grant.slot) == (2, "b")
    assert (grant.retiring.generation, grant.retiring_slot) == (1, "a")
    (login,) = after.declarations["n2"].registry_logins
    assert (login.user, login.secret.generation) == ("node-n2_a", 1)
