"""`expose:` in mesh.yaml as an operator writes it: located faults, a located refusal, the
plan showing each exposure with its reason, ports that never move, and same-node openings
shown by container and MAC. Uses the homelab fixture, copied, with exposures added."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from _meshdir import FIXTURES, run_cli
from executors.control.loading import load_mesh_dir

import resolver


@pytest.fixture
def homelab(tmp_path) -> Path:
    mesh_dir = tmp_path / "homelab"
    shutil.copytree(FIXTURES / "homelab", mesh_dir)
    text = (mesh_dir / "mesh.yaml").read_text()
    catalogue = (FIXTURES / "homelab" / "../../catalogue").resolve()
    (mesh_dir / "mesh.yaml").write_text(text.replace("catalogue: ../../catalogue",
                                                     f"catalogue: {catalogue}"))
    return mesh_dir


def expose(mesh_dir: Path, instance: str, block: str) -> None:
    """Add `expose:` (YAML lines under the instance, already indented) to an instance."""
    path = mesh_dir / "mesh.yaml"
    lines = path.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip() == f"{instance}:")
    end = at + 1
    while end < len(lines) and lines[end].startswith("    "):
        end += 1
    lines[end:end] = ["    expose:"] + block.splitlines()
    path.write_text("\n".join(lines) + "\n")


def line_of(mesh_dir: Path, needle: str) -> int:
    return next(i for i, line in enumerate((mesh_dir / "mesh.yaml").read_text().splitlines(),
                                           start=1) if needle in line)


def test_bad_sources_are_located_faults_every_one_at_once(homelab):
    expose(homelab, "grafana@lab", '      http: {to: [192.168.1.5/24, lan, "fd00::/64", '
                                   '"fd00::0/64"]}\n      metrics: {to: []}')
    code, output = run_cli("check", homelab)
    assert code == 2, output
    line = line_of(homelab, "http: {to:")
    where = f"{homelab / 'mesh.yaml'}:{line}:"
    assert f"{where}" in output
    assert "'192.168.1.5/24' has host bits set (the network is 192.168.1.0/24)" in output
    assert "'lan' is not an address or a network" in output
    assert "source 'fd00::0/64' is listed twice" in output
    assert f"{homelab / 'mesh.yaml'}:{line + 1}:" in output and "an exposure to nobody" in output
    assert "Traceback" not in output


def test_an_exposure_of_no_listen_is_refused_at_its_key(homelab):
    expose(homelab, "grafana@lab", "      dashboard: {to: [any]}")
    code, output = run_cli("check", homelab)
    assert code == 1, output
    line = line_of(homelab, "dashboard: {to:")
    assert f"{homelab / 'mesh.yaml'}:{line}:7: error [unknown-listen] instance grafana@lab exposes " \
           f"'dashboard', which is not a listen of module grafana (its listens: http)" in output


def test_the_plan_shows_exposures_with_their_reason_and_no_port_moves(homelab):
    inputs = load_mesh_dir(homelab)
    before = resolver.resolve(inputs.catalogue, inputs.mesh, inputs.ledger)
    expose(homelab, "grafana@lab",
           '      http: {to: [192.168.1.0/24, "fd00::/64"], reason: dashboards on the LAN}')
    expose(homelab, "postgres@home", "      postgres: {to: [any]}")
    code, output = run_cli("plan", homelab)
    assert code == 0, output
    inputs = load_mesh_dir(homelab)
    after = resolver.resolve(inputs.catalogue, inputs.mesh, inputs.ledger)
    assert after.ledger.ports == before.ledger.ports
    grafana = after.ledger.ports["grafana@lab"]["http"].port
    postgres = after.ledger.ports["postgres@home"]["postgres"].port
    assert (f"firewall expose {grafana}/tcp to 192.168.1.0/24, fd00::/64 "
            f"(grafana@lab/http exposed: dashboards on the LAN)") in output
    assert (f"firewall expose {postgres}/tcp to anywhere "
            f"(postgres@home/postgres exposed by mesh.yaml)") in output
    # lab's address is IPv4: the IPv6 network is said to be unreachable, as a note
    assert "[exposure-family]" in output and "fd00::/64" in output
    code, output = run_cli("plan", homelab, "--json")
    plan = json.loads(output)
    exposed = plan["nodes"]["lab"]["firewall"]["expose"]
    assert exposed == [{"port": grafana, "protocol": "tcp",
                        "sources": ["192.168.1.0/24", "fd00::/64"],
                        "reason": "grafana@lab/http exposed: dashboards on the LAN"}]


def test_same_node_openings_are_shown_by_container_and_mac(homelab):
    code, output = run_cli("plan", homelab, "--node", "home")
    assert code == 0, output
    inputs = load_mesh_dir(homelab)
    resolution = resolver.resolve(inputs.catalogue, inputs.mesh, inputs.ledger)
    home = resolution.declarations["home"]
    gitea = next(c for c in home.containers if c.instance == "gitea@home")
    assert gitea.mac is not None and gitea.mac.startswith("0a:")
    port = resolution.ledger.ports["postgres@home"]["postgres"].port
    line = next(l for l in output.splitlines() if l.startswith(f"  firewall same-node {port}/"))
    assert f"{gitea.name} {gitea.mac}" in line and "postgres@home/postgres for" in line
    assert "gitea@home" in line
