"""The whole project is `mypy --strict` clean: the resolver's annotations are what an embedding
program checks itself against (resolver/ ships py.typed), and the executors, benchmarks and
scripts are held to the same rule.

mypy runs once, as `python3 -m mypy` with no arguments runs it (pyproject.toml's [tool.mypy]:
strict, files resolver/, executors/, benchmarks/, scripts/); the test fails on any error in any
module: a new module is held to the rule from its first line. A second test holds the
configuration itself, so the first cannot pass by checking less.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHECKED = ["resolver", "executors", "benchmarks", "scripts"]

_ERROR = re.compile(r"^(?P<file>[^:]+\.py):(?P<line>\d+): error: (?P<what>.*)$")


def mypy_errors(tmp_path: Path, *paths: str) -> list[str]:
    """'file:line: message' for every error the project's mypy configuration reports (on the
    whole project, or on `paths` with the same settings)."""
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--cache-dir", str(tmp_path / ".mypy"),
         *paths],
        cwd=ROOT, capture_output=True, text=True, timeout=900)
    found = [f"{m['file']}:{m['line']}: {m['what']}"
             for m in map(_ERROR.match, result.stdout.splitlines()) if m]
    if result.returncode != 0:  # mypy failed: each failure is a located error, never a crash
        assert found, result.stdout + result.stderr
    else:
        assert "Success: no issues found" in result.stdout, result.stdout + result.stderr
    return found


def test_the_project_is_mypy_strict_clean(tmp_path):
    found = mypy_errors(tmp_path)
    assert found == [], f"{len(found)} mypy --strict error(s):\n" + "\n".join(found)


def test_the_configuration_checks_the_whole_project_strictly():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert config["strict"] is True
    assert sorted(config["files"]) == sorted(CHECKED)
    loosened = {key for override in config.get("overrides", []) for key in override
                if key not in ("module", "ignore_missing_imports")}
    assert loosened == set()  # third-party packages without types only; nothing of ours
    ours = [m for override in config.get("overrides", []) for m in override["module"]
            if m.split(".")[0] in ("resolver", "executors", "benchmarks", "scripts")]
    assert ours == []


def test_mypy_finds_an_error_when_there_is_one(tmp_path):
    """The check can fail: with the project's settings, an unannotated function (an error
    only under --strict) is reported."""
    probe = tmp_path / "probe.py"
    probe.write_text("def f(x):\n    return x\n")
    found = mypy_errors(tmp_path, str(probe))
    assert [line for line in found if line.startswith(f"{probe}:1:")], found
