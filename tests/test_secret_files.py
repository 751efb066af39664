"""Secrets as files, as the resolver reads and renders them (docs/schema.md, `secret-files`).

A container's `secret-files:` entry becomes a file in its declaration (path in /run/secrets,
content a `${secret:…}` token, mode 0400, the owner the module names), the variable it names
holds the path, and the container refers to the credential as an env secret does, so a new
generation changes its declaration. What is wrong is refused by `mesh check` with one line at
the key: a path outside the container's secret directory, a mount over that directory, a
variable set twice, an owner that is not uid:gid, a placeholder that names nothing.
"""

from __future__ import annotations

import json

import attrs
import pytest
from pyrsistent import pvector

import resolver
from executors.control.loading import load_mesh_dir

from test_bad_input import FAULT_LINE, LEDGER, MESH, PROVISIONS, check, meshdir

WEB_FILES = """\
name: web
artifacts:
  web: {repository: mesh-test/busybox, tag: "1"}
listens:
  http: {port: 8080}
secrets: [api-key]
state:
  data: {path: web/data, owner: "1000:1000"}
containers:
  - name: web
    artifact: web
    env:
      GREETING: hello
    secret-files:
      - path: /run/secrets/api-key
        content: "key=${self.api-key.password}"
        env: API_KEY_FILE
        owner: "1000:1000"
      - path: /run/secrets/plain
        content: "${self.instance} on ${self.node}"
    mounts:
      - {state: data, target: /data}
"""


def _resolve(directory):
    inputs = load_mesh_dir(directory)
    return resolver.resolve(inputs.catalogue, inputs.mesh, inputs.ledger,
                            sources=inputs.sources)


def test_a_secret_file_is_declared_with_a_token_and_its_variable_names_the_path(tmp_path):
    directory = meshdir(tmp_path, catalogue__web__module_yaml=WEB_FILES)
    code, lines, out = check(directory)
    assert code == 0, lines
    (declaration,) = _resolve(directory).declarations.values()
    (container,) = declaration.containers
    assert dict(container.env) == {"GREETING": "hello", "API_KEY_FILE": "/run/secrets/api-key"}
    files = {f.path: f for f in container.secret_files}
    key = files["/run/secrets/api-key"]
    assert key.content == "key=${secret:secret/web@anchor/api-key}"
    assert (key.mode, key.owner, key.reason) == ("0400", "1000:1000", "read through API_KEY_FILE")
    plain = files["/run/secrets/plain"]
    assert (plain.content, plain.owner) == ("web@anchor on anchor", "0:0")
    # the container refers to the credential, as it would for an env secret
    assert [ref.credential for ref in container.secrets] == ["secret/web@anchor/api-key"]
    # the declaration round-trips through its schema'd JSON
    text = json.dumps(resolver.documents.unstructure(declaration))
    assert "/run/secrets/api-key" in text


def test_a_new_generation_changes_the_declaration_as_an_env_secret_does(tmp_path):
    directory = meshdir(tmp_path, catalogue__web__module_yaml=WEB_FILES,
                        ledger_yaml=LEDGER + """\
credentials:
  secret/web@anchor/api-key:
    active: {generation: 1, sealed: {anchor: AAAA}}
""")
    first = _resolve(directory).declarations["anchor"]
    ledger = (directory / "ledger.yaml").read_text().replace("generation: 1", "generation: 2")
    (directory / "ledger.yaml").write_text(ledger)
    second = _resolve(directory).declarations["anchor"]
    assert first.digest != second.digest
    changes = resolver.container_changes({"anchor": first}, {"anchor": second})
    (change,) = changes
    assert change.action == "recreate"
    assert "secret secret/web@anchor/api-key generation 1 → 2" in change.causes


@pytest.mark.parametrize("edit, key, message", [
    (("path: /run/secrets/api-key", "path: /etc/api-key"), "path",
     "secret file path '/etc/api-key' is outside the container's secret directory /run/secrets"),
    (("path: /run/secrets/api-key", "path: /run/secrets/../etc/shadow"), "path",
     "is outside the container's secret directory"),
    (("path: /run/secrets/api-key", "path: /run/secrets/.hidden"), "path",
     "is outside the container's secret directory"),
    (("{state: data, target: /data}", "{state: data, target: /run}"), "target",
     "mount target '/run' covers the secret directory /run/secrets"),
    (("{state: data, target: /data}", "{state: data, target: /run/secrets/x}"), "target",
     "covers the secret directory"),
    (("GREETING: hello", "API_KEY_FILE: x"), "env",
     "API_KEY_FILE is also set in the container's env"),
    (('owner: "1000:1000"\n      - path', 'owner: "git"\n      - path'), "owner",
     "owner 'git' is not uid:gid"),
    (("key=${self.api-key.password}", "${self.nope.password}"), "content",
     "no secret named 'nope'"),
    (("${self.instance} on ${self.node}", "${db.password}"), "content",
     "no requirement named 'db'"),
])
def test_a_wrong_secret_file_is_one_fault_at_its_key(tmp_path, edit, key, message):
    old, new = edit
    assert old in WEB_FILES
    directory = meshdir(tmp_path, catalogue__web__module_yaml=WEB_FILES.replace(old, new, 1))
    code, lines, _ = check(directory)
    assert code == 2, lines
    (line,) = lines
    match = FAULT_LINE.match(line)
    assert match, line
    assert match.group("file").endswith("catalogue/web/module.yaml")
    assert message in match.group("what"), line
    written = (directory / "catalogue/web/module.yaml").read_text().splitlines()
    assert f"{key}:" in written[int(match.group("line")) - 1] or new.split(":")[0] in \
        written[int(match.group("line")) - 1], (line, written)


