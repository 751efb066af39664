"""One writer of the ledger at a time: a `mesh rotate` typed while another writer (the control
loop recording a report, here a process holding the lock between its read and its write) is
busy waits for it, says so, and then reads what the other wrote, so neither change is lost."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from _meshdir import FIXTURES, prepare, run_cli
from executors.control.ledger_lock import held, locked
from executors.control.loading import load_mesh_dir, mesh_lock, write_ledger

REPO = Path(__file__).resolve().parent.parent
CREDENTIAL = "postgres-database/postgres@lab/umami@home"
PIN = "registry.invalid/locked:1"

WRITER = """
import sys, time, attrs
from executors.control.loading import load_mesh_dir, mesh_lock, write_ledger
with mesh_lock(sys.argv[1]):
    inputs = load_mesh_dir(sys.argv[1])
    print("read", flush=True)
    time.sleep(3)  # the other writer starts now
    write_ledger(inputs.ledger_path, attrs.evolve(
        inputs.ledger, pins=inputs.ledger.pins.set(sys.argv[2], "sha256:" + "c" * 64)))
print("written", flush=True)
"""


def test_a_rotate_typed_while_another_writer_holds_the_ledger_waits_and_loses_nothing(tmp_path):
    mesh_dir, _, _ = prepare(FIXTURES / "homelab", tmp_path)
    assert run_cli("ca", "init", mesh_dir)[0] == 0
    assert run_cli("plan", "--issue", mesh_dir)[0] == 0
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(mesh_dir), PIN], env=env,
                              stdout=subprocess.PIPE, text=True)
    assert writer.stdout.readline().strip() == "read"
    rotate = subprocess.run([sys.executable, "-m", "executors.cli", "rotate", str(mesh_dir),
                             CREDENTIAL], env=env, capture_output=True, text=True, timeout=60)
    assert writer.wait(30) == 0
    assert rotate.returncode == 0, rotate.stderr
    assert "waiting for another writer of the ledger" in rotate.stderr
    ledger = load_mesh_dir(mesh_dir).ledger
    assert ledger.pins.get(PIN) == "sha256:" + "c" * 64, "the other writer's change was lost"
    assert ledger.credentials[CREDENTIAL].pending is not None, "the rotation was lost"


def test_the_lock_is_reentrant_and_released_and_write_ledger_takes_it_alone(tmp_path):
    mesh_dir, _, _ = prepare(FIXTURES / "homelab", tmp_path)
    ledger_path = mesh_dir / "ledger.yaml"
    with mesh_lock(mesh_dir):
        with locked(ledger_path):  # a function that locks again, inside a holder
            assert held(ledger_path)
            inputs = load_mesh_dir(mesh_dir)
            write_ledger(inputs.ledger_path, inputs.ledger)
        assert held(ledger_path)
    assert not held(ledger_path)
    start = time.monotonic()
    write_ledger(ledger_path, load_mesh_dir(mesh_dir).ledger)  # takes and releases it
    assert not held(ledger_path) and time.monotonic() - start < 30
    assert [p.name for p in mesh_dir.iterdir() if "lock" in p.name] == [], "no lock file left"
