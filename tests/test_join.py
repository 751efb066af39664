"""`mesh join`, `mesh init` and `mesh supervise` without a fleet: what is refused before
anything is made, and the supervisor's restarts (the fleets themselves:
tests/test_join_netns.py, tests/test_init_netns.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from executors.common.service import Service, child_pid, supervisor_pid, unit_text

REPO = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def mesh(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "executors.cli", *args], capture_output=True,
                          text=True, env=ENV, timeout=120)


def test_a_damaged_token_is_one_line_and_nothing_is_written(tmp_path):
    for token in ("mesh-enrol:nonsense", "not-a-token"):
        run = mesh("join", token, "--config", str(tmp_path / "agent.yaml"), "--key",
                   str(tmp_path / "node.key"), "--run-dir", str(tmp_path))
        assert run.returncode == 2, run.stdout + run.stderr
        assert run.stderr.count("\n") == 1 and "token" in run.stderr, run.stderr
        assert list(tmp_path.iterdir()) == []


def test_the_supervisor_restarts_what_exits_and_stops_on_sigterm(tmp_path):
    supervisor = subprocess.Popen(
        [sys.executable, "-m", "executors.cli", "supervise", "--name", "probe", "--run-dir",
         str(tmp_path), "--", "schema", "report"], env=ENV, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    try:
        log = tmp_path / "probe.log"
        deadline = time.monotonic() + 30
        while log.read_text().count("started pid") < 3 if log.exists() else True:
            assert time.monotonic() < deadline and supervisor.poll() is None, \
                log.read_text() if log.exists() else "no log"
            time.sleep(0.2)
        assert "exited 0; restarting in 1s" in log.read_text()
        assert supervisor_pid("probe", tmp_path) == supervisor.pid
        second = subprocess.run([sys.executable, "-m", "executors.cli", "supervise", "--name",
                                 "probe", "--run-dir", str(tmp_path), "--", "schema", "report"],
                                env=ENV, capture_output=True, text=True, timeout=60)
        assert second.returncode != 0 and "runs already" in second.stderr, second.stderr
        supervisor.send_signal(signal.SIGTERM)
        assert supervisor.wait(30) == 0
        assert supervisor_pid("probe", tmp_path) is None and child_pid("probe", tmp_path) is None
        assert not (tmp_path / "probe.pid").exists()
    finally:
        if supervisor.poll() is None:
            supervisor.kill()


def test_the_systemd_unit_restarts_always_and_starts_at_boot():
    text = unit_text(Service("agent", "mesh agent of node n2", ("agent", "--config",
                                                                "/etc/mesh/agent.yaml"),
                             (sys.executable, "-m", "executors.cli"), environment={"DOCKER_HOST": "unix:///run/docker.sock"}))
    assert f"ExecStart={sys.executable} -m executors.cli agent --config /etc/mesh/agent.yaml" \
        in text
    assert "Restart=always" in text and "WantedBy=multi-user.target" in text
    assert "Environment=DOCKER_HOST=unix:///run/docker.sock" in text


def test_init_refuses_a_directory_with_something_in_it_and_writes_nothing(tmp_path):
    directory = tmp_path / "mesh"
    directory.mkdir()
    (directory / "mesh.yaml").write_text("mesh: home\n")
    run = mesh("init", str(directory), "--node", "anchor", "--address", "10.44.0.1",
               "--key", str(tmp_path / "node.key"), "--config", str(tmp_path / "agent.yaml"),
               "--run-dir", str(tmp_path / "run"))
    assert run.returncode == 2, run.stdout + run.stderr
    assert run.stderr.count("\n") == 1 and "is not empty" in run.stderr, run.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mesh"]
    assert [p.name for p in directory.iterdir()] == ["mesh.yaml"]


def test_init_refuses_a_machine_without_a_docker_engine_and_writes_nothing(tmp_path):
    run = mesh("init", str(tmp_path / "mesh"), "--node", "anchor", "--address", "10.44.0.1",
               "--key", str(tmp_path / "node.key"), "--config", str(tmp_path / "agent.yaml"),
               "--run-dir", str(tmp_path / "run"), "--docker-host",
               f"unix://{tmp_path}/no-docker.sock")
    assert run.returncode == 2, run.stdout + run.stderr
    assert run.stderr.count("\n") == 1 and "no Docker Engine answers" in run.stderr, run.stderr
    assert list(tmp_path.iterdir()) == []


def test_init_refuses_a_catalogue_without_the_control_module_and_writes_nothing(tmp_path):
    """The template assigns the control plane too: a catalogue without it is refused first."""
    catalogue = tmp_path / "catalogue"
    for module in ("postgres", "lavinmq", "registry"):
        (catalogue / module).mkdir(parents=True)
        (catalogue / module / "module.yaml").write_text(f"name: {module}\n")
    (catalogue / "provisions.yaml").write_text("{}\n")
    run = mesh("init", str(tmp_path / "mesh"), "--node", "anchor", "--address", "10.44.0.1",
               "--catalogue", str(catalogue), "--key", str(tmp_path / "node.key"),
               "--config", str(tmp_path / "agent.yaml"), "--run-dir", str(tmp_path / "run"))
    assert run.returncode == 2, run.stdout + run.stderr
    assert run.stderr.count("\n") == 1 and "(missing: control)" in run.stderr, run.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["catalogue"]


def test_init_refuses_a_machine_without_the_node_extra(tmp_path):
    """The node extra's psycopg hidden from the interpreter (a site directory that shadows it
    with a module that cannot be found)."""
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "sitecustomize.py").write_text(
        "import importlib.util, sys\n"
        "class Hide:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'psycopg':\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, Hide())\n"
        "_find = importlib.util.find_spec\n"
        "importlib.util.find_spec = lambda n, p=None: None if n.split('.')[0] == 'psycopg' "
        "else _find(n, p)\n")
    run = subprocess.run([sys.executable, "-m", "executors.cli", "init",
                          str(tmp_path / "mesh"), "--node", "anchor", "--address", "10.44.0.1",
                          "--key", str(tmp_path / "node.key")], capture_output=True, text=True,
                         env={**ENV, "PYTHONPATH": f"{shadow}:{REPO}"}, timeout=120)
    assert run.returncode == 2, run.stdout + run.stderr
    assert run.stderr.count("\n") == 1 and "needs the node extra" in run.stderr, run.stderr
    assert "psycopg[binary]" in run.stderr and not (tmp_path / "mesh").exists()
