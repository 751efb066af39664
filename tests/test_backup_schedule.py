"""The agent's backup schedule and backup requests, without a broker: a due backup runs in a
thread of its own and its result is recorded (0600, atomically) and handed to the loop once; a
failed one is retried only after the back-off; a backup request is checked (this node, this
mesh, unexpired, an action) before anything runs, and its answer matches the published schema
and says `refused` for a request the node cannot run; `mesh status` says each reported
backup, `overdue` by the schedule's rule, and the last failure.

The backups themselves run against the real Docker Engine and restic in
tests/test_backup_schedule_fleet.py; here the repository cannot be opened (the agent's
environment names no password file), which is the failure the schedule must survive.
"""

from __future__ import annotations

import datetime
import json
import os
import stat

import jsonschema
import pytest
from pyrsistent import pmap, pvector

from resolver import Backups, BackupTarget, Declaration, Instance, Mesh, Node
from resolver.backups import BackupDuty

from executors.cli._backup_status import reported, reported_lines
from executors.common import messages
from executors.common.message_schemas import BACKUP_ANSWER, BACKUP_REQUEST, REPORT
from executors.control.remote_backup import BackupQuery, request_body
from executors.node.agent import backup_answer
from executors.node.backup_schedule import BackupRunner, BackupSchedule, read_record

NOW = datetime.datetime(2026, 12, 2, 12, 0, tzinfo=datetime.timezone.utc)


@pytest.fixture
def schedule(tmp_path, monkeypatch):
    monkeypatch.delenv("MESH_BACKUP_PASSWORD_FILE", raising=False)
    clock = [1_800_000_000.0]
    said: list[str] = []
    runner = BackupRunner(str(tmp_path / "state"), None, str(tmp_path / "node.key"), "n1",
                          said.append, clock=lambda: clock[0])
    found = BackupSchedule(runner, said.append)
    found.follow(Declaration(mesh="m", node="n1", address="10.0.0.1", backups=pvector([
        BackupDuty(instance="db@n1", module="postgres", repository=str(tmp_path / "repo"),
                   target_node="shelf", every=300)])))
    found.clock, found.said = clock, said  # type: ignore[attr-defined]
    return found


def run_due(schedule: BackupSchedule) -> list:
    schedule.tick()
    if schedule.thread is not None:
        schedule.thread.join(30)
    return schedule.finished()


def test_a_failed_backup_is_recorded_and_retried_only_after_the_back_off(schedule):
    (first,) = run_due(schedule)
    assert first.instance == "db@n1" and first.snapshot is None and first.failures == 1
    assert "names no $MESH_BACKUP_PASSWORD_FILE" in first.error
    path = schedule.runner.paths.root / "backups" / "db@n1.json"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert read_record(schedule.runner.paths, "db@n1") == first
    assert schedule.finished() == []  # handed to the loop once

    schedule.clock[0] += 30  # within the first back-off (60 s)
    assert run_due(schedule) == []
    schedule.clock[0] += 31
    (second,) = run_due(schedule)
    assert second.failures == 2
    (reported,) = schedule.results()
    assert reported["instance"] == "db@n1" and reported["failures"] == 2
    jsonschema.validate({"format": messages.REPORT_FORMAT, "mesh": "m", "node": "n1",
                         "at": "2026-12-02T12:00:00Z", "trigger": "backup",
                         "result": "failed", "backups": schedule.results(),
                         "backup": second.to_json()}, REPORT)


def test_a_declaration_without_a_schedule_backs_up_nothing(schedule):
    schedule.follow(Declaration(mesh="m", node="n1", address="10.0.0.1"))
    assert run_due(schedule) == [] and schedule.thread is None


def body(**changed) -> dict:
    found = request_body("m", BackupQuery("n1", "db@n1", "restore", "3f2a91c0"), "r1",
                         NOW + datetime.timedelta(minutes=5))
    found.update(changed)
    return found


