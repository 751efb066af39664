"""Binding values and the mesh CA mounted as files (module `mounts:` with `binding:` / `ca:`):
what the declaration carries, when a container is recreated, and the refusals with file:line."""

from __future__ import annotations

import json

import attrs
import pytest
import yaml
from nacl.public import PrivateKey

import resolver
from resolver import InputError, load_inputs
from resolver.rendering import secret_token
from resolver.rotation import record_applied

from executors.control.issuer import issue, rotate

PROVISIONS = """\
postgres-database:
  scope: node
  grant: database+login
  keys: [host, port, database, user, password, url]
  url: "postgres://{user}@{host}:{port}/{database}"
"""
POSTGRES = """\
name: postgres
artifacts:
  server: {repository: example.org/postgres, tag: "16"}
listens:
  postgres: {port: 5432}
provides:
  - {provision: postgres-database, listen: postgres}
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
  - {as: cache, module: postgres, provider: nowhere, optional: true}
state:
  data: {path: app/data}
containers:
  - name: web
    artifact: image
    mounts:
      - {state: data, target: /var/lib/app}
      - {binding: db, target: /etc/app/db.env}
      - {binding: db, target: /etc/app/db.json, format: json}
      - {ca: true, target: /etc/ssl/mesh-ca.crt}
  - name: worker
    artifact: image
    mounts:
      - {binding: db, target: /config/db.yaml, format: yaml}
      - {binding: cache, target: /config/cache.json, format: json}
  - name: plain
    artifact: image
"""
CA_PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
LEDGER = ("version: 1\npins:\n"
          "  example.org/postgres:16: sha256:" + "1" * 64 + "\n"
          "  example.org/app:1: sha256:" + "2" * 64 + "\n")
LEDGER_WITH_CA = LEDGER + "ca: |\n" + "".join(f"  {line}\n" for line in CA_PEM.splitlines())
KEYS = [PrivateKey.generate() for _ in range(2)]


def _public(key: PrivateKey) -> str:
    import base64
    return base64.b64encode(bytes(key.public_key)).decode()


def mesh_text(db_on: str = "n0") -> str:
    return ("mesh: m\nnodes:\n"
            f"  n0:\n    address: 10.0.0.1\n    public-key: {_public(KEYS[0])}\n    control: true\n"
            f"  n1:\n    address: 10.0.0.2\n    public-key: {_public(KEYS[1])}\n"
            "instances:\n"
            f"  db:\n    module: postgres\n    node: {db_on}\n"
            "  app:\n    module: app\n    node: n1\n")


def load(mesh: str, app: str = APP, ledger: str = LEDGER_WITH_CA):
    return load_inputs({"mesh": (mesh, "mesh.yaml"),
                        "provisions": (PROVISIONS, "provisions.yaml"),
                        "ledger": (ledger, "ledger.yaml"),
                        "module:postgres": (POSTGRES, "postgres/module.yaml"),
                        "module:app": (app, "app/module.yaml")})


def resolve(inputs, ledger=None):
    return resolver.resolve(inputs.catalogue, inputs.mesh, ledger or inputs.ledger,
                            sources=inputs.sources)


def issued(inputs):
    """(the ledger with every credential issued, the resolution with it)."""
    first = resolve(inputs)
    ledger = issue(list(first.requests), inputs.mesh, first.ledger)
    return ledger, resolve(inputs, ledger)


def containers(resolution, node="n1"):
    return {c.container: c for c in resolution.declarations[node].containers}


def files(resolution, node="n1"):
    return {f.path: f for f in resolution.declarations[node].files}


def test_a_binding_mount_is_a_declared_file_of_the_values_with_the_password_as_a_token():
    ledger, resolution = issued(load(mesh_text()))
    web = containers(resolution)["web"]
    by_target = {m.target: m for m in web.mounts}
    env_mount, json_mount = by_target["/etc/app/db.env"], by_target["/etc/app/db.json"]
    assert (env_mount.kind, env_mount.source, env_mount.read_only) == \
        ("binding", "/etc/mesh/bindings/app/db.env", True)
    assert json_mount.source == "/etc/mesh/bindings/app/db.json"
    binding = next(b for b in resolution.declarations["n1"].bindings if b.requirement == "db")
    assert binding.secret is not None and binding.secret in web.secrets
    held = files(resolution)
    env_file = held["/etc/mesh/bindings/app/db.env"]
    assert env_file.mode == "0444" and env_file.secret == binding.secret
    lines = dict(line.split("=", 1) for line in env_file.content.splitlines())
    assert lines == dict(binding.values)
    assert lines["password"] == secret_token(binding.secret.credential)
    assert lines["host"] == "10.0.0.1"
    assert json.loads(held["/etc/mesh/bindings/app/db.json"].content) == dict(binding.values)
    assert yaml.safe_load(held["/etc/mesh/bindings/app/db.yaml"].content) == dict(binding.values)
    # an optional requirement left unbound: the file is there, with no values
    assert json.loads(held["/etc/mesh/bindings/app/cache.json"].content) == {}
    # no value anywhere in the declaration: only the token
    assert "mesh.binding-files" in web.labels
    assert "mesh.binding-files" not in containers(resolution)["plain"].labels


