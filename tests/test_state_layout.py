"""Instances' state and the executor's own files in separate namespaces under the state root.

An instance's relative state path lives at `<state root>/<instance>/<path>`; the executor keeps
its env files, binding files, run-once markers and records in `<state root>/.mesh/`. Instances
named `env`, `steps` and `bindings` (the names of the executor's directories) get their state
where every instance does, and the executor's files stay out of it; a declared state directory
or accessed path inside `.mesh/` is refused; a node applied by an earlier version (its files
directly under the state root) is moved into `.mesh/` by the next apply, with no container
recreated and no run-once step run again.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from pyrsistent import pvector

from resolver import AccessDecl, MountDecl, StateDirDecl

from _docker import (cleanup, container, declaration, engine, env_image, unique_mesh,
                     write_declaration)
from _meshop import Operator
from executors.cli import main as cli

pytestmark = pytest.mark.integration

SLEEPER = ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]

MODULE = """\
name: app
artifacts:
  image: {{repository: {repository}, tag: "{tag}"}}
state:
  data: {{path: data, owner: "0:0", mode: "0750"}}
containers:
  - name: main
    artifact: image
    command: [sh, -c, "trap 'exit 0' TERM; while true; do sleep 1; done"]
    env: {{GREETING: hello}}
    mounts: [{{state: data, target: /data}}]
