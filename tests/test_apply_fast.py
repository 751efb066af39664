"""The quick no-op check of `mesh apply` (executors/node/apply/fast.py) against the real engine.

It must answer exactly as the full path does for a converged node (text, --json, --dry-run),
and decline to the full path for every kind of drift, which then fixes it, after which the
check answers again. It must not import the resolver, cattrs, ruamel, attrs or the docker SDK,
nor argparse, hashlib (OpenSSL) or socket.py; its SHA-256 is hashlib's.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import io
import json
import os
import subprocess
import sys
from contextlib import redirect_stdout
from pathlib import Path

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyrsistent import pmap, pvector

from resolver import (AccessDecl, BindingDecl, FirewallAllow, FirewallFloor, FirewallIntent,
                      SecretRef, StateDirDecl)
from resolver.rendering import secret_token

from executors.node.apply import fast as apply_fast
from executors.node.apply import sha

from executors.cli import main as cli

from executors.cli import apply as cmd_apply

from executors.common import keys
from _docker import (cleanup, container, declaration, docker_host, engine, env_image,
                     unique_mesh, write_declaration)

pytestmark = pytest.mark.integration

SLEEPER = ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]
FAST_MARK = "no-op check:"
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def api():
    return engine()


@pytest.fixture
def mesh(api):
    name = unique_mesh("q")
    yield name
    cleanup(api, name)


def run(capsys, *argv):
    """(exit code, stdout, stderr, whether the no-op check answered)."""
    code = cli.main(["apply", *map(str, argv), "--stop-timeout", "1",
                     "--docker-host", docker_host()])
    captured = capsys.readouterr()
    return code, captured.out, captured.err, FAST_MARK in captured.err


def run_json(capsys, *argv):
    code, out, err, fast = run(capsys, *argv, "--json")
    return code, json.loads(out), err, fast


class Node:
    """A node with every kind of thing the check looks at: two services, a run-once step, a
    state directory, an accessed path, an env file per container and a binding file."""

    def __init__(self, api, mesh, tmp_path, serial=1, web_env="one"):
        self.api, self.mesh, self.tmp = api, mesh, tmp_path
        self.state = tmp_path / "state"
        self.data = tmp_path / "srv" / "data"
        self.shared = tmp_path / "shared"
        self.shared.mkdir(exist_ok=True)
        self.path = self.write(serial, web_env)

    def decl(self, serial, web_env):
        image = env_image(self.api)
        return declaration(
            self.mesh, serial=serial,
            containers=[
                container(self.mesh, "init", image, command=["sh", "-c", "echo ok"],
                          run_once=True),
                container(self.mesh, "web", image, command=SLEEPER, env={"MODE": web_env}),
                container(self.mesh, "db", image, command=SLEEPER, env={"ROLE": "db"})],
            state_dirs=[StateDirDecl(str(self.data), 1000, 1000, "0750", "app@n1", "data")],
            accesses=[AccessDecl(str(self.shared), "rw", pvector(["app@n1"]))],
            bindings=[BindingDecl("app@n1", "db", "db@n1", None, pmap({"host": "10.0.0.9"}))])

    def write(self, serial, web_env="one", name="d.json"):
        return write_declaration(self.tmp / name, self.decl(serial, web_env))

    def name(self, short):
        return f"{self.mesh}-{short}"


@pytest.fixture
def node(api, mesh, tmp_path, capsys):
    node = Node(api, mesh, tmp_path)
    code, report, err, fast = run_json(capsys, node.path, "--state-root", node.state)
    assert code == 0 and not fast, err
    assert report["ops"], "the first apply creates everything"
    return node


# --------------------------------------------------------------------------- same answer


def test_the_check_answers_a_converged_node_exactly_as_the_full_path_does(node, capsys):
    for extra in ([], ["--json"], ["--dry-run"], ["--dry-run", "--json"]):
        fast = run(capsys, node.path, "--state-root", node.state, *extra)
        full = run(capsys, node.path, "--state-root", node.state, *extra, "--no-fast")
        assert fast[3] and not full[3], (extra, fast[2])
        assert (fast[0], fast[1]) == (full[0], full[1]) == (0, full[1]), extra
    code, report, _, _ = run_json(capsys, node.path, "--state-root", node.state)
    assert report["ops"] == [] and report["result"] == "applied"
    assert report["serial_applied"] == 1 and report["file"] == node.path


def test_a_no_op_with_sealed_secrets_answers_as_the_full_path_and_a_new_ledger_declines(
        api, mesh, tmp_path, capsys):
    from resolver import Credential, Generation, Ledger
    from resolver.documents import dump_ledger

    key_path = tmp_path / "n1.key"
    public = keys.create_node_key(key_path)
    secret = "s3cr3t-" + os.urandom(6).hex()

    def ledger(value):
        sealed = pmap({"n1": keys.seal(public, value, "n1")})
        path = tmp_path / "ledger.yaml"
        path.write_text(dump_ledger(Ledger(credentials=pmap(
            {"db-cred": Credential(active=Generation(3, sealed=sealed))}))))
        return path

    ledger_path = ledger(secret)
    decl = declaration(mesh, containers=[container(
        mesh, "web", env_image(api), command=SLEEPER, env={"DB_PASSWORD": secret_token("db-cred")},
        secrets=[SecretRef("db-cred", 3)])])
    path = write_declaration(tmp_path / "d.json", decl)
    argv = [path, "--state-root", tmp_path / "state", "--secrets", ledger_path, "--key", key_path]
    assert run(capsys, *argv)[0] == 0
    fast, full = run(capsys, *argv), run(capsys, *argv, "--no-fast")
    assert fast[3] and (fast[0], fast[1]) == (full[0], full[1])
    assert "credential generations in force: db-cred 3" in fast[1]
    fast, full = run(capsys, *argv, "--json"), run(capsys, *argv, "--json", "--no-fast")
    assert fast[3] and (fast[0], fast[1]) == (full[0], full[1])
    assert secret not in json.dumps(json.loads((tmp_path / "state" / ".mesh" / "noop.json").read_text()))
    # without the secrets the full path refuses: so must the check not answer
    code, _, err, fast_answered = run(capsys, path, "--state-root", tmp_path / "state")
    assert code == 1 and not fast_answered and "no sealed secrets were given" in err
    # a ledger that changed (here: the same value sealed again) is unsealed by the full path
    ledger(secret)
    code, report, _, fast_answered = run_json(capsys, *argv)
    assert code == 0 and not fast_answered and report["ops"] == []
    assert run(capsys, *argv)[3]


# --------------------------------------------------------------------------- drift


def stop_a_container(node):
    node.api.stop(node.name("web"), timeout=1)
    return [("start-container", node.name("web"))]


def remove_a_container(node):
    node.api.remove_container(node.name("db"), force=True)
    return [("create-container", node.name("db"))]


def recreate_a_container_by_hand_with_other_env(node):
    name = node.name("web")
    labels = node.api.inspect_container(name)["Config"]["Labels"]
    node.api.remove_container(name, force=True)
    labels = {**labels, "mesh.config-digest": "sha256:" + "0" * 64}
    node.api.create_container(env_image(node.api), command=SLEEPER, name=name,
                              environment=["MODE=by-hand"], labels=labels)
    node.api.start(name)
    return [("recreate-container", name)]


def add_an_extra_managed_container(node):
    name = node.name("extra")
    node.api.create_container(env_image(node.api), command=SLEEPER, name=name,
                              labels={"mesh.mesh": node.mesh})
    node.api.start(name)
    return [("remove-container", name)]


def chmod_a_state_dir(node):
    os.chmod(node.data, 0o777)
    return [("fix-dir", str(node.data))]


def chown_a_state_dir(node):
    os.chown(node.data, 1000, 1234)
    return [("fix-dir", str(node.data))]


def edit_an_env_file(node):
    env_file = node.state / ".mesh" / "env" / f"{node.name('db')}.env"
    env_file.write_text(env_file.read_text() + "EXTRA=1\n")
    return [("write-file", str(env_file))]


def chmod_a_binding_file(node):
    binding = node.state / ".mesh" / "bindings" / "app@n1--db.env"
    os.chmod(binding, 0o644)
    return [("write-file", str(binding))]


def add_a_stray_env_file(node):
    stray = node.state / ".mesh" / "env" / "stray.env"
    stray.write_text("A=1\n")
    return [("remove-file", str(stray))]


def remove_a_run_once_marker(node):
    (node.state / ".mesh" / "steps" / f"{node.name('init')}.digest").unlink()
    return [("run-step", node.name("init"))]


def write_a_newer_declaration(node):
    node.write(2, web_env="two")
    return [("recreate-container", node.name("web")), ("record-applied", "serial 2")]


def rewrite_the_declaration_same_content_other_bytes(node):
    Path(node.path).write_text(json.dumps(json.loads(Path(node.path).read_text())))
    return []  # the full path finds nothing to change, and the next run is fast again


DRIFTS = [stop_a_container, remove_a_container, recreate_a_container_by_hand_with_other_env,
          add_an_extra_managed_container, chmod_a_state_dir, chown_a_state_dir,
          edit_an_env_file, chmod_a_binding_file, add_a_stray_env_file, remove_a_run_once_marker,
          write_a_newer_declaration, rewrite_the_declaration_same_content_other_bytes]


@pytest.mark.parametrize("drift", DRIFTS, ids=[d.__name__ for d in DRIFTS])
def test_every_kind_of_drift_declines_to_the_full_path_which_fixes_it(node, capsys, drift):
    assert run(capsys, node.path, "--state-root", node.state)[3], "converged: the check answers"
    expected = drift(node)
    code, report, err, fast = run_json(capsys, node.path, "--state-root", node.state)
    assert code == 0 and not fast, err
    done = [(op["op"], op["subject"]) for op in report["ops"]]
    for op in expected:
        assert op in done, (op, done)
    code, report, err, fast = run_json(capsys, node.path, "--state-root", node.state)
    assert code == 0 and fast and report["ops"] == [], err
    assert report["serial_applied"] == (2 if drift is write_a_newer_declaration else 1)


def mesh_apply_process(node):
    """`mesh apply` as an operator runs it: a fresh process (`python -m executors.cli`, whose
    answered no-op ends the process at once, cli/apply.py's _end_process): (exit code, --json
    report, stderr, whether the no-op check answered)."""
    done = subprocess.run(
        [sys.executable, "-m", "executors.cli", "apply", str(node.path), "--state-root",
         str(node.state), "--docker-host", docker_host(), "--stop-timeout", "1", "--json"],
        capture_output=True, text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    return done.returncode, json.loads(done.stdout), done.stderr, FAST_MARK in done.stderr


def test_a_container_changed_behind_the_mesh_s_back_is_noticed_by_the_next_mesh_apply(node):
    """The no-op answer never hides a drift: with the node converged (the fresh process is
    answered by the check), one container stopped and another replaced by hand with other env
    (the way an operator might, outside the mesh) are both put right by the very next
    `mesh apply`, which then answers quickly again."""
    code, report, err, fast = mesh_apply_process(node)
    assert code == 0 and fast and report["ops"] == [], err
    node.api.stop(node.name("db"), timeout=1)
    expected = [("start-container", node.name("db")),
                *recreate_a_container_by_hand_with_other_env(node)]
    code, report, err, fast = mesh_apply_process(node)
    assert code == 0 and not fast, err
    assert "no-op check declined" in err
    assert sorted((op["op"], op["subject"]) for op in report["ops"]) == sorted(expected)
    web = node.api.inspect_container(node.name("web"))
    assert "MODE=one" in web["Config"]["Env"] and web["State"]["Running"]
    assert node.api.inspect_container(node.name("db"))["State"]["Running"]
    code, report, err, fast = mesh_apply_process(node)
    assert code == 0 and fast and report["ops"] == [], err


def test_a_no_op_asks_the_engine_one_list_call_on_either_path(node, capsys, monkeypatch):
    """Observing a converged node is one label-filtered list call, whether the check answers
    (over its raw socket) or the full path does (through the SDK): nothing is inspected per
    container."""
    import docker

    asked = []
    raw_get = apply_fast._get
    monkeypatch.setattr(apply_fast, "_get",
                        lambda path, target: asked.append(target) or raw_get(path, target))
    sdk_send = docker.APIClient.send
    monkeypatch.setattr(docker.APIClient, "send", lambda self, request, **kwargs: (
        asked.append(f"{request.method} {request.path_url}") or sdk_send(self, request,
                                                                         **kwargs)))
    code, _, err, fast = run(capsys, node.path, "--state-root", node.state)
    assert code == 0 and fast, err
    assert len(asked) == 1 and "/containers/json?all=1&filters=" in asked[0], asked
    asked.clear()
    code, report, err, fast = run_json(capsys, node.path, "--state-root", node.state,
                                       "--no-fast")
    assert code == 0 and not fast and report["ops"] == [], err
    assert len(asked) == 1 and asked[0].startswith("GET ") \
        and "/containers/json?" in asked[0], asked


def test_a_removed_accessed_path_declines_and_the_full_path_refuses(node, capsys):
    node.shared.rmdir()
    code, report, err, fast = run_json(capsys, node.path, "--state-root", node.state)
    assert code == 1 and not fast and report["result"] == "refused"
    node.shared.mkdir()
    assert run(capsys, node.path, "--state-root", node.state)[3]


def test_an_older_declaration_is_superseded_by_the_full_path(node, capsys):
    node.write(2, web_env="two")
    assert run(capsys, node.path, "--state-root", node.state)[0] == 0
    older = node.write(1, name="old.json")
    code, report, _, fast = run_json(capsys, older, "--state-root", node.state)
    assert code == 0 and not fast and report["result"] == "superseded"


# --------------------------------------------------------------------------- declines


def parsed(*argv):
    parser = argparse.ArgumentParser(prog="mesh")
    cmd_apply.register(parser.add_subparsers(dest="command", required=True))
    argv = [*map(str, argv)]
    if "--docker-host" not in argv:
        argv += ["--docker-host", docker_host()]
    return cmd_apply.options_from(parser.parse_args(["apply", *argv]))


def test_the_check_declines_what_it_does_not_handle(node, capsys, monkeypatch):
    assert apply_fast.try_noop(parsed(node.path, "--state-root", node.state), io.StringIO()) == 0
    second = node.write(1, name="same.json")
    for argv in ([node.path, second], [node.tmp], [node.path, "--docker-host", "tcp://127.0.0.1:1"],
                 [node.path, "--secrets", node.path]):
        args = parsed(*argv, "--state-root", node.state)
        with redirect_stdout(io.StringIO()) as out:
            assert apply_fast.try_noop(args, out) is None, argv
        assert out.getvalue() == ""
    lock = os.open(node.state / ".mesh" / "lock", os.O_RDWR)
    try:  # another apply holds the lock: the full path waits for it, the check does not
        fcntl.flock(lock, fcntl.LOCK_EX)
        assert apply_fast.try_noop(parsed(node.path, "--state-root", node.state),
                                   io.StringIO()) is None
    finally:
        os.close(lock)
    monkeypatch.setenv("MESH_APPLY_NO_FAST", "1")
    capsys.readouterr()
    assert not run(capsys, node.path, "--state-root", node.state)[3]


def test_a_firewall_intent_applied_with_no_firewall_is_checked_only_with_no_firewall(
        api, mesh, tmp_path, capsys):
    intent = FirewallIntent(address="127.0.0.1", allow=pvector([FirewallAllow(
        8080, "tcp", pvector(["10.1.0.2"]), "web")]), floors=pvector([FirewallFloor(
            22, "tcp", pvector(), "ssh")]), mesh_sources=pvector(["127.0.0.1"]))
    decl = attrs.evolve(declaration(mesh, containers=[
        container(mesh, "web", env_image(api), command=SLEEPER)]), firewall=intent)
    path = write_declaration(tmp_path / "d.json", decl)
    state = tmp_path / "state"
    assert run(capsys, path, "--state-root", state, "--no-firewall")[0] == 0  # host untouched
    assert run(capsys, path, "--state-root", state, "--no-firewall")[3]
    assert apply_fast.try_noop(parsed(path, "--state-root", state), io.StringIO()) is None


FIREWALL_SCRIPT = """
import io, json, sys
import nftables
from executors.cli import main as cli

