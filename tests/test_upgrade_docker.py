"""Guarded upgrades, on the real Docker Engine with real PostgreSQL (tests/_pgimage.py) and
Debian's restic, driven by `mesh pin`, `mesh plan`, `mesh apply` and `mesh rollback` as an
operator types them.

What is checked, in one operator's afternoon: rows written on image A; the tag repinned to
image B (the same server, another label: another digest) → the apply snapshots postgres@solo
into the backup target before it recreates the container, records the snapshot and the image
before, and the rows are still there; a second apply snapshots nothing; rows written after.
Then the tag moved to 16.x (image C): the plan refuses it (one line, mesh.yaml:line, the
instance held on B) until mesh.yaml says `upgrade: {to: "16", by: fresh}`; the apply then
snapshots, sets the old state directory aside (kept) and starts on an empty one. `mesh
rollback` refuses while the catalogue names the 16.x tag (pointing at module.yaml's line);
with the tag set back and the way back confirmed, it pins the image before, and the next plan
and apply run image B again and restore the snapshot: every row written before the major
upgrade is back. No secret value or backup password is printed.

Simplification, said plainly: as in tests/test_backup_docker.py, the backup target node
(`shelf`) is declared in mesh.yaml but its repository is a directory of this machine.
"""

from __future__ import annotations

import io
import json
import re
import secrets
import time

import psycopg
import pytest

from _docker import env_image  # noqa: F401  (the shared engine fixture's twin)
from _manifests import PROVISIONS
from _meshop import REGISTRY, Operator, push
from _pgimage import postgres_image
from test_backup_docker import DUMPED, _mesh_with_target

pytestmark = pytest.mark.integration

UPGRADES = "upgrades: {{artifact: postgres, version: '^([0-9]+)\\.'}}\n"
MANIFEST = DUMPED.replace('tag: "{tag}"', 'tag: "15.1-{tag}"') + UPGRADES
INSTANCE = "postgres@solo"


def _variant(api, base: str, name: str, label: str) -> str:
    """`base` with one more label: the same server, another image digest."""
    tag = f"mesh-test/postgres-variant:{name}-{label}"
    dockerfile = f"FROM {base}\nLABEL mesh.test.variant={label}\n".encode()
    for line in api.build(fileobj=io.BytesIO(dockerfile), tag=tag, rm=True, decode=True):
        assert "error" not in line, line
    return tag


@pytest.fixture
def operator(tmp_path):
    from _docker import engine

    api = engine()
    base = postgres_image(api)
    op = Operator(tmp_path, PROVISIONS, {"postgres": (MANIFEST, base)}, {INSTANCE: "postgres"})
    op.repository = f"{REGISTRY}/mesh-test-operator/postgres"
    op.base = base
    try:
        push(api, base, op.repository, f"15.1-{op.name}")
        op.setup()
        password = tmp_path / "backup.password"
        password.write_text(secrets.token_urlsafe(24))
        password.chmod(0o600)
        op.backup_password = password.read_text()
        _mesh_with_target(op, every=None)
        shelf = op.mesh("node-key", "shelf", "--path", tmp_path / "shelf.key").stdout
        key = shelf.split("public-key:")[1].split()[0]
        text = (op.dir / "mesh.yaml").read_text()
        (op.dir / "mesh.yaml").write_text(text.replace(
            "shelf: {address: 192.0.2.9}", f'shelf: {{address: 192.0.2.9, public-key: "{key}"}}'))
        yield op
    finally:
        op.cleanup()
        for label in ("b", "c"):
            try:
                api.remove_image(f"mesh-test/postgres-variant:{op.name}-{label}", force=True)
            except Exception:  # noqa: BLE001 - not built when the test stopped early
                pass


def _admin(op: Operator) -> str:
    return op.values()[f"secret/{INSTANCE}/admin"][1]


def _connect(op: Operator, dbname: str = "postgres", wait: float = 90.0):
    deadline = time.monotonic() + wait
    while True:
        try:
            return op.pg_login(INSTANCE, _admin(op), dbname=dbname)
        except psycopg.OperationalError as exc:
            if "does not exist" in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _insert(op: Operator, first: int, last: int) -> None:
    with _connect(op, "shop") as conn:
        conn.execute("INSERT INTO orders SELECT g, 'item ' || g FROM generate_series(%s::int, %s::int) g",
                     (first, last))


def _count(op: Operator) -> int:
    with _connect(op, "shop") as conn:
        return int(conn.execute("SELECT count(*) FROM orders").fetchone()[0])


def _image(op: Operator) -> str:
    (row,) = op.api.containers(filters={"label": [f"mesh.mesh={op.name}",
                                                  f"mesh.instance={INSTANCE}"]})
    return op.api.inspect_container(row["Id"])["Config"]["Image"]


def _plan(op: Operator, check: bool = True):
    return op.mesh("plan", ".", "--issue", "--out", "out", check=check)


def _apply(op: Operator, check: bool = True):
    return op.apply("--backup-password-file", op.dir / "backup.password", check=check)


def _record(op: Operator) -> dict:
    return json.loads((op.state / ".mesh" / "upgrades" / f"{INSTANCE}.json").read_text())


