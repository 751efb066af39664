"""Guarded upgrades' bad input, without an Engine: module.yaml's `upgrades:` is checked where it
is written (file:line), an `upgrade: by:` naming no step is refused by the plan, and `mesh
rollback` with no upgrade recorded is one line, exit 2, nothing changed. (The upgrade itself,
its snapshot and the rollback run against real PostgreSQL in tests/test_upgrade_docker.py.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pyrsistent import pmap, pvector

from resolver import (Catalogue, InputError, Instance, Ledger, Mesh, Node, UpgradeConfirm,
                      UpgradeRule, resolve)
from resolver.documents import load_module

REPO = Path(__file__).resolve().parent.parent

MODULE = """\
name: pg
artifacts:
  pg: {repository: example/pg, tag: "16.4"}
state:
  data: {path: data}
containers:
  - {name: migrate, artifact: pg, run-once: true}
  - {name: server, artifact: pg}
upgrades:
  artifact: pg
  version: '^([0-9]+)\\.'
  migrations: [migrate]
"""


def test_a_valid_upgrades_section_loads():
    module, _ = load_module(MODULE, "catalogue/pg/module.yaml")
    assert module.upgrades == UpgradeRule(version=r"^([0-9]+)\.", artifact="pg",
                                          migrations=pvector(["migrate"]))


@pytest.mark.parametrize("old, new, line, expected", [
    ("version: '^([0-9]+)\\.'", "version: '^(['", 11, "is not a regular expression"),
    ("  artifact: pg\n  version", "  artifact: nope\n  version", 10, "is not one of the module's"),
    ("migrations: [migrate]", "migrations: [server]", 12, "is not a run-once container"),
])
def test_a_bad_upgrades_section_is_refused_where_it_is_written(old, new, line, expected):
    assert old in MODULE
    with pytest.raises(InputError) as caught:
        load_module(MODULE.replace(old, new, 1), "catalogue/pg/module.yaml")
    (fault,) = caught.value.faults
    assert fault.line == line and expected in fault.message, fault


def test_an_upgrade_by_no_step_of_the_module_is_refused():
    module, _ = load_module(MODULE, "catalogue/pg/module.yaml")
    mesh = Mesh(mesh="m", nodes=pmap({"n1": Node(address="10.0.0.1")}),
                instances=pmap({"pg@n1": Instance(
                    module="pg", node="n1", upgrade=UpgradeConfirm(to="17", by="pg_upgrade"))}))
    resolution = resolve(Catalogue(modules=pmap({"pg": module})), mesh,
                         Ledger(pins=pmap({"example/pg:16.4": "sha256:" + "1" * 64})))
    (problem,) = [p for p in resolution.problems if p.code == "upgrade-unknown-step"]
    assert list(problem.blocks) == ["pg@n1"]
    assert "expected one of: fresh, migrate" in problem.message
    confirmed = attrs_evolve_upgrade(mesh, UpgradeConfirm(to="17", by="migrate"))
    resolution = resolve(Catalogue(modules=pmap({"pg": module})), confirmed,
                         Ledger(pins=pmap({"example/pg:16.4": "sha256:" + "1" * 64})))
    assert not [p for p in resolution.problems if p.severity == "error"]


def attrs_evolve_upgrade(mesh: Mesh, confirm: UpgradeConfirm) -> Mesh:
    import attrs

    instance = attrs.evolve(mesh.instances["pg@n1"], upgrade=confirm)
    return attrs.evolve(mesh, instances=mesh.instances.set("pg@n1", instance))


def test_rollback_with_no_upgrade_recorded_is_one_line_and_exit_2(tmp_path):
    done = subprocess.run([sys.executable, "-m", "executors.cli", "rollback", str(tmp_path),
                           "pg@n1", "--state-root", str(tmp_path / "state")],
                          capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 2
    assert done.stderr.startswith("mesh: no upgrade of pg@n1 is recorded at ")
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "state").exists()  # nothing written