"""
NAMES = ("env", "steps", "bindings")


@pytest.fixture
def api():
    return engine()


@pytest.fixture
def mesh(api):
    name = unique_mesh("l")
    yield name
    cleanup(api, name)


def apply_json(capsys, *argv):
    code = cli.main(["apply", *map(str, argv), "--json", "--stop-timeout", "1"])
    captured = capsys.readouterr()
    return code, json.loads(captured.out), captured.err


def test_instances_named_like_the_executors_directories_keep_their_state_apart(tmp_path):
    op = Operator(tmp_path, "{}\n", {"app": (MODULE, env_image(engine()))},
                  {name: "app" for name in NAMES})
    try:
        op.mesh("ca", "init", ".")
        op.mesh("pin", ".")
        op.mesh("plan", ".", "--issue", "--out", "out")
        out = tmp_path / "out" / "solo.declaration.json"
        declared = json.loads(out.read_text())
        assert {d["path"] for d in declared["state_dirs"]} == \
            {f"/var/lib/mesh/{name}/data" for name in NAMES}
        # this node's state root is the test's, not /var/lib/mesh: the same paths under it
        out.write_text(out.read_text().replace("/var/lib/mesh/", f"{op.state}/"))
        report = op.apply_json()
        assert report["result"] == "applied", report
        for name in NAMES:
            assert sorted(os.listdir(op.state / name)) == ["data"], \
                f"{op.state / name} holds the executor's files beside the instance's state"
            assert (op.state / name / "data").is_dir()
        executor = op.state / ".mesh"
        env_files = sorted(p.name for p in (executor / "env").iterdir())
        assert env_files == sorted(f"{op.name}-{name}-main.env" for name in NAMES)
        assert not [p for p in executor.rglob("*") if p.name == "data"]
        assert op.apply_json()["ops"] == []
    finally:
        op.cleanup()


def test_state_or_an_accessed_path_inside_the_executors_directory_is_refused(
        api, mesh, tmp_path, capsys):
    state = tmp_path / "state"
    inside = state / ".mesh" / "env"
    decl = declaration(mesh, containers=[container(
        mesh, "web", env_image(api), command=SLEEPER,
        mounts=[MountDecl("state", str(inside / "data"), "/data"),
                MountDecl("access", str(state / ".mesh"), "/secrets", True)])],
        state_dirs=[StateDirDecl(str(inside / "data"), 0, 0, "0750", "app@n1", "data")],
        accesses=[AccessDecl(str(state / ".mesh"), "ro", pvector(["app@n1"]))])
    code, report, _ = apply_json(capsys, write_declaration(tmp_path / "d.json", decl),
                                 "--state-root", state)
    assert code == 1 and report["result"] == "refused" and report["ops"] == []
    refused = {r["subject"]: r["message"] for r in report["refusals"]}
    assert "executor's own directory" in refused[str(inside / "data")]
    assert "executor's own directory" in refused[str(state / ".mesh")]
    assert not (inside / "data").exists()


def test_a_node_applied_by_an_earlier_layout_moves_in_without_recreating(
        api, mesh, tmp_path, capsys):
    image = env_image(api)
    data = tmp_path / "srv" / "data"
    decl = declaration(mesh, containers=[
        container(mesh, "init", image, command=["sh", "-c", "echo once >> /data/log"],
                  run_once=True, mounts=[MountDecl("state", str(data), "/data")]),
        container(mesh, "web", image, command=SLEEPER, env={"MODE": "one"})],
        state_dirs=[StateDirDecl(str(data), 0, 0, "0750", "app@n1", "data")])
    path = write_declaration(tmp_path / "d.json", decl)
    state = tmp_path / "state"
    assert apply_json(capsys, path, "--state-root", state)[0] == 0
    web = api.inspect_container(f"{mesh}-web")["Id"]
    # what an earlier version left: its files directly under the state root, its record
    # without a result (it was written before the provisioners ran)
    executor = state / ".mesh"
    record = json.loads((executor / "applied.json").read_text())
    for name in ("env", "steps", "dirs.json", "noop.json"):
        if (executor / name).exists():
            shutil.move(str(executor / name), str(state / name))
    (state / "applied.json").write_text(json.dumps(
        {k: record[k] for k in ("serial", "digest", "generations")}))
    shutil.rmtree(executor)
    (state / "lock").touch()

    code, report, err = apply_json(capsys, path, "--no-fast", "--state-root", state)
    assert code == 0, report
    assert "moved into the executor's own directory" in err
    assert [(o["op"], o["cause"]) for o in report["ops"]] == [
        ("record-applied", "the record does not say whether every phase succeeded (an earlier "
                           "version)")]
    assert api.inspect_container(f"{mesh}-web")["Id"] == web
    assert (data / "log").read_text() == "once\n"  # the step did not run again
    assert sorted(os.listdir(state)) == [".mesh"]
    assert sorted(os.listdir(executor / "env")) == [f"{mesh}-init.env", f"{mesh}-web.env"]
    assert json.loads((executor / "applied.json").read_text())["result"] == "applied"
    code, report, _ = apply_json(capsys, path, "--state-root", state)
    assert code == 0 and report["ops"] == []


def test_the_node_default_state_root_is_where_the_resolver_puts_instance_state():
    """One state root: the resolver writes a module's relative state path below it, and the
    node (node_paths.DEFAULT_STATE_ROOT, `mesh apply --state-root`'s default) keeps its own
    files in .mesh/ below the same root, which render refuses as an instance's state."""
    import resolver
    from resolver import rendering
    from executors.control.loading import load_mesh_dir
    from executors.node.node_paths import DEFAULT_STATE_ROOT, EXECUTOR_DIR, NodePaths

    inputs = load_mesh_dir(os.path.join(os.path.dirname(__file__), "..", "fixtures", "homelab"))
    resolution = resolver.resolve(inputs.catalogue, inputs.mesh, inputs.ledger,
                                  sources=inputs.sources)
    paths = [d.path for decl in resolution.declarations.values() for d in decl.state_dirs]
    assert paths and all(p.startswith(DEFAULT_STATE_ROOT + "/") for p in paths), paths
    assert all(p.split("/")[len(DEFAULT_STATE_ROOT.split("/"))] != EXECUTOR_DIR for p in paths)
    assert not any(NodePaths(DEFAULT_STATE_ROOT).owns(p) for p in paths)
    assert DEFAULT_STATE_ROOT == rendering.STATE_ROOT  # the resolver's rule, spelled once more
    # only where the standard library alone must answer (apply_fast); everywhere else it is used
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    for path in [*Path(root, "executors").rglob("*.py"), *Path(root, "resolver").rglob("*.py")]:
        if path.name not in ("node_paths.py", "_render.py"):
            assert DEFAULT_STATE_ROOT not in path.read_text(), path
