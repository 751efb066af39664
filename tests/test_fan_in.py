"""A requirement that takes every provider (`each: true`), as an operator meets it: `mesh
check` faults with file:line, `mesh plan` showing the requirement with its list (an empty one
too), `mesh graph`, the declaration's list and the binding file the consumer mounts, each
provider's own credential and firewall opening, and the ledger a fixed point."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pyrsistent import pvector

from resolver import Declaration, FileDecl, SecretRef
from resolver.documents import load_ledger
from resolver.rendering import secret_token

ROOT = Path(__file__).resolve().parent.parent
PIN = "sha256:" + "1" * 64

PROVISIONS = """\
tools:
  grant: client+secret
  keys: [host, port, client, password, url]
  url: "http://{host}:{port}/mcp"
"""
SERVER = """\
name: toolsrv
artifacts:
  img: {repository: example/tools, tag: "1"}
listens:
  http: {port: 8000}
provides:
  - {provision: tools, listen: http}
containers:
  - {name: server, artifact: img}
"""
ASSISTANT = """\
name: assistant
artifacts:
  img: {repository: example/assistant, tag: "1"}
requires:
  - {as: tools, provision: tools, each: true%s}
containers:
  - name: app
    artifact: img
    env:
      TOOL_SERVERS: "${tools.count}"
    mounts:
      - {binding: tools, target: /etc/assistant/tools.json, format: json}
"""
MESH = """\
mesh: fan
nodes:
  a: {address: 10.0.0.1}
  b: {address: 10.0.0.2}
instances:
  assistant@a: {module: assistant, node: a}