argv = ["apply", sys.argv[1], "--state-root", sys.argv[2], "--stop-timeout", "1"]


def run(*extra):
    out, err = io.StringIO(), io.StringIO()
    sys.stdout, sys.stderr = out, err
    try:
        code = cli.main(argv + list(extra))
    finally:
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
    return [code, out.getvalue(), "no-op check:" in err.getvalue()]


def ops(result):
    return [op["op"] for op in json.loads(result[1])["ops"]]


seen = {"first": ops(run("--json"))}
for extra in ([], ["--json"], ["--dry-run"]):
    seen["same " + " ".join(extra)] = [run(*extra), run(*extra, "--no-fast")]
nftables.Nftables().cmd("delete table inet mesh")
seen["table deleted"] = [ops(run("--json")), run()[2]]
with open(sys.argv[2] + "/.mesh/firewall.digest", "w") as handle:
    handle.write("sha256:other\\n")
seen["record changed"] = [ops(run("--json")), run()[2]]
print(json.dumps(seen))
"""


def test_a_firewall_intent_in_force_is_checked_like_the_firewall_executor_does(
        api, mesh, tmp_path):
    """In a fresh network namespace (never the host's ruleset)."""
    from _netns import have_tools

    reason = have_tools()
    if reason:
        pytest.skip(reason)
    intent = FirewallIntent(address="127.0.0.1", allow=pvector([FirewallAllow(
        8080, "tcp", pvector(["10.1.0.2"]), "web")]), floors=pvector([FirewallFloor(
            22, "tcp", pvector(), "ssh")]), mesh_sources=pvector(["127.0.0.1"]))
    decl = attrs.evolve(declaration(mesh, containers=[
        container(mesh, "web", env_image(api), command=SLEEPER)]), firewall=intent)
    path = write_declaration(tmp_path / "d.json", decl)
    done = subprocess.run(["unshare", "-n", sys.executable, "-c", FIREWALL_SCRIPT, path,
                           str(tmp_path / "state")], capture_output=True, text=True,
                          cwd=str(tmp_path), timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO),
                               "DOCKER_HOST": docker_host()})
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert "firewall-replace-table" in seen["first"]
    for extra in ("", "--json", "--dry-run"):
        fast, full = seen["same " + extra]
        assert fast[2] and not full[2], extra
        assert fast[:2] == full[:2] and fast[0] == 0, extra
    assert "firewall-replace-table" in seen["table deleted"][0] and seen["table deleted"][1]
    assert "firewall-record-digest" in seen["record changed"][0] and seen["record changed"][1]