def test_the_ca_mount_is_the_nodes_one_ca_file_read_only_and_labelled():
    _, resolution = issued(load(mesh_text()))
    web = containers(resolution)["web"]
    ca = next(m for m in web.mounts if m.kind == "ca")
    assert (ca.source, ca.target, ca.read_only) == \
        ("/etc/mesh/ca/ca.crt", "/etc/ssl/mesh-ca.crt", True)
    ca_file = files(resolution)["/etc/mesh/ca/ca.crt"]
    assert ca_file.content == CA_PEM and ca_file.secret is None and ca_file.mode == "0644"
    assert web.labels["mesh.ca"].startswith("sha256:")
    assert "/etc/mesh/ca/ca.crt" not in files(resolution, "n0")  # nothing there mounts it


def test_a_rotation_changes_exactly_the_containers_that_mount_the_binding():
    inputs = load(mesh_text())
    ledger, before = issued(inputs)
    binding = next(b for b in before.declarations["n1"].bindings if b.requirement == "db")
    rotated = rotate(ledger, [binding.secret.credential], inputs.mesh)
    granting = resolve(inputs, rotated)  # the provider puts it in force first
    assert containers(granting) == containers(before)
    in_force = record_applied(granting.ledger, "n0", granting.declarations["n0"])
    after = resolve(inputs, in_force)
    old, new = containers(before), containers(after)
    for name in ("web", "worker"):
        assert old[name].labels["mesh.binding-files"] != new[name].labels["mesh.binding-files"]
        assert {s.generation for s in new[name].secrets} == {2}
    assert old["plain"] == new["plain"]
    changes = {c.container.rsplit("-", 1)[1]: c for c in resolver.container_changes(
        before.declarations, after.declarations)}
    assert set(changes) == {"web", "worker"}
    assert all(c.action == "recreate" for c in changes.values())
    assert f"secret {binding.secret.credential} generation 1 → 2" in changes["web"].causes


def test_a_provider_move_rewrites_the_file_with_the_new_host_and_recreates():
    inputs = load(mesh_text("n0"))
    ledger, before = issued(inputs)
    moved = load(mesh_text("n1"))
    after = resolve(moved, issue(list(resolve(moved, ledger).requests), moved.mesh,
                                 resolve(moved, ledger).ledger))
    old = files(before)["/etc/mesh/bindings/app/db.env"]
    new = files(after)["/etc/mesh/bindings/app/db.env"]
    assert "host=10.0.0.1" in old.content and "host=10.0.0.2" in new.content
    assert containers(before)["web"].labels["mesh.binding-files"] != \
        containers(after)["web"].labels["mesh.binding-files"]


def test_resolving_again_changes_nothing():
    inputs = load(mesh_text())
    ledger, first = issued(inputs)
    again = resolve(inputs, first.ledger)
    assert again.declarations == first.declarations


def _fault(app: str) -> str:
    with pytest.raises(InputError) as error:
        load(mesh_text(), app)
    return str(error.value)


def test_a_binding_mount_naming_no_requirement_is_refused_at_its_line():
    app = APP.replace("{binding: db, target: /etc/app/db.env}",
                      "{binding: dbb, target: /etc/app/db.env}")
    message = _fault(app)
    assert "app/module.yaml:14:" in message and "dbb" in message, message
    assert "requirements" in message


