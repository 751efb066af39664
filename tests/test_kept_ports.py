"""A kept host port never moves: a floor added on it is refused, naming the port's holder.

Through the `mesh` command on a copy of the homelab fixture whose ledger records every port;
the last tests with its declarations written too (`--out`), so that the ledger's `declared`
renderings keep what ledger.ports never records: mailserver@home's fixed ports 25 and 587.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ruamel.yaml import YAML

ROOT = Path(__file__).resolve().parent.parent
CATALOGUE = ROOT / "catalogue"


def mesh(*args):
    return subprocess.run([sys.executable, "-m", "executors.cli", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT)


@pytest.fixture
def homelab(tmp_path):
    target = tmp_path / "homelab"
    shutil.copytree(ROOT / "fixtures" / "homelab", target)
    text = (target / "mesh.yaml").read_text().replace("../../catalogue", str(CATALOGUE))
    (target / "mesh.yaml").write_text(text)
    assert mesh("plan", target, "--write-ledger").returncode == 0
    return target


def published(plan: dict) -> dict:
    return {(c["instance"], p["listen"]): (node, p["host_port"])
            for node, d in plan["nodes"].items() for c in d["containers"] for p in c["ports"]}


def fixing_module(homelab: Path, port: int) -> str:
    """The catalogue copied into the mesh directory with a new module `metrics` fixing host
    port `port`; mesh.yaml's text naming that catalogue (not yet written back)."""
    shutil.copytree(CATALOGUE, homelab / "catalogue")
    module_dir = homelab / "catalogue" / "metrics"
    module_dir.mkdir()
    (module_dir / "module.yaml").write_text(
        "name: metrics\n"
        "artifacts:\n  image: {repository: docker.io/gitea/gitea, tag: \"1.22.3\"}\n"
        f"listens:\n  http: {{port: 9100, fixed: {port}}}\n"
        "containers:\n  - {name: main, artifact: image}\n")
    return (homelab / "mesh.yaml").read_text().replace(str(CATALOGUE), "catalogue")


def test_a_floor_on_a_kept_port_is_refused_and_moves_nothing(homelab):
    before = json.loads(mesh("plan", homelab, "--json").stdout)
    ports = published(before)
    node, port = ports[("umami@home", "http")]
    text = (homelab / "mesh.yaml").read_text()
    (homelab / "mesh.yaml").write_text(
        text + f"\nfloors:\n  - {{port: {port}, reason: metrics}}\n")
    line = len(text.splitlines()) + 3

    result = mesh("plan", homelab, "--json")
    assert result.returncode == 1
    after = json.loads(result.stdout)
    assert published(after) == ports, "a kept port moved"
    problem = next(p for p in after["problems"] if p["code"] == "floor-conflict")
    assert (problem["line"], problem["severity"]) == (line, "error")
    assert "umami@home" in problem["message"] and str(port) in problem["message"]
    assert problem["candidates"] == ["umami@home"]
    for decl in after["nodes"].values():  # the refused floor is in no firewall
        assert port not in [f["port"] for f in decl["firewall"]["floors"]]
    text_plan = mesh("plan", homelab).stdout
    assert f"mesh.yaml:{line}:" in text_plan and "[floor-conflict]" in text_plan


def test_a_floor_on_a_free_port_is_kept_by_every_node_and_moves_nothing(homelab):
    before = json.loads(mesh("plan", homelab, "--json").stdout)
    ports = published(before)
    used = {port for _node, port in ports.values()}
    free = next(p for p in range(20000, 30000) if p not in used)
    document = YAML().load((homelab / "mesh.yaml").read_text())
    document["floors"] = [{"port": free, "reason": "metrics"}]
    with (homelab / "mesh.yaml").open("w") as handle:
        YAML().dump(document, handle)
    result = mesh("plan", homelab, "--json")
    assert result.returncode == 0, result.stdout
    after = json.loads(result.stdout)
    assert published(after) == ports
    for decl in after["nodes"].values():
        assert free in [f["port"] for f in decl["firewall"]["floors"]]


