"""`mesh apply` against the real Docker Engine: labels, ports, recreate on a changed config
digest (env, rotation), removal of what is no longer declared, containers the mesh does not
manage, run-once steps, health, latest wins over a sequence, and zero operations on re-apply."""

from __future__ import annotations

import json
import os

import attrs
import pytest
from pyrsistent import pvector

from resolver import HealthDecl, SecretRef
from resolver.rendering import secret_token

from executors.cli import main as cli
from executors.node.apply.pipeline import NodePaths, apply_declaration, observe, render
from executors.node.apply.diff import diff
from _docker import (cleanup, container, declaration, engine, env_image, env_of, free_port,
                     http_get, http_health, unique_mesh, write_declaration)

pytestmark = pytest.mark.integration

SLEEPER = ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]


@pytest.fixture
def api():
    return engine()


@pytest.fixture
def mesh(api):
    name = unique_mesh("d")
    yield name
    cleanup(api, name)


def apply_json(capsys, *argv):
    code = cli.main(["apply", *map(str, argv), "--json", "--stop-timeout", "1"])
    captured = capsys.readouterr()
    return code, json.loads(captured.out), captured.err


def managed(api, mesh):
    return {row["Names"][0].lstrip("/"): row
            for row in api.containers(all=True, filters={"label": f"mesh.mesh={mesh}"})}


def secrets_by_generation(ref):
    return f"pw-{ref.credential}-g{ref.generation}"


def test_apply_creates_labelled_containers_on_the_node_address_and_reapply_does_nothing(
        api, mesh, tmp_path, capsys):
    image = env_image(api)
    port = free_port()
    decl = declaration(mesh, containers=[
        container(mesh, "init", image, command=["sh", "-c", "echo migrated"], run_once=True),
        container(mesh, "web", image, port=port, env={"DB_HOST": "db.one"},
                  health=http_health(port), labels={"org.example.role": "web"})])
    path = write_declaration(tmp_path / "d.json", decl)
    state = tmp_path / "state"
    code, report, err = apply_json(capsys, path, "--state-root", state)
    assert code == 0, report
    assert [op["op"] for op in report["ops"]] == [
        "write-file", "write-file", "run-step", "create-container", "record-applied"]
    assert report["health"] == {f"{mesh}-web": "answering"}
    assert "answering" in report["ops"][3]["result"]
    for op in report["ops"]:
        assert op["cause"] and op["result"]
        assert f"→ {op['op']} {op['subject']}" in err  # each step printed as it happened
    info = api.inspect_container(f"{mesh}-web")
    labels = info["Config"]["Labels"]
    assert labels["mesh.mesh"] == mesh and labels["mesh.instance"] == "app@n1"
    assert labels["mesh.container"] == "web" and labels["mesh.config-digest"].startswith("sha256:")
    assert labels["org.example.role"] == "web"
    assert info["HostConfig"]["PortBindings"] == {"8080/tcp": [{"HostIp": "127.0.0.1",
                                                                "HostPort": str(port)}]}
    assert info["Image"] == image
    assert env_of(http_get(f"http://127.0.0.1:{port}/cgi-bin/env"))["DB_HOST"] == "db.one"
    assert set(managed(api, mesh)) == {f"{mesh}-web"}  # the completed step was removed
    assert (state / ".mesh" / "steps" / f"{mesh}-init.digest").exists()

    code, again, _ = apply_json(capsys, path, "--state-root", state)
    assert code == 0 and again["ops"] == [] and again["serial_applied"] == 1


