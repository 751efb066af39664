"""Backups that restore, on the real Docker Engine with real PostgreSQL (tests/_pgimage.py) and
Debian's restic, driven by `mesh backup`, `mesh backups` and `mesh restore` as an operator
types them.

What is checked: 10,000 rows backed up, the table dropped, the snapshot restored, the rows
back; a second backup of unchanged data adds almost nothing to the repository (deduplicated,
the size printed); `mesh backups` lists both snapshots with ages and sizes and says when an
instance is overdue; a snapshot ID the repository does not hold, a snapshot of another module
and a target on the instance's own node are refused with one line each, exit 2, nothing
changed; a module without a dump is backed up by stop-copy-start of its state directory and
restored the same way; the repository's password is never printed.

Simplification, said plainly: the backup target node (`shelf`) is declared in mesh.yaml but its
repository is a directory of this machine (restic's local backend), so the "other node" is the
same host here; the rule that refuses a target on the instance's own node is checked by name.
"""

from __future__ import annotations

import re
import secrets
import subprocess
import time

import psycopg
import pytest

from _docker import env_image  # noqa: F401  (the shared engine fixture's twin)
from _manifests import POSTGRES, PROVISIONS
from _meshop import REPO, Operator
from _pgimage import postgres_image

pytestmark = pytest.mark.integration

ROWS = 10_000
# The catalogue's own `backup:` (its dump derives the `\restrict` key from the admin password
# file), on the test module told its admin password as that file, as the catalogue's is.
CATALOGUE_BACKUP = "backup:" + (REPO / "catalogue" / "postgres" / "module.yaml").read_text() \
    .split("\nbackup:", 1)[1].split("\n\n", 1)[0] + "\n"
POSTGRES_FILES = POSTGRES.replace('''      POSTGRES_PASSWORD: "${{self.admin.password}}"
''', "").replace('''    mounts: [{{state: data''', '''    secret-files:
      - {{path: /run/secrets/postgres-password, content: "${{self.admin.password}}",
         env: POSTGRES_PASSWORD_FILE, owner: "999:999"}}
    mounts: [{{state: data''')
DUMPED = POSTGRES_FILES + CATALOGUE_BACKUP.replace("{", "{{").replace("}", "}}")


def _mesh_with_target(op: Operator, target_node: str = "shelf", every: str | None = "1h"
                      ) -> None:
    text = (op.dir / "mesh.yaml").read_text()
    text = re.sub(r"\nbackups:.*", "", text, flags=re.S).rstrip("\n") + "\n"
    if "  shelf:" not in text:
        text = text.replace("instances:", "  shelf: {address: 192.0.2.9}\ninstances:", 1)
    text += f"backups:\n  target: {{node: {target_node}, repository: {op.dir / 'repo'}}}\n"
    if every is not None:
        text += f"  every: {{postgres@solo: {every}}}\n"
    (op.dir / "mesh.yaml").write_text(text)


@pytest.fixture
def operator(tmp_path, request):
    from _docker import engine

    manifest = request.param if hasattr(request, "param") else DUMPED
    api = engine()
    op = Operator(tmp_path, PROVISIONS, {"postgres": (manifest, postgres_image(api))},
                  {"postgres@solo": "postgres"})
    try:
        op.setup()
        password = tmp_path / "backup.password"
        password.write_text(secrets.token_urlsafe(24))
        password.chmod(0o600)
        op.backup_password = password.read_text()
        _mesh_with_target(op)
        yield op
    finally:
        op.cleanup()


def _admin(op: Operator) -> str:
    return op.values()["secret/postgres@solo/admin"][1]


def _connect(op: Operator, dbname: str = "postgres", wait: float = 60.0):
    deadline = time.monotonic() + wait
    while True:
        try:
            return op.pg_login("postgres@solo", _admin(op), dbname=dbname)
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _backup_cli(op: Operator, verb: str, *args, check: bool = True):
    return op.mesh(verb, ".", *args, "--password-file", op.dir / "backup.password",
                   "--state-root", op.state, check=check)


