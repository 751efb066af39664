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
from types import ModuleType
from typing import Callable, Iterator, Optional, Union

import attrs

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fuzz_mutators import (  # noqa: E402  (re-exported: the harness's one import)
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

__all__ = [
    "BYTE_MUTATORS", "CLASSES", "FAILURES", "MUTATORS", "REPO", "TEXT_MUTATORS", "TREE_MUTATORS",
    "Checker", "Seed", "apply", "classify", "load_seeds", "memoized_loaders", "mutation",
]

CLASSES = ("ok", "located fault", "position-less fault", "unformatted fault", "traceback", "hang")
FAILURES = ("position-less fault", "unformatted fault", "traceback", "hang")


# --------------------------------------------------------------------------- running check


class Checker:
    """A private copy of catalogue/ and fixtures/ in which documents are checked."""

    def __init__(self, root: Path, repo: Path = REPO) -> None:
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


@attrs.frozen
class _Raised:
    """A loader's answer that was an InputError (raised again on each hit)."""

    error: resolver.InputError


# (loader, text, file, further arguments, keyword arguments) → what it returned, or _Raised
_Key = tuple[str, Union[str, bytes], str, tuple[object, ...], tuple[tuple[str, object], ...]]
_MEMO: dict[_Key, object] = {}
_MEMO_LIMIT = 512
# the loaders swapped for memoized ones: resolver._documents' per-document loaders, and the
# parse of mesh.yaml that resolver._mesh_dir imported
_SWAPPED = [(documents_module, name) for name in
            ("load_mesh", "load_ledger", "load_module", "load_provisions")] \
    + [(mesh_dir_module, "parse_document")]


def _memoized(function: Callable[..., object]) -> Callable[..., object]:
    def call(text: object, file: str, *args: object, **kwargs: object) -> object:
        if not isinstance(text, (str, bytes)):  # a Parsed document: parsed already
            return function(text, file, *args, **kwargs)
        key = (function.__name__, text, file, args, tuple(sorted(kwargs.items())))
        hit = _MEMO.get(key)
        if hit is None:
            try:
                hit = function(text, file, *args, **kwargs)
            except resolver.InputError as error:
                hit = _Raised(error)
            if len(_MEMO) >= _MEMO_LIMIT:
                _MEMO.pop(next(iter(_MEMO)))
            _MEMO[key] = hit
        if isinstance(hit, _Raised):
            raise hit.error
        return hit

    return call


@contextlib.contextmanager
def memoized_loaders() -> Iterator[None]:
    """Within it, the resolver's per-document loaders (and load_mesh_dir's parse of mesh.yaml)
    remember their answers: sound because they are pure functions of their arguments."""
    saved: list[tuple[ModuleType, str, Callable[..., object]]] = [
        (module, name, getattr(module, name)) for module, name in _SWAPPED]
    try:
        for module, name, function in saved:
            setattr(module, name, _memoized(function))
        yield
    finally:
        for module, name, function in saved:
            setattr(module, name, function)