def test_a_changed_env_value_recreates_and_names_the_key(api, mesh, tmp_path, capsys):
    image = env_image(api)
    port = free_port()
    state = tmp_path / "state"
    first = declaration(mesh, containers=[container(mesh, "web", image, port=port,
                                                    env={"DB_HOST": "db.one", "MODE": "x"},
                                                    health=http_health(port))])
    assert apply_json(capsys, write_declaration(tmp_path / "1.json", first),
                      "--state-root", state)[0] == 0
    old_id = api.inspect_container(f"{mesh}-web")["Id"]
    second = declaration(mesh, serial=2, containers=[
        container(mesh, "web", image, port=port, env={"DB_HOST": "db.two", "MODE": "x"},
                  health=http_health(port))])
    code, report, _ = apply_json(capsys, write_declaration(tmp_path / "2.json", second),
                                 "--state-root", state)
    assert code == 0
    recreate = [op for op in report["ops"] if op["op"] == "recreate-container"]
    assert recreate and recreate[0]["cause"] == "config digest changed: env DB_HOST"
    assert api.inspect_container(f"{mesh}-web")["Id"] != old_id
    assert env_of(http_get(f"http://127.0.0.1:{port}/cgi-bin/env"))["DB_HOST"] == "db.two"


def test_rotation_reaches_the_container_and_the_report_states_generations(
        api, mesh, tmp_path):
    image = env_image(api)
    port = free_port()
    state = tmp_path / "state"

    def decl(serial, generation):
        return declaration(mesh, serial=serial, containers=[container(
            mesh, "web", image, port=port, health=http_health(port),
            env={"DB_PASSWORD": secret_token("app-db"), "DB_HOST": "db"},
            secrets=[SecretRef("app-db", generation)])])

    report = apply_declaration(decl(1, 1), api=api, state_root=state,
                               secret_source=secrets_by_generation, stop_timeout=1)
    assert report.generations == {"app-db": 1}
    assert env_of(http_get(f"http://127.0.0.1:{port}/cgi-bin/env"))["DB_PASSWORD"] == \
        "pw-app-db-g1"
    report = apply_declaration(decl(2, 2), api=api, state_root=state,
                               secret_source=secrets_by_generation, stop_timeout=1)
    assert report.result == "applied"
    assert report.generations == {"app-db": 2} and report.serial_applied == 2
    causes = {op.op: op.cause for op in report.ops}
    assert causes["recreate-container"] == "config digest changed: env DB_PASSWORD"
    assert causes["write-file"] == "contents changed"
    assert env_of(http_get(f"http://127.0.0.1:{port}/cgi-bin/env"))["DB_PASSWORD"] == \
        "pw-app-db-g2"
    assert "pw-app-db" not in json.dumps(report.to_json())


def test_undeclared_managed_containers_are_removed_and_others_never_touched(
        api, mesh, tmp_path, capsys):
    image = env_image(api)
    state = tmp_path / "state"
    other_mesh = unique_mesh("o")
    strangers = [
        api.create_container(image, command=SLEEPER, name=f"{mesh}-stranger")["Id"],
        api.create_container(image, command=SLEEPER, name=f"{other_mesh}-neighbour",
                             labels={"mesh.mesh": other_mesh, "mesh.config-digest": "x"})["Id"],
    ]
    try:
        for stranger in strangers:
            api.start(stranger)
        first = declaration(mesh, containers=[container(mesh, "aa", image, command=SLEEPER),
                                              container(mesh, "bb", image, command=SLEEPER)])
        assert apply_json(capsys, write_declaration(tmp_path / "1.json", first),
                          "--state-root", state)[0] == 0
        second = declaration(mesh, serial=2,
                             containers=[container(mesh, "aa", image, command=SLEEPER)])
        code, report, _ = apply_json(capsys, write_declaration(tmp_path / "2.json", second),
                                     "--state-root", state)
        assert code == 0
        assert [(op["op"], op["subject"], op["cause"]) for op in report["ops"]
                if op["op"] != "write-file" and op["op"] != "remove-file"] == [
            ("remove-container", f"{mesh}-bb", "no longer declared"),
            ("record-applied", "serial 2", "serial 1 → 2")]
        assert set(managed(api, mesh)) == {f"{mesh}-aa"}
        for stranger in strangers:
            assert api.inspect_container(stranger)["State"]["Running"]
        # a declared name taken by a container the mesh does not manage: reported, untouched
        third = declaration(mesh, serial=3, containers=[
            container(mesh, "aa", image, command=SLEEPER),
            container(mesh, "stranger", image, command=SLEEPER)])
        code, report, _ = apply_json(capsys, write_declaration(tmp_path / "3.json", third),
                                     "--state-root", state)
        assert code == 1 and report["result"] == "failed"
        failed = [op for op in report["ops"] if op["result"].startswith("failed")]
        assert failed[0]["subject"] == f"{mesh}-stranger"
        assert "does not manage" in failed[0]["result"]
        assert api.inspect_container(strangers[0])["State"]["Running"]
        assert report["serial_applied"] == 2
    finally:
        for stranger in strangers:
            api.remove_container(stranger, force=True)


