"""`mesh plan`: exit codes, the documented --json fields, declarations with --out, and the
ledger written only when asked, atomically, to a fixed point."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
CATALOGUE = FIXTURES.parent / "catalogue"


def mesh(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "executors.cli", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd or FIXTURES.parent)


@pytest.fixture
def homelab(tmp_path):
    target = tmp_path / "homelab"
    shutil.copytree(FIXTURES / "homelab", target)
    text = (target / "mesh.yaml").read_text().replace("../../catalogue", str(CATALOGUE))
    (target / "mesh.yaml").write_text(text)
    return target


def test_exit_codes_0_1_2(tmp_path):
    assert mesh("plan", FIXTURES / "homelab").returncode == 0
    refused = mesh("plan", FIXTURES / "refusals" / "ambiguous-provider")
    assert refused.returncode == 1
    assert "[ambiguous-provider]" in refused.stdout and "postgres@b, postgres@c" in refused.stdout
    (tmp_path / "mesh.yaml").write_text("mesh: x\nnodes: {a: {address: 3}}\n")
    bad = mesh("plan", tmp_path)
    assert bad.returncode == 2
    assert "mesh.yaml:2:" in bad.stderr and "Traceback" not in bad.stderr


def test_json_has_the_documented_fields():
    out = mesh("plan", FIXTURES / "homelab", "--json")
    doc = json.loads(out.stdout)
    lab = doc["nodes"]["lab"]
    assert lab["digest"].startswith("sha256:")
    container = next(c for c in lab["containers"] if c["ports"])
    assert {"name", "instance", "image", "env", "ports"} <= set(container)
    assert {"host_ip", "host_port", "container_port", "protocol"} <= set(container["ports"][0])
    assert container["ports"][0]["host_ip"] == "10.44.0.20"
    assert {"port", "protocol", "sources"} <= set(lab["firewall"]["allow"][0])
    assert lab["grants"]
    binding = doc["bindings"][0]
    assert {"consumer", "requirement", "provision", "provider", "login", "host", "port",
            "chosen_by"} <= set(binding)
    assert isinstance(doc["problems"], list) and isinstance(doc["requests"], list)


def test_out_writes_declarations_and_reports_no_change_the_second_time(homelab, tmp_path):
    out = tmp_path / "decl"
    first = mesh("plan", homelab, "--out", out)
    assert first.returncode == 0
    files = sorted(p.name for p in out.iterdir())
    assert files == ["home.declaration.json", "lab.declaration.json"]
    assert "create home/" in first.stdout
    second = mesh("plan", homelab, "--out", out, "--detailed-exitcode")
    assert f"no changes against the declarations in {out} (--out)" in second.stdout
    assert "create home/" not in second.stdout and second.returncode == 0


def test_ledger_written_only_when_asked_and_then_a_fixed_point(homelab):
    ledger = homelab / "ledger.yaml"
    before = ledger.read_text()
    assert mesh("plan", homelab).returncode == 0
    assert ledger.read_text() == before
    assert mesh("plan", homelab, "--write-ledger").returncode == 0
    written = ledger.read_text()
    assert written != before and '"ports":' in written and '"logins":' in written
    assert not list(homelab.glob(".ledger.yaml.*")), "no temp file left behind"
    assert mesh("plan", homelab, "--write-ledger").returncode == 0
    assert ledger.read_text() == written


def test_a_moved_provider_keeps_its_consumers_and_the_plan_says_so(homelab):
    assert mesh("plan", homelab, "--write-ledger").returncode == 0
    text = (homelab / "mesh.yaml").read_text()
    before = json.loads(mesh("plan", homelab, "--json").stdout)
    moved = text.replace("keycloak@home:\n    module: keycloak\n    node: home",
                         "keycloak@home:\n    module: keycloak\n    node: lab")
    assert moved != text, "fixture layout changed: update this test"
    (homelab / "mesh.yaml").write_text(moved)
    result = mesh("plan", homelab, "--json")
    after = json.loads(result.stdout)
    was = {(b["consumer"], b["requirement"]): b for b in before["bindings"]}
    for b in after["bindings"]:
        if b["provider"] == "keycloak@home":
            old = was[(b["consumer"], b["requirement"])]
            assert b["login"] == old["login"] and b["host"] == "10.44.0.20"
    assert any(c["kind"] == "moved" and c["subject"] == "keycloak@home" for c in after["changes"])


def test_control_characters_from_input_never_reach_the_terminal(homelab):
    """An escape sequence written into mesh.yaml is quoted as `\\x1b`, on stdout (the plan's
    problems) and on stderr (a fault) alike; --json stays JSON with the character escaped."""
    text = (homelab / "mesh.yaml").read_text()
    (homelab / "mesh.yaml").write_text(
        text.replace("oidc: keycloak@home", 'oidc: "keycloak\\e[2J\\x9b@home"', 1))
    plan = mesh("plan", homelab)
    assert plan.returncode == 1
    assert "\x1b" not in plan.stdout + plan.stderr and "\x9b" not in plan.stdout
    assert "names keycloak\\x1b[2J\\x9b@home, which is not an instance" in plan.stdout
    as_json = json.loads(mesh("plan", homelab, "--json").stdout)
    assert any("keycloak\x1b[2J" in p["message"] for p in as_json["problems"])
    (homelab / "mesh.yaml").write_text(text + '\n"\\e[31mbad": 1\n')
    bad = mesh("plan", homelab)
    assert bad.returncode == 2 and "\x1b" not in bad.stderr and "\\x1b[31m" in bad.stderr


def test_printable_keeps_newline_and_tab_and_escapes_the_rest():
    from executors.cli.terminal import printable

    assert printable("a\tb\nc") == "a\tb\nc"
    assert printable("\x00\x07\x1b\x7f\x85\x9f é") == "\\x00\\x07\\x1b\\x7f\\x85\\x9f é"
