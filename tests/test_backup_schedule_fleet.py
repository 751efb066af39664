"""Backups on a schedule by the node agent, and `mesh backup` / `mesh restore` from the control
node through the agent, on the real Docker Engine with real PostgreSQL (tests/_pgimage.py) and
Debian's restic, driven as an operator drives them.

What is checked: with `backups: every: {db@n1: 5s}` the agent of n1 (a `mesh agent` process,
enrolled with a real token) writes snapshots with no command given, records the last one in
`<state root>/.mesh/backups/db@n1.json`, and reports it; `mesh collect` keeps the report and
`mesh status` shows the last backup, and says `overdue` once the agent stopped for longer than
the schedule; `mesh backup DIR db@n1` on the control node is taken by n1's agent (the control
node has no password file), the table is dropped, `mesh restore DIR db@n1 --snapshot ID` through
the agent brings the rows back; `mesh backups DIR` without the repository's password lists what
the nodes reported; the repository's password is never printed.

Simplification, said plainly: the backup target is mesh.yaml's outside `{node, repository}`
form: a node `shelf` declared (never enrolled) whose repository is a directory of this machine
(restic's local backend), opened by the agent with $MESH_BACKUP_PASSWORD_FILE. The backup
store the mesh runs itself (`target: INSTANCE`) is not exercised by agents here: it needs a
second node with its own agent, and two agents on this one Engine remove each other's
containers (an apply removes its mesh's containers its declaration does not name), so that
fleet needs network namespaces with a dockerd each (tests/test_backup_target_docker.py runs
the store that way with `mesh apply`; tests/test_backup_schedule.py checks that a store duty
is opened through node/backup_target.py with the agent's values in force).
"""

from __future__ import annotations

import datetime
import json
import re
import secrets
import time

import pytest
from cryptography.hazmat.primitives.asymmetric import ed25519

from executors.common import amqp, messages
from executors.control.control_state import ControlState
from executors.control.remote_backup import BackupQuery, request_body

from _docker import engine
from _fleet import FleetMesh
from _manifests import POSTGRES, PROVISIONS
from _meshop import REPO
from _pgimage import postgres_image

pytestmark = pytest.mark.integration

ROWS = 5_000
CATALOGUE_BACKUP = "backup:" + (REPO / "catalogue" / "postgres" / "module.yaml").read_text() \
    .split("\nbackup:", 1)[1].split("\n\n", 1)[0] + "\n"
DUMPED = POSTGRES.replace('''      POSTGRES_PASSWORD: "${{self.admin.password}}"
''', "").replace('''    mounts: [{{state: data''', '''    secret-files:
      - {{path: /run/secrets/postgres-password, content: "${{self.admin.password}}",
         env: POSTGRES_PASSWORD_FILE, owner: "999:999"}}
    mounts: [{{state: data''') + CATALOGUE_BACKUP.replace("{", "{{").replace("}", "}}")


def psql(fleet: FleetMesh, sql: str, database: str = "postgres", check=True) -> str:
    """`psql` in db@n1's container over its local socket (trusted, as the official image)."""
    api = fleet.api
    container = fleet.container("db@n1", "server")
    run = api.exec_create(container, ["psql", "-U", "postgres", "-d", database, "-tAc", sql],
                          user="postgres")
    output = api.exec_start(run["Id"]).decode()
    code = api.exec_inspect(run["Id"])["ExitCode"]
    if check:
        assert code == 0, output
    return output.strip()