def test_a_stopped_managed_container_is_started(api, mesh, tmp_path, capsys):
    image = env_image(api)
    path = write_declaration(tmp_path / "d.json", declaration(
        mesh, containers=[container(mesh, "aa", image, command=SLEEPER)]))
    assert apply_json(capsys, path, "--state-root", tmp_path / "s")[0] == 0
    api.stop(f"{mesh}-aa", timeout=1)
    code, report, _ = apply_json(capsys, path, "--state-root", tmp_path / "s")
    assert [(op["op"], op["cause"]) for op in report["ops"]] == [
        ("start-container", "not running (exited)")]
    assert api.inspect_container(f"{mesh}-aa")["State"]["Running"]


def test_run_once_steps_rerun_only_when_changed_and_a_failure_stops_what_follows(
        api, mesh, tmp_path, capsys):
    image = env_image(api)
    state = tmp_path / "state"
    log = tmp_path / "runs"
    log.mkdir()
    from resolver import MountDecl

    def step(script, **kw):
        return container(mesh, "migrate", image, command=["sh", "-c", script], run_once=True,
                         mounts=[MountDecl("state", str(log), "/log")], **kw)

    ok = step("echo ran >> /log/count")
    after = container(mesh, "app", image, command=SLEEPER)
    d1 = declaration(mesh, containers=[ok, after])
    assert apply_json(capsys, write_declaration(tmp_path / "1.json", d1),
                      "--state-root", state)[0] == 0
    d2 = declaration(mesh, serial=2, containers=[ok, after])
    code, report, _ = apply_json(capsys, write_declaration(tmp_path / "2.json", d2),
                                 "--state-root", state)
    assert code == 0 and [op["op"] for op in report["ops"]] == ["record-applied"]
    assert (log / "count").read_text() == "ran\n"  # unchanged step: not rerun

    # stdout and stderr are separate streams: the engine may interleave lines written in the
    # same instant either way, so the step pauses before writing to the other stream
    failing = step("echo one; echo two; sleep 0.2; echo boom >&2; exit 3")
    late = container(mesh, "late", image, command=SLEEPER)
    d3 = declaration(mesh, serial=3, containers=[after, failing, late])
    code, report, err = apply_json(capsys, write_declaration(tmp_path / "3.json", d3),
                                   "--state-root", state)
    assert code == 1 and report["result"] == "failed"
    run = next(op for op in report["ops"] if op["op"] == "run-step")
    assert run["result"] == "failed: exit 3"
    assert run["detail"][-3:] == ["one", "two", "boom"]
    assert "| boom" in err
    skipped = [op for op in report["ops"] if op["result"].startswith("skipped")]
    assert [op["subject"] for op in skipped] == [f"{mesh}-late", "serial 3"]
    assert f"{mesh}-late" not in managed(api, mesh)
    assert report["serial_applied"] == 2  # the failed serial 3 is not in force

    fixed = declaration(mesh, serial=4, containers=[after, step("echo again >> /log/count"),
                                                    late])
    code, report, _ = apply_json(capsys, write_declaration(tmp_path / "4.json", fixed),
                                 "--state-root", state)
    assert code == 0
    kinds = [op["op"] for op in report["ops"]]
    assert kinds.index("run-step") < kinds.index("create-container")
    assert (log / "count").read_text() == "ran\nagain\n"


