"""Rotations that take effect or say why not (issue 26): a module says how each of its own
secrets reaches its running app; `mesh rotate` prints the by-hand step, refuses a rotation that
would record a generation nothing uses (naming the module's line and the way out), and never
claims a provisioner that does not exist; `mesh applied --by-hand` settles a provider's admin
rotated by hand. Through the command, on copies of the homelab fixture with real node keys."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from executors.control.loading import load_mesh_dir
from resolver.rotation import declared_grants

from _meshdir import FIXTURES, ROOT, prepare, run_cli
from test_rotate_cli import declared_in


@pytest.fixture
def homelab(tmp_path):
    mesh_dir, keys, _ = prepare(FIXTURES / "homelab", tmp_path)
    assert run_cli("ca", "init", mesh_dir)[0] == 0
    assert run_cli("plan", "--issue", mesh_dir)[0] == 0
    return mesh_dir


def test_rotating_grafanas_admin_prints_the_step_that_puts_it_in_force(homelab):
    code, output = run_cli("rotate", homelab, "secret/grafana@lab/admin", "--dry-run")
    assert code == 0, output
    step = re.search(r"by hand, for secret/grafana@lab/admin \((.*?)\): (.*)", output)
    assert step, output
    where, instruction = step.groups()
    assert where.endswith("catalogue/grafana/module.yaml:29:5"), where  # its rotation entry
    assert "grafana cli admin reset-admin-password" in instruction
    assert "own secret, active at once" not in output


def test_rotating_keycloak_claims_no_provisioner_and_waits_for_the_operators_word(homelab):
    code, output = run_cli("rotate", homelab, "--provider", "keycloak@home")
    assert code == 0, output
    assert "changed on the running server by its provisioner" not in output
    assert "kcadm.sh set-password" in output
    assert "--by-hand secret/keycloak@home/admin" in output
    ledger = load_mesh_dir(homelab).ledger
    assert ledger.credentials["secret/keycloak@home/admin"].pending.generation == 2

    # home's apply as it reports it: nothing provisions client+secret (keycloak's clients and
    # its admin); the rest is granted
    declaration = declared_in(homelab, "home")
    granted = {c: g for c, g in declared_grants(declaration).items()
               if not c.startswith(("oidc/", "secret/keycloak@home/"))}
    report = homelab.parent / "home.json"
    report.write_text(json.dumps({
        "version": 2, "node": "home", "result": "applied", "serial": declaration.serial,
        "digest": declaration.digest, "granted": granted,
        "not_provisioned": [{"credential": g.credential.credential, "kind": g.kind,
                             "provider": g.provider, "consumer": g.consumer}
                            for g in declaration.grants if g.kind == "client+secret"]}))
    code, output = run_cli("applied", homelab, "home", "--report", report)
    assert code == 0, output  # recorded, but nothing put keycloak's admin in force
    assert load_mesh_dir(homelab).ledger.credentials[
        "secret/keycloak@home/admin"].pending is not None
    code, output = run_cli("applied", homelab, "home", "--report", report,
                           "--by-hand", "secret/keycloak@home/admin")
    assert code == 0, output
    settled = load_mesh_dir(homelab).ledger.credentials["secret/keycloak@home/admin"]
    assert settled.pending is None and settled.active.generation == 2


def test_a_providers_admin_with_no_provisioner_and_no_rotation_entry_is_refused(homelab):
    catalogue = homelab / "catalogue"
    shutil.copytree(ROOT / "catalogue", catalogue)
    text = (homelab / "mesh.yaml").read_text()
    (homelab / "mesh.yaml").write_text(re.sub(r"catalogue: .*", "catalogue: catalogue", text))
    module = catalogue / "keycloak" / "module.yaml"
    module.write_text(re.sub(r"rotation:.*?\n(?=\S)", "", module.read_text(), flags=re.S))
    before = (homelab / "ledger.yaml").read_bytes()
    code, output = run_cli("rotate", homelab, "secret/keycloak@home/admin")
    assert code == 1, output
    line = next(i for i, text in enumerate(module.read_text().splitlines(), 1)
                if text.startswith("secrets:"))
    assert f"keycloak/module.yaml:{line}:" in output
    assert "no provisioner for client+secret" in output and "how: by-hand" in output
    assert "nothing rotated" in output
    assert (homelab / "ledger.yaml").read_bytes() == before


def test_an_own_secret_read_at_every_start_is_rotated_with_its_containers(homelab):
    code, output = run_cli("rotate", homelab, "secret/umami@home/app-secret", "--dry-run")
    assert code == 0, output
    assert "read at every start" in output and "recreate home/" in output
    assert "by hand" not in output
