"""Containers carry log limits, and `mesh logs` shows what they wrote, against the real Engine.

An operator's one-node mesh (tests/_meshop.py) with `logs:` in mesh.yaml: every container is
created with the json-file driver's max-size and max-file (`docker inspect`
HostConfig.LogConfig); `mesh logs INSTANCE` prints every container's output merged by time,
prefixed with the container's name (the run-once step's too), `--container`, `--tail`,
`--since` and `--follow` narrow it; a changed limit recreates the containers (the plan and the
apply say `logs`), and a second apply does nothing. A container that writes far more than its
limit keeps only about max-size × max-files of it, with either rotating driver.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import time

import attrs
import pytest

from resolver import LogsDecl

from _docker import (cleanup, container, declaration, docker_host, engine, env_image,
                     unique_mesh, write_declaration)
from _meshop import REPO, Operator

pytestmark = pytest.mark.integration

MODULE = """\
name: app
artifacts:
  image: {{repository: {repository}, tag: "{tag}"}}
containers:
  - name: main
    artifact: image
    command: [sh, -c, "trap 'exit 0' TERM; echo hello from main; i=0; while true; do i=$((i+1)); echo tick $i; sleep 1; done"]
  - name: side
    artifact: image
    command: [sh, -c, "trap 'exit 0' TERM; echo side ready >&2; while true; do sleep 1; done"]
"""


def mesh_cli(*args, cwd=None, check=True):
    result = subprocess.run([sys.executable, "-m", "executors.cli", *map(str, args)],
                            capture_output=True, text=True, cwd=cwd,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    if check:
        assert result.returncode == 0, f"mesh {' '.join(map(str, args))}:\n{result.stderr}"
    return result


def logs(*args, check=True):
    """`mesh logs` on this machine; given an Operator first, only its mesh's containers (other
    tests' one-node meshes name their instances app@solo too)."""
    if args and not isinstance(args[0], str):
        args = (*args[1:], "--mesh", args[0].name)
    return mesh_cli("logs", *args, "--docker-host", docker_host(), check=check)


def log_config(api, name):
    return api.inspect_container(name)["HostConfig"]["LogConfig"]


def set_logs(op, text):
    path = op.dir / "mesh.yaml"
    kept = [line for line in path.read_text().splitlines() if not line.startswith("logs:")]
    path.write_text("\n".join(kept + [text]) + "\n")