# --------------------------------------------------------------------------- cost


# what a plain no-op must not load: the full path's packages, and the standard library's
# costlier modules the check spares itself (argparse: no parser is built; hashlib: OpenSSL;
# socket.py: selectors and enums; http.client: ssl and email)
HEAVY = ("resolver", "cattrs", "ruamel", "attrs", "docker", "requests", "pyrsistent")
SPARED = ("argparse", "hashlib", "_hashlib", "socket", "selectors", "ssl", "http", "email")


def loaded_modules(script: str) -> tuple[set[str], str]:
    """The modules a fresh interpreter holds after running `script`, and what it said on
    stderr before (the module names are printed last, one line of JSON)."""
    done = subprocess.run([sys.executable, "-c", script + "\nimport json, sys\n"
                           "print(json.dumps(sorted(sys.modules)), file=sys.stderr)"],
                          capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    *said, names = done.stderr.strip().splitlines()
    return set(json.loads(names)), "\n".join(said)


def test_a_fast_no_op_imports_neither_the_resolver_nor_the_sdk(node):
    script = (
        "import sys; from executors.cli import main as cli\n"
        f"code = cli.main(['apply', {str(node.path)!r}, '--state-root', {str(node.state)!r}, "
        f"'--docker-host', {docker_host()!r}])\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
        f"{HEAVY!r})\n"
        "print(code, heavy, file=sys.stderr)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    assert FAST_MARK in done.stderr
    assert done.stderr.strip().endswith("0 []"), done.stderr
    assert "nothing to change" in done.stdout


def test_a_fast_no_op_spares_the_standard_library_s_costlier_modules(node):
    """Beyond what the interpreter itself loaded at start (its site-packages' .pth files may
    load anything), a no-op answered by the check adds none of SPARED."""
    started, _ = loaded_modules("")
    answered, said = loaded_modules(
        "import sys\nfrom executors.cli import main as cli\n"
        f"assert cli.main(['apply', {str(node.path)!r}, '--state-root', {str(node.state)!r}, "
        f"'--docker-host', {docker_host()!r}, '--json']) == 0\n")
    assert FAST_MARK in said, said
    added = {m.split(".")[0] for m in answered - started}
    assert "executors" in added
    assert added.isdisjoint(SPARED + HEAVY), sorted(added & set(SPARED + HEAVY))


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=4096))
def test_the_check_s_sha256_is_hashlib_s(data):
    """sha.py's digest (CPython's own SHA-256, sparing the check OpenSSL) is hashlib's: the
    record a full apply writes and the check's reading of the same bytes agree."""
    assert sha.sha256_hex(data) == hashlib.sha256(data).hexdigest()


