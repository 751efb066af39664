"""A running mesh meets operator mistakes, against the real registry and Docker Engine.

- A typo in mesh.yaml (`bind: {api: web@typo}`) makes `app@solo` refused: `mesh plan --out`
  holds its last good declaration and `mesh apply` keeps its running container (same
  container, never recreated), and says which instance is held and why.
- A confirmed move (`state-from:`) leaves the old node's state directory and its data where
  they are when the old node applies its declaration without the instance.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from _docker import cleanup, engine, env_image, env_of, http_get, unique_mesh

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parent.parent
REGISTRY = os.environ.get("MESH_TEST_REGISTRY", "127.0.0.1:5000")

MODULES = {
    "web": """\
name: web
artifacts:
  image: {{repository: {repository}, tag: "{tag}"}}
listens:
  http: {{port: 8080}}
provides:
  - {{provision: web, listen: http}}
containers:
  - name: server
    artifact: image
    health: {{http: {{listen: http, path: /cgi-bin/env}}}}
""",
    "app": """\
name: app
artifacts:
  image: {{repository: {repository}, tag: "{tag}"}}
listens:
  http: {{port: 8080}}
requires:
  - {{as: api, provision: web}}
state:
  data: {{path: {state}, owner: "0:0", mode: "0750"}}
containers:
  - name: server
    artifact: image
    env: {{API: "${{api.url}}"}}
    mounts: [{{state: data, target: /data}}]
    health: {{http: {{listen: http, path: /cgi-bin/env}}}}
""",
}


def two_free_ports() -> int:
    """The first of two consecutive free loopback ports (the mesh's host-port range)."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            first = s.getsockname()[1]
        if first >= 65535:
            continue
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", first + 1))
        except OSError:
            continue
        return first
    raise AssertionError("no two consecutive free ports")


def mesh(*args, cwd):
    return subprocess.run([sys.executable, "-m", "executors.cli", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


@pytest.fixture
def world(tmp_path):
    api = engine()
    name = unique_mesh("h")
    repository, tag = f"{REGISTRY}/mesh-held/env", name
    api.tag(env_image(api), repository, tag)
    for line in api.push(repository, tag, stream=True, decode=True):
        assert "error" not in line, line
    (tmp_path / "catalogue").mkdir()
    (tmp_path / "catalogue" / "provisions.yaml").write_text(
        'web: {scope: node, grant: none, keys: [host, port, url], url: "http://{host}:{port}"}\n')
    for module, text in MODULES.items():
        (tmp_path / "catalogue" / module).mkdir()
        (tmp_path / "catalogue" / module / "module.yaml").write_text(
            text.format(repository=repository, tag=tag, state=tmp_path / "appdata"))
    first = two_free_ports()
    (tmp_path / "mesh.yaml").write_text(
        f"mesh: {name}\ncatalogue: catalogue\n"
        f"nodes:\n  solo: {{address: 127.0.0.1}}\n  spare: {{address: 127.0.0.2}}\n"
        f"instances:\n"
        f"  web@solo: {{module: web, node: solo}}\n"
        f"  app@solo:\n    module: app\n    node: solo\n    bind: {{api: web@solo}}\n"
        f"host-ports: {{first: {first}, last: {first + 1}}}\n")
    state = tmp_path / "state"

    def run(*args, expect=0):
        result = mesh(*args, cwd=tmp_path)
        assert result.returncode == expect, \
            f"mesh {' '.join(map(str, args))}:\n{result.stdout}\n{result.stderr}"
        return result

    def apply(*extra):
        return run("apply", "out/solo.declaration.json", "--state-root", state,
                   "--no-firewall", "--stop-timeout", "1", *extra)

    try:
        run("pin", ".")
        yield api, name, tmp_path, run, apply, first
    finally:
        cleanup(api, name)


def app_container(api, name) -> dict:
    rows = api.containers(all=True, filters={"label": [f"mesh.mesh={name}",
                                                      "mesh.instance=app@solo"]})
    assert len(rows) == 1, rows
    return rows[0]


def test_a_typo_holds_the_running_container_and_apply_says_so(world):
    api, name, tmp_path, run, apply, first = world
    run("plan", ".", "--out", "out")
    apply()
    before = app_container(api, name)
    app_port = first + (1 if "app@solo" > "web@solo" else 0)
    told = env_of(http_get(f"http://127.0.0.1:{app_port}/cgi-bin/env"))
    assert told["API"].startswith("http://127.0.0.1:")

    text = (tmp_path / "mesh.yaml").read_text()
    (tmp_path / "mesh.yaml").write_text(text.replace("{api: web@solo}", "{api: web@typo}"))
    plan = run("plan", ".", "--out", "out", expect=1)
    assert "[held]" in plan.stdout and "[provider-not-assigned]" in plan.stdout
    held = apply("--json")
    report = json.loads(held.stdout)
    assert [op for op in report["ops"] if "app" in op["subject"]] == [], report["ops"]
    assert [(h["instance"], h["code"]) for h in report["held"]] == [
        ("app@solo", "provider-not-assigned")]
    assert "mesh.yaml:" in report["held"][0]["where"]
    after = app_container(api, name)
    assert after["Id"] == before["Id"] and after["State"] == "running"
    assert env_of(http_get(f"http://127.0.0.1:{app_port}/cgi-bin/env"))["API"] == told["API"]
    summary = apply().stdout  # the text report says it too (no-op path included)
    assert "held: app@solo" in summary and "provider-not-assigned" in summary

    (tmp_path / "mesh.yaml").write_text(text)  # fixed with `plan --out` alone
    run("plan", ".", "--out", "out")
    fixed = json.loads(apply("--json").stdout)
    assert fixed["result"] == "applied" and "held" not in fixed or not fixed["held"]
    assert fixed["serial_applied"] > report["serial_applied"]
    assert app_container(api, name)["Id"] == before["Id"], "the fix recreated the app"


def test_a_confirmed_move_leaves_the_state_directory_and_its_data_on_the_old_node(world):
    api, name, tmp_path, run, apply, _first = world
    run("plan", ".", "--out", "out")
    apply()
    data = tmp_path / "appdata"
    assert data.is_dir()
    (data / "precious.db").write_text("rows\n")

    text = (tmp_path / "mesh.yaml").read_text()
    moved = text.replace("    node: solo\n    bind:", "    node: spare\n    bind:")
    (tmp_path / "mesh.yaml").write_text(moved)
    refused = run("plan", ".", "--out", "out", expect=1)
    assert "[move-with-state]" in refused.stdout and str(data) in refused.stdout
    apply()  # held: nothing changes on solo
    assert app_container(api, name)["State"] == "running"

    (tmp_path / "mesh.yaml").write_text(
        moved.replace("    node: spare\n", "    node: spare\n    state-from: solo\n"))
    plan = run("plan", ".", "--out", "out")
    assert "state-left-behind" in plan.stdout and str(data) in plan.stdout
    report = json.loads(apply("--json").stdout)
    assert any(op["op"] == "remove-container" for op in report["ops"])
    assert not api.containers(all=True, filters={"label": [f"mesh.mesh={name}",
                                                           "mesh.instance=app@solo"]})
    assert (data / "precious.db").read_text() == "rows\n", "a move deleted data"