def test_a_request_is_checked_before_anything_runs():
    jsonschema.validate(body(), BACKUP_REQUEST)
    assert backup_answer.check_request(body(), "m", "n1", NOW) == "r1"
    refused = {
        "for node 'n2' of mesh 'm', not this node's": body(node="n2"),
        "expired at": body(expires="2026-12-02T11:00:00Z"),
        "asks for 'delete'; expected backup or restore": body(action="delete"),
        "the restore request names no snapshot": body(snapshot=None),
        "the backup request has no id": body(request=""),
    }
    for why, wrong in refused.items():
        with pytest.raises(messages.MessageRefused, match=why.replace("(", r"\(")
                           .replace(")", r"\)").replace("$", r"\$")):
            backup_answer.check_request(wrong, "m", "n1", NOW)


def test_an_envelope_says_whether_it_is_a_backup_request():
    assert backup_answer.is_backup_request(json.dumps({"kind": "backup-request"}).encode())
    assert not backup_answer.is_backup_request(json.dumps({"kind": "logs-request"}).encode())
    assert not backup_answer.is_backup_request(b"\xff not json")


def test_a_request_for_an_instance_without_a_duty_is_refused_and_answered_as_such(schedule):
    answer = backup_answer.answer(body(instance="ghost@n1", action="backup"), "r1", "n1",
                                  schedule)
    jsonschema.validate(answer, BACKUP_ANSWER)
    assert answer["refused"] is True
    assert "has no backup duty for 'ghost@n1'; backed up here: db@n1" in answer["error"]

    failed = backup_answer.answer(body(action="backup"), "r1", "n1", schedule)
    jsonschema.validate(failed, BACKUP_ANSWER)
    assert "refused" not in failed and "MESH_BACKUP_PASSWORD_FILE" in failed["error"]
    assert read_record(schedule.runner.paths, "db@n1").trigger == "request"


def test_status_says_each_reported_backup_and_overdue_by_the_same_rule():
    mesh = Mesh(mesh="m", nodes=pmap({"n1": Node(address="10.0.0.1"),
                                      "shelf": Node(address="10.0.0.9")}),
                instances=pmap({"db@n1": Instance(module="postgres", node="n1"),
                                "notes@n1": Instance(module="notes", node="n1")}),
                backups=Backups(target=BackupTarget(node="shelf", repository="/r"),
                                every=pmap({"db@n1": "1h", "notes@n1": "1h"})))
    now = 1_800_000_000
    nodes = [{"node": "n1", "backups": [
        {"instance": "db@n1", "snapshot": "3f2a91c0aa", "good": now - 3600, "bytes": 2048,
         "error": None, "failures": 0},
        {"instance": "notes@n1", "snapshot": "77aa11bb", "good": now - 3601, "bytes": 10,
         "error": "restic backup failed (exit 1): repository is locked", "failures": 2}]},
        {"node": "shelf", "backups": []}]
    lines = reported_lines(reported(mesh, nodes, now), now)
    assert lines == [
        "backup db@n1: snapshot 3f2a91c0, 60m ago, 2.0 KiB (every 1h; reported by n1)",
        "backup notes@n1: overdue, snapshot 77aa11bb, 60m ago, 10 B (every 1h; reported by "
        "n1); last attempt failed (2 in a row): restic backup failed (exit 1): repository is "
        "locked"]
    assert reported(mesh, [{"node": "n1", "backups": []}], now) == []  # no agent: nothing


def test_a_duty_on_the_mesh_store_is_opened_with_the_values_in_force(schedule):
    """A duty with a store login goes through node/backup_target.open_repository, with the
    agent's state root and key: with no declaration applied yet, it says so, nothing runs."""
    schedule.follow(Declaration(mesh="m", node="n1", address="10.0.0.1", backups=pvector([
        BackupDuty(instance="db@n1", module="postgres", target_node="n2", every=300,
                   repository="rest:https://10.0.0.2:8000/db-n1/", login="db-n1",
                   password="${secret:backup/store@n2/db@n1}",
                   key="${secret:backup-key/db@n1}")])))
    (first,) = run_due(schedule)
    assert first.failures == 1 and "cannot read the sealed values in force" in first.error
    assert str(schedule.runner.paths.root / "agent" / "current" / "secrets.yaml") in first.error
