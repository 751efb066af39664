"""`after()` (executors/node/apply/diff.py) is the model of what `mesh apply` does; here it is
checked against the real executor and the real Docker Engine, with few examples (each is a real
apply).

One example: a first declaration is applied for real; the node is then disturbed the way
nodes are (a container stopped or removed by hand, a state directory chmodded, an env file
deleted or a stray one left, a step's completion marker lost, the applied record lost); a
second declaration (containers added, changed, removed; steps changed; directories with other
owners and modes; accessed paths present or absent) is planned from what `observe` sees, and
`after()` predicts the node once the plan ran. The plan then runs for real, the node is
observed again, and what was predicted must be what is there: directories (kind, owner, mode,
recorded), files (digest, mode), containers (config digest, running, their summary label),
completion markers and the applied record. A refused plan changes nothing, as predicted.
Finally the real node is converged: planning again asks for nothing.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from pyrsistent import pvector

from executors.node.apply.pipeline import NodePaths, apply_declaration, observe, render
from executors.node.apply.diff import after, diff
from resolver import AccessDecl, MountDecl, SecretRef, StateDirDecl
from resolver.rendering import secret_token

pytestmark = pytest.mark.integration

_SPEC = importlib.util.spec_from_file_location(
    "mesh_tests_docker", Path(__file__).resolve().parent.parent / "tests" / "_docker.py")
docker_helpers = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(docker_helpers)

SLEEPER = ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]
ROOT = os.geteuid() == 0
OWNERS = [0, 1000] if ROOT else [os.geteuid()]
DISTURBANCES = ["none", "stop a container", "remove a container", "chmod a directory",
                "delete an env file", "leave a stray env file", "lose a step marker",
                "lose the applied record"]


def secret_value(ref: SecretRef) -> str:
    return f"pw-{ref.credential}-g{ref.generation}"


@st.composite
def node_states(draw):
    """What one declaration asks of the node, as plain choices (built into a Declaration once
    the example's mesh name and directories are known)."""
    containers = []
    if draw(st.booleans()):
        containers.append(("init", True, draw(st.sampled_from(["echo one", "echo two"])), None))
    for short in draw(st.lists(st.sampled_from(["web", "worker"]), unique=True, min_size=1)):
        containers.append((short, False, draw(st.sampled_from(["a", "b"])),
                           draw(st.sampled_from([None, 1, 2]))))
    dirs = [(name, draw(st.sampled_from(OWNERS)), draw(st.sampled_from(OWNERS)),
             draw(st.sampled_from(["0750", "0700", "0755"])))
            for name in draw(st.lists(st.sampled_from(["data", "logs"]), unique=True))]
    accesses = draw(st.lists(st.sampled_from([("media", "ro"), ("downloads", "rw")]),
                             unique=True, max_size=2))
    return containers, dirs, accesses


def build(mesh: str, serial: int, state, image: str, base: Path):
    containers, dirs, accesses = state
    decls = []
    data_dir = next((d for d in dirs if d[0] == "data"), None)
    for short, run_once, value, generation in containers:
        if run_once:
            decls.append(docker_helpers.container(mesh, short, image, run_once=True,
                                                  command=["sh", "-c", value]))
            continue
        env = {"MODE": value}
        secrets = ()
        if generation is not None:
            env["PASSWORD"] = secret_token("db-cred")
            secrets = (SecretRef("db-cred", generation),)
        mounts = ()
        if short == "web" and data_dir is not None:
            mounts = (MountDecl("state", str(base / "srv" / "data"), "/data"),)
        decls.append(docker_helpers.container(mesh, short, image, env=env, secrets=secrets,
                                              command=SLEEPER, mounts=mounts))
    return docker_helpers.declaration(
        mesh, serial=serial, containers=decls,
        state_dirs=[StateDirDecl(str(base / "srv" / name), uid, gid, mode, "app@n1", name)
                    for name, uid, gid, mode in dirs],
        accesses=[AccessDecl(str(base / "data" / name), mode, pvector(["app@n1"]))
                  for name, mode in accesses])


def disturb(api, what: str, paths: NodePaths, base: Path, mesh: str) -> None:
    managed = sorted(row["Names"][0].lstrip("/") for row in
                     api.containers(all=True, filters={"label": f"mesh.mesh={mesh}"}))
    if what == "stop a container" and managed:
        api.stop(managed[0], timeout=1)
    elif what == "remove a container" and managed:
        api.remove_container(managed[-1], force=True)
    elif what == "chmod a directory":
        for directory in sorted((base / "srv").glob("*")):
            os.chmod(directory, 0o711)
            break
    elif what == "delete an env file":
        for file in sorted(paths.env_dir.glob("*.env")):
            file.unlink()
            break
    elif what == "leave a stray env file":
        paths.env_dir.mkdir(parents=True, exist_ok=True)
        (paths.env_dir / f"{mesh}-gone.env").write_text("X=1\n")
        os.chmod(paths.env_dir / f"{mesh}-gone.env", 0o600)
    elif what == "lose a step marker":
        for marker in sorted(paths.steps_dir.glob("*.digest")):
            marker.unlink()
            break
    elif what == "lose the applied record" and paths.applied.exists():
        paths.applied.unlink()


def comparable(observed):
    """The parts of an observation the model speaks for."""
    return {
        "dirs": {p: (f.kind, f.uid, f.gid, f.mode, f.recorded) for p, f in observed.dirs.items()},
        "files": {p: (f.sha256, f.mode) for p, f in observed.files.items()},
        "containers": {n: (c.digest, c.running, dict(c.summary))
                       for n, c in observed.containers.items()},
        "markers": dict(observed.markers),
        "applied": observed.applied,
    }


@settings(max_examples=6, deadline=None, phases=[Phase.explicit, Phase.generate],
          suppress_health_check=list(HealthCheck))
@given(node_states(), node_states(), st.sampled_from(DISTURBANCES), st.booleans())
def test_after_predicts_what_the_real_executor_leaves_on_the_node(first, second, what,
                                                                  absent_access):
    api = docker_helpers.engine()
    image = docker_helpers.env_image(api)
    mesh = docker_helpers.unique_mesh("p")
    base = Path(tempfile.mkdtemp(prefix="mesh-after-"))
    try:
        for name in ("media", "downloads"):
            (base / "data" / name).mkdir(parents=True)
        paths = NodePaths(base / "state")
        one = build(mesh, 1, first, image, base)
        report = apply_declaration(one, api=api, state_root=paths.state_root,
                                   secret_source=secret_value, stop_timeout=1)
        assert report.result == "applied", report.to_json()
        disturb(api, what, paths, base, mesh)
        if absent_access and second[2]:
            shutil.rmtree(base / "data" / second[2][0][0])
        two = build(mesh, 2, second, image, base)
        rendered = render(two, paths, secret_value)
        before = observe(api, paths, rendered.desired)
        plan = diff(rendered.desired, before)
        predicted = after(rendered.desired, before, plan.ops)
        report = apply_declaration(two, api=api, state_root=paths.state_root,
                                   secret_source=secret_value, stop_timeout=1)
        assert report.result == ("refused" if plan.refused else "applied"), report.to_json()
        now = observe(api, paths, rendered.desired)
        assert comparable(now) == comparable(predicted)
        assert diff(rendered.desired, now).ops == ()
    finally:
        docker_helpers.cleanup(api, mesh)
        shutil.rmtree(base, ignore_errors=True)
