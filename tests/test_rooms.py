"""The house: executors' rooms say where code runs, and arrows point one way.

cli → node, control, common; node → common; control → common; common → nothing of executors.
Nothing imports cli (the verbs are the top floor). The resolver imports no executor.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ROOMS = ("cli", "node", "control", "common")
ALLOWED = {
    "cli": {"cli", "node", "control", "common"},
    "node": {"node", "common"},
    "control": {"control", "common"},
    "common": {"common"},
}


def executor_imports(path: Path, room: str) -> set[str]:
    """The executors rooms a file imports (relative imports resolve to its own room)."""
    rooms = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 1:
                rooms.add(room)
                continue
            if node.level > 1:
                names = [f"executors.{node.module or ''}"]
            else:
                names = [node.module or ""]
                if node.module == "executors":
                    names = [f"executors.{a.name}" for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "executors" and len(parts) > 1:
                rooms.add(parts[1])
    return rooms


FILES = sorted((ROOT / "executors").rglob("*.py"))


def test_every_executor_file_lives_in_a_room():
    loose = [str(p.relative_to(ROOT)) for p in FILES
             if p.parent.name not in ROOMS and p.name != "__init__.py"]
    assert loose == [], "files outside executors/{cli,node,control,common}: " + ", ".join(loose)


@pytest.mark.parametrize("path", [p for p in FILES if p.parent.name in ROOMS],
                         ids=lambda p: str(p.relative_to(ROOT / "executors")))
def test_imports_point_one_way(path):
    room = path.parent.name
    wrong = executor_imports(path, room) - ALLOWED[room] - {""}
    assert not wrong, f"executors/{room}/{path.name} imports executors.{sorted(wrong)}: " \
        f"{room} may import only {sorted(ALLOWED[room])}"


def test_the_check_catches_a_wrong_arrow(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from executors.control.issuer import issue\n")
    assert executor_imports(bad, "node") == {"control"}