"""


def mesh(*args):
    return subprocess.run([sys.executable, "-m", "executors.cli", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT)


def write(directory: Path, providers: dict[str, str], requirement: str = "") -> Path:
    (directory / "catalogue" / "toolsrv").mkdir(parents=True, exist_ok=True)
    (directory / "catalogue" / "assistant").mkdir(parents=True, exist_ok=True)
    (directory / "catalogue" / "provisions.yaml").write_text(PROVISIONS)
    (directory / "catalogue" / "toolsrv" / "module.yaml").write_text(SERVER)
    (directory / "catalogue" / "assistant" / "module.yaml").write_text(ASSISTANT % requirement)
    (directory / "mesh.yaml").write_text(MESH + "".join(
        f"  {name}: {{module: toolsrv, node: {node}}}\n" for name, node in providers.items()))
    ledger = directory / "ledger.yaml"
    if not ledger.exists():
        ledger.write_text(f"version: 1\npins:\n  example/tools:1: {PIN}\n"
                          f"  example/assistant:1: {PIN}\n")
    return directory


def plan_json(directory: Path) -> dict:
    out = mesh("plan", directory, "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout)


def the_list(doc: dict) -> dict:
    (listed,) = [b for b in doc["nodes"]["a"]["bindings"] if b["requirement"] == "tools"]
    return listed


def test_every_provider_once_each_with_its_own_login_and_opening(tmp_path):
    directory = write(tmp_path, {"tools@a": "a", "tools@b": "b"})
    doc = plan_json(directory)
    listed = the_list(doc)
    assert listed["each"] is True and listed["values"] == {"count": "2"}
    assert [e["provider"] for e in listed["entries"]] == ["tools@a", "tools@b"]
    credentials = [e["secret"]["credential"] for e in listed["entries"]]
    assert credentials == ["tools/tools@a/assistant@a", "tools/tools@b/assistant@a"]
    logins = {e["values"]["client"] for e in listed["entries"]}
    assert len(logins) == 2, "two providers never share a login"
    app = next(c for c in doc["nodes"]["a"]["containers"] if c["instance"] == "assistant@a")
    assert app["env"]["TOOL_SERVERS"] == "2"
    # the provider on b opens its port to a's address only; the one on a to the app's MAC
    port_b = int(listed["entries"][1]["values"]["port"])
    allows = [x for x in doc["nodes"]["b"]["firewall"]["allow"] if x["port"] == port_b]
    assert [x["sources"] for x in allows] == [["10.0.0.1"]]
    port_a = int(listed["entries"][0]["values"]["port"])
    local = [x for x in doc["nodes"]["a"]["firewall"]["local"] if x["port"] == port_a]
    assert [x["macs"] for x in local] == [[app["mac"]]]
    # the file it mounts is the list, every entry's credential a token the node fills
    (mounted,) = [f for f in doc["nodes"]["a"]["files"] if f["path"].endswith("tools.json")]
    items = json.loads(mounted["content"])
    assert [i["name"] for i in items] == ["tools@a", "tools@b"]
    assert items[1]["password"] == "${secret:tools/tools@b/assistant@a}"
    assert {r["credential"] for r in app["secrets"]} == set(credentials)
    text = mesh("plan", directory).stdout
    assert "assistant@a tools -> every tools provider (2)" in text
    assert "    - tools@b  10.0.0.2:" in text
    graph = mesh("graph", directory).stdout
    assert "tools: every tools (2): tools@a, tools@b" in graph
    assert 'id="binding:assistant@a/tools/tools@a"' in graph
    assert 'id="binding:assistant@a/tools/tools@b"' in graph


def test_an_empty_list_is_a_visible_state_not_a_refusal(tmp_path):
    directory = write(tmp_path, {})
    doc = plan_json(directory)
    listed = the_list(doc)
    assert listed["entries"] == [] and listed["values"] == {"count": "0"}
    assert not [p for p in doc["problems"] if p["severity"] == "error"]
    text = mesh("plan", directory).stdout
    assert "assistant@a tools -> every tools provider (0): none in scope" in text
    assert "tools: every tools (0): none yet" in mesh("graph", directory).stdout


def test_at_least_and_within_node(tmp_path):
    directory = write(tmp_path, {"tools@b": "b"}, ", within: node, at-least: 1")
    out = mesh("plan", directory)
    assert out.returncode == 1
    assert "module.yaml:5:" in out.stdout and "[too-few-providers]" in out.stdout
    assert "at least 1 provider of tools (tools) on node a and has 0" in out.stdout
    write(directory, {"tools@b": "b", "tools@a": "a"}, ", within: node, at-least: 1")
    listed = the_list(plan_json(directory))
    assert [e["provider"] for e in listed["entries"]] == ["tools@a"]


@pytest.mark.parametrize("extra, fault", [
    (", optional: true", "optional is given with each: true"),
    (", provider: tools@a", "provider is given with each: true"),
    (", within: far", "within 'far' is not a scope"),
    (", at-least: -1", "at-least -1 is negative"),
])
def test_faults_name_file_and_line(tmp_path, extra, fault):
    out = mesh("check", write(tmp_path, {"tools@a": "a"}, extra))
    assert out.returncode == 2, out.stdout + out.stderr
    assert "assistant/module.yaml:5:" in out.stderr + out.stdout
    assert fault in out.stderr + out.stdout and "Traceback" not in out.stderr


def test_bind_names_a_list_refused_at_mesh_yaml(tmp_path):
    directory = write(tmp_path, {"tools@a": "a"})
    text = (directory / "mesh.yaml").read_text().replace(
        "{module: assistant, node: a}", "{module: assistant, node: a, bind: {tools: tools@a}}")
    (directory / "mesh.yaml").write_text(text)
    out = mesh("check", directory)
    assert out.returncode == 1 and "mesh.yaml:6:" in out.stdout
    assert "[bind-on-each]" in out.stdout


def test_a_provider_added_changes_only_its_entry_and_the_ledger_is_a_fixed_point(tmp_path):
    directory = write(tmp_path, {"tools@a": "a"})
    assert mesh("plan", directory, "--write-ledger").returncode == 0
    before = the_list(plan_json(directory))
    write(directory, {"tools@a": "a", "tools@b": "b"})
    assert mesh("plan", directory, "--write-ledger").returncode == 0
    ledger = (directory / "ledger.yaml").read_text()
    after = the_list(plan_json(directory))
    assert after["entries"][0] == before["entries"][0]
    assert [e["provider"] for e in after["entries"]] == ["tools@a", "tools@b"]
    assert mesh("plan", directory, "--write-ledger").returncode == 0
    assert (directory / "ledger.yaml").read_text() == ledger
    recorded, _ = load_ledger(ledger, "ledger.yaml")
    assert "assistant@a" not in recorded.bindings, "a list follows the mesh: not recorded"
    assert {"tools/tools@a/assistant@a", "tools/tools@b/assistant@a"} <= set(recorded.logins)


@pytest.mark.parametrize("fmt", ["env", "yaml"])
def test_the_list_file_in_env_and_yaml(tmp_path, fmt):
    directory = write(tmp_path, {"tools@a": "a", "tools@b": "b"})
    module = directory / "catalogue" / "assistant" / "module.yaml"
    module.write_text(module.read_text().replace("tools.json, format: json",
                                                 f"tools.{fmt}, format: {fmt}"))
    doc = plan_json(directory)
    (mounted,) = [f for f in doc["nodes"]["a"]["files"] if f["path"].endswith(f"tools.{fmt}")]
    if fmt == "yaml":
        items = yaml.safe_load(mounted["content"])
        assert [i["name"] for i in items] == ["tools@a", "tools@b"]
    else:
        lines = mounted["content"].splitlines()
        assert lines[0] == "count=2" and "name_0=tools@a" in lines and "name_1=tools@b" in lines


def test_the_node_fills_every_entry_of_a_list_file(tmp_path):
    from executors.node.apply.render import render
    from executors.node.node_paths import NodePaths

    first, second = SecretRef("tools/a/c", 1), SecretRef("tools/b/c", 2)
    content = json.dumps([{"name": "a", "password": secret_token("tools/a/c")},
                          {"name": "b", "password": secret_token("tools/b/c")}])
    declaration = Declaration(mesh="m", node="n", address="10.0.0.1", files=pvector([
        FileDecl("/etc/mesh/bindings/c/tools.json", content, "0444", first,
                 more_secrets=pvector([second]))]))
    rendered = render(declaration, NodePaths(tmp_path / "state", tmp_path / "files"),
                      lambda ref: f"pw{ref.generation}")
    assert not rendered.desired.refusals
    (path,) = [p for p in rendered.contents if p.endswith("tools.json")]
    assert json.loads(rendered.contents[path]) == [{"name": "a", "password": "pw1"},
                                                   {"name": "b", "password": "pw2"}]
    assert dict(rendered.desired.generations) == {"tools/a/c": 1, "tools/b/c": 2}
