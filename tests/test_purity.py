"""resolver/ is pure: no module in it imports anything that does I/O or reads ambient state.

The scan reads the source (AST), so an import hidden in a function body, a `from X import`,
`__import__("os")` or `importlib.import_module("os")` is found as well as a top-level one.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

RESOLVER = Path(__file__).resolve().parent.parent / "resolver"

FORBIDDEN = {
    "os", "io", "pathlib", "subprocess", "socket", "time", "datetime", "random", "secrets",
    "logging", "threading", "executors", "importlib", "shutil", "tempfile", "glob", "sys",
    "multiprocessing", "asyncio", "urllib", "http", "requests", "docker", "psycopg", "uuid",
    "signal", "select", "selectors", "fcntl", "mmap", "ctypes", "sqlite3", "ssl",
    "concurrent", "getpass", "platform", "locale", "fileinput", "builtins", "gc",
}
# The one exception: resolve() pauses CPython's cyclic collector while it runs and restores the
# caller's setting (process state, not I/O; a resolution makes no reference cycle, which
# tests/test_resolver_collector.py proves, so pausing cannot grow memory). Only
# resolver/_collector.py may import `gc`, and nothing else there is allowed.
ALLOWED = {("_collector.py", "gc")}
FORBIDDEN_CALLS = {"open", "__import__", "exec", "eval", "compile", "input", "breakpoint"}


def forbidden_uses(source: str, filename: str) -> list[str]:
    """Every forbidden import or call in `source`, as 'file:line: what'."""
    found = []
    tree = ast.parse(source, filename)
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Call):
            func = node.func
            called = func.id if isinstance(func, ast.Name) else None
            if called in FORBIDDEN_CALLS:
                found.append(f"{filename}:{node.lineno}: calls {called}()")
        for name in names:
            if name.split(".")[0] in FORBIDDEN:
                found.append(f"{filename}:{node.lineno}: imports {name}")
    return found


def resolver_sources() -> list[Path]:
    return sorted(RESOLVER.rglob("*.py"))


def test_resolver_has_sources():
    assert any(p.name == "__init__.py" for p in resolver_sources())


@pytest.mark.parametrize("path", resolver_sources(), ids=lambda p: p.name)
def test_resolver_module_is_pure(path: Path):
    allowed = {f"imports {name}" for module, name in ALLOWED if module == path.name}
    found = forbidden_uses(path.read_text(), str(path))
    assert [f for f in found if f.split(": ", 1)[1] not in allowed] == []


def test_only_the_collector_module_may_import_gc():
    importing = sorted(p.name for p in resolver_sources()
                       if any(f.endswith(": imports gc")
                              for f in forbidden_uses(p.read_text(), str(p))))
    assert importing == ["_collector.py"]


@pytest.mark.parametrize("source, what", [
    ("import os\n", "imports os"),
    ("import os.path as p\n", "imports os.path"),
    ("from pathlib import Path\n", "imports pathlib"),
    ("from datetime import datetime\n", "imports datetime"),
    ("def f():\n    import random\n", "imports random"),
    ("from executors.control.loading import load_mesh_dir\n", "imports executors.control.loading"),
    ("m = __import__('socket')\n", "calls __import__()"),
    ("import importlib\nimportlib.import_module('os')\n", "imports importlib"),
    ("with open('x') as f:\n    pass\n", "calls open()"),
    ("import gc\ngc.disable()\n", "imports gc"),
])
def test_scan_finds_forbidden_use(tmp_path: Path, source: str, what: str):
    bad = tmp_path / "_bad.py"
    bad.write_text(source)
    found = forbidden_uses(bad.read_text(), str(bad))
    assert found and what in found[0]


def test_scan_allows_pure_imports():
    source = "import ipaddress\nimport hashlib\nfrom typing import Any\nfrom ._model import Mesh\n"
    assert forbidden_uses(source, "ok.py") == []


# The executors' diffs and renderings are pure functions too (observe → diff → apply keeps
# only observe and apply impure); they are held to the same rule.
# They may import each other and nothing else of the executors.
PURE_EXECUTOR_MODULES = ["node/apply/diff.py", "node/apply/compare.py", "node/firewall/render.py",
                         "node/firewall/readback.py", "node/firewall/meaning.py",
                         "common/marks.py"]
PURE_EXECUTOR_IMPORTS = {"executors." + name[:-3].replace("/", ".")
                         for name in PURE_EXECUTOR_MODULES}


@pytest.mark.parametrize("name", PURE_EXECUTOR_MODULES)
def test_pure_executor_module_is_pure(name: str):
    path = RESOLVER.parent / "executors" / name
    found = forbidden_uses(path.read_text(), str(path))
    assert [f for f in found if f.split(": imports ")[-1] not in PURE_EXECUTOR_IMPORTS] == []