def test_a_binding_file_over_or_inside_a_state_mount_is_refused_at_its_line():
    inside = APP.replace("{binding: db, target: /etc/app/db.env}",
                         "{binding: db, target: /var/lib/app/db.env}")
    message = _fault(inside)
    assert "app/module.yaml:14:" in message and "inside the state mount" in message, message
    over = APP.replace("{binding: db, target: /etc/app/db.env}",
                       "{binding: db, target: /var/lib}")
    message = _fault(over)
    assert "app/module.yaml:14:" in message and "over the state mount" in message, message
    same = APP.replace("{ca: true, target: /etc/ssl/mesh-ca.crt}",
                       "{ca: true, target: /etc/app/db.env}")
    message = _fault(same)
    assert "the mesh CA" in message and "same target" in message, message


def test_format_without_binding_and_an_unknown_format_are_refused():
    message = _fault(APP.replace("{ca: true, target: /etc/ssl/mesh-ca.crt}",
                                 "{ca: true, target: /etc/ssl/mesh-ca.crt, format: json}"))
    assert "format is given without binding" in message, message
    message = _fault(APP.replace("format: json}", "format: toml}", 1))
    assert "'toml' is not allowed" in message, message


def test_two_sources_in_one_mount_are_refused():
    message = _fault(APP.replace("{ca: true, target: /etc/ssl/mesh-ca.crt}",
                                 "{ca: true, binding: db, target: /etc/ssl/mesh-ca.crt}"))
    assert "names binding and ca" in message, message


def test_no_mesh_ca_is_stated_at_the_mount_and_the_file_is_not_declared():
    inputs = load(mesh_text(), ledger=LEDGER)
    resolution = resolve(inputs)
    problem = next(p for p in resolution.problems if p.code == "no-mesh-ca")
    assert problem.severity == "error" and problem.instance == "app"
    assert list(problem.blocks) == []  # its credentials are still requested (plan --issue)
    assert problem.where.startswith("app/module.yaml:16:"), problem.where
    assert "mesh ca init" in problem.message
    assert any(r.id == "postgres-database/db/app" for r in resolution.requests)
    web = containers(resolution)["web"]
    assert any(m.kind == "ca" for m in web.mounts) and web.labels["mesh.ca"] == "none"
    assert "/etc/mesh/ca/ca.crt" not in files(resolution)
    with_ca = resolve(inputs, attrs.evolve(resolution.ledger, ca=CA_PEM))
    assert not [p for p in with_ca.problems if p.code == "no-mesh-ca"]
    assert containers(with_ca)["web"].labels["mesh.ca"] != "none"


def test_a_node_refuses_a_container_mounting_a_file_its_declaration_does_not_hold(tmp_path):
    from executors.node.apply.render import render
    from executors.node.node_paths import NodePaths

    resolution = resolve(load(mesh_text(), ledger=LEDGER))
    rendered = render(resolution.declarations["n1"], NodePaths(tmp_path / "state",
                                                               tmp_path / "files"))
    refused = [r for r in rendered.desired.refusals if "/etc/mesh/ca/ca.crt" in r.message]
    assert refused and "m-app-web" in refused[0].subject, rendered.desired.refusals


def test_held_instance_keeps_its_binding_files():
    inputs = load(mesh_text())
    ledger, first = issued(inputs)
    recorded = resolver.rendering.record_declared(first)
    broken = load(mesh_text().replace("module: app", "module: app\n    parts: [nope]"))
    held = resolve(broken, recorded)
    assert any(p.code == "held" for p in held.problems)
    assert files(held)["/etc/mesh/bindings/app/db.env"] == \
        files(first)["/etc/mesh/bindings/app/db.env"]
    assert containers(held)["web"] == containers(first)["web"]


def test_an_owner_makes_the_file_0400_its_users_and_two_owners_of_one_file_are_refused():
    app = APP.replace("{binding: db, target: /etc/app/db.json, format: json}",
                      '{binding: db, target: /etc/app/db.json, format: json, owner: "70:70"}')
    _, resolution = issued(load(mesh_text(), app))
    owned = files(resolution)["/etc/mesh/bindings/app/db.json"]
    assert (owned.mode, owned.owner) == ("0400", "70:70")
    assert files(resolution)["/etc/mesh/bindings/app/db.env"].owner is None
    twice = app.replace("{binding: db, target: /config/db.yaml, format: yaml}",
                        "{binding: db, target: /config/db.json, format: json}")
    message = _fault(twice)
    assert "app/module.yaml:20:" in message and "it is one file" in message, message
    message = _fault(APP.replace("{ca: true, target: /etc/ssl/mesh-ca.crt}",
                                 '{ca: true, target: /etc/ssl/mesh-ca.crt, owner: "1:1"}'))
    assert "owner is given without binding" in message, message

