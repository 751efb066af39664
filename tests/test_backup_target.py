"""The backup target as a provision, without an Engine: mesh.yaml's `backups: target:` checked
where it is written (file:line) through `mesh check` as the operator runs it, and the node's
half (executors/node/backup_target.py) opening a duty's repository into private files.
(A backup through a real store, across two machines with the firewall on, is
tests/test_backup_target_docker.py.)"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from pyrsistent import pvector

from resolver import BackupError, Declaration, MeshError, SecretRef
from resolver.backups import BackupDuty

from executors.node.backup_target import duty_of, login_location, open_repository
from executors.node.node_paths import NodePaths

REPO = Path(__file__).resolve().parent.parent


def _mesh_dir(tmp: Path, target: str, postgres_node: str = "n1",
              extra: str = "") -> Path:
    (tmp / "mesh.yaml").write_text(
        f"mesh: m\ncatalogue: {REPO / 'catalogue'}\nnodes:\n"
        "  n1: {address: 10.9.0.1, control: true}\n  n2: {address: 10.9.0.2}\n"
        f"instances:\n  postgres@a: {{module: postgres, node: {postgres_node}}}\n"
        "  store@b: {module: backup-store, node: n2}\n"
        "  minio@b: {module: minio, node: n2}\n" + extra +
        f"backups:\n  target: {target}\n")
    return tmp


def _check(directory: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "executors.cli", "check", str(directory)],
                          capture_output=True, text=True, cwd=str(REPO),
                          env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=120)


def _line_of(directory: Path, text: str) -> int:
    lines = (directory / "mesh.yaml").read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


def test_a_stateful_instance_on_the_stores_node_is_refused_at_backups_target(tmp_path):
    directory = _mesh_dir(tmp_path, "store@b", postgres_node="n2")
    done = _check(directory)
    said = done.stdout + done.stderr
    line = _line_of(directory, "target: store@b")
    assert done.returncode == 1, said
    assert re.search(rf"mesh\.yaml:{line}:\d+: error \[backup-target\] postgres@a runs on n2, the "
                     r"node of its backup target store@b: a backup must be kept on another node",
                     said), said
    assert "Traceback" not in said
    # the same instance on another node is not refused
    assert "postgres@a runs on" not in (lambda d: d.stdout + d.stderr)(
        _check(_mesh_dir(tmp_path, "store@b")))


def test_a_target_that_is_no_instance_or_no_store_is_refused_where_it_is_written(tmp_path):
    directory = _mesh_dir(tmp_path, "nosuch@b")
    done = _check(directory)
    said = done.stdout + done.stderr
    assert done.returncode == 2, said
    assert re.search(rf"mesh\.yaml:{_line_of(directory, 'target: nosuch@b')}:\d+: backup "
                     r"target 'nosuch@b' is not an instance", said), said

    directory = _mesh_dir(tmp_path, "minio@b")
    said = (lambda d: d.stdout + d.stderr)(_check(directory))
    assert re.search(rf"mesh\.yaml:{_line_of(directory, 'target: minio@b')}:\d+: "
                     r"error \[backup-target\] backups.target minio@b \(module minio\) provides no "
                     "backup-target", said), said

    directory = _mesh_dir(tmp_path, "{node: n2}")
    said = (lambda d: d.stdout + d.stderr)(_check(directory))
    assert "an outside backup target needs both `node` and `repository`" in said, said


def test_the_outside_form_still_reads(tmp_path):
    directory = _mesh_dir(tmp_path, "{node: n2, repository: /srv/restic}")
    said = (lambda d: d.stdout + d.stderr)(_check(directory))
    assert "[backup-target]" not in said and "backup target" not in said, said


DUTY = BackupDuty(instance="pg@n1", module="postgres",
                  repository="rest:https://10.9.0.2:20000/pg@n1/", target_node="n2",
                  login="pg@n1", password="${secret:backup-login/store/pg@n1}",
                  key="${secret:backup-key/pg@n1}", ca="/etc/mesh/ca/ca.crt",
                  refs=pvector([SecretRef("backup-login/store/pg@n1", 1),
                                SecretRef("backup-key/pg@n1", 2)]))
VALUES = {("backup-login/store/pg@n1", 1): "login-pass-Z9x", ("backup-key/pg@n1", 2): "repo-key-Q7"}


def _source(ref: SecretRef) -> str:
    return VALUES[(ref.credential, ref.generation)]


def test_a_duty_opens_into_private_files_removed_afterwards(tmp_path):
    paths = NodePaths(tmp_path / "state", tmp_path / "root")
    ca = Path(paths.on_node(DUTY.ca))
    ca.parent.mkdir(parents=True)
    ca.write_text("CA")
    declaration = Declaration(mesh="m", node="n1", address="10.9.0.1", backups=pvector([DUTY]))
    assert duty_of(declaration, "pg@n1") == DUTY
    with open_repository(DUTY, declaration, paths, _source) as repo:
        assert repo.location == DUTY.repository  # what is said: no credentials
        assert repo.cacert == str(ca)
        private = Path(repo.password_file).parent
        assert stat.S_IMODE(private.stat().st_mode) == 0o700
        for path in (Path(repo.password_file), Path(str(repo.repository_file))):
            assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert Path(repo.password_file).read_text() == "repo-key-Q7"
        assert Path(str(repo.repository_file)).read_text() == \
            "rest:https://pg%40n1:login-pass-Z9x@10.9.0.2:20000/pg@n1/"
        # restic is given paths only: no value on its command line or in its environment
        arguments = " ".join(repo._globals())
        environment = " ".join(repo._env().values())
        for value in VALUES.values():
            assert value not in arguments and value not in environment
    assert not private.exists()


def test_a_duty_without_what_it_needs_is_refused_by_name(tmp_path):
    paths = NodePaths(tmp_path / "state", tmp_path / "root")
    declaration = Declaration(mesh="m", node="n1", address="10.9.0.1")
    with pytest.raises(BackupError, match="no backup duty for 'pg@n1'"):
        duty_of(declaration, "pg@n1")
    outside = BackupDuty(instance="pg@n1", module="postgres", repository="/srv/r",
                         target_node="n2")
    with pytest.raises(BackupError, match="outside repository"):
        with open_repository(outside, declaration, paths, _source):
            pass
    with pytest.raises(MeshError, match="mesh CA .* is not on this node"):
        with open_repository(DUTY, declaration, paths, _source):
            pass
    assert login_location("rest:https://h:1/x/", "a@b", "p/q") == "rest:https://a%40b:p%2Fq@h:1/x/"


def test_a_restic_repository_password_is_never_rotated():
    from pyrsistent import pmap

    from resolver import Credential, Generation
    from resolver import RotationError
    from resolver.rotation import begin_rotation

    issued = Credential(active=Generation(generation=1, sealed=pmap({"n1": "sealed"})))
    with pytest.raises(RotationError, match="never rotated"):
        begin_rotation("backup-key/pg@n1", issued, {"n1": "sealed-2"})
    # the store login's password rotates as any provider's credential does
    assert begin_rotation("backup-login/store/pg@n1", issued, {"n1": "s2"}) != issued