def test_health_distinguishes_running_from_answering(api, mesh, tmp_path):
    image = env_image(api)
    port = free_port()
    good = container(mesh, "good", image, port=port,
                     health=HealthDecl(kind="tcp", port=8080, host_port=port, timeout=20))
    cmd = container(mesh, "cmd", image, command=SLEEPER,
                    health=HealthDecl(kind="command", command=pvector(["true"]), timeout=20))
    never = container(mesh, "never", image, command=SLEEPER,
                      health=HealthDecl(kind="command", command=pvector(["false"]), timeout=2))
    report = apply_declaration(declaration(mesh, containers=[good, cmd, never]), api=api,
                               state_root=tmp_path / "s", stop_timeout=1)
    assert report.health == {f"{mesh}-good": "answering", f"{mesh}-cmd": "answering",
                                      f"{mesh}-never": "running, not answering"}
    last = [op for op in report.ops if op.subject == f"{mesh}-never"][0]
    assert not last.ok and "did not answer within 2s" in last.result
    assert report.result == "failed"


def test_applying_a_sequence_ends_in_the_state_of_its_last_declaration(api, mesh, tmp_path):
    image = env_image(api)
    state = tmp_path / "state"
    sequence = [
        declaration(mesh, 1, [container(mesh, "aa", image, command=SLEEPER, env={"V": "1"}),
                              container(mesh, "bb", image, command=SLEEPER)]),
        declaration(mesh, 2, [container(mesh, "st", image, command=["true"], run_once=True),
                              container(mesh, "aa", image, command=SLEEPER, env={"V": "2"}),
                              container(mesh, "cc", image, command=SLEEPER)]),
        declaration(mesh, 3, [container(mesh, "cc", image, command=SLEEPER, env={"W": "3"}),
                              container(mesh, "aa", image, command=SLEEPER, env={"V": "2"})]),
    ]
    for decl in sequence:
        assert apply_declaration(decl, api=api, state_root=state,
                                 stop_timeout=1).result == "applied"
    last = sequence[-1]
    rendered = render(last, NodePaths(state))
    observed = observe(api, NodePaths(state), rendered.desired)
    assert diff(rendered.desired, observed).ops == ()
    assert set(observed.containers) == {c.name for c in last.containers}
    assert {n: c.digest for n, c in observed.containers.items()} == \
        {c.name: c.digest for c in rendered.desired.containers}
    assert set(observed.files) == {f.path for f in rendered.desired.files}
    assert dict(observed.markers) == {}

    fresh_state = tmp_path / "fresh"  # the same last declaration applied alone: same result
    cleanup(api, mesh)
    apply_declaration(last, api=api, state_root=fresh_state, stop_timeout=1)
    fresh = observe(api, NodePaths(fresh_state), rendered.desired)
    assert {n: (c.digest, c.running) for n, c in fresh.containers.items()} == \
        {n: (c.digest, c.running) for n, c in observed.containers.items()}
    assert {os.path.basename(p): f.sha256 for p, f in fresh.files.items()} == \
        {os.path.basename(p): f.sha256 for p, f in observed.files.items()}
    assert fresh.applied == observed.applied



