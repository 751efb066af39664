"""TLS for bindings as the resolver and the issuer see it: a provider whose listen says
`tls: true` gets a server certificate from the mesh CA through the one mechanism the registry
uses (issued once, kept, renewed, issued anew on a move), its key file owned by the user its
artifact names; a consumer on another node is told values that require and verify TLS and gets
the CA mounted; a same-node consumer stays plain only when the listen says so; a listen whose
image cannot serve TLS is refused at its line. Pure resolutions and the real issuer; the
two-namespace test (test_postgres_tls_netns.py) shows the same with real servers.
"""

from __future__ import annotations

import base64

import attrs
import pytest
from nacl.public import PrivateKey
from ruamel.yaml import YAML

import resolver
from resolver import InputError, load_inputs
from resolver.certificates import tls_credential

from executors.control.ca import init_ca
from executors.control.issuer import issue, renew

REPO_CATALOGUE = __import__("pathlib").Path(__file__).resolve().parent.parent / "catalogue"
PROVISIONS = (REPO_CATALOGUE / "provisions.yaml").read_text()
POSTGRES = """\
name: postgres
artifacts:
  server: {{repository: example.org/postgres, tag: "16", tls: {tls}, tls-key-owner: "999:999"}}
listens:
  pg: {{port: 5432, tls: true{plain}}}
provides:
  - {{provision: postgres-database, listen: pg}}
containers:
  - name: server
    artifact: server
"""
APP = """\
name: app
artifacts:
  image: {repository: example.org/app, tag: "1"}
requires:
  - {as: db, provision: postgres-database}
containers:
  - name: main
    artifact: image
    env:
      SSLMODE: "${db.sslmode}"
      URL: "${db.url}"
"""
PINS = ("version: 1\npins:\n  example.org/postgres:16: sha256:" + "1" * 64 + "\n"
        "  example.org/app:1: sha256:" + "2" * 64 + "\n")
KEYS = [PrivateKey.generate() for _ in range(3)]


def public(key: PrivateKey) -> str:
    return base64.b64encode(bytes(key.public_key)).decode()


def mesh_text(postgres_on: int, apps: dict[str, int]) -> str:
    nodes = "".join(f"  n{i}:\n    address: 10.0.0.{i + 1}\n    public-key: {public(k)}\n"
                    + ("    control: true\n" if i == 0 else "") for i, k in enumerate(KEYS))
    instances = f"  pg:\n    module: postgres\n    node: n{postgres_on}\n" + "".join(
        f"  {name}:\n    module: app\n    node: n{node}\n" for name, node in apps.items())
    return f"mesh: m\nnodes:\n{nodes}instances:\n{instances}"


def load(text: str, ledger: str = PINS, *, plain_same_node: bool = False, tls: bool = True):
    postgres = POSTGRES.format(tls="true" if tls else "false",
                               plain=", plain-same-node: true" if plain_same_node else "")
    return load_inputs({"mesh": (text, "mesh.yaml"),
                        "provisions": (PROVISIONS, "provisions.yaml"),
                        "ledger": (ledger, "ledger.yaml"),
                        "module:postgres": (postgres, "postgres/module.yaml"),
                        "module:app": (APP, "app/module.yaml")})


def resolve(inputs, ledger=None, now=None):
    return resolver.resolve(inputs.catalogue, inputs.mesh, ledger or inputs.ledger,
                            sources=inputs.sources, now=now)


@pytest.fixture(scope="module")
def ca(tmp_path_factory):
    return init_ca(tmp_path_factory.mktemp("ca"), load(mesh_text(0, {})).mesh)


def issued(inputs, ca, ledger=None):
    resolution = resolve(inputs, ledger)
    ledger = issue(list(resolution.requests), inputs.mesh, resolution.ledger, ca=ca,
                   now="2026-01-01T00:00:00Z", control_key=KEYS[0])  # n0: the control node
    return ledger, resolve(inputs, ledger)


def binding_of(resolution, consumer: str):
    node = next(d for d in resolution.declarations.values() if consumer in d.instances)
    (binding,) = [b for b in node.bindings if b.consumer == consumer]
    return node, binding


def test_a_cross_node_consumer_verifies_the_provider_against_the_mesh_ca(ca):
    inputs = load(mesh_text(0, {"far": 1}))
    first = resolve(inputs)
    assert [(r.id, list(r.holders)) for r in first.requests if r.kind == "tls-certificate"] \
        == [("pg", ["n0"])]
    ledger, resolution = issued(inputs, ca)
    assert [r for r in resolution.requests if r.kind == "tls-certificate"] == []  # kept
    node, binding = binding_of(resolution, "far")
    values = dict(binding.values)
    assert values["sslmode"] == "verify-full" and values["sslrootcert"] == "/etc/mesh/ca.crt"
    assert values["url"] == (f"postgres://{values['user']}@10.0.0.1:{values['port']}/"
                             f"{values['database']}?sslmode=verify-full"
                             "&sslrootcert=/etc/mesh/ca.crt&channel_binding=disable")
    assert values["channel_binding"] == "disable"  # undefined for the CA's Ed25519
    (main,) = node.containers
    assert main.env["SSLMODE"] == "verify-full" and main.env["URL"] == values["url"]
    assert [(m.kind, m.source, m.target, m.read_only) for m in main.mounts] == [
        ("ca", "/etc/mesh/ca/ca.crt", "/etc/mesh/ca.crt", True)]
    assert [(f.path, f.content) for f in node.files] == [("/etc/mesh/ca/ca.crt", ledger.ca)]
    # the provider serves with its certificate for its node's address, key 0600 owned 999:999
    provider = resolution.declarations["n0"]
    (server,) = provider.containers
    certificate = ledger.tls["pg"]
    assert certificate.address == "10.0.0.1"
    assert server.labels["mesh.tls-serial"] == certificate.serial
    assert ("tls", "/etc/mesh/tls/pg", "/etc/mesh/tls", True) in [
        (m.kind, m.source, m.target, m.read_only) for m in server.mounts]
    files = {f.path: f for f in provider.files}
    key = files["/etc/mesh/tls/pg/server.key"]
    assert (key.mode, key.owner, key.content) == ("0600", "999:999",
                                                  f"${{secret:{tls_credential('pg')}}}")
    assert files["/etc/mesh/tls/pg/server.crt"].content == certificate.pem
    assert "PRIVATE KEY" not in repr(resolution.declarations)