def test_an_ssh_port_moved_onto_a_kept_port_is_refused_and_moves_nothing(homelab):
    before = json.loads(mesh("plan", homelab, "--json").stdout)
    ports = published(before)
    node, port = ports[("grafana@lab", "http")]
    assert node == "lab"
    text = (homelab / "mesh.yaml").read_text()
    assert "ssh-port: 2222" in text, "fixture layout changed: update this test"
    (homelab / "mesh.yaml").write_text(text.replace("ssh-port: 2222", f"ssh-port: {port}"))
    result = mesh("plan", homelab, "--json")
    assert result.returncode == 1
    after = json.loads(result.stdout)
    assert published(after) == ports, "a kept port moved"
    problem = next(p for p in after["problems"] if p["code"] == "floor-conflict")
    assert "grafana@lab" in problem["message"] and problem["candidates"] == ["grafana@lab"]
    line = next(i for i, row in enumerate(text.splitlines(), 1) if "ssh-port: 2222" in row)
    assert problem["line"] == line
    floors = after["nodes"]["lab"]["firewall"]["floors"]
    assert any(f["port"] == port and f["reason"] == "ssh" for f in floors), "ssh stays open"


def test_a_new_fixed_port_on_a_kept_port_is_refused_naming_both_and_moves_nothing(homelab):
    """The reproduction of issue 26: a new module fixing 20001 on home beside gitea@home."""
    before = json.loads(mesh("plan", homelab, "--json").stdout)
    ports = published(before)
    node, port = ports[("gitea@home", "http")]
    text = fixing_module(homelab, port)
    (homelab / "mesh.yaml").write_text(text + f"  metrics@{node}:\n    module: metrics\n"
                                              f"    node: {node}\n")
    result = mesh("plan", homelab, "--json")
    assert result.returncode == 1
    after = json.loads(result.stdout)
    assert published(after) == ports, "a kept port moved"
    problem = next(p for p in after["problems"] if p["code"] == "port-conflict")
    assert problem["instance"] == f"metrics@{node}"
    assert problem["candidates"] == ["gitea@home", f"metrics@{node}"]
    assert problem["line"] == len(text.splitlines()) + 2  # the instance's entry
    message = problem["message"]
    assert "gitea@home/http" in message and f"{port}" in message
    also = problem["also"]  # both positions: the fixed port's line, the holder's entry
    assert len(also) == 2 and "/catalogue/metrics/module.yaml:5:" in also[0]
    gitea_line = next(i for i, row in enumerate(text.splitlines(), 1) if "gitea@home:" in row)
    assert f"/mesh.yaml:{gitea_line + 1}:" in also[1]  # its entry, as the problem's own line
    assert "metrics's listen http" in message
    assert "another fixed port" in message
    text_plan = mesh("plan", homelab)
    assert text_plan.returncode == 1 and "[port-conflict]" in text_plan.stdout
    assert f"(and {also[0]}, {also[1]})" in text_plan.stdout  # the text plan names both too


