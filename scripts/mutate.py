#!/usr/bin/env python3
"""Mutation testing of resolver/ against property_tests/ alone.

    python3 scripts/mutate.py --sample 60 --seed 1 --jobs 2

A small AST mutator: it lists every mutation site in resolver/*.py (comparison swaps,
`and`/`or`, dropped `not`, constants, `+`/`-`, `return None`, a statement replaced by `pass`,
`break`/`continue`), samples `--sample` of them with a fixed `--seed`, and runs
`pytest -x property_tests/` (integration tests deselected) against each mutant, in a private
copy of the tree per worker: the real files are never edited. A mutant whose tests fail is
killed, one whose tests pass survived, one that outlives `--timeout` timed out. A mutant that
compiles to the same bytecode as the original is equivalent by construction and not run.

Prints killed / survived / timeout per module and, for each survivor, its diff; `--json FILE`
writes every result. Not part of the test suite (it takes tens of minutes): see README.md.

The baseline (which property runs which resolver/ line, by coverage.py) is the slow step; it
runs once with the `dev` profile and is kept in `.mutate-cache/baseline.json` under a digest
of resolver/ and property_tests/, so a second sample on unchanged sources starts at once.
A mutant first runs the tests that ran its lines (a kill shows fast); one that survives them
runs every property before it counts as survived: a value computed once and kept (a cache, a
table built on first use) runs its lines in one test and is read by others, which coverage
does not see (the schema's `additionalProperties` deleted passed the 2 tests that built the
schemas and failed the one that reads them).
Give `--timeout` to bound each mutant (a mutant that outlives it counts as timed out).

Sites are counted inside resolver/ except __init__.py (re-exports) and _codes.py (the
published code names: renaming one is a change of the API, which the fixtures pin, not a
behaviour the properties could notice). Docstrings, annotations and strings with spaces
(messages) are not mutated; identifier-like strings (keys, kinds, slots) are.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import hashlib
import json
import marshal
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ElementTree
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from queue import Empty, Queue
from types import FrameType
from typing import Optional, Sequence, Union

REPO = Path(__file__).resolve().parent.parent
PACKAGE = "resolver"
EXCLUDED = {"__init__.py", "_codes.py"}
COPIED = ("resolver", "executors", "property_tests", "catalogue", "fixtures", "tests", "docs",
          "scripts", "pyproject.toml")  # scripts/: the fuzz property imports its mutators
TESTS = "property_tests"

COMPARE_SWAPS: dict[type[ast.cmpop], type[ast.cmpop]] = {ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Lt: ast.LtE, ast.LtE: ast.Lt,
                 ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.In: ast.NotIn, ast.NotIn: ast.In,
                 ast.Is: ast.IsNot, ast.IsNot: ast.Is}
DELETABLE = (ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.If, ast.For, ast.While,
             ast.Return, ast.Raise, ast.Continue, ast.Break, ast.With, ast.Try, ast.Delete)
OPERATORS: dict[str, type[ast.cmpop]] = {"==": ast.Eq, "!=": ast.NotEq, "<": ast.Lt, "<=": ast.LtE, ">": ast.Gt,
             ">=": ast.GtE, "in": ast.In, "not in": ast.NotIn, "is": ast.Is,
             "is not": ast.IsNot}
SYMBOL = {v: k for k, v in OPERATORS.items()}


@dataclass(frozen=True)
class Site:
    """One mutation: the `index`-th node of ast.walk(module) changed by `kind`."""

    file: str  # relative to the repository
    index: int
    kind: str
    detail: str  # which alternative (e.g. the operator's position in a comparison)
    line: int
    end_line: int = 0
    in_function: bool = True  # False: module or class level, run when the module is imported

    @property
    def id(self) -> str:
        return f"{self.file}:{self.index}:{self.kind}:{self.detail}"


@dataclass
class Result:
    site: Site
    outcome: str  # killed | survived | timeout | equivalent | error
    seconds: float = 0.0
    diff: str = ""
    failed: str = ""  # the first failing test, for a killed mutant
    extra: dict[str, Union[int, str]] = field(default_factory=dict)


# --------------------------------------------------------------------------- sites


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    parents: dict[ast.AST, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[child] = node
    return parents


def _skipped(tree: ast.AST) -> set[ast.AST]:
    """Nodes never mutated: docstrings, annotations, `__all__`, TYPE_CHECKING blocks."""
    skip: set[ast.AST] = set()

    def everything(node: ast.AST) -> None:
        skip.update(ast.walk(node))

    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                everything(body[0])
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.returns is not None:
                everything(node.returns)
            for arg in ast.walk(node.args):
                if isinstance(arg, ast.arg) and arg.annotation is not None:
                    everything(arg.annotation)
        if isinstance(node, ast.AnnAssign):
            everything(node.annotation)
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__"
                                                for t in node.targets):
            everything(node)
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) \
                and node.test.id == "TYPE_CHECKING":
            everything(node)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            everything(node)
        if isinstance(node, ast.JoinedStr):  # f-string pieces are message text
            for value in node.values:
                if isinstance(value, ast.Constant):
                    skip.add(value)
    return skip


def _in_function(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return True
    return False


def _identifier_like(text: str) -> bool:
    return bool(text) and len(text) <= 40 and not any(c.isspace() for c in text)


def mutations_of(node: ast.AST, parents: dict[ast.AST, ast.AST],
                 skip: set[ast.AST]) -> list[tuple[str, str]]:
    """(kind, detail) for each way `node` can be mutated."""
    if node in skip:
        return []
    found: list[tuple[str, str]] = []
    if isinstance(node, ast.Compare):
        for j, op in enumerate(node.ops):
            if type(op) in COMPARE_SWAPS:
                found.append(("compare", str(j)))
    elif isinstance(node, ast.BoolOp):
        found.append(("boolop", ""))
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        found.append(("drop-not", ""))
    elif isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, bool):
            found.append(("constant", ""))
        elif isinstance(value, int):
            found.append(("constant", ""))
        elif isinstance(value, str) and _identifier_like(value):
            found.append(("constant", ""))
    elif isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        found.append(("arith", ""))
    if isinstance(node, ast.Return) and node.value is not None and not (
            isinstance(node.value, ast.Constant) and node.value.value is None):
        found.append(("return-none", ""))
    if isinstance(node, (ast.Break, ast.Continue)):
        found.append(("break-continue", ""))
    if isinstance(node, ast.stmt) and isinstance(node, DELETABLE) and _in_function(node, parents):
        parent = parents.get(node)
        if not isinstance(node, ast.Pass) and parent is not None:
            found.append(("delete", ""))
    return found


def list_sites(files: list[Path]) -> list[Site]:
    sites: list[Site] = []
    for path in files:
        tree = ast.parse(path.read_text(), str(path))
        parents, skip = _parents(tree), _skipped(tree)
        for index, node in enumerate(ast.walk(tree)):
            for kind, detail in mutations_of(node, parents, skip):
                line = getattr(node, "lineno", 0)
                sites.append(Site(str(path.relative_to(REPO)), index, kind, detail, line,
                                  getattr(node, "end_lineno", line) or line,
                                  _in_function(node, parents)))
    return sites


def _replace_in_parent(parents: dict[ast.AST, ast.AST], node: ast.AST, new: ast.AST) -> None:
    parent = parents[node]
    for name, value in ast.iter_fields(parent):
        if isinstance(value, list) and node in value:
            value[value.index(node)] = new
            return
        if value is node:
            setattr(parent, name, new)
            return
    raise AssertionError("node not found in its parent")


def mutate(source: str, site: Site) -> tuple[str, str]:
    """(mutated source, one-line description) of `site` applied to `source`."""
    tree = ast.parse(source)
    parents = _parents(tree)
    node = list(ast.walk(tree))[site.index]
    kind = site.kind
    if kind == "compare" and isinstance(node, ast.Compare):
        j = int(site.detail)
        old = type(node.ops[j])
        node.ops[j] = COMPARE_SWAPS[old]()
        what = f"{SYMBOL[old]} → {SYMBOL[type(node.ops[j])]}"
    elif kind == "boolop" and isinstance(node, ast.BoolOp):
        word = "and" if isinstance(node.op, ast.And) else "or"
        node.op = ast.Or() if word == "and" else ast.And()
        what = f"{word} → {'or' if word == 'and' else 'and'}"
    elif kind == "drop-not" and isinstance(node, ast.UnaryOp):
        _replace_in_parent(parents, node, node.operand)
        what = "not x → x"
    elif kind == "constant" and isinstance(node, ast.Constant) \
            and isinstance(node.value, (bool, int, str)):
        value = node.value
        if isinstance(value, bool):
            node.value = not value
        elif isinstance(value, int):
            node.value = value + 1
        else:
            node.value = value + "_mutant"
        what = f"{value!r} → {node.value!r}"
    elif kind == "arith" and isinstance(node, ast.BinOp):
        sign = "+" if isinstance(node.op, ast.Add) else "-"
        node.op = ast.Sub() if sign == "+" else ast.Add()
        what = f"{sign} → {'-' if sign == '+' else '+'}"
    elif kind == "return-none" and isinstance(node, ast.Return):
        node.value = None
        what = "return … → return None"
    elif kind == "break-continue" and isinstance(node, (ast.Break, ast.Continue)):
        new: ast.stmt = ast.Continue() if isinstance(node, ast.Break) else ast.Break()
        _replace_in_parent(parents, node, ast.copy_location(new, node))
        what = "break ↔ continue"
    elif kind == "delete" and isinstance(node, ast.stmt):
        _replace_in_parent(parents, node, ast.copy_location(ast.Pass(), node))
        what = f"statement deleted ({type(node).__name__})"
    else:  # pragma: no cover
        raise ValueError(f"{kind} does not apply to a {type(node).__name__}")
    ast.fix_missing_locations(tree)
    return ast.unparse(tree) + "\n", what


def same_bytecode(a: str, b: str) -> bool:
    def code(text: str) -> bytes:
        return marshal.dumps(compile(text, "m.py", "exec", dont_inherit=True, optimize=0))

    return code(a) == code(b)


def unified(original: str, mutated: str, site: Site) -> str:
    lines = difflib.unified_diff(original.splitlines(), mutated.splitlines(), lineterm="",
                                 fromfile=f"{site.file} (line {site.line})",
                                 tofile="mutant", n=1)
    return "\n".join(list(lines)[2:])


# --------------------------------------------------------------------------- running


def make_copy(root: Path) -> Path:
    tree = root / "tree"
    for name in COPIED:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, tree / name, ignore=shutil.ignore_patterns(
                "__pycache__", ".hypothesis", ".pytest_cache"))
        elif source.exists():
            tree.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, tree / name)
    return tree


def pytest_command(files: list[str], extra: list[str]) -> list[str]:
    return [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
            "-m", "not integration", "--tb=line", "-W", "ignore::DeprecationWarning",
            *extra, *files]


RUNNING: set[subprocess.Popen[str]] = set()  # the test processes under way, each its own group


def stop_all(*_signal: Union[int, Optional[FrameType]]) -> None:
    """Stop every test process this script started (by its process group), then leave."""
    for process in list(RUNNING):
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if _signal:
        raise SystemExit(f"stopped by signal {_signal[0]}")


def run_tests(tree: Path, files: list[str], timeout: float, profile: str,
              extra: Sequence[str] = (), env: Optional[dict[str, str]] = None,
              ) -> tuple[str, float, str, int]:
    """(outcome, seconds, first failure line, return code) of the tests in `tree`."""
    environment = dict(os.environ, PYTHONPATH=str(tree), PYTHONDONTWRITEBYTECODE="1",
                       HYPOTHESIS_PROFILE=profile, **(env or {}))
    start = time.monotonic()
    process = subprocess.Popen(pytest_command(files, list(extra)), cwd=tree, env=environment,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True)
    RUNNING.add(process)
    try:
        out, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        return "timeout", time.monotonic() - start, "", -1
    finally:
        RUNNING.discard(process)
    seconds = time.monotonic() - start
    if process.returncode == 0:
        return "survived", seconds, "", 0
    failed = next((line for line in out.splitlines()
                   if line.startswith(("FAILED", "ERROR")) or " Error" in line), "")
    if not failed:
        failed = out.strip().splitlines()[-1] if out.strip() else ""
    if process.returncode in (1, 2, 3):
        return "killed", seconds, failed[:300], process.returncode
    return "error", seconds, out[-2000:], process.returncode


COVERAGE_PLUGIN = """
# Written by scripts/mutate.py into its copy of the tree: records which test runs which line.
import os

