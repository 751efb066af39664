"""The control instance reaches the broker's management API through a binding like any other
(issue 28): the catalogue's control module requires `amqp-management`, which lavinmq provides
on its `management` listen (TLS), so the resolver's own binding and firewall rules open that
listen to the control instance and to nothing else: across nodes to the control node's address
only, on one node to the control container only. Without the requirement the listen stays
closed (what the firewall did before). `mesh plan` on a copy of fixtures/homelab, as an
operator runs it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
REQUIREMENT = """  - as: broker-api
    provision: amqp-management
"""


def homelab(tmp: Path, control_on: str = "home", requirement: bool = True) -> Path:
    """A copy of fixtures/homelab with its own copy of the catalogue; control@<control_on>."""
    directory = tmp / "homelab"
    shutil.copytree(REPO / "fixtures" / "homelab", directory)
    shutil.copytree(REPO / "catalogue", directory / "catalogue",
                    ignore=shutil.ignore_patterns("dist", "__pycache__"))
    mesh = (directory / "mesh.yaml").read_text().replace("catalogue: ../../catalogue",
                                                         "catalogue: catalogue")
    if control_on != "home":
        mesh = mesh.replace("    facilities: [docker-socket]\n",
                            "    facilities: [mesh-dir=/srv/mesh, control-key=/etc/mesh/node.key,"
                            " docker-socket]\n", 1)
        mesh = mesh.replace("  control@home:\n    module: control\n    node: home\n",
                            f"  control@{control_on}:\n    module: control\n"
                            f"    node: {control_on}\n")
    (directory / "mesh.yaml").write_text(mesh)
    module = directory / "catalogue" / "control" / "module.yaml"
    text = module.read_text()
    assert REQUIREMENT in text
    if not requirement:
        module.write_text(text.replace(REQUIREMENT, ""))
    return directory


def plan(directory: Path) -> dict[str, dict]:
    out = directory / "out"
    done = subprocess.run([sys.executable, "-m", "executors.cli", "plan", str(directory),
                           "--out", str(out)], capture_output=True, text=True, cwd=REPO,
                          timeout=300)
    assert done.returncode in (0, 1), done.stdout + done.stderr
    return {node: json.loads((out / f"{node}.declaration.json").read_text())
            for node in ("home", "lab")}


def management_port(home: dict) -> int:
    (port,) = [p["host_port"] for c in home["containers"] for p in c.get("ports") or []
               if c["instance"] == "lavinmq@home" and p["listen"] == "management"]
    return port


def rules_for(home: dict, port: int) -> list[tuple[str, dict]]:
    firewall = home["firewall"]
    return [(section, rule) for section in ("allow", "floors", "local")
            for rule in firewall.get(section) or [] if rule["port"] == port]


def test_across_nodes_the_management_listen_opens_to_the_control_node_alone(tmp_path):
    declarations = plan(homelab(tmp_path, control_on="lab"))
    home, lab = declarations["home"], declarations["lab"]
    port = management_port(home)
    assert rules_for(home, port) == [("allow", {
        "port": port, "protocol": "tcp", "reason": "lavinmq@home/management for control@lab",
        "sources": ["10.44.0.20"]})]
    (binding,) = [b for b in lab["bindings"]
                  if b["consumer"] == "control@lab" and b["requirement"] == "broker-api"]
    assert binding["provider"] == "lavinmq@home"
    assert binding["values"]["url"] == f"https://10.44.0.10:{port}"  # TLS, no account
    assert "user" not in binding["values"] and "password" not in binding["values"]


def test_on_one_node_it_opens_to_the_control_container_alone(tmp_path):
    home = plan(homelab(tmp_path))["home"]
    port = management_port(home)
    (rule,) = rules_for(home, port)
    assert rule[0] == "local" and rule[1]["reason"] == "lavinmq@home/management for control@home"
    (control,) = [c for c in home["containers"] if c["instance"] == "control@home"]
    assert rule[1]["macs"] == [control["mac"]]


def test_without_the_requirement_the_listen_stays_closed(tmp_path):
    declarations = plan(homelab(tmp_path, control_on="lab", requirement=False))
    home = declarations["home"]
    assert rules_for(home, management_port(home)) == []