def test_a_fixed_port_kept_by_a_holder_that_moved_and_was_refused_is_refused(homelab):
    """A holder moved to another node holds nothing on its old node, unless it is refused:
    then it stays where it was, its ports kept. gitea@home moved to lab (fresh) and refused in
    the same check that meets fixed ports (its module now fixes a port a floor keeps) keeps its
    port on home, so a new module fixing that port on home is refused naming gitea, and
    gitea's port does not move (found by the kept-ports property: the newcomer took the
    port and nothing said so)."""
    before = json.loads(mesh("plan", homelab, "--json").stdout)
    node, port = published(before)[("gitea@home", "http")]
    assert node == "home"
    text = fixing_module(homelab, port)
    gitea = homelab / "catalogue" / "gitea" / "module.yaml"
    gitea.write_text(gitea.read_text().replace(
        "  ssh:\n    port: 22\n", "  ssh:\n    port: 22\n  mail:\n    port: 2525\n    fixed: 26\n"))
    moved = text.replace("  gitea@home:\n    module: gitea\n    node: home\n",
                         "  gitea@home:\n    module: gitea\n    node: lab\n    fresh: true\n"
                         ).replace("\ninstances:\n",
                                   "\nfloors:\n  - {port: 26, reason: mail}\n\ninstances:\n")
    assert moved.count("floors:") == 1 and "    node: lab\n" in moved
    (homelab / "mesh.yaml").write_text(moved + "  metrics@home:\n    module: metrics\n"
                                               "    node: home\n")
    result = mesh("plan", homelab, "--json")
    assert result.returncode == 1, result.stderr
    after = json.loads(result.stdout)
    assert any(p["instance"] == "gitea@home" and "floor" in p["message"]
               for p in after["problems"]), "the holder is not refused: nothing to test"
    conflict = [p for p in after["problems"] if p["code"] == "port-conflict"
                and p["instance"] == "metrics@home"]
    assert conflict, [(p["code"], p["instance"], p["message"]) for p in after["problems"]]
    assert conflict[0]["candidates"] == ["gitea@home", "metrics@home"]
    assert "gitea@home/http" in conflict[0]["message"] and str(port) in conflict[0]["message"]
    assert ("metrics@home", "http") not in published(after)
    assert mesh("plan", homelab, "--write-ledger").returncode == 1
    ledger = json.loads((homelab / "ledger.yaml").read_text())
    assert ledger["ports"]["gitea@home"]["http"] == {"node": "home", "port": port}


# --- ports an instance's last declaration publishes (the ledger's `declared` renderings)

MAILSERVER = "  mailserver@home:\n    module: mailserver\n"


@pytest.fixture
def declared_homelab(tmp_path):
    """The homelab copy with its declarations written (`--out`): the ledger records each
    instance's rendering, so mailserver@home's fixed ports (25, 587), which ledger.ports never
    records, are kept by its last declaration alone."""
    target = tmp_path / "homelab"
    shutil.copytree(ROOT / "fixtures" / "homelab", target)
    text = (target / "mesh.yaml").read_text().replace("../../catalogue", str(CATALOGUE))
    assert MAILSERVER in text, "fixture layout changed: update this test"
    (target / "mesh.yaml").write_text(text)
    written = mesh("plan", target, "--write-ledger", "--out", tmp_path / "out")
    assert written.returncode == 0, written.stdout + written.stderr
    ledger = json.loads((target / "ledger.yaml").read_text())
    recorded = {(e["node"], e["port"]) for entries in ledger["ports"].values()
                for e in entries.values()}
    assert not recorded & {("home", 25), ("home", 587)}, "fixed ports are not recorded"
    assert (target / "ledger.declared" / "home" / "declared.json").exists()
    return target


def planned_with_a_floor_on_25(homelab, text: str) -> tuple[dict, int]:
    """`mesh plan --json` of `text` (mesh.yaml) with a floor on 25 added at its end, refused:
    the plan and the floor's line."""
    (homelab / "mesh.yaml").write_text(text + "\nfloors:\n  - {port: 25, reason: metrics}\n")
    result = mesh("plan", homelab, "--json")
    assert result.returncode == 1
    return json.loads(result.stdout), len(text.splitlines()) + 3


def floors_of(plan: dict) -> dict:
    return {node: [(f["port"], f["reason"]) for f in d["firewall"]["floors"]]
            for node, d in plan["nodes"].items()}