def _set_tag(op: Operator, tag: str) -> None:
    path = op.modules["postgres"]
    path.write_text(re.sub(r'tag: "[^"]*"', f'tag: "{tag}"', path.read_text(), count=1))


def _set_upgrade(op: Operator, confirm: str | None) -> None:
    path = op.dir / "mesh.yaml"
    line = f"  {INSTANCE}: {{module: postgres, node: solo"
    text = re.sub(rf"^  {re.escape(INSTANCE)}: .*$", line + (f", upgrade: {confirm}}}"
                                                             if confirm else "}"),
                  path.read_text(), count=1, flags=re.M)
    path.write_text(text)


def test_an_upgrade_is_snapshotted_a_major_is_refused_until_confirmed_and_rollback_restores(
        operator):
    op = operator
    with _connect(op) as conn:
        conn.execute("CREATE DATABASE shop")
    with _connect(op, "shop") as conn:
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY, item text)")
    _insert(op, 1, 1000)
    _plan(op)
    image_a = _image(op)

    # the tag moves to another digest (a minor release): snapshot first, then recreate
    push(op.api, _variant(op.api, op.base, op.name, "b"), op.repository, f"15.1-{op.name}")
    op.mesh("pin", ".", "--refresh")
    planned = _plan(op)
    assert "pre-upgrade-snapshot" in planned.stdout and "snapshots it into" in planned.stdout, \
        planned.stdout
    applied = _apply(op)
    snapshot_at = applied.stderr.find("snapshot-before-upgrade postgres@solo")
    recreated = re.search(r"(recreate|replace|remove|create)[-\w]* \S*postgres", applied.stderr)
    assert snapshot_at >= 0 and recreated is not None, applied.stderr
    assert snapshot_at < recreated.start(), applied.stderr  # the snapshot came first
    record = _record(op)
    assert record["from"] == {"server": image_a} and len(record["snapshot"]) >= 8, record
    image_b = _image(op)
    assert image_b != image_a and image_b == record["to"]["server"]
    assert _count(op) == 1000
    again = _apply(op)
    assert "snapshot-before-upgrade" not in again.stderr  # nothing changes image: no snapshot
    _insert(op, 1001, 1500)  # rows written after the upgrade

    # a major: refused until mesh.yaml confirms it
    push(op.api, _variant(op.api, op.base, op.name, "c"), op.repository, f"16.0-{op.name}")
    _set_tag(op, f"16.0-{op.name}")
    op.mesh("pin", ".")
    refused = _plan(op, check=False)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    found = re.search(r"mesh\.yaml:\d+:\d+: .*\[upgrade-needs-migration\].*", refused.stdout)
    assert found and 'upgrade: {to: "16", by: fresh}' in found.group(0), refused.stdout
    held = _apply(op)
    assert "snapshot-before-upgrade" not in held.stderr and _image(op) == image_b
    assert _count(op) == 1500
    _set_upgrade(op, '{to: "16", by: fresh}')
    _plan(op)
    major = _apply(op)
    assert "snapshot-before-upgrade postgres@solo" in major.stderr, major.stderr
    assert "starts version 16 fresh" in major.stderr
    assert _image(op) != image_b
    with pytest.raises(psycopg.OperationalError, match="does not exist"):
        _count(op)  # empty state: the old directory is set aside, kept
    assert list(op.state.rglob("*.before-16")) or list(op.dir.rglob("*.before-16"))
    snapshot = _record(op)["snapshot"]

    # rollback: refused while the catalogue names the 16 tag; then the image before, restored
    refused = op.mesh("rollback", ".", INSTANCE, "--state-root", op.state, check=False)
    assert refused.returncode == 2
    assert re.match(rf"mesh: \S*module\.yaml:\d+:\d+: artifact postgres names tag "
                    rf"16\.0-{op.name}; .* tag 15\.1-{op.name} before", refused.stderr), \
        refused.stderr
    _set_tag(op, f"15.1-{op.name}")
    _set_upgrade(op, '{to: "15", by: fresh}')
    rolled = op.mesh("rollback", ".", INSTANCE, "--state-root", op.state)
    assert f"restores snapshot {snapshot[:8]}" in rolled.stdout
    _plan(op)
    back = _apply(op)
    assert "restore-after-rollback postgres@solo" in back.stderr, back.stderr
    assert _image(op) == image_b
    assert _count(op) == 1500  # every row written before the major upgrade
    assert _record(op)["rollback"] is None
    assert "restore-after-rollback" not in _apply(op).stderr  # done once

    op.assert_no_secret_printed()
    assert op.backup_password not in "".join(op.printed)


def test_an_upgrade_without_the_password_changes_nothing(operator):
    op = operator
    image_a = _image(op)
    push(op.api, _variant(op.api, op.base, op.name, "b"), op.repository, f"15.1-{op.name}")
    op.mesh("pin", ".", "--refresh")
    _plan(op)
    failed = op.apply(check=False)
    assert failed.returncode == 1
    assert "--backup-password-file" in failed.stderr, failed.stderr
    assert _image(op) == image_a  # not recreated