def _fill(op: Operator) -> None:
    with _connect(op) as conn:
        conn.execute("CREATE DATABASE shop")
    with _connect(op, "shop") as conn:
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY, item text)")
        conn.execute("INSERT INTO orders SELECT g, 'item ' || g FROM generate_series(1, %s) g",
                     (ROWS,))


def _count(op: Operator) -> int:
    with _connect(op, "shop") as conn:
        return int(conn.execute("SELECT count(*) FROM orders").fetchone()[0])


def _drop(op: Operator) -> None:
    with _connect(op, "shop") as conn:
        conn.execute("DROP TABLE orders")


def _written(result) -> tuple[str, int]:
    """The snapshot ID and the bytes added, from `mesh backup`'s line."""
    found = re.search(r"snapshot ([0-9a-f]{8}) of postgres@solo: read ([0-9.]+ \w+), "
                      r"added ([0-9.]+) (\w+)", result.stdout)
    assert found, result.stdout + result.stderr
    unit = {"B": 1, "KiB": 1024, "MiB": 1 << 20, "GiB": 1 << 30}[found.group(4)]
    return found.group(1), int(float(found.group(3)) * unit)


def _snapshot_count(op: Operator) -> int:
    return len(re.findall(r"^[0-9a-f]{8} +postgres@solo", _backup_cli(op, "backups").stdout,
                          flags=re.M))


def test_backup_drop_restore_brings_the_rows_back_and_a_second_backup_adds_almost_nothing(
        operator):
    op = operator
    _fill(op)
    listed = _backup_cli(op, "backups", check=False)
    assert listed.returncode == 2 and "no restic repository" in listed.stderr, listed.stderr

    first, added_first = _written(_backup_cli(op, "backup", "postgres@solo"))
    second, added_second = _written(_backup_cli(op, "backup", "postgres@solo"))
    assert first != second
    assert added_first > 100_000, added_first  # 10,000 rows, compressed
    assert added_second < added_first / 20, (added_first, added_second)  # deduplicated

    listed = _backup_cli(op, "backups").stdout
    assert re.search(rf"^{first} +postgres@solo +\d+s +[0-9.]+ (KiB|MiB)$", listed, re.M), \
        listed
    assert "2 snapshot(s); the repository holds" in listed and "overdue" not in listed

    _drop(op)
    with pytest.raises(psycopg.errors.UndefinedTable):
        _count(op)
    restored = _backup_cli(op, "restore", "postgres@solo", "--snapshot", first)
    assert f"restored snapshot {first}" in restored.stdout
    assert _count(op) == ROWS

    op.assert_no_secret_printed()
    assert op.backup_password not in "".join(op.printed)


