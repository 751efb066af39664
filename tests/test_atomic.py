"""Files written whole or not at all (executors/common/atomic.py), and the one owner of it."""

from __future__ import annotations

import ast
import os
import stat
from pathlib import Path

import pytest

from executors.common.atomic import write_atomic, write_exclusive

ROOT = Path(__file__).resolve().parent.parent


def test_write_atomic_replaces_with_the_mode_asked(tmp_path):
    path = tmp_path / "sub" / "f"
    write_atomic(path, "one")
    write_atomic(path, b"two", mode=0o600)
    assert path.read_bytes() == b"two"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert os.listdir(path.parent) == ["f"]  # no temp file left


def test_write_exclusive_creates_whole_with_its_mode_whatever_the_umask(tmp_path):
    old = os.umask(0)
    try:
        write_exclusive(tmp_path / "key", "secret-ish\n", 0o600)
    finally:
        os.umask(old)
    assert (tmp_path / "key").read_text() == "secret-ish\n"
    assert stat.S_IMODE((tmp_path / "key").stat().st_mode) == 0o600
    assert os.listdir(tmp_path) == ["key"]


def test_write_exclusive_never_overwrites_and_leaves_no_temp_file(tmp_path):
    path = tmp_path / "key"
    path.write_text("first")
    with pytest.raises(FileExistsError):
        write_exclusive(path, "second", 0o600)
    assert path.read_text() == "first"
    assert os.listdir(tmp_path) == ["key"]


def test_write_exclusive_refuses_a_dangling_symlink(tmp_path):
    (tmp_path / "key").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(FileExistsError):
        write_exclusive(tmp_path / "key", "x", 0o600)
    assert not (tmp_path / "elsewhere").exists()


def test_a_failed_write_leaves_the_target_and_no_temp_file(tmp_path):
    path = tmp_path / "f"
    path.write_text("old")
    with pytest.raises(TypeError):
        write_atomic(path, 12345)  # type: ignore[arg-type]  (neither bytes nor text)
    with pytest.raises(TypeError):
        write_exclusive(tmp_path / "g", 12345)  # type: ignore[arg-type]
    assert path.read_text() == "old"
    assert sorted(os.listdir(tmp_path)) == ["f"]


def _defines_a_file_writer(path: Path) -> list[str]:
    """Functions outside common/atomic.py that open files for exclusive creation or rename a
    temp file over a target: the things only atomic.py may do."""
    found = []
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name in ("write_atomic", "write_exclusive",
                                                               "_write_exclusive"):
            found.append(f"{path.relative_to(ROOT)}: def {node.name}")
        if isinstance(node, ast.Attribute) and node.attr == "O_EXCL":
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: os.O_EXCL")
        if isinstance(node, ast.Attribute) and node.attr == "replace" \
                and isinstance(node.value, ast.Name) and node.value.id == "os":
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: os.replace")
    return found


def test_write_atomic_has_one_owner():
    others = []
    for path in sorted((ROOT / "executors").rglob("*.py")):
        if path == ROOT / "executors" / "common" / "atomic.py":
            continue
        others += _defines_a_file_writer(path)
    assert others == [], "files written whole outside executors/common/atomic.py: " + \
        "; ".join(others)
