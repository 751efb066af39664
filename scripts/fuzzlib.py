"""The in-process `mesh check` of scripts/fuzz.py and property_tests/test_fuzz_props.py, and
what it printed, classified; the documents come from fuzz_mutators (re-exported here).

- Checker.check() writes the mutated bytes over the document in a private copy of catalogue/ and
  fixtures/ and runs `mesh check` in-process (executors.cli.main), then restores the original.
  classify() sorts what it printed into ok, located fault, position-less fault, unformatted
  fault (a fault line that is not `file:line:col: what; expected …`), or traceback; the
  guards of fuzz.py add hang.
- memoized_loaders(): the resolver is pure, so loading an unchanged document again gives the
  same result; within it the per-document loaders remember their answers for the documents
  that did not change, and each check costs one parse instead of twenty.
"""

from __future__ import annotations

import contextlib
import io
import re
import shutil
import sys
import traceback
from pathlib import Path
from typing import Callable, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fuzz_mutators import (  # noqa: E402,F401  (re-exported: the harness's one import)
    BYTE_MUTATORS,
    MUTATORS,
    REPO,
    TEXT_MUTATORS,
    TREE_MUTATORS,
    Seed,
    apply,
    load_seeds,
    mutation,
)

import resolver  # noqa: E402
import resolver._documents as documents_module  # noqa: E402
import resolver._mesh_dir as mesh_dir_module  # noqa: E402
from executors.cli import main as cli  # noqa: E402

CLASSES = ("ok", "located fault", "position-less fault", "unformatted fault", "traceback", "hang")
FAILURES = ("position-less fault", "unformatted fault", "traceback", "hang")


# --------------------------------------------------------------------------- running check


class Checker:
    """A private copy of catalogue/ and fixtures/ in which documents are checked."""

    def __init__(self, root: Path, repo: Path = REPO):
        self.root = Path(root)
        for part in ("catalogue", "fixtures"):
            shutil.copytree(repo / part, self.root / part)

    def check(self, seed: Seed, data: bytes) -> tuple[Optional[int], str, str]:
        """(exit code or None for a traceback, what it printed, the traceback)."""
        target = self.root / seed.path
        original = target.read_bytes()
        target.write_bytes(data)
        out, err = io.StringIO(), io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = cli.main(["check", str(self.root / seed.mesh_dir)])
            return code, out.getvalue() + err.getvalue(), ""
        except Exception:  # noqa: BLE001 - a traceback is an outcome to count (MemoryError too)
            return None, out.getvalue() + err.getvalue(), traceback.format_exc()
        finally:
            target.write_bytes(original)


_LOCATED = re.compile(r"^(?P<file>.+?):(?P<line>[1-9][0-9]*):(?P<col>[1-9][0-9]*): (?P<rest>.+)$")
_PROBLEM = re.compile(r"^(error|warning) \[[a-z-]+\] .+")
_SUMMARY = re.compile(r"^(OK: .*|\d+ errors? \(.*\) fails? the check.*)$")
_COUNT = re.compile(r"^\d+ errors?$")


def classify(code: Optional[int], output: str, trace: str = "") -> tuple[str, str]:
    """(class, the line that decided it) of one `mesh check` run."""
    if code is None:
        return "traceback", trace.strip().splitlines()[-1] if trace.strip() else "(no trace)"
    lines = [line for line in output.splitlines() if line.strip()]
    if code not in (0, 1, 2):
        return "traceback", f"exit {code}"
    if any("Traceback (most recent call last)" in line for line in lines):
        return "traceback", "a traceback was printed"
    if code == 2:
        body = lines[:-1] if lines and _COUNT.match(lines[-1]) else lines
        if not body:
            return "unformatted fault", "exit 2 and no fault printed"
        for line in body:
            located = _LOCATED.match(line)
            if located is None:
                return "position-less fault", line
            rest = located.group("rest")
            if "; expected " not in rest or rest.startswith("; expected"):
                return "unformatted fault", line
        return "located fault", body[0]
    if not lines or not _SUMMARY.match(lines[-1]):
        return "unformatted fault", lines[-1] if lines else "(nothing printed)"
    for line in lines[:-1]:
        located = _LOCATED.match(line)
        if located is None:
            return "position-less fault", line
        if not _PROBLEM.match(located.group("rest")):
            return "unformatted fault", line
    return "ok", lines[-1]


# --------------------------------------------------------------------------- memoizing the pure loaders


_MEMO: dict = {}
_MEMO_LIMIT = 512


def _memoized(function: Callable) -> Callable:
    def call(text, file, **kwargs):
        if not isinstance(text, (str, bytes)):  # a Parsed document: parsed already
            return function(text, file, **kwargs)
        key = (function.__name__, text, file, tuple(sorted(kwargs.items())))
        hit = _MEMO.get(key)
        if hit is None:
            try:
                hit = ("value", function(text, file, **kwargs))
            except resolver.InputError as error:
                hit = ("error", error)
            if len(_MEMO) >= _MEMO_LIMIT:
                _MEMO.pop(next(iter(_MEMO)))
            _MEMO[key] = hit
        if hit[0] == "error":
            raise hit[1]
        return hit[1]

    return call


@contextlib.contextmanager
def memoized_loaders():
    """Within it, the resolver's per-document loaders (and load_mesh_dir's parse of mesh.yaml)
    remember their answers: sound because they are pure functions of their arguments."""
    names = ("load_mesh", "load_ledger", "load_module", "load_provisions")
    saved = {n: getattr(documents_module, n) for n in names}
    saved_parse = mesh_dir_module.parse_document
    try:
        for n in names:
            setattr(documents_module, n, _memoized(saved[n]))
        mesh_dir_module.parse_document = _memoized(saved_parse)
        yield
    finally:
        for n in names:
            setattr(documents_module, n, saved[n])
        mesh_dir_module.parse_document = saved_parse
