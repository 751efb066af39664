"""The fuzzing harness (scripts/fuzz.py, fuzz_mutators.py, fuzzlib.py): it runs, it is
deterministic, and its classifier can tell every class, so a run that reports 0 tracebacks,
hangs and position-less faults means what it says. The 100,000-document run itself is not part of the
suite (README: `python3 scripts/fuzz.py --count 100000 --seed N`).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))

import fuzzlib  # noqa: E402


def test_every_document_of_the_repository_is_a_seed():
    seeds = fuzzlib.load_seeds()
    paths = {s.path for s in seeds}
    expected = {str(p.relative_to(REPO)) for pattern in (
        "fixtures/**/mesh.yaml", "fixtures/**/ledger.yaml", "fixtures/**/module.yaml",
        "fixtures/**/provisions.yaml", "catalogue/*/module.yaml", "catalogue/provisions.yaml")
        for p in REPO.glob(pattern)}
    assert paths == expected
    assert {s.kind for s in seeds} == {"mesh", "ledger", "module", "provisions"}
    homelab = {s.path: s.mesh_dir for s in seeds}
    assert homelab["catalogue/postgres/module.yaml"] == "fixtures/anchor"  # a mesh that uses it


def test_a_document_of_a_run_is_the_same_whoever_draws_it():
    seeds = fuzzlib.load_seeds()
    first = [fuzzlib.mutation(seeds, 5, i) for i in range(40)]
    again = [fuzzlib.mutation(list(seeds), 5, i) for i in reversed(range(40))][::-1]
    assert [(d.path, n, b) for d, n, b in first] == [(d.path, n, b) for d, n, b in again]
    assert len({b for _, _, b in first}) > 30  # and they differ from one another


def test_every_mutator_changes_its_document():
    seeds = fuzzlib.load_seeds()
    mesh = next(s for s in seeds if s.path == "fixtures/homelab/mesh.yaml")
    import random
    for name in fuzzlib.MUTATORS:
        changed = sum(fuzzlib.apply(mesh, [name], random.Random(i)) != mesh.text.encode()
                      for i in range(10))
        assert changed >= 5, name


@pytest.mark.parametrize("index", [0, 1, 2, 3])
def test_harness_examples_from_each_kind_of_seed(tmp_path, index):
    """A handful of harness documents, deterministic by seed and index, through the harness's
    own checker: the pipeline the 100,000-document run exercises."""
    seeds = fuzzlib.load_seeds()
    checker = fuzzlib.Checker(tmp_path / "copy")
    kinds = {s.kind for s in seeds}
    assert kinds == {"mesh", "ledger", "module", "provisions"}
    for i in range(index * 10, index * 10 + 10):
        document, names, data = fuzzlib.mutation(seeds, 12, i)
        outcome, line = fuzzlib.classify(*checker.check(document, data))
        assert outcome not in fuzzlib.FAILURES, (i, names, line)


def test_the_classifier_can_tell_every_class():
    classify = fuzzlib.classify
    assert classify(0, "OK: 1 nodes, 1 instances, 1 modules\n")[0] == "ok"
    assert classify(1, "m.yaml:1:2: error [x] y\n1 error (x) fails the check\n")[0] == "ok"
    assert classify(2, "m.yaml:1:2: what; expected that\n1 error\n")[0] == "located fault"
    assert classify(2, "m.yaml: what; expected that\n1 error\n")[0] == "position-less fault"
    assert classify(2, "mesh: something went wrong\n")[0] == "position-less fault"
    assert classify(2, "m.yaml:1:2: what\n1 error\n")[0] == "unformatted fault"
    assert classify(1, "m.yaml: error [x] y\n1 error (x) fails the check\n")[0] == \
        "position-less fault"
    assert classify(None, "", "Traceback ...\nValueError: x\n") == ("traceback", "ValueError: x")


def test_the_harness_runs_with_one_worker():
    result = subprocess.run([sys.executable, str(REPO / "scripts" / "fuzz.py"), "--count", "12",
                             "--seed", "3", "--workers", "1"],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    counts = dict(re.findall(r"^  ([a-z -]+?)\s+([\d,]+)$", result.stdout, re.M))
    assert sum(int(v.replace(",", "")) for v in counts.values()) == 12
    assert counts["traceback"] == counts["hang"] == counts["position-less fault"] == "0"




def test_the_time_guard_turns_a_stuck_check_into_a_hang(tmp_path):
    """The guard is what a 0 in `hang` rests on: a check that never returns is cut off."""
    script = f"""
import sys, time
sys.path.insert(0, {str(REPO / 'scripts')!r})
import fuzz
fuzz._setup(1, 0.5, 0, {str(tmp_path)!r})
fuzz._STATE["checker"].check = lambda document, data: time.sleep(60)
print(fuzz._one(0)[1])
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=120)
    assert result.stdout.strip() == "hang", result.stderr


def test_the_memory_guard_turns_a_runaway_check_into_a_counted_traceback(tmp_path):
    script = f"""
import sys
sys.path.insert(0, {str(REPO / 'scripts')!r})
import fuzz, fuzzlib
fuzz._setup(1, 20, 64, {str(tmp_path)!r})
fuzzlib.cli.main = lambda argv: [bytearray(16 * 1024 * 1024) for _ in range(64)]
print(fuzz._one(0)[1:3])
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=120)
    assert "'traceback', 'MemoryError'" in result.stdout, result.stdout + result.stderr
