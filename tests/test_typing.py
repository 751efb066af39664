"""The resolver library is `mypy --strict` clean: its annotations are what an embedding program
checks itself against (resolver/ ships py.typed).

mypy runs once over the whole of resolver/ in strict mode; the test fails on any error in any
module of resolver/: a new module is held to the rule from its first line.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_ERROR = re.compile(r"^resolver/(?P<file>[^:/]+\.py):(?P<line>\d+): error: (?P<what>.*)$")


def mypy_errors(tmp_path: Path) -> list[tuple[str, str]]:
    """(file, 'line: message') for every error `mypy --strict resolver/` reports."""
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental",
         "--cache-dir", str(tmp_path / ".mypy"), "resolver/"],
        cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert "error: " in result.stdout or result.returncode == 0, result.stdout + result.stderr
    found = []
    for line in result.stdout.splitlines():
        match = _ERROR.match(line)
        if match:
            found.append((match["file"], f"{match['line']}: {match['what']}"))
    if result.returncode != 0:  # mypy failed: each failure is a located error, never a crash
        assert found, result.stdout + result.stderr
    return found


def test_the_resolver_is_mypy_strict_clean(tmp_path):
    errors = mypy_errors(tmp_path)
    found = [f"resolver/{file}:{what}" for file, what in errors]
    assert found == [], f"{len(found)} mypy --strict error(s):\n" + "\n".join(found)