def wait_for_server(fleet: FleetMesh, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if psql(fleet, "SELECT 1", check=False) == "1":
                return
        except Exception:  # noqa: BLE001 - the container is not there yet
            pass
        assert time.monotonic() < deadline, "db@n1 never answered"
        time.sleep(1)


def write_backups(fleet: FleetMesh, every: str) -> None:
    made = fleet.mesh("node-key", "shelf", "--path", fleet.dir.parent / "shelf.key").stdout
    key = made.split("public-key: ", 1)[1].split()[0]
    text = (fleet.dir / "mesh.yaml").read_text()
    text = text.replace("instances:", f'  shelf: {{address: 192.0.2.9, public-key: "{key}"}}'
                        "  # holds the backups\ninstances:", 1)
    text += (f"backups:\n  target: {{node: shelf, repository: {fleet.dir.parent / 'repo'}}}\n"
             f"  every: {{db@n1: {every}}}\n")
    (fleet.dir / "mesh.yaml").write_text(text)


def test_the_agent_backs_up_on_schedule_and_the_control_node_backs_up_and_restores_through_it(
        tmp_path, monkeypatch):
    api = engine()
    fleet = FleetMesh(tmp_path, {"db@n1": ("postgres", "n1")}, nodes=("n1",),
                      modules={"postgres": (DUMPED, postgres_image(api))},
                      provisions=PROVISIONS)
    password = tmp_path / "backup.password"
    password.write_text(secrets.token_urlsafe(24))
    password.chmod(0o600)
    try:
        write_backups(fleet, "5s")
        fleet.setup()
        fleet.enrol("n1")
        # the agent's service environment names the outside repository's password file
        monkeypatch.setenv("MESH_BACKUP_PASSWORD_FILE", str(password))
        fleet.start_agent("n1")
        monkeypatch.delenv("MESH_BACKUP_PASSWORD_FILE")  # the control node has none
        fleet.publish()
        fleet.wait_log("n1", "reported applied", timeout=240)
        wait_for_server(fleet)
        psql(fleet, "CREATE DATABASE shop")
        psql(fleet, "CREATE TABLE orders (id int PRIMARY KEY, item text)", "shop")
        psql(fleet, f"INSERT INTO orders SELECT g, 'item ' || g FROM generate_series(1, {ROWS}) g",
             "shop")

        # no command: the schedule (5s) makes the agent write snapshots, and record them
        mark = fleet.log_size("n1")
        fleet.wait_log("n1", "backed up db@n1: snapshot", timeout=90, after=mark)
        fleet.wait_log("n1", "reported backed-up", timeout=30, after=mark)
        record = json.loads((fleet.state("n1") / ".mesh" / "backups" / "db@n1.json")
                            .read_text())
        assert record["instance"] == "db@n1" and record["error"] is None
        assert record["trigger"] == "schedule" and record["every"] == 5
        assert re.fullmatch(r"[0-9a-f]{8,64}", record["snapshot"]), record

        fleet.collect(wait=30, check=False)
        shown = fleet.mesh("status", ".").stdout
        # (`overdue` too when the next one, due 5s later, is not reported yet)
        assert re.search(r"^backup db@n1: (overdue, )?snapshot [0-9a-f]{8}, \d+s ago, "
                         r"[0-9.]+ \w+ \(every 5s; reported by n1\)$", shown, re.M), shown
        as_json = fleet.status()
        (reported,) = as_json["backups"]["reported"]
        assert reported["instance"] == "db@n1" and reported["snapshot"]

        # from the control node, through the agent: a snapshot, the rows dropped, put back
        taken = fleet.mesh(*fleet.control_args("backup", ".", "db@n1", "--timeout", "120"))
        found = re.search(r"^snapshot ([0-9a-f]{8}) of db@n1: read [0-9.]+ \w+, added "
                          r"[0-9.]+ \w+ to \S+ on shelf by n1's agent", taken.stdout, re.M)
        assert found, taken.stdout + taken.stderr
        assert "asked node n1's agent to backup db@n1" in taken.stderr
        snapshot = found.group(1)
        fleet.wait_log("n1", "answered backup request")

        psql(fleet, "DROP TABLE orders", "shop")
        assert "does not exist" in psql(fleet, "SELECT count(*) FROM orders", "shop",
                                        check=False)
        restored = fleet.mesh(*fleet.control_args("restore", ".", "db@n1", "--snapshot",
                                                  snapshot, "--timeout", "120"))
        assert f"restored snapshot {snapshot} (db@n1) into db@n1 by n1's agent" \
            in restored.stdout, restored.stdout + restored.stderr
        assert psql(fleet, "SELECT count(*) FROM orders", "shop") == str(ROWS)

        # a snapshot the repository does not hold: refused by the node, one line, exit 2
        missing = fleet.mesh(*fleet.control_args("restore", ".", "db@n1", "--snapshot",
                                                 "deadbeef", "--timeout", "60"), check=False)
        assert missing.returncode == 2, missing.stdout + missing.stderr
        assert "mesh: node n1: no snapshot 'deadbeef' in the repository" in missing.stderr

        # a request signed by a key the mesh CA never certified: refused, nothing runs
        forged = messages.sign(
            messages.BACKUP_REQUEST,
            request_body(fleet.name, BackupQuery("n1", "db@n1", "restore", snapshot),
                         "forged", datetime.datetime.now(datetime.timezone.utc)
                         + datetime.timedelta(minutes=5)),
            ed25519.Ed25519PrivateKey.generate(),
            (fleet.dir / "ca" / "mesh-ca.crt").read_text())
        publish_as_control(fleet, "n1", forged)
        fleet.wait_log("n1", "refused backup request backup/n1/forged")

        # the repository is not read from the control node: what the agents reported
        fleet.collect(wait=5, check=False)
        listed = fleet.mesh("backups", ".").stdout
        assert "as the nodes' agents last reported" in listed, listed
        assert re.search(r"^backup db@n1: (overdue, )?snapshot [0-9a-f]{8}", listed, re.M), \
            listed

        # the agent stopped for longer than the schedule: overdue, by the same rule
        fleet.stop_agent("n1")
        fleet.collect(wait=5, check=False)
        time.sleep(8)
        late = fleet.mesh("status", ".").stdout
        assert re.search(r"^backup db@n1: overdue, snapshot [0-9a-f]{8}, \d+s ago", late,
                         re.M), late

        assert password.read_text() not in fleet.everything_printed()
    finally:
        fleet.close()


def publish_as_control(fleet: FleetMesh, node: str, envelope: bytes) -> None:
    """`envelope` to the node's queue with the control account, as `mesh backup` sends one."""
    names = amqp.FleetNames(fleet.name)
    host, port = fleet.broker.amqp.rsplit(":", 1)
    connection = amqp.connect(amqp.parameters(
        amqp.BrokerAddress(host, int(port)), names.vhost, names.control_user,
        ControlState(fleet.dir, None).control_password(), tls=amqp.BrokerTls.plain()
        if fleet.broker.plain else amqp.BrokerTls((fleet.dir / "ca" / "mesh-ca.crt").read_text())))
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        amqp.publish(channel, amqp.DECLARATIONS, node, envelope,
                     amqp.properties(message_id=f"backup/{node}/forged",
                                     kind=messages.BACKUP_REQUEST))
    finally:
        connection.close()