def test_firewall_intent_goes_through_the_firewall_executor_before_containers(
        api, mesh, tmp_path):
    """In a fresh network namespace (never the host's ruleset): the firewall executor applies
    the declared intent before any container operation, and a second apply does nothing."""
    import subprocess
    import sys

    from resolver import FirewallAllow, FirewallFloor, FirewallIntent

    from _netns import have_tools

    reason = have_tools()
    if reason:
        pytest.skip(reason)
    image = env_image(api)
    port = free_port()
    intent = FirewallIntent(
        address="127.0.0.1",
        allow=pvector([FirewallAllow(port, "tcp", pvector(["10.1.0.2"]), "web@n1 for app@n2")]),
        floors=pvector([FirewallFloor(22, "tcp", pvector(), "ssh")]),
        mesh_sources=pvector(["10.1.0.2", "127.0.0.1"]))
    decl = attrs.evolve(declaration(mesh, containers=[
        container(mesh, "web", image, port=port)]), firewall=intent)
    path = write_declaration(tmp_path / "d.json", decl)
    runs = tmp_path / "runs"
    runs.mkdir()
    script = (
        "import sys\n"
        "from executors.cli import main as cli\n"
        f"argv = ['apply', {path!r}, '--json', '--state-root', {str(tmp_path / 's')!r}, "
        "'--stop-timeout', '1']\n"
        "for run in ('first', 'second'):\n"
        f"    with open({str(runs)!r} + '/' + run + '.json', 'w') as out:\n"
        "        sys.stdout = out\n"
        "        code = cli.main(argv)\n"
        "        sys.stdout = sys.__stdout__\n"
        "    assert code == 0, run\n"
        "import nftables\n"
        "n = nftables.Nftables()\n"
        "rc, listing, err = n.cmd('list table inet mesh')\n"
        f"open({str(runs)!r} + '/table.txt', 'w').write(listing)\n")
    done = subprocess.run(["unshare", "-n", sys.executable, "-c", script], capture_output=True,
                          text=True, cwd=str(tmp_path), timeout=120,
                          env={**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(
                              os.path.abspath(__file__)))})
    assert done.returncode == 0, done.stderr
    first = json.loads((runs / "first.json").read_text())
    second = json.loads((runs / "second.json").read_text())
    kinds = [op["op"] for op in first["ops"]]
    assert any(k.startswith("firewall") for k in kinds), kinds
    firewall_at = min(i for i, k in enumerate(kinds) if k.startswith("firewall"))
    assert firewall_at < kinds.index("create-container")
    assert second["ops"] == []
    assert str(port) in (runs / "table.txt").read_text()


def test_an_image_named_by_digest_is_pulled_only_when_missing(api, mesh, tmp_path):
    """`repository@sha256:…` from the test registry: pulled when absent, never when present."""
    registry = os.environ.get("MESH_TEST_REGISTRY", "127.0.0.1:5000")
    try:
        import urllib.request

        urllib.request.urlopen(f"http://{registry}/v2/", timeout=3).close()
    except OSError as exc:
        pytest.skip(f"no registry at {registry} ({exc}); scripts/services.sh starts one")
    repository = f"{registry}/mesh-test/apply-pull-{mesh}"
    api.tag(env_image(api), repository, "v1")
    digest = None
    for event in api.push(repository, tag="v1", stream=True, decode=True):
        assert "error" not in event, event
        digest = event.get("aux", {}).get("Digest", digest)
    assert digest
    api.remove_image(f"{repository}:v1")  # untag: the repository@digest is now absent here
    reference = f"{repository}@{digest}"
    decl = declaration(mesh, containers=[container(mesh, "web", reference, command=SLEEPER)])
    try:
        import io

        from executors.common.report import LivePrinter, Report

        said = io.StringIO()
        report = apply_declaration(decl, api=api, state_root=tmp_path / "s", stop_timeout=1,
                                   report=Report(printer=LivePrinter(stream=said)))
        assert report.result == "applied", report.to_json()
        assert f"pulling {reference} (not present on this node)" in said.getvalue()
        assert api.inspect_container(f"{mesh}-web")["Config"]["Image"] == reference
        cleanup(api, mesh)
        said = io.StringIO()
        report = apply_declaration(decl, api=api, state_root=tmp_path / "s", stop_timeout=1,
                                   report=Report(printer=LivePrinter(stream=said)))
        assert [op.op for op in report.ops] == ["create-container"]
        assert "pulling" not in said.getvalue()  # present now: not pulled again
    finally:
        cleanup(api, mesh)
        try:
            api.remove_image(reference)
        except Exception:  # already gone
            pass