import coverage

_cov = coverage.Coverage(data_file=os.environ["MUTATE_COVERAGE_FILE"],
                         include=[os.path.join(os.environ["MUTATE_TREE"], "resolver", "*")])
_cov.start()


def pytest_runtest_setup(item):
    _cov.switch_context(item.nodeid)


def pytest_runtest_teardown(item, nextitem):
    _cov.switch_context("")


def pytest_unconfigure(config):
    _cov.stop()
    _cov.save()
"""


@dataclass
class Baseline:
    files: list[str]  # test files, fastest first
    seconds: float
    # relative file → line → test ids ("" = import)
    tests: dict[str, dict[int, set[str]]] = field(default_factory=dict)
    order: dict[str, int] = field(default_factory=dict)  # test id → its position in the run

    def tests_for(self, site: Site) -> Optional[list[str]]:
        """The tests that run the mutated lines, in baseline order; None means every test
        (the lines run at import, or nothing is known); [] means no test runs them."""
        if not self.tests:
            return None
        lines = self.tests.get(site.file, {})
        found: set[str] = set()
        for line in range(site.line, max(site.line, site.end_line) + 1):
            found |= lines.get(line, set())
        if "" in found or not site.in_function:
            return None
        return sorted(found, key=lambda t: self.order.get(t, len(self.order)))


def source_digest(root: Path) -> str:
    """sha256 over resolver/ and property_tests/ sources: the key of a cached baseline."""
    digest = hashlib.sha256()
    for path in sorted([*(root / PACKAGE).rglob("*.py"), *(root / TESTS).rglob("*.py")]):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def cached_baseline(cache: Optional[Path], key: str) -> Optional[Baseline]:
    """The baseline recorded for exactly these sources (same key), or None."""
    if cache is None or not cache.exists():
        return None
    try:
        plain = json.loads(cache.read_text())
    except ValueError:
        return None
    if plain.get("key") != key:
        return None
    tests = {f: {int(line): set(ids) for line, ids in lines.items()}
             for f, lines in plain["tests"].items()}
    return Baseline(plain["files"], plain["seconds"], tests, plain["order"])


def save_baseline(cache: Path, key: str, known: Baseline) -> None:
    """Write the baseline whole (temp file, then rename) under its key."""
    plain = {"key": key, "files": known.files, "seconds": known.seconds, "order": known.order,
             "tests": {f: {str(line): sorted(ids) for line, ids in lines.items()}
                       for f, lines in known.tests.items()}}
    cache.parent.mkdir(parents=True, exist_ok=True)
    temporary = cache.with_suffix(".tmp")
    temporary.write_text(json.dumps(plain))
    os.replace(temporary, cache)


def baseline(tree: Path, profile: str, timeout: float) -> Baseline:
    """The unmutated tests must pass. Files are ordered fastest first (so `-x` stops early on
    the cheap kills) and, when coverage.py is installed, each test's resolver/ lines are
    recorded, so a mutant runs only the tests that execute what it changed."""
    report = tree / "baseline.xml"
    extra = [f"--junitxml={report}"]
    env: dict[str, str] = {}
    try:
        import coverage  # noqa: F401  (optional: without it every mutant runs every test)
    except ImportError:
        print("coverage.py is not installed: every mutant runs every property test "
              "(python3 -m pip install coverage)", flush=True)
    else:
        (tree / "_mutate_coverage.py").write_text(COVERAGE_PLUGIN)
        extra += ["-p", "_mutate_coverage"]
        env = {"MUTATE_COVERAGE_FILE": str(tree / ".coverage"), "MUTATE_TREE": str(tree)}
    outcome, seconds, failed, code = run_tests(tree, [TESTS], timeout, profile, extra=extra,
                                               env=env)
    if outcome != "survived":
        raise SystemExit(f"the unmutated tree does not pass its property tests ({outcome}, "
                         f"rc {code}): {failed}")
    per_file: dict[str, float] = defaultdict(float)
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        module = case.get("classname", "").split(".")
        name = "/".join(module[:2]) + ".py" if len(module) >= 2 else ""
        if name.startswith(TESTS + "/"):
            per_file[name] += float(case.get("time", 0))
    files = sorted(per_file, key=lambda f: (per_file[f], f))
    listed = {p.as_posix() for p in (tree / TESTS).glob("test_*.py")}
    missing = sorted(str(Path(p).relative_to(tree)) for p in listed) if not files else []
    result = Baseline(files or missing, seconds)
    if env:
        import coverage  # (optional, found above)

        data = coverage.CoverageData(basename=env["MUTATE_COVERAGE_FILE"])
        data.read()
        for measured in data.measured_files():
            relative = str(Path(measured).relative_to(tree))
            by_line = data.contexts_by_lineno(measured)
            result.tests[relative] = {line: set(contexts) for line, contexts in by_line.items()}
        ids = sorted({t for lines in result.tests.values() for ts in lines.values() for t in ts
                      if t}, key=lambda t: (result.files.index(t.split("::")[0])
                                            if t.split("::")[0] in result.files else 99, t))
        result.order = {t: i for i, t in enumerate(ids)}
    return result


def worker(number: int, base: Path, queue: Queue[tuple[Site, str, str]], results: list[Result],
           lock: threading.Lock, known: Baseline, timeout: float, profile: str,
           originals: dict[str, str]) -> None:
    tree = make_copy(base / f"w{number}")
    while True:
        try:
            site, mutated, diff = queue.get_nowait()
        except Empty:
            return
        tests = known.tests_for(site)
        target = tree / site.file
        target.write_text(mutated)
        try:
            # the tests that ran these lines first (a kill is found fast); a survivor of them
            # is confirmed against every property, since a value computed once and kept (a
            # cache, a module-level table) runs its lines in one test and is read by others
            outcome, seconds, failed = "survived", 0.0, ""
            if tests:
                outcome, seconds, failed, _ = run_tests(tree, tests, timeout, profile)
            extra: dict[str, Union[int, str]] = {"tests": len(tests) if tests else "all"}
            if outcome == "survived":
                outcome, more, failed, _ = run_tests(tree, known.files, timeout, profile)
                seconds += more
                if tests is not None:
                    extra["tests"] = f"{len(tests)}+all"
                if tests == [] and outcome == "survived":
                    extra["note"] = "no property runs it"
        finally:
            target.write_text(originals[site.file])
        result = Result(site, outcome, seconds, diff, failed, extra)
        with lock:
            results.append(result)
            done = len(results)
            print(f"[{done}] {result.outcome:9s} {result.seconds:6.0f}s "
                  f"{result.extra.get('tests')!s:>4} tests  {site.file}:{site.line} "
                  f"{site.kind} {diff.splitlines()[0] if diff else ''}"[:170], flush=True)


def summarise(results: list[Result], sampled: int, total_sites: int, seed: int) -> str:
    out: list[str] = []
    by_module: dict[str, Counter[str]] = defaultdict(Counter)
    for r in results:
        by_module[Path(r.site.file).name][r.outcome] += 1
    outcomes = ("killed", "survived", "timeout", "equivalent", "error")
    out.append(f"\nmutation sample: {sampled} of {total_sites} sites in {PACKAGE}/, seed {seed}")
    out.append(f"{'module':18s} " + " ".join(f"{o:>10s}" for o in outcomes))
    for module in sorted(by_module):
        out.append(f"{module:18s} " + " ".join(f"{by_module[module][o]:10d}" for o in outcomes))
    total = Counter(r.outcome for r in results)
    out.append(f"{'total':18s} " + " ".join(f"{total[o]:10d}" for o in outcomes))
    judged = total["killed"] + total["timeout"] + total["survived"]
    if judged:
        rate = (total["killed"] + total["timeout"]) / judged
        out.append(f"killed (timeouts counted as killed) {total['killed'] + total['timeout']} of "
                   f"{judged} non-equivalent mutants run: {rate:.0%}")
    survivors = sorted((r for r in results if r.outcome in ("survived", "error")),
                       key=lambda r: (r.site.file, r.site.line))
    for r in survivors:
        why = f" [{r.extra['note']}]" if r.extra.get("note") else ""
        out.append(f"\n--- {r.outcome}{why}: {r.site.id} (line {r.site.line})")
        out.append(r.diff if r.outcome == "survived" else r.failed)
    return "\n".join(out)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sample", type=int, default=60, help="mutants to draw (default 60)")
    parser.add_argument("--seed", type=int, default=1, help="sampling seed (default 1)")
    parser.add_argument("--jobs", type=int, default=1, help="parallel workers (default 1)")
    parser.add_argument("--timeout", type=float, default=0,
                        help="seconds per mutant (default: 3x the baseline run + 60)")
    parser.add_argument("--profile", default="mutate",
                        help="hypothesis profile (default `mutate`: derandomized, no database)")
    parser.add_argument("--module", action="append", default=[],
                        help="only sites in this file of resolver/ (repeatable)")
    parser.add_argument("--site", action="append", default=[],
                        help="run exactly this site id (as printed), instead of a sample")
    parser.add_argument("--list", action="store_true", help="count the sites per module, run nothing")
    parser.add_argument("--json", help="write every result to this file")
    parser.add_argument("--baseline-profile", default="dev",
                        help="hypothesis profile of the coverage baseline (default `dev`: 50 "
                             "examples; which test runs which line hardly changes with more)")
    parser.add_argument("--cache", default=str(REPO / ".mutate-cache" / "baseline.json"),
                        help="where the coverage baseline is kept, keyed by a digest of "
                             "resolver/ and property_tests/ (reused while they are unchanged; "
                             "'' to never cache)")
    args = parser.parse_args(argv)

    files = sorted(p for p in (REPO / PACKAGE).glob("*.py") if p.name not in EXCLUDED)
    if args.module:
        wanted = {Path(m).name for m in args.module}
        files = [p for p in files if p.name in wanted]
    sites = list_sites(files)
    if args.list:
        for module, count in sorted(Counter(Path(s.file).name for s in sites).items()):
            print(f"{module:18s} {count:5d}")
        print(f"{'total':18s} {len(sites):5d}")
        return 0
    if args.site:
        by_id = {s.id: s for s in sites}
        unknown = [s for s in args.site if s not in by_id]
        if unknown:
            raise SystemExit(f"unknown site(s): {', '.join(unknown)}")
        chosen = [by_id[s] for s in args.site]
    else:
        chosen = random.Random(args.seed).sample(sites, min(args.sample, len(sites)))
    originals = {s.file: (REPO / s.file).read_text() for s in chosen}

    results: list[Result] = []
    queue: Queue[tuple[Site, str, str]] = Queue()
    for site in sorted(chosen, key=lambda s: (s.file, s.index, s.kind, s.detail)):
        original = originals[site.file]
        mutated, what = mutate(original, site)
        unparsed = ast.unparse(ast.parse(original)) + "\n"
        diff = f"{what}\n" + unified(unparsed, mutated, site)
        if same_bytecode(unparsed, mutated):
            results.append(Result(site, "equivalent", 0.0, diff, "same bytecode"))
            continue
        queue.put((site, mutated, diff))

    signal.signal(signal.SIGTERM, stop_all)
    with tempfile.TemporaryDirectory(prefix="mesh-mutate-") as base_dir:
        base = Path(base_dir)
        cache = Path(args.cache) if args.cache else None
        key = source_digest(REPO) + "/" + args.baseline_profile
        known = cached_baseline(cache, key)
        if known is not None:
            print(f"baseline: reused {cache} (sources unchanged)", flush=True)
        else:
            print(f"baseline: the unmutated property tests in a copy of the tree "
                  f"(profile {args.baseline_profile})", flush=True)
            known = baseline(make_copy(base / "baseline"), args.baseline_profile,
                             args.timeout * 20 if args.timeout else 7200)
            if cache is not None:
                save_baseline(cache, key, known)
        seconds = known.seconds
        timeout = args.timeout or 3 * seconds + 60
        print(f"baseline passed in {seconds:.0f}s; per-mutant timeout {timeout:.0f}s; "
              f"{queue.qsize()} mutant(s) to run with {args.jobs} worker(s)", flush=True)
        lock = threading.Lock()
        threads = [threading.Thread(target=worker, args=(n, base, queue, results, lock, known,
                                                         timeout, args.profile, originals))
                   for n in range(max(1, args.jobs))]
        for t in threads:
            t.daemon = True
            t.start()
        try:
            for t in threads:
                while t.is_alive():
                    t.join(1)
        except KeyboardInterrupt:
            stop_all()
            raise

    print(summarise(results, len(chosen), len(sites), args.seed))
    if args.json:
        Path(args.json).write_text(json.dumps([dict(asdict(r), id=r.site.id) for r in results],
                                              indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