def test_bad_input_is_refused_with_one_line_and_nothing_changes(operator):
    op = operator
    _fill(op)
    first, _ = _written(_backup_cli(op, "backup", "postgres@solo"))

    missing = _backup_cli(op, "restore", "postgres@solo", "--snapshot", "deadbeef",
                          check=False)
    assert missing.returncode == 2
    assert missing.stderr.strip() == ("mesh: no snapshot 'deadbeef' in the repository; "
                                      "`mesh backups` lists the snapshots there are")

    # a snapshot of another module, written into the same repository by restic itself
    env = {"RESTIC_REPOSITORY": str(op.dir / "repo"),
           "RESTIC_PASSWORD_FILE": str(op.dir / "backup.password")}
    import os
    subprocess.run(["restic", "backup", "--stdin", "--stdin-filename", "notes@solo.dump",
                    "--tag", "mesh-instance=notes@solo", "--tag", "mesh-module=notes"],
                   input=b"not a postgres dump", env={**os.environ, **env}, check=True,
                   capture_output=True)
    listed = _backup_cli(op, "backups").stdout
    (other,) = re.findall(r"^([0-9a-f]{8}) +notes@solo", listed, re.M)
    _drop(op)
    foreign = _backup_cli(op, "restore", "postgres@solo", "--snapshot", other, check=False)
    assert foreign.returncode == 2
    assert "holds notes@solo (module notes); postgres@solo is module postgres" \
        in foreign.stderr
    assert len(foreign.stderr.strip().splitlines()) == 1
    with pytest.raises(psycopg.errors.UndefinedTable):
        _count(op)  # nothing was put back

    _mesh_with_target(op, target_node="solo", every=None)
    same = _backup_cli(op, "backup", "postgres@solo", check=False)
    assert same.returncode == 2
    assert same.stderr.strip() == ("mesh: the backup target is on node solo, the node of "
                                   "postgres@solo: a backup must be kept on another node")
    _mesh_with_target(op, target_node="solo")  # scheduled there too: mesh.yaml is refused
    same = _backup_cli(op, "backup", "postgres@solo", check=False)
    assert same.returncode == 2
    assert re.match(r"mesh\.yaml:\d+:\d+: postgres@solo runs on solo, the backup target's "
                    r"own node; expected a backup target on another node", same.stderr), \
        same.stderr
    _mesh_with_target(op)
    assert _snapshot_count(op) == 1  # the refused backup wrote nothing

    unknown = _backup_cli(op, "backup", "nothing@solo", check=False)
    assert unknown.returncode == 2 and "mesh.yaml names no instance 'nothing@solo'" \
        in unknown.stderr
    _backup_cli(op, "restore", "postgres@solo", "--snapshot", first)
    assert _count(op) == ROWS


def test_an_instance_older_than_its_schedule_is_overdue(operator):
    op = operator
    listed = _backup_cli(op, "backup", "postgres@solo")
    assert "snapshot" in listed.stdout
    _mesh_with_target(op, every="1s")
    time.sleep(2.5)
    listed = _backup_cli(op, "backups").stdout
    assert re.search(r"^overdue: postgres@solo \(last backup \d+s ago; every 1s\)$", listed,
                     re.M), listed
    status = op.mesh("status", ".", "--backup-password-file", op.dir / "backup.password")
    assert re.search(r"^backup overdue: postgres@solo \(last backup \d+s ago; every 1s\)$",
                     status.stdout, re.M), status.stdout
    assert "backups not checked: no --backup-password-file" in op.mesh("status", ".").stdout
    _mesh_with_target(op, every="1d")
    status = op.mesh("status", ".", "--backup-password-file", op.dir / "backup.password")
    assert "backups: every scheduled instance is within its schedule" in status.stdout
    assert "overdue" not in status.stdout


@pytest.mark.parametrize("operator", [POSTGRES], indirect=True)
def test_a_module_without_a_dump_is_stopped_copied_and_started(operator):
    op = operator
    _fill(op)
    result = _backup_cli(op, "backup", "postgres@solo")
    first, added = _written(result)
    assert "stopping 1 container(s)" in result.stderr and "started again" in result.stderr
    assert _count(op) == ROWS  # running again after the copy
    _drop(op)
    _backup_cli(op, "restore", "postgres@solo", "--snapshot", first)
    assert _count(op) == ROWS


FAILING = POSTGRES + """\
backup:
  container: server
  dump: [sh, -c, "pg_dumpall --username postgres --restrict-key=testkey; exit 3"]
  restore: [psql, -X, -q, --username, postgres, --dbname, postgres]
"""


@pytest.mark.parametrize("operator", [FAILING], indirect=True)
def test_a_dump_that_fails_leaves_no_snapshot(operator):
    op = operator
    failed = _backup_cli(op, "backup", "postgres@solo", check=False)
    assert failed.returncode == 1
    assert "mesh: postgres@solo: sh exited 3" in failed.stderr
    assert "no snapshot was kept" in failed.stderr
    assert _snapshot_count(op) == 0