def test_a_floor_on_a_fixed_port_a_running_instance_publishes_is_refused_and_it_runs_on(
        declared_homelab):
    """Only the last declaration keeps a fixed port: a floor on smtp's 25 is the floor's
    refusal (`floor-conflict` naming mailserver@home/smtp), never mailserver's (`port-conflict`:
    the running instance refused, held, and the floor opened on every node)."""
    before = json.loads(mesh("plan", declared_homelab, "--json").stdout)
    ports = published(before)
    assert ports[("mailserver@home", "smtp")] == ("home", 25)
    after, line = planned_with_a_floor_on_25(
        declared_homelab, (declared_homelab / "mesh.yaml").read_text())
    errors = [p for p in after["problems"] if p["severity"] == "error"]
    assert [(p["code"], p["line"], p["candidates"]) for p in errors] == [
        ("floor-conflict", line, ["mailserver@home"])], errors
    assert "host port 25 kept by mailserver@home/smtp on node home" in errors[0]["message"]
    assert not any(p["instance"] == "mailserver@home" for p in after["problems"]), \
        "the running instance was refused for the floor"
    assert not after["nodes"]["home"].get("held"), "nothing is held"
    assert published(after) == ports, "a published port changed"
    assert floors_of(after) == floors_of(before), "the refused floor is in a firewall"


def test_a_floor_on_a_fixed_port_a_held_instance_publishes_is_refused(declared_homelab):
    """A refused mailserver@home (a typo in its module) is held: its last declaration still
    publishes 25 on home. A floor on 25 then is refused naming it, as for a running one, and
    opens nowhere (never silently opened beside the held container's port)."""
    text = (declared_homelab / "mesh.yaml").read_text()
    typo = text.replace(MAILSERVER, MAILSERVER.replace("mailserver\n", "mailserverr\n"))
    (declared_homelab / "mesh.yaml").write_text(typo)
    held = json.loads(mesh("plan", declared_homelab, "--json").stdout)
    assert [h["instance"] for h in held["nodes"]["home"]["held"]] == ["mailserver@home"]
    ports = published(held)
    assert ports[("mailserver@home", "smtp")] == ("home", 25)
    after, line = planned_with_a_floor_on_25(declared_homelab, typo)
    conflict = [p for p in after["problems"] if p["code"] == "floor-conflict"]
    assert [(p["line"], p["candidates"]) for p in conflict] == [(line, ["mailserver@home"])], \
        [(p["code"], p["instance"], p["message"]) for p in after["problems"]]
    assert "host port 25 kept by mailserver@home/smtp on node home" in conflict[0]["message"]
    assert [h["instance"] for h in after["nodes"]["home"]["held"]] == ["mailserver@home"]
    assert published(after) == ports
    assert floors_of(after) == floors_of(held), "the refused floor is in a firewall"


def test_an_ssh_port_moved_onto_a_fixed_port_a_running_instance_publishes_is_refused(
        declared_homelab):
    """home's ssh-port moved onto submission's 587 (kept by mailserver@home's last declaration
    alone) is refused naming it; mailserver@home is not refused and keeps publishing 587."""
    before = json.loads(mesh("plan", declared_homelab, "--json").stdout)
    ports = published(before)
    assert ports[("mailserver@home", "submission")] == ("home", 587)
    text = (declared_homelab / "mesh.yaml").read_text()
    home = "    address: 10.44.0.10\n"
    assert text.count(home) == 1, "fixture layout changed: update this test"
    (declared_homelab / "mesh.yaml").write_text(text.replace(home, home + "    ssh-port: 587\n"))
    line = next(i for i, row in enumerate(text.splitlines(), 1) if row == home.rstrip()) + 1

    result = mesh("plan", declared_homelab, "--json")
    assert result.returncode == 1
    after = json.loads(result.stdout)
    errors = [p for p in after["problems"] if p["severity"] == "error"]
    assert [(p["code"], p["line"], p["candidates"]) for p in errors] == [
        ("floor-conflict", line, ["mailserver@home"])], errors
    assert "kept by mailserver@home/submission" in errors[0]["message"]
    assert not any(p["instance"] == "mailserver@home" for p in after["problems"])
    assert published(after) == ports, "a published port changed"
