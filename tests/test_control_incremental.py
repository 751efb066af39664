"""The control loop touches only the nodes whose declarations changed (issue 33, incremental).

`mesh control` runs as an operator runs it, against the RabbitMQ of scripts/services.sh, on a
mesh of three nodes whose images are pinned in the ledger (nobody applies: the declarations
wait in the nodes' queues). A one-line edit of mesh.yaml that changes one node's declaration
publishes exactly one message (to that node's queue, counted by the broker) and rewrites
exactly one declaration file (the others keep their inode and mtime); the ledger written by
that round changes nothing more. The memo the loop keeps (executors/control/loading.MemoLoader)
loads exactly what load_mesh_dir loads, through a fixed series of edits and faults and through
random ones (hypothesis: a memo that kept a changed file's parse fails it).
"""

from __future__ import annotations

import base64
import subprocess
import sys
import time
import uuid
from pathlib import Path

import attrs
import pika
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nacl.public import PrivateKey

from _fleet import Broker
from executors.common.amqp import FleetNames
from executors.control.control_state import ControlState
from executors.control.loading import MemoLoader, load_mesh_dir
import resolver
from resolver import InputError
from resolver.documents import dump_ledger
from resolver.rendering import record_declared

REPO = Path(__file__).resolve().parent.parent
DIGEST = "sha256:" + "cd" * 32
MODULE = """\
name: app
artifacts:
  image: {repository: registry.invalid/incremental/app, tag: "1"}
listens:
  web: {port: 8080}
containers:
  - name: main
    artifact: image
    env: {GREETING: hello}
"""
NODES = ("n1", "n2", "n3")
#: Each node's public key (the nodes never run here: nothing is sealed to them)
KEYS = {node: base64.b64encode(PrivateKey.generate().public_key.encode()).decode()
        for node in NODES}


def write_mesh(directory: Path, name: str, extra: str = "") -> None:
    lines = [f"mesh: {name}", "catalogue: catalogue", "nodes:"]
    lines += [f"  {node}: {{address: 10.9.0.{i + 1}, public-key: \"{KEYS[node]}\""
              f"{', control: true' if i == 0 else ''}}}" for i, node in enumerate(NODES)]
    lines += ["instances:"] + [f"  app@{node}: {{module: app, node: {node}}}" for node in NODES]
    if extra:
        lines.append(extra)
    lines.append("host-ports: {first: 21000, last: 21099}")
    (directory / "mesh.yaml").write_text("\n".join(lines) + "\n")


def make_mesh(directory: Path, name: str) -> None:
    (directory / "catalogue" / "app").mkdir(parents=True)
    (directory / "catalogue" / "provisions.yaml").write_text("{}\n")
    (directory / "catalogue" / "app" / "module.yaml").write_text(MODULE)
    write_mesh(directory, name)
    (directory / "ledger.yaml").write_text(
        f"version: 1\npins:\n  registry.invalid/incremental/app:1: '{DIGEST}'\n")


def run_mesh(directory: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "executors.cli", *args], cwd=directory,
                          capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})


def stamps(out: Path) -> dict[str, tuple[int, int]]:
    return {path.name: (path.stat().st_ino, path.stat().st_mtime_ns)
            for path in sorted(out.glob("*.declaration.json"))}