def test_an_unknown_key_in_a_secret_file_names_the_allowed_ones(tmp_path):
    directory = meshdir(tmp_path, catalogue__web__module_yaml=WEB_FILES.replace(
        "owner: \"1000:1000\"", "mode: \"0444\""))
    code, lines, _ = check(directory)
    assert code == 2
    (line,) = lines
    assert "mode" in line and "content" in line and "owner" in line, line


def test_a_step_may_read_its_secret_from_a_file(tmp_path):
    module = WEB_FILES.replace("secrets: [api-key]", """\
secrets: [api-key]
rotation:
  api-key: {how: step, step: seed}""") + """\
  - name: seed
    artifact: web
    run-once: true
    secret-files:
      - {path: /run/secrets/api-key, content: "${self.api-key.password}"}
"""
    directory = meshdir(tmp_path, catalogue__web__module_yaml=module)
    code, lines, _ = check(directory)
    assert code == 0, lines


def test_the_schema_describes_secret_files():
    schema = resolver.documents.json_schema("module")
    text = json.dumps(schema)
    assert "secret-files" in text and "owner" in text


assert MESH and PROVISIONS  # the single-node mesh these cases edit (tests/test_bad_input.py)


# --------------------------------------------------------------------------- on the node


def _rendered(tmp_path, path="/run/secrets/api-key", owner="1000:1000"):
    from executors.node.apply.render import render
    from executors.node.node_paths import NodePaths

    directory = meshdir(tmp_path, catalogue__web__module_yaml=WEB_FILES,
                        ledger_yaml=LEDGER + """\
credentials:
  secret/web@anchor/api-key:
    active: {generation: 1, sealed: {anchor: AAAA}}
""")
    declaration = _resolve(directory).declarations["anchor"]
    (container,) = declaration.containers
    files = [f if f.path != "/run/secrets/api-key" else
             attrs.evolve(f, path=path, owner=owner) for f in container.secret_files]
    declaration = attrs.evolve(declaration, containers=pvector(
        [attrs.evolve(container, secret_files=pvector(files))]))
    paths = NodePaths(tmp_path / "state")
    return render(declaration, paths, lambda ref: "the-issued-value-" + "x" * 30), paths


def test_the_node_writes_the_value_into_the_file_only(tmp_path):
    rendered, paths = _rendered(tmp_path)
    assert not rendered.desired.refusals, rendered.desired.refusals
    (name,) = rendered.specs
    spec = rendered.specs[name]
    directory = str(paths.secrets_dir / name)
    secret = [f for f in rendered.desired.files if f.path.startswith(directory)]
    assert sorted(f.path for f in secret) == [f"{directory}/api-key", f"{directory}/plain"]
    key = next(f for f in secret if f.path.endswith("/api-key"))
    assert (key.mode, key.owner) == (0o400, (1000, 1000))
    assert rendered.contents[key.path] == b"key=the-issued-value-" + b"x" * 30
    assert (directory, "/run/secrets", "ro") in spec.binds
    assert "API_KEY_FILE=/run/secrets/api-key" in spec.environment
    labels = json.dumps(dict(spec.labels))
    assert "the-issued-value" not in labels and "the-issued-value" not in "".join(
        spec.environment)
    summary = rendered.desired.containers[0].summary
    assert "secret-file /run/secrets/api-key" in summary
    assert "the-issued-value" not in json.dumps(dict(summary))


@pytest.mark.parametrize("path, owner, refused", [
    ("/etc/api-key", "1000:1000", "is not a file directly in /run/secrets"),
    ("/run/secrets/../api-key", "1000:1000", "is not a file directly in /run/secrets"),
    ("/run/secrets/api-key", "git", "owner 'git' is not uid:gid"),
])
def test_a_declaration_edited_by_hand_is_refused_on_the_node(tmp_path, path, owner, refused):
    rendered, _ = _rendered(tmp_path, path, owner)
    assert any(refused in r.message for r in rendered.desired.refusals), \
        rendered.desired.refusals
