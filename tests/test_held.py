"""A typo in mesh.yaml never tears down what runs, and serials never go backwards.

The operator's sequence from issue 11, through the `mesh` command on a copy of the homelab
fixture: declarations written and recorded; then `bind: {db: postgres@labb}` (a typo) makes
umami@home refused. Its last good declaration is held: its containers, its grant on lab's
postgres, lab's firewall allow for it, its binding values, all byte for byte; the plan (text
and --json) and the declaration say it is held, why, and where. Fixing the typo with
`plan --out` alone gives a serial above the typo's, so the fix supersedes it. Only removing
the instance from mesh.yaml removes it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
CATALOGUE = ROOT / "catalogue"
TYPO = "bind:\n      db: postgres@lab\n"


def mesh(*args):
    return subprocess.run([sys.executable, "-m", "executors.cli", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT)


@pytest.fixture
def homelab(tmp_path):
    target = tmp_path / "homelab"
    shutil.copytree(FIXTURES / "homelab", target)
    text = (target / "mesh.yaml").read_text().replace("../../catalogue", str(CATALOGUE))
    assert TYPO in text, "fixture layout changed: update this test"
    (target / "mesh.yaml").write_text(text)
    return target


def declarations(out: Path) -> dict:
    return {p.name.split(".")[0]: json.loads(p.read_text()) for p in out.glob("*.json")}


def parts_of(decls: dict, instance: str) -> dict:
    """Everything the declarations say about one consumer instance, wherever it is."""
    home, lab = decls["home"], decls["lab"]
    return {
        "containers": [c for c in home["containers"] if c["instance"] == instance],
        "bindings": [b for b in home.get("bindings", []) if b["consumer"] == instance],
        "grants": [g for g in lab.get("grants", []) if g["consumer"] == instance],
        "allow": [a for a in lab["firewall"].get("allow", []) if instance in a["reason"]],
        "listed": instance in home.get("instances", []),
    }


def test_a_typo_holds_the_instance_and_the_fix_supersedes_it(homelab, tmp_path):
    out = tmp_path / "out"
    good = mesh("plan", homelab, "--write-ledger", "--out", out)
    assert good.returncode == 0, good.stdout + good.stderr
    before = declarations(out)
    kept = parts_of(before, "umami@home")
    assert kept["containers"] and kept["bindings"] and kept["grants"] and kept["allow"]

    text = (homelab / "mesh.yaml").read_text()
    (homelab / "mesh.yaml").write_text(text.replace(TYPO, TYPO.replace("@lab", "@labb")))
    typo = mesh("plan", homelab, "--out", out)
    assert typo.returncode == 1  # still a refusal the operator must fix
    held = declarations(out)
    assert parts_of(held, "umami@home") == kept, "the refused instance lost its declaration"
    assert "[provider-not-assigned]" in typo.stdout and "[held]" in typo.stdout
    line = next(i for i, row in enumerate(text.splitlines(), 1) if "db: postgres@lab" in row)
    assert f"mesh.yaml:{line}:" in typo.stdout
    entry = held["home"]["held"]
    assert [(h["instance"], h["code"], h["line"]) for h in entry] == [
        ("umami@home", "provider-not-assigned", line)]
    plan = json.loads(mesh("plan", homelab, "--json").stdout)
    assert any(p["code"] == "held" and p["instance"] == "umami@home" and p["line"] == line
               for p in plan["problems"])
    assert plan["nodes"]["home"]["held"][0]["instance"] == "umami@home"
    typo_serial = held["home"]["serial"]
    assert typo_serial > before["home"]["serial"]

    (homelab / "mesh.yaml").write_text(text)  # the typo fixed, with `plan --out` alone
    fixed = mesh("plan", homelab, "--out", out)
    assert fixed.returncode == 0, fixed.stdout
    after = declarations(out)
    assert after["home"]["serial"] > typo_serial, "the fix would be superseded by the typo"
    assert "held" not in after["home"]
    assert parts_of(after, "umami@home") == kept

    # only removing the instance from mesh.yaml removes it
    start = text.index("  umami@home:")
    end = text.index("  mosquitto@home:")
    (homelab / "mesh.yaml").write_text(text[:start] + text[end:])
    gone = mesh("plan", homelab, "--out", out)
    assert gone.returncode == 0, gone.stdout
    removed = parts_of(declarations(out), "umami@home")
    assert removed == {"containers": [], "bindings": [], "grants": [], "allow": [],
                       "listed": False}


def test_serials_follow_the_declarations_already_written_in_out(homelab, tmp_path):
    """A ledger that lags behind the --out directory (restored from a backup, or written by
    an older mesh) never makes a declaration with a lower serial than the one there."""
    out = tmp_path / "out"
    assert mesh("plan", homelab, "--out", out).returncode == 0
    ledger = (homelab / "ledger.yaml").read_text()
    text = (homelab / "mesh.yaml").read_text()
    (homelab / "mesh.yaml").write_text(text.replace("  mosquitto@home:\n    module: mosquitto\n"
                                                    "    node: home\n", ""))
    assert mesh("plan", homelab, "--out", out).returncode == 0
    second = declarations(out)["home"]["serial"]
    (homelab / "ledger.yaml").write_text(ledger)  # the ledger goes back in time
    (homelab / "mesh.yaml").write_text(text)
    assert mesh("plan", homelab, "--out", out).returncode == 0
    assert declarations(out)["home"]["serial"] > second


def test_the_first_declaration_after_issuing_is_serial_one(tmp_path):
    from _meshdir import prepare, run_cli

    mesh_dir, _keys, _ = prepare(FIXTURES / "homelab", tmp_path)
    code, output = run_cli("plan", mesh_dir, "--issue", "--out", tmp_path / "out")
    assert code == 0, output
    assert {n: d["serial"] for n, d in declarations(tmp_path / "out").items()} == {
        "home": 1, "lab": 1}
    code, output = run_cli("plan", mesh_dir, "--out", tmp_path / "out")
    assert {n: d["serial"] for n, d in declarations(tmp_path / "out").items()} == {
        "home": 1, "lab": 1}, "nothing changed: the serial stays"
