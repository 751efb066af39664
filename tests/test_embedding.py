"""docs/embedding.md's example program runs as the document says, and is mypy --strict clean.

The program is taken from the document itself (its first ```python block), so the document
cannot drift from what works: it is run against fixtures/homelab in a child process (as an
embedding program runs, importing only the public `resolver`), and checked by mypy in strict
mode against the library's own annotations (py.typed).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "embedding.md"


def program() -> str:
    text = DOC.read_text()
    match = re.search(r"```python\n(.*?)```", text, re.S)
    assert match, "docs/embedding.md has no ```python block"
    return match.group(1)


def documented_output() -> list[str]:
    text = DOC.read_text()
    match = re.search(r"```\n\$ python3 embed.py (\S+) (\S+) (\S+)\n(.*?)```", text, re.S)
    assert match, "docs/embedding.md shows no run of the program"
    return [*match.group(1, 2, 3), *match.group(4).splitlines()]


def test_the_example_program_runs_as_documented(tmp_path):
    script = tmp_path / "embed.py"
    script.write_text(program())
    directory, instance, node, *expected = documented_output()
    result = subprocess.run([sys.executable, str(script), directory, instance, node],
                            cwd=ROOT, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == expected
    assert any(line.startswith("home: create ") for line in expected)


def test_the_example_program_reports_bad_input_as_located_faults(tmp_path):
    script = tmp_path / "embed.py"
    script.write_text(program())
    mesh = tmp_path / "mesh"
    mesh.mkdir()
    (mesh / "mesh.yaml").write_text(f"mesh: m\ncatalogue: {ROOT / 'catalogue'}\n"
                                    "nodes:\n  a:\n    address: 10.0.0.1\n    ssh-port: '22'\n")
    result = subprocess.run([sys.executable, str(script), str(mesh), "x", "a"], cwd=ROOT,
                            capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert re.search(r"mesh\.yaml:6:\d+: .*ssh-port", result.stderr), result.stderr


def test_the_example_program_is_mypy_strict_clean(tmp_path):
    script = tmp_path / "embed.py"
    script.write_text(program())
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent",
         "--no-incremental", "--cache-dir", str(tmp_path / ".mypy"), str(script)],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
        env={**os.environ, "MYPYPATH": str(ROOT)})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success" in result.stdout