def test_a_new_ca_recreates_a_tls_consumer_as_it_does_a_ca_mount(ca, tmp_path):
    """One rule for the CA a container mounts (resolver/_binding_files.with_ca_at): a TLS
    consumer's CA mount is labelled with the CA's fingerprint as a `ca: true` mount is, so a new
    mesh CA changes its container (recreated) and nothing else of it."""
    inputs = load(mesh_text(0, {"far": 1}))
    ledger, resolution = issued(inputs, ca)
    node, _ = binding_of(resolution, "far")
    (main,) = node.containers
    label = main.labels["mesh.ca"]
    assert label.startswith("sha256:") and label != "none"
    from cryptography.hazmat.primitives import serialization

    other = init_ca(tmp_path / "other", inputs.mesh)  # a new CA (e.g. after a compromise)
    pem = other.certificate.public_bytes(serialization.Encoding.PEM).decode("ascii")
    assert pem != ledger.ca
    with_other = attrs.evolve(ledger, ca=pem)
    node_after, _ = binding_of(resolve(inputs, with_other), "far")
    (after,) = node_after.containers
    assert after.labels["mesh.ca"] != label
    assert attrs.evolve(after, labels=after.labels.set("mesh.ca", label)) == main


def test_a_same_node_consumer_is_plain_only_when_the_listen_says_so(ca):
    for plain_same_node in (False, True):
        inputs = load(mesh_text(0, {"near": 0, "far": 1}), plain_same_node=plain_same_node)
        _, resolution = issued(inputs, ca)
        node, near = binding_of(resolution, "near")
        _, far = binding_of(resolution, "far")
        assert dict(far.values)["sslmode"] == "verify-full"
        container = next(c for c in node.containers if c.instance == "near")
        if plain_same_node:  # told exactly what a binding was told before TLS existed
            assert set(near.values) == {"host", "port", "database", "user", "password", "url"}
            assert "?" not in near.values["url"]
            assert container.env["SSLMODE"] == ""
            assert [m for m in container.mounts if m.kind == "ca"] == []
        else:
            assert dict(near.values)["sslmode"] == "verify-full"
            assert [m.kind for m in container.mounts] == ["ca"]


def test_a_move_issues_a_new_certificate_and_renew_signs_anew(ca):
    inputs = load(mesh_text(0, {"far": 1}))
    ledger, _ = issued(inputs, ca)
    moved = load(mesh_text(2, {"far": 1}))
    reasons = [r.reason for r in resolve(moved, ledger).requests if r.kind == "tls-certificate"]
    assert reasons == ["server certificate of pg: its node's address changed from 10.0.0.1 "
                       "to 10.0.0.3"]
    after, resolution = issued(moved, ca, ledger)
    assert after.tls["pg"].address == "10.0.0.3"
    assert set(after.credentials[tls_credential("pg")].active.sealed) == {"n2"}
    _, binding = binding_of(resolution, "far")
    assert binding.values["host"] == "10.0.0.3"
    renewed = renew(after, moved.mesh, ca, "n2")
    assert renewed.tls["pg"].serial != after.tls["pg"].serial


def test_a_listen_whose_image_cannot_serve_tls_is_refused_at_its_line():
    with pytest.raises(InputError) as caught:
        load(mesh_text(0, {"far": 1}), tls=False)
    (fault,) = [f for f in caught.value.faults if "TLS" in f.message]
    assert fault.file.endswith("postgres/module.yaml") and fault.line == 5, fault
    assert "artifact 'server'" in fault.message and "does not serve TLS" in fault.message


def test_the_catalogue_postgres_serves_tls_with_its_certificate():
    yaml = YAML(typ="safe")
    postgres = yaml.load((REPO_CATALOGUE / "postgres" / "module.yaml").read_text())
    assert postgres["listens"]["postgres"]["tls"] is True
    assert postgres["artifacts"]["postgres"]["tls"] is True
    assert postgres["artifacts"]["postgres"]["tls-key-owner"] == "999:999"
    server = next(c for c in postgres["containers"] if c["name"] == "server")
    assert server["command"] == ["postgres", "-c", "ssl=on",
                                 "-c", "ssl_cert_file=/etc/mesh/tls/server.crt",
                                 "-c", "ssl_key_file=/etc/mesh/tls/server.key"]
    provisions = yaml.load(PROVISIONS)
    assert provisions["postgres-database"]["tls"]["values"] == {
        "sslmode": "verify-full", "sslrootcert": "{ca}", "channel_binding": "disable"}
    assert provisions["amqp"]["tls"]["url"].startswith("amqps://")