def test_containers_carry_the_meshs_log_limits_and_mesh_logs_prints_their_output(tmp_path):
    api = engine()
    op = Operator(tmp_path, "{}\n", {"app": (MODULE, env_image(api))}, {"app@solo": "app"})
    try:
        set_logs(op, "logs: {max-size: 1m, max-files: 2}")
        op.setup()
        main, side = f"{op.name}-app-solo-main", f"{op.name}-app-solo-side"
        for name in (main, side):
            assert log_config(api, name) == {"Type": "json-file",
                                             "Config": {"max-file": "2", "max-size": "1m"}}
        declared = json.loads((tmp_path / "out" / "solo.declaration.json").read_text())
        # (the declaration leaves out what is at its default: the json-file driver)
        assert [c["logs"] for c in declared["containers"]] == [{"max_files": 2, "max_size": "1m"}] * 2

        deadline = time.monotonic() + 30
        while "tick 2" not in (printed := logs(op, "app@solo").stdout):
            assert time.monotonic() < deadline, printed
            time.sleep(0.5)
        lines = printed.splitlines()
        # both containers, stdout and stderr, each line prefixed with its container's name
        assert {"main | hello from main", "main | tick 1", "side | side ready"} <= set(lines)
        stamped = logs(op, "app@solo", "--timestamps").stdout.splitlines()
        stamps = [line.split(" | ", 1)[1].split(" ", 1)[0] for line in stamped]
        assert len(stamped) >= len(lines) and stamps[0][:4].isdigit()
        assert stamps == sorted(stamps, key=lambda s: datetime.datetime.fromisoformat(
            s.rstrip("Z")[:26]))  # by time (to the microsecond, as Python reads it)

        only = logs(op, "app@solo", "--container", "main", "--tail", "1").stdout.splitlines()
        assert len(only) == 1 and only[0].startswith("tick ")  # one container: no prefix
        assert logs(op, "app@solo", "--container", "side").stdout == "side ready\n"
        assert logs(op, "app@solo", "--since", "2099-01-01T00:00:00Z").stdout == ""
        unknown = logs(op, "app@solo", "--container", "nope", check=False)
        assert unknown.returncode == 2 and "has no container 'nope'; it has main, side" in \
            unknown.stderr

        follower = subprocess.Popen(
            [sys.executable, "-m", "executors.cli", "logs", "app@solo", "--container", "main",
             "--follow", "--since", "1s", "--mesh", op.name, "--docker-host", docker_host()],
            stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
        try:
            seen = [follower.stdout.readline() for _ in range(2)]  # new lines as they come
            assert all(line.startswith("tick ") for line in seen), seen
            assert int(seen[1].split()[1]) == int(seen[0].split()[1]) + 1
        finally:
            follower.kill()
            follower.wait()

        # a changed limit: the plan names it, the apply recreates, a second apply does nothing
        set_logs(op, "logs: {max-size: 2m, max-files: 4}")
        planned = op.mesh("plan", ".", "--issue", "--out", "out").stdout
        assert "logs" in planned, planned
        report = op.apply_json()
        recreated = [o for o in report["ops"] if o["op"] == "recreate-container"]
        assert {o["subject"] for o in recreated} == {main, side}, report["ops"]
        assert "logs" in recreated[0]["cause"]
        assert log_config(api, main)["Config"] == {"max-file": "4", "max-size": "2m"}
        again = op.apply_json()
        assert [o["op"] for o in again["ops"]] in ([], ["record-applied"]), again["ops"]
    finally:
        op.cleanup()


@pytest.mark.parametrize("driver", ["json-file", "local"])
def test_a_container_writing_far_more_than_its_limit_keeps_about_the_limit(tmp_path, driver):
    api = engine()
    mesh = unique_mesh("g")
    image = env_image(api)
    line = "x" * 90
    chatty = attrs.evolve(
        container(mesh, "chatty", image, command=[
            "sh", "-c", f"trap 'exit 0' TERM; i=0; while [ $i -lt 5000 ]; do echo $i {line}; "
            "i=$((i+1)); done; echo all written; while true; do sleep 1; done"]),
        logs=LogsDecl(driver=driver, max_size="20k", max_files=2))
    path = write_declaration(tmp_path / "d.json", declaration(mesh, containers=[chatty]))
    try:
        applied = mesh_cli("apply", path, "--state-root", tmp_path / "state", "--no-firewall",
                           "--stop-timeout", "1", "--docker-host", docker_host())
        assert applied.returncode == 0
        assert log_config(api, f"{mesh}-chatty") == {
            "Type": driver, "Config": {"max-file": "2", "max-size": "20k"}}
        deadline = time.monotonic() + 30
        while not (printed := logs("app@n1", "--mesh", mesh).stdout).endswith("all written\n"):
            assert time.monotonic() < deadline, printed[-200:]
            time.sleep(0.5)
        written = 5000 * (len(line) + 6)
        assert len(printed) < 60_000 < written, len(printed)  # two files of 20k, not 480k
        assert "4999 " + line in printed and "\n0 " + line not in printed
    finally:
        cleanup(api, mesh)


def test_an_instance_not_on_this_node_or_a_bad_since_is_one_line_and_exit_2():
    engine()
    missing = logs("nothing@nowhere", "--mesh", unique_mesh("z"), check=False)
    assert missing.returncode == 2 and missing.stdout == ""
    assert missing.stderr.startswith("mesh: no container of instance nothing@nowhere")
    assert len(missing.stderr.strip().splitlines()) == 1
    since = logs("app@n1", "--since", "yesterday", check=False)
    assert since.returncode == 2 and "is not a time; expected a duration" in since.stderr
    assert "Traceback" not in since.stderr + missing.stderr
