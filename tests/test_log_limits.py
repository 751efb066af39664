"""Log limits in mesh.yaml (`logs: {driver, max-size, max-files}`) as an operator writes them:
every container of every node's declaration carries them; left out, the defaults (json-file,
10m, 3) are what containers carry and what a declaration written before the field loads with,
and the declaration's document leaves them out (so its digest is unchanged); a changed limit
is a recreate whose cause names both limits; bad values are located faults, all at once."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import resolver
from resolver import LogsDecl, Logs
from resolver.documents import structure, unstructure

from _meshdir import FIXTURES, run_cli
from executors.control.loading import load_mesh_dir


@pytest.fixture
def homelab(tmp_path) -> Path:
    mesh_dir = tmp_path / "homelab"
    shutil.copytree(FIXTURES / "homelab", mesh_dir)
    text = (mesh_dir / "mesh.yaml").read_text()
    catalogue = (FIXTURES / "homelab" / "../../catalogue").resolve()
    (mesh_dir / "mesh.yaml").write_text(text.replace("catalogue: ../../catalogue",
                                                     f"catalogue: {catalogue}"))
    return mesh_dir


def with_logs(mesh_dir: Path, block: str) -> None:
    path = mesh_dir / "mesh.yaml"
    path.write_text(path.read_text() + block)


def declarations(mesh_dir: Path):
    inputs = load_mesh_dir(mesh_dir)
    return resolver.resolve(inputs.catalogue, inputs.mesh, inputs.ledger).declarations


def test_left_out_every_container_carries_the_defaults_and_the_document_leaves_them_out(homelab):
    assert Logs() == Logs("json-file", "10m", 3)
    found = declarations(homelab)
    containers = [c for d in found.values() for c in d.containers]
    assert containers and all(c.logs == LogsDecl("json-file", "10m", 3) for c in containers)
    for declaration in found.values():
        assert all("logs" not in c for c in unstructure(declaration)["containers"])


def test_a_declaration_written_before_log_limits_loads_with_the_defaults(homelab):
    declaration = next(iter(declarations(homelab).values()))
    document = unstructure(declaration)
    assert all("logs" not in c for c in document["containers"])  # as an older one reads
    loaded = structure(json.loads(json.dumps(document)), resolver.Declaration)
    assert loaded == declaration and all(c.logs == LogsDecl() for c in loaded.containers)


def test_the_meshs_limits_reach_every_container_of_every_node(homelab):
    before = declarations(homelab)
    with_logs(homelab, "logs:\n  driver: local\n  max-size: 512k\n  max-files: 5\n")
    after = declarations(homelab)
    assert set(after) == set(before)
    for node, declaration in after.items():
        assert declaration.containers
        assert all(c.logs == LogsDecl("local", "512k", 5) for c in declaration.containers)
        assert declaration.digest != before[node].digest
        assert all(c["logs"] == {"driver": "local", "max_size": "512k", "max_files": 5}
                   for c in unstructure(declaration)["containers"])


def test_a_changed_limit_is_a_recreate_naming_both_limits(homelab):
    with_logs(homelab, "logs: {max-size: 1m}\n")
    old = declarations(homelab)
    (homelab / "mesh.yaml").write_text((homelab / "mesh.yaml").read_text().replace(
        "logs: {max-size: 1m}", "logs: {max-size: 1m, max-files: 7}"))
    new = declarations(homelab)
    changes = resolver.container_changes(old, new)
    assert changes and {c.action for c in changes} == {"recreate"}
    assert {tuple(c.causes) for c in changes} == {("logs json-file 1m x 3 → json-file 1m x 7",)}
    assert len(changes) == sum(len(d.containers) for d in new.values())


def test_bad_limits_are_located_faults_every_one_at_once(homelab):
    with_logs(homelab, "logs:\n  driver: syslog\n  max-size: 10MB\n  max-files: 0\n")
    code, output = run_cli("check", homelab)
    assert code == 2, output
    lines = (homelab / "mesh.yaml").read_text().splitlines()
    at = {key: lines.index(f"  {key}: {value}") + 1
          for key, value in (("driver", "syslog"), ("max-size", "10MB"), ("max-files", "0"))}
    where = str(homelab / "mesh.yaml")
    assert f"{where}:{at['driver']}:11: 'syslog' is not allowed; expected one of json-file, " \
        "local" in output
    assert f"{where}:{at['max-size']}:13: log size '10MB' is not a size; expected a whole " \
        "number with k, m or g, such as 10m" in output
    assert f"{where}:{at['max-files']}:14: 0 log files; expected at least 1" in output
    assert "3 errors" in output and "Traceback" not in output


def test_an_unknown_key_or_a_wrong_type_is_located_too(homelab):
    with_logs(homelab, "logs: {max-size: 10m, rotate: 2, max-files: three}\n")
    code, output = run_cli("check", homelab)
    assert code == 2, output
    line = len((homelab / "mesh.yaml").read_text().splitlines())
    assert f"{homelab / 'mesh.yaml'}:{line}:" in output
    assert "rotate" in output and "max-files" in output and "Traceback" not in output


def test_the_schema_says_what_mesh_yaml_logs_accepts(tmp_path):
    code, output = run_cli("schema", "mesh")
    assert code == 0, output
    logs = json.loads(output)["$defs"]["Logs"]["properties"]
    assert logs["driver"]["enum"] == ["json-file", "local"]
    assert logs["max-size"]["pattern"] == "^[1-9][0-9]*[kmg]$"
    assert logs["max-files"]["minimum"] == 1
