"""`mesh check` on any mutation of any repository document: ok, or faults every one of which is
`file:line:col: what; expected …`; never a traceback, never a position-less fault.

The mutators are the fuzzing harness's own (scripts/fuzz_mutators.py: deleted keys, wrong types,
unknown and duplicated keys, tabs, deep nesting, huge numbers and strings, non-UTF-8 bytes,
alias chains and billion laughs, truncation, paths the file system refuses, ...); hypothesis
draws the seed document, the mutators and the randomness they use, so a failure shrinks to a
small mutation of one document. `python3 scripts/fuzz.py` runs the same at 100,000 documents.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))

import fuzzlib  # noqa: E402

SEEDS = fuzzlib.load_seeds()


@pytest.fixture(scope="module")
def checker():
    root = Path(tempfile.mkdtemp(prefix="mesh-fuzz-props-"))
    try:
        yield fuzzlib.Checker(root / "copy")
    finally:
        shutil.rmtree(root)


@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(seed=st.sampled_from(SEEDS),
       names=st.lists(st.sampled_from(sorted(fuzzlib.MUTATORS)), min_size=1, max_size=3,
                      unique=True),
       rng=st.randoms(use_true_random=False))
def test_check_of_any_mutated_document_is_ok_or_located(checker, seed, names, rng):
    data = fuzzlib.apply(seed, names, rng)
    with fuzzlib.memoized_loaders():
        code, output, trace = checker.check(seed, data)
    outcome, line = fuzzlib.classify(code, output, trace)
    assert outcome in ("ok", "located fault"), (outcome, line, trace[-2000:])