def test_an_edit_for_one_node_publishes_one_message_and_rewrites_one_file(tmp_path):
    broker = Broker.services()
    name = f"inc{uuid.uuid4().hex[:10]}"
    directory = tmp_path / "mesh"
    make_mesh(directory, name)
    assert run_mesh(directory, "ca", "init", ".").returncode == 0
    log = tmp_path / "control.log"
    handle = open(log, "w")
    control = subprocess.Popen(
        [sys.executable, "-m", "executors.cli", "control", ".", "--interval", "0.2",
         *broker.options()], cwd=directory, stdout=handle, stderr=subprocess.STDOUT,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
    handle.close()
    state = ControlState(directory)
    names = FleetNames(name)
    connection = None

    def published_lines() -> list[str]:
        return [line for line in log.read_text().splitlines()
                if line.startswith("control: published ")]

    def wait(condition, what: str, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            assert control.poll() is None, f"control exited:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"{what}:\n{log.read_text()[-3000:]}"
            time.sleep(0.1)

    def waiting() -> dict[str, int]:
        assert connection is not None
        channel = connection.channel()
        try:
            return {node: channel.queue_declare(names.node_queue(node), passive=True)
                    .method.message_count for node in NODES}
        finally:
            channel.close()

    try:
        wait(lambda: len(state.published()) == len(NODES), "the first round publishes all")
        connection = pika.BlockingConnection(broker.connection_parameters(
            names.vhost, names.control_user, state.control_password()))
        time.sleep(1.5)  # the ledger the first round wrote: a round that publishes nothing
        assert len(published_lines()) == len(NODES), log.read_text()
        assert waiting() == {node: 1 for node in NODES}
        before = stamps(state.out)
        assert len(before) == len(NODES)
        digests = {node: state.published()[node]["digest"] for node in NODES}

        # one line: a second instance on n2 (only n2's declaration changes)
        write_mesh(directory, name, "  app.extra@n2: {module: app, node: n2}")
        wait(lambda: len(published_lines()) >= len(NODES) + 1, "the edit is published")
        time.sleep(1.5)  # the round after it (the ledger it wrote) publishes nothing more
        assert published_lines()[-1].startswith("control: published n2 serial 2 "), \
            published_lines()
        assert len(published_lines()) == len(NODES) + 1, log.read_text()
        assert waiting() == {"n1": 1, "n2": 2, "n3": 1}
        after = stamps(state.out)
        changed = sorted(file for file in before if after[file] != before[file])
        assert changed == ["n2.declaration.json"], (before, after)
        now = state.published()
        assert {node: now[node]["digest"] for node in NODES if node != "n2"} == {
            node: digests[node] for node in NODES if node != "n2"}
        assert now["n2"]["digest"] != digests["n2"]
    finally:
        if connection is not None:
            connection.close()
        control.terminate()
        try:
            control.wait(30)
        except subprocess.TimeoutExpired:
            control.kill()
        broker.remove_mesh(name)


def write_recorded_ledger(directory: Path) -> None:
    """The ledger as a publish leaves it: every declaration recorded (`declared` renderings)."""
    (directory / "ledger.yaml").write_text(
        f"version: 1\npins:\n  registry.invalid/incremental/app:1: '{DIGEST}'\n")
    try:
        inputs = load_mesh_dir(directory)
    except InputError:
        return  # the mesh does not load (an earlier edit): the pins alone
    resolution = resolver.resolve_inputs(inputs)
    (directory / "ledger.yaml").write_text(dump_ledger(record_declared(resolution)))
    if resolution.declarations:
        assert '"declared":' in (directory / "ledger.yaml").read_text()  # an older ledger's


def _same(memo, full) -> None:
    for field in ("catalogue", "mesh", "ledger", "mesh_dir", "ledger_path"):
        assert getattr(memo, field) == getattr(full, field), field
    assert dict(memo.sources.documents) == dict(full.sources.documents)
    for key, where in full.sources.documents.items():  # a written ledger's laid out, not read
        for path in _tree_paths(where.tree):
            for at_key in (False, True):
                assert memo.sources.documents[key].position(path, at_key=at_key) == \
                    where.position(path, at_key=at_key), (key, path, at_key)
            assert memo.sources.documents[key].key_order(path) == where.key_order(path), \
                (key, path)


def _tree_paths(tree, path=()):
    """Every key path of a position tree the reader made, and one past each of its ends."""
    child = tree[-1]
    yield path
    if isinstance(child, dict):
        for name, entry in child.items():
            yield from _tree_paths(entry, path + (name,))
        yield path + ("not-a-key",)
    elif isinstance(child, list):
        for index, item in enumerate(child):
            yield from _tree_paths(item, path + (index,))
        yield path + (len(child),)


def _outcome(load, directory):
    try:
        return "loaded", load(directory)
    except InputError as error:
        return "faults", [str(fault) for fault in error.faults]


def test_the_loader_memo_loads_what_load_mesh_dir_loads_through_edits_and_faults(tmp_path):
    directory = tmp_path / "mesh"
    make_mesh(directory, "memo")
    memo = MemoLoader()
    edits = [
        lambda: None,
        lambda: write_mesh(directory, "memo", "  app.extra@n2: {module: app, node: n2}"),
        lambda: (directory / "catalogue" / "app" / "module.yaml").write_text(
            MODULE.replace("hello", "bonjour")),
        lambda: write_mesh(directory, "memo", "  app.bad@n2: {module: nope, node: n2}"),
        lambda: write_mesh(directory, "memo", "  app.bad@n2: {module: app, node: n2"),
        lambda: write_mesh(directory, "memo"),
        lambda: (directory / "ledger.yaml").unlink(),
        lambda: (directory / "catalogue" / "other").mkdir(),
        lambda: (directory / "catalogue" / "other" / "module.yaml").write_text(
            MODULE.replace("name: app", "name: other")),
        lambda: (directory / "catalogue" / "provisions.yaml").write_text("[\n"),
        lambda: (directory / "catalogue" / "provisions.yaml").write_text("{}\n"),
        lambda: (directory / "mesh.yaml").write_text(
            (directory / "mesh.yaml").read_text() + "ledger: elsewhere/ledger.yaml\n"),
        lambda: (directory / "mesh.yaml").write_text(
            (directory / "mesh.yaml").read_text().replace("elsewhere/", "")),
        lambda: write_recorded_ledger(directory),  # `declared`: normalized in place on load
        lambda: None,
    ]
    for number, edit in enumerate(edits):
        edit()
        parses = memo.parses
        kind, memo_result = _outcome(memo.load, directory)
        full_kind, full_result = _outcome(load_mesh_dir, directory)
        assert kind == full_kind, (number, memo_result, full_result)
        if kind == "faults":
            assert memo_result == full_result, number
        else:
            _same(memo_result, full_result)
        if number == 0:
            assert memo.parses > parses  # the first load parses every document
    parses = memo.parses
    _same(memo.load(directory), load_mesh_dir(directory))
    assert memo.parses == parses  # nothing changed: nothing parsed again
    write_mesh(directory, "memo", "  app.more@n3: {module: app, node: n3}")
    kept = memo.load(directory).catalogue.modules["app"]
    assert memo.parses == parses + 1  # only mesh.yaml
    write_mesh(directory, "memo", "  app.again@n3: {module: app, node: n3}")
    # a mesh.yaml edit does not structure the catalogue again: the resolver then compares
    # the very same Module objects (0.4 s of comparisons at 10,000 instances otherwise)
    before = memo.load(directory)
    assert before.catalogue.modules["app"] is kept
    # nor the instances and nodes it did not change (mesh.yaml parsed again in part)
    _replace_line(directory, "  app@n2: ", "  app@n2: {module: app, node: n3}")
    after = memo.load(directory)
    _same(after, load_mesh_dir(directory))
    assert after.mesh.instances["app@n2"].node == "n3"
    assert all(after.mesh.instances[name] is instance
               for name, instance in before.mesh.instances.items() if name != "app@n2")
    assert all(after.mesh.nodes[name] is node for name, node in before.mesh.nodes.items())


def test_a_relative_mesh_directory_loads_as_load_mesh_dir_has_it(tmp_path, monkeypatch):
    make_mesh(tmp_path / "mesh", "relative")
    monkeypatch.chdir(tmp_path)
    for spelled in ("mesh", "./mesh/", "mesh//"):
        _same(MemoLoader().load(spelled), load_mesh_dir(spelled))
    assert attrs.has(type(MemoLoader().load("mesh")))


@pytest.mark.parametrize("broken", ["mesh.yaml", "catalogue"])
def test_a_missing_file_reads_as_load_mesh_dir_says_it(tmp_path, broken):
    directory = tmp_path / "mesh"
    make_mesh(directory, "missing")
    memo = MemoLoader()
    memo.load(directory)
    target = directory / broken
    if target.is_dir():
        for path in sorted(target.rglob("*"), reverse=True):
            path.unlink() if path.is_file() else path.rmdir()
        target.rmdir()
    else:
        target.unlink()
    assert _outcome(memo.load, directory) == _outcome(load_mesh_dir, directory)


#: One-file edits of the test mesh, by name: what an operator does between two loads.
EDITS = {
    "add an instance": lambda d, k: write_mesh(
        d, "memo", f"  app.x{k}@n2: {{module: app, node: n2}}"),
    "an unknown module": lambda d, k: write_mesh(
        d, "memo", f"  app.x{k}@n2: {{module: nope, node: n2}}"),
    "broken YAML": lambda d, k: write_mesh(d, "memo", f"  app.x{k}@n2: {{module: app"),
    "back to plain": lambda d, k: write_mesh(d, "memo"),
    "module env": lambda d, k: (d / "catalogue" / "app" / "module.yaml").write_text(
        MODULE.replace("hello", f"hello{k}")),
    "module broken": lambda d, k: (d / "catalogue" / "app" / "module.yaml").write_text(
        MODULE.replace("containers:", "containers: [")),
    "ledger recorded": lambda d, k: write_recorded_ledger(d),
    "ledger removed": lambda d, k: (d / "ledger.yaml").unlink(missing_ok=True),
    "ledger pins": lambda d, k: (d / "ledger.yaml").write_text(
        f"version: 1\npins:\n  registry.invalid/incremental/app:1: '{DIGEST}'\n"),
    "ledger version 9": lambda d, k: (d / "ledger.yaml").write_text("version: 9\n"),
    "provisions broken": lambda d, k: (d / "catalogue" / "provisions.yaml").write_text("[\n"),
    "provisions plain": lambda d, k: (d / "catalogue" / "provisions.yaml").write_text("{}\n"),
    "nothing": lambda d, k: None,
    # one line of mesh.yaml: parsed again in part, the other instances and nodes kept
    "move an instance": lambda d, k: _replace_line(
        d, "  app@n2: ", f"  app@n2: {{module: app, node: n{1 + k % 3}}}"),
    "an instance on no node": lambda d, k: _replace_line(
        d, "  app@n2: ", "  app@n2: {module: app, node: nowhere}"),
    "an instance of the wrong type": lambda d, k: _replace_line(
        d, "  app@n2: ", "  app@n2: {module: [app], node: n2}"),
    "an instance removed": lambda d, k: _replace_line(d, "  app@n3: ", None),
    "a node moved": lambda d, k: _replace_line(
        d, "  n3: ", f"  n3: {{address: 10.9.1.{k + 1}, public-key: \"{KEYS['n3']}\"}}"),
    "a node line added": lambda d, k: _replace_line(
        d, "  n3: ", f"  n3: {{address: 10.9.0.3, public-key: \"{KEYS['n3']}\"}}\n"
        f"  n{k + 4}: {{address: 10.9.2.{k + 1}, public-key: \"{KEYS['n1']}\"}}"),
}


def _replace_line(directory: Path, start: str, line) -> None:
    """mesh.yaml with its line starting `start` replaced by `line` (None: removed); as it is
    when no line starts so."""
    path = directory / "mesh.yaml"
    lines = path.read_text().split("\n")
    for number, text in enumerate(lines):
        if text.startswith(start):
            lines[number:number + 1] = [] if line is None else [line]
            break
    path.write_text("\n".join(lines))


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(sorted(EDITS)), min_size=1, max_size=8))
def test_through_any_edits_the_memo_loads_what_a_fresh_load_does(tmp_path_factory, edits):
    directory = tmp_path_factory.mktemp("memo") / "mesh"
    make_mesh(directory, "memo")
    memo = MemoLoader()
    memo.load(directory)
    for number, edit in enumerate(edits):
        EDITS[edit](directory, number)
        kind, memo_result = _outcome(memo.load, directory)
        full_kind, full_result = _outcome(load_mesh_dir, directory)
        assert kind == full_kind, (edits[:number + 1], memo_result, full_result)
        if kind == "faults":
            assert memo_result == full_result, edits[:number + 1]
        else:
            _same(memo_result, full_result)
