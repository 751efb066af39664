"""`mesh graph`: the DOT text of every fixture against its golden file, byte for byte.

One golden per fixture mesh, as data: tests/golden/graph/<fixture>.dot (a new fixture is a new
file, not new code). The command runs as an operator runs it, from the repository root with
the fixture's relative path, so problem positions read `fixtures/…`. A fixture whose documents
do not load has no picture: the command refuses it (exit 2) and it has no golden.

Regenerate after an intended change with `MESH_UPDATE_GOLDEN=1 pytest tests/test_graph_golden.py`
and review the diff like code.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from ruamel.yaml import YAML

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
GOLDEN = Path(__file__).resolve().parent / "golden" / "graph"
NOW = "2026-01-01T00:00:00Z"  # certificate windows depend on the clock; the goldens do not
UPDATE = os.environ.get("MESH_UPDATE_GOLDEN") == "1"
CASES = sorted(p.parent for p in FIXTURES.glob("**/mesh.yaml"))


def mesh(*args, seed=None):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if seed is not None:
        env["PYTHONHASHSEED"] = seed
    return subprocess.run([sys.executable, "-m", "executors.cli", *map(str, args)],
                          capture_output=True, cwd=ROOT, env=env)


def loads(case: Path) -> bool:
    expected = case / "expected.yaml"
    return not (expected.exists() and "load_fault" in YAML(typ="safe").load(expected.read_text()))


def golden_of(case: Path) -> Path:
    return GOLDEN / f"{case.relative_to(FIXTURES)}.dot"


@pytest.mark.parametrize("case", CASES, ids=lambda c: str(c.relative_to(FIXTURES)))
def test_fixture_dot_equals_its_golden(case):
    relative = case.relative_to(ROOT)
    run = mesh("graph", relative, "--now", NOW)
    if not loads(case):
        assert run.returncode == 2, run.stderr.decode()
        assert run.stdout == b"" and b"Traceback" not in run.stderr
        assert not golden_of(case).exists(), "a fixture that does not load has no picture"
        return
    assert run.returncode in (0, 1), run.stderr.decode()
    golden = golden_of(case)
    if UPDATE:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_bytes(run.stdout)
    assert golden.exists(), f"no golden {golden}; run with MESH_UPDATE_GOLDEN=1 and review it"
    assert run.stdout == golden.read_bytes(), (
        f"{relative}: the DOT differs from {golden.relative_to(ROOT)}; if the change is "
        "intended, regenerate with MESH_UPDATE_GOLDEN=1 and review the diff")


@pytest.mark.parametrize("name", ["homelab", "refusals/ambiguous-provider"])
def test_the_same_mesh_gives_the_same_bytes_whatever_the_hash_seed(name):
    """Set and dict order under other string hashes must not reach the text."""
    runs = [mesh("graph", Path("fixtures") / name, "--now", NOW, seed=seed)
            for seed in ("0", "1", "4242")]
    assert runs[0].stdout and all(r.stdout == runs[0].stdout for r in runs)


def test_every_golden_belongs_to_a_fixture():
    expected = {golden_of(c) for c in CASES if loads(c)}
    assert set(GOLDEN.glob("**/*.dot")) == expected
