"""The record of what was declared, one file per node beside the ledger (issue 33): written by
`mesh plan --out` (the same transaction the control loop writes through), only for the nodes
whose record changed; an older ledger.yaml holding `declared:` still loads and moves its record
out on the next write; a crash between the files loses nothing; a bad record is a file:line
fault (exit 2).

Through the `mesh` command on a copy of the homelab fixture.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import attrs
import resolver
from resolver.documents import declared_dir, dump_ledger, dump_record, load_record
from resolver.rendering import record_declared

from executors.control.loading import load_mesh_dir

from _meshdir import FIXTURES, prepare, run_cli

REPO = FIXTURES.parent


def record_path(mesh_dir, node):
    return mesh_dir / "ledger.declared" / node / "declared.json"


def stamps(mesh_dir):
    return {node: (record_path(mesh_dir, node).stat().st_ino,
                   record_path(mesh_dir, node).stat().st_mtime_ns)
            for node in ("home", "lab")}


def published(tmp_path):
    mesh_dir, _, _ = prepare(FIXTURES / "homelab", tmp_path)
    code, output = run_cli("plan", mesh_dir, "--out", tmp_path / "out")
    assert code == 0, output
    return mesh_dir


def test_the_record_is_one_file_per_node_beside_the_ledger_and_out_of_ledger_yaml(tmp_path):
    mesh_dir = published(tmp_path)
    assert declared_dir(str(mesh_dir / "ledger.yaml")) == str(mesh_dir / "ledger.declared")
    text = (mesh_dir / "ledger.yaml").read_text()
    assert "declared" not in text and "\nnodes:" not in text
    ledger = load_mesh_dir(mesh_dir).ledger
    for node in ("home", "lab"):
        path = record_path(mesh_dir, node)
        record = load_record(path.read_bytes(), str(path), node)
        assert oct(path.stat().st_mode & 0o777) == "0o600"
        assert record.node_serial == ledger.nodes[node]
        assert dict(record.declared) == {name: rendering for name, rendering
                                         in ledger.declared.items() if rendering.node == node}
        # canonical JSON, one instance a line
        lines = path.read_text().splitlines()
        assert len(lines) == len(record.declared) + 2
        assert json.loads(path.read_text())["node"] == node
    written = json.loads((tmp_path / "out" / "home.declaration.json").read_text())
    assert ledger.nodes["home"].digest == written["digest"]


def test_only_the_records_of_nodes_that_changed_are_written(tmp_path):
    mesh_dir = published(tmp_path)
    before = stamps(mesh_dir)
    code, output = run_cli("plan", mesh_dir, "--out", tmp_path / "out")
    assert code == 0, output
    assert stamps(mesh_dir) == before, "nothing changed, nothing written"
    path = mesh_dir / "mesh.yaml"
    text = path.read_text()
    old = "  mosquitto@home:\n    module: mosquitto\n    node: home\n"
    assert old in text
    path.write_text(text.replace(old, "", 1))  # served on home only
    code, output = run_cli("plan", mesh_dir, "--out", tmp_path / "out")
    assert code == 0, output
    after = stamps(mesh_dir)
    assert after["lab"] == before["lab"], "lab's record was rewritten for a change on home"
    assert after["home"] != before["home"]
    # a node added (home opens its broker to it, so home's record changes too): nothing
    # issued, so ledger.yaml is not written
    ledger_before = (mesh_dir / "ledger.yaml").stat()
    text = path.read_text()
    path.write_text(text.replace("\nnodes:\n", "\nnodes:\n  spare:\n    address: 10.44.0.99\n", 1))
    code, output = run_cli("plan", mesh_dir, "--out", tmp_path / "out")
    assert code == 0, output
    assert record_path(mesh_dir, "spare").is_file()
    assert (mesh_dir / "ledger.yaml").stat().st_ino == ledger_before.st_ino
    assert (mesh_dir / "ledger.yaml").stat().st_mtime_ns == ledger_before.st_mtime_ns


def test_an_older_ledger_with_declared_loads_and_moves_its_record_out_on_the_next_write(
        tmp_path):
    mesh_dir, _, _ = prepare(FIXTURES / "homelab", tmp_path)
    inputs = load_mesh_dir(mesh_dir)
    legacy = record_declared(resolver.resolve_inputs(inputs))
    (mesh_dir / "ledger.yaml").write_text(dump_ledger(legacy))  # as an earlier version wrote it
    assert '"declared":' in (mesh_dir / "ledger.yaml").read_text()
    loaded = load_mesh_dir(mesh_dir).ledger
    assert loaded == legacy and len(loaded.declared) > 20
    code, output = run_cli("plan", mesh_dir, "--out", tmp_path / "out")
    assert code == 0, output
    text = (mesh_dir / "ledger.yaml").read_text()
    assert "declared" not in text
    assert record_path(mesh_dir, "home").is_file() and record_path(mesh_dir, "lab").is_file()
    migrated = load_mesh_dir(mesh_dir).ledger
    assert migrated.declared == legacy.declared
    assert migrated.nodes == legacy.nodes  # the same declarations: the same serials


def test_a_crash_between_the_files_of_a_move_keeps_the_newer_record_and_the_next_write_mends_it(
        tmp_path):
    mesh_dir = published(tmp_path)
    ledger = load_mesh_dir(mesh_dir).ledger
    home = load_record(record_path(mesh_dir, "home").read_bytes(), "home")
    lab = load_record(record_path(mesh_dir, "lab").read_bytes(), "lab")
    # umami@home moved to lab: lab's record (gaining it) written, then the crash: home's
    # record still holds it as it was
    moved = attrs.evolve(home.declared["umami@home"], node="lab")
    newer = attrs.evolve(lab, epoch=max(home.epoch, lab.epoch) + 1,
                         declared=lab.declared.set("umami@home", moved))
    record_path(mesh_dir, "lab").write_text(dump_record(newer))
    reread = load_mesh_dir(mesh_dir).ledger
    assert reread.declared["umami@home"] == moved, "the newer record wins"
    assert len(reread.declared) == len(ledger.declared), "nothing lost, nothing doubled"
    # the other order (home's record newer): home's rendering wins
    record_path(mesh_dir, "home").write_text(dump_record(attrs.evolve(home, epoch=newer.epoch + 1)))
    assert load_mesh_dir(mesh_dir).ledger.declared["umami@home"].node == "home"
    # the next write leaves the instance in one record only
    code, output = run_cli("plan", mesh_dir, "--out", tmp_path / "out")
    assert code == 0, output
    home = load_record(record_path(mesh_dir, "home").read_bytes(), "home")
    lab = load_record(record_path(mesh_dir, "lab").read_bytes(), "lab")
    assert ("umami@home" in home.declared) != ("umami@home" in lab.declared)
    assert load_mesh_dir(mesh_dir).ledger.declared == ledger.declared


def test_a_record_ahead_of_an_older_ledger_yaml_wins_for_its_node(tmp_path):
    mesh_dir = published(tmp_path)
    ledger = load_mesh_dir(mesh_dir).ledger
    # a crash after the records, before ledger.yaml dropped an older `declared:` section
    stale = attrs.evolve(ledger, declared=ledger.declared.set(
        "umami@home", attrs.evolve(ledger.declared["umami@home"], containers=())),
        nodes=ledger.nodes.set("home", resolver.NodeSerial(0, "sha256:old")))
    (mesh_dir / "ledger.yaml").write_text(dump_ledger(stale))
    assert load_mesh_dir(mesh_dir).ledger == ledger


def test_a_bad_record_is_refused_at_its_file_and_line(tmp_path):
    mesh_dir = published(tmp_path)
    path = record_path(mesh_dir, "lab")
    lines = path.read_text().splitlines(keepends=True)
    lines[2] = lines[2].replace('"node":"lab"', '"node":"nowhere"', 1)
    path.write_text("".join(lines))
    result = subprocess.run([sys.executable, "-m", "executors.cli", "plan", str(mesh_dir)],
                            capture_output=True, text=True, cwd=REPO, timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    shown = str(path)  # not below the current directory: named whole
    assert f"{shown}:3:" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    path.write_text("".join(lines[:2]) + "not json at all {\n")
    result = subprocess.run([sys.executable, "-m", "executors.cli", "plan", str(mesh_dir)],
                            capture_output=True, text=True, cwd=REPO, timeout=120)
    assert result.returncode == 2 and f"{shown}:" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_the_control_loops_loader_joins_changed_records_as_a_whole_load_does(tmp_path):
    """The loader the control loop keeps joins only the records that changed into the ledger
    it joined last; after each round of edits and writes it equals load_mesh_dir."""
    from executors.control.loading import MemoLoader, write_ledger

    mesh_dir = published(tmp_path)
    memo = MemoLoader()
    first = memo.load(mesh_dir)
    assert first.ledger == load_mesh_dir(mesh_dir).ledger
    path = mesh_dir / "mesh.yaml"
    text = path.read_text()
    moved = text.replace("  umami@home:\n    module: umami\n    node: home",
                         "  umami@home:\n    module: umami\n    node: lab", 1)
    removed = moved.replace("  mosquitto@home:\n    module: mosquitto\n    node: home\n", "")
    for edit in (moved, removed, text):
        path.write_text(edit)
        inputs = memo.load(mesh_dir)
        ledger = record_declared(resolver.resolve_inputs(inputs))
        write_ledger(inputs.ledger_path, ledger, memo)
        again = memo.load(mesh_dir)
        assert again.ledger == ledger == load_mesh_dir(mesh_dir).ledger


def test_loading_and_writing_make_no_reference_cycles(tmp_path):
    """The loader and the writer pause the cyclic collector (runtime.collector_paused): they
    must leave nothing only it could free."""
    import gc

    from executors.control.loading import MemoLoader, write_ledger

    mesh_dir = published(tmp_path)
    memo = MemoLoader()
    inputs = memo.load(mesh_dir)
    ledger = record_declared(resolver.resolve_inputs(inputs))
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for _ in range(2):
            fresh = MemoLoader()
            inputs = fresh.load(mesh_dir)
            write_ledger(inputs.ledger_path, attrs.evolve(ledger, pins=ledger.pins.set(
                f"x/y:{_}", "sha256:" + "a" * 64)), fresh)
            fresh.load(mesh_dir)
            del fresh, inputs
        gc.collect()
        # ruamel's pure parser (a document with non-ASCII text) leaves its own parser objects
        # in a cycle, a few dozen per document, freed at the next collection; nothing else
        kinds = {type(o) for o in gc.garbage}
        assert all(k.__module__.startswith("ruamel") or k.__module__ == "builtins"
                   for k in kinds), kinds  # no model, record or loader of ours
        assert any(k.__module__.startswith("ruamel") for k in kinds)
        assert not any(isinstance(o, dict) and "version" in o for o in gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if was:
            gc.enable()


def test_a_record_json_reads_but_yaml_refuses_is_refused_as_yaml_refuses_it(tmp_path):
    """The record is read by json first; what the document reader refuses (a key twice) is
    refused all the same, at its line."""
    mesh_dir = published(tmp_path)
    path = record_path(mesh_dir, "lab")
    text = path.read_text()
    path.write_text(text.replace('"version":1}', '"version":1,"version":1}'))
    code, output = run_cli("plan", mesh_dir)
    assert code == 2 and "duplicate key 'version'" in output, output
    assert f"{path}:{len(text.splitlines())}:" in output, output


def test_records_of_gives_an_unchanged_nodes_record_itself_and_builds_the_changed_ones(tmp_path):
    """records_of(ledger, epoch, kept): the writer finds the records to write by identity:
    a node whose record records what its kept record does is given that very record; a
    changed serial, a changed rendering, an instance gone or come, a node new: a new record
    at `epoch`, equal to what records_of without `kept` builds (the kept ones keep their
    epoch: records_of without `kept` builds them anew at `epoch`, recording the same)."""
    from pyrsistent import pmap
    from resolver.documents import records_of, unchanged

    ledger = load_mesh_dir(published(tmp_path)).ledger
    kept = records_of(ledger, 1)
    assert all(records_of(ledger, 2, kept)[node] is kept[node] for node in kept)
    lab = sorted(n for n, r in ledger.declared.items() if r.node == "lab")
    home = sorted(n for n, r in ledger.declared.items() if r.node == "home")
    edits = {
        "serial": attrs.evolve(ledger, nodes=ledger.nodes.set("lab", attrs.evolve(
            ledger.nodes["lab"], serial=ledger.nodes["lab"].serial + 1))),
        "rendering": attrs.evolve(ledger, declared=ledger.declared.set(lab[0], attrs.evolve(
            ledger.declared[lab[0]], containers=ledger.declared[lab[0]].containers[1:]))),
        "gone": attrs.evolve(ledger, declared=ledger.declared.remove(lab[0])),
        "come": attrs.evolve(ledger, declared=ledger.declared.set(
            "extra@lab", attrs.evolve(ledger.declared[lab[0]]))),
        "moved": attrs.evolve(ledger, declared=ledger.declared.set(home[0], attrs.evolve(
            ledger.declared[home[0]], node="lab"))),
    }
    for label, edited in edits.items():
        again, whole = records_of(edited, 2, kept), records_of(edited, 2)
        changed = {node for node in again if again[node] is not kept.get(node)}
        assert set(again) == set(whole) and all(
            again[node] == whole[node] if node in changed else unchanged(whole[node], kept[node])
            for node in whole), label
        assert changed == ({"lab", "home"} if label == "moved" else {"lab"}), label
        assert all(again[node].epoch == 2 and not unchanged(again[node], kept[node])
                   for node in changed), label
    assert records_of(attrs.evolve(ledger, nodes=pmap(), declared=pmap()), 2, kept) == {}
