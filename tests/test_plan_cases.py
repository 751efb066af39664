"""`mesh plan --against`: every section of a declaration compared, each change with its cause,
as data (tests/plan_cases/README.md), through the command as an operator runs it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CASES = sorted((ROOT / "tests" / "plan_cases").glob("*.json"))
UPDATE = os.environ.get("MESH_UPDATE_GOLDEN") == "1"


def mesh(*args):
    return subprocess.run([sys.executable, "-m", "executors.cli", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT)


def edit(directory: Path, step: dict) -> None:
    path = directory / step["file"]
    text = path.read_text()
    if "replace" in step:
        old, new = step["replace"]
        assert old in text, f"{step['file']} does not hold {old!r}"
        text = text.replace(old, new, 1)
    else:
        text += step["append"]
    path.write_text(text)


@pytest.mark.parametrize("case_file", CASES, ids=[c.stem for c in CASES])
def test_plan_lists_exactly_the_cases_changes(case_file, tmp_path):
    case = json.loads(case_file.read_text())
    directory = tmp_path / "mesh"
    shutil.copytree(ROOT / "fixtures" / case["fixture"], directory)
    shutil.copytree(ROOT / "catalogue", directory / "catalogue")
    text = (directory / "mesh.yaml").read_text().replace("../../catalogue", "catalogue")
    (directory / "mesh.yaml").write_text(text)
    assert mesh("plan", directory, "--write-ledger").returncode == 0
    base = tmp_path / "base"
    written = mesh("plan", directory, "--out", base)
    assert written.returncode == 0, written.stdout + written.stderr
    for step in case["edits"]:
        edit(directory, step)

    result = mesh("plan", directory, "--against", base, "--json", "--detailed-exitcode")
    assert "Traceback" not in result.stderr, result.stderr
    document = json.loads(result.stdout)
    said = [[c["action"], c["node"], c["section"], c["subject"],
             [cause.replace(str(directory), "DIR") for cause in c["causes"]]]
            for c in document["declaration_changes"]]
    if UPDATE:
        case["changes"], case["exit"] = said, result.returncode
        case_file.write_text(json.dumps(case, indent=2, ensure_ascii=False) + "\n")
        return
    assert said == case["changes"]
    assert result.returncode == case["exit"]
    assert result.returncode == (1 if document["problems"] and any(
        p["severity"] == "error" for p in document["problems"]) else 2 if said else 0)
    summary = document["summary"]
    assert (summary["add"], summary["change"], summary["remove"]) == tuple(
        sum(c[0] == a for c in said) for a in "+~-")
    text_plan = mesh("plan", directory, "--against", base).stdout
    for action, node, section, subject, _causes in said:
        where = f"{node}/{subject}" if section == "container" else f"{node} {section} {subject}"
        assert any(line.strip().startswith(action) and where in line
                   for line in text_plan.splitlines()), (action, where)
