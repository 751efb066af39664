"""The agent's side of a move on the arriving node (executors/node/agent/arrivals.py) and how
the control plane keeps what it says (control/inbox.py): progress at most every
PROGRESS_EVERY seconds, a failed arrival kept and tried again every RETRY_SECONDS, a progress
report kept apart from the last report, an arrival's last word kept per instance. The whole
walk across machines is tests/test_state_move_agents_netns.py."""

from __future__ import annotations

from pathlib import Path

from executors.control.inbox import _kept
from executors.node.agent import arrivals
from executors.node.apply.outcome import ApplyOutcome, ApplyResult


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_progress_is_handed_over_at_most_every_few_seconds():
    clock = Clock()
    moving = arrivals.MoveProgress(clock)
    assert moving.take() is None
    moving.note("db@main", "db@main: 1.0 MiB of 40.0 MiB (2%) received, 1.0 MiB/s")
    assert moving.take() == {"instance": "db@main",
                             "line": "db@main: 1.0 MiB of 40.0 MiB (2%) received, 1.0 MiB/s"}
    moving.note("db@main", "db@main: 2.0 MiB of 40.0 MiB (5%) received, 1.0 MiB/s")
    assert moving.take() is None, "too soon after the last one"
    clock.now += arrivals.PROGRESS_EVERY
    assert moving.take()["line"].startswith("db@main: 2.0 MiB")
    assert moving.take() is None, "taken once"


def test_a_failed_arrival_is_kept_and_tried_again(tmp_path: Path):
    clock, said = Clock(), []
    retry = arrivals.ArrivalRetry(tmp_path / "agent", said.append, clock)
    assert retry.files() is None and not retry.due()
    declaration, secrets = tmp_path / "d.json", tmp_path / "s.yaml"
    declaration.write_text('{"serial": 7}')
    secrets.write_text("credentials: {}\n")
    retry.keep(str(declaration), secrets, 7)
    assert retry.files() is not None and retry.serial() == 7
    assert (tmp_path / "agent" / "arriving" / "secrets.yaml").stat().st_mode & 0o777 == 0o600
    assert not retry.due()
    clock.now += arrivals.RETRY_SECONDS
    assert retry.due()
    retry.postpone()
    assert not retry.due()
    # a restarted agent finds it and tries at once
    again = arrivals.ArrivalRetry(tmp_path / "agent", said.append, clock)
    assert again.due()
    again.clear()
    assert again.files() is None and not again.due()
    assert "trying it again in" in said[0]


def test_only_a_failed_arrival_phase_is_retried():
    assert arrivals.arrival_failed(ApplyOutcome(ApplyResult.FAILED, failed_phase="arrival"))
    assert not arrivals.arrival_failed(ApplyOutcome(ApplyResult.FAILED,
                                                    failed_phase="containers"))
    assert not arrivals.arrival_failed(ApplyOutcome(ApplyResult.APPLIED))


def test_progress_is_kept_apart_and_an_arrival_keeps_its_last_word():
    applied = {"trigger": "message", "result": "applied", "serial": 3, "at": "t1"}
    kept = _kept({}, "n2", applied)
    progress = {"trigger": "progress", "result": "copying", "at": "t2",
                "moving": {"instance": "db@main", "line": "db@main: 1.0 MiB of 2.0 MiB"}}
    kept = _kept(kept, "n2", progress)
    assert kept["last"] == applied, "a progress report never replaces the last report"
    assert kept["history"] == _kept({}, "n2", applied)["history"]
    assert kept["moving"] == {"instance": "db@main", "line": "db@main: 1.0 MiB of 2.0 MiB",
                              "at": "t2"}
    failed = {"trigger": "message", "result": "failed", "serial": 4, "at": "t3",
              "operations": [{"op": "arrive", "subject": "db@main", "cause": "state",
                              "result": "failed: broke off"}]}
    kept = _kept(kept, "n2", failed)
    assert kept["moving"] is None and kept["last"] == failed
    assert kept["arrivals"] == {"db@main": {"at": "t3", "result": "failed: broke off"}}
    assert kept["last_applied"]["serial"] == 3