def test_the_check_s_sha256_of_a_file_and_without_cpython_s_own_hashes(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"\x00mesh\n" * 1000)
    expected = hashlib.sha256(path.read_bytes()).hexdigest()
    assert sha.sha256_file(str(path)) == expected
    # a CPython built without `_sha256`/`_sha2` (None in sys.modules: the import fails)
    script = ("import sys\nsys.modules['_sha256'] = sys.modules['_sha2'] = None\n"
              "from executors.node.apply import sha\n"
              f"print(sha.sha256_file({str(path)!r}), 'hashlib' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [expected, "True"]


def test_each_subcommand_help_is_the_same_from_the_lazy_parser():
    def help_of(argv, commands):
        with redirect_stdout(io.StringIO()) as out:
            with pytest.raises(SystemExit):
                cli.build_parser(commands).parse_args(argv)
        return out.getvalue()

    assert cli.commands_for(["--help"]) == cli.COMMANDS == cli.commands_for([])
    assert cli.commands_for(["nonsense"]) == cli.COMMANDS
    for name in cli.COMMANDS:
        assert cli.commands_for([name, "--help"]) == [name]
        lazy = help_of([name, "--help"], cli.commands_for([name, "--help"]))
        assert lazy and lazy == help_of([name, "--help"], cli.COMMANDS), name


def test_the_quick_reading_of_apply_options_is_argparse_s_or_none(monkeypatch):
    """cli/main.py reads plainly spelled `mesh apply` options without argparse: for each
    spelling it reads, the same ApplyOptions as the parser; anything else is left to it."""
    monkeypatch.setenv("DOCKER_HOST", "unix:///run/x.sock")

    def parsed_options(argv):
        parser = argparse.ArgumentParser()
        cmd_apply.register(parser.add_subparsers(dest="command", required=True))
        return cmd_apply.options_from(parser.parse_args(["apply", *argv]))

    read = [["d.json"], ["a.json", "b.json", "--json"], ["--dry-run", "d.json", "--no-fast"],
            ["d.json", "--state-root", "/s", "--file-root=/f", "--secrets", "l.yaml", "--key",
             "k", "--docker-host", "tcp://h:1", "--stop-timeout", "3", "--no-firewall"],
            ["d.json", "--state-root=", "--stop-timeout=7", "--state-root", "/last"], ["-"]]
    for argv in read:
        assert cmd_apply.quick_options(argv) == parsed_options(argv), argv
    left = [[], ["--json"], ["-h"], ["d.json", "--help"], ["d.json", "--dry"],
            ["d.json", "--", "e.json"], ["a.json", "--json", "b.json"], ["d.json", "--json=1"],
            ["d.json", "--state-root"], ["d.json", "--state-root", "-x"], ["d.json", "-x"],
            ["d.json", "--stop-timeout", "-1"], ["d.json", "--stop-timeout", "x"]]
    for argv in left:
        assert cmd_apply.quick_options(argv) is None, argv
    options = {o for action in cmd_apply_parser_actions() for o in action.option_strings}
    assert options - {"-h", "--help"} == set(cmd_apply._FLAGS) | set(cmd_apply._VALUES)


def cmd_apply_parser_actions():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    cmd_apply.register(sub)
    return sub.choices["apply"]._actions
