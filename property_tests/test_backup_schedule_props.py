"""The pure rule of scheduled backups (resolver.backups `due`, `is_overdue`, `retry_after`).

Properties: `due` agrees with a deliberately simple oracle of the documented rule (no good
snapshot or the newest older than the schedule; after a failure, not before the back-off);
what the agent runs and what `mesh status` calls overdue never disagree (`due` without
failures is exactly `overdue_since`); an instance backed up at `now` is never due, one with
no schedule never is; a failure retried at the moment it failed never is; the back-off
doubles and stays within its cap and the schedule; the order puts never-backed-up first.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from pyrsistent import pmap

from resolver import Backups, BackupTarget, Instance, Mesh, Node
from resolver.backups import (LastBackup, due, duration_seconds, is_overdue, overdue_since,
                              retry_after)

INSTANCES = ("db@n1", "web@n1", "queue@n2", "notes@n2")
NOW = st.integers(0, 2 * 10**9)
seconds = st.integers(1, 10 * 86400)
schedules = st.dictionaries(st.sampled_from(INSTANCES), seconds, max_size=4)
lasts = st.builds(LastBackup, good=st.one_of(st.none(), st.integers(0, 2 * 10**9)),
                  failed=st.one_of(st.none(), st.integers(0, 2 * 10**9)),
                  failures=st.integers(0, 6))
records = st.dictionaries(st.sampled_from(INSTANCES), lasts, max_size=4)


def _oracle(schedule: dict[str, int], last: dict[str, LastBackup], now: int) -> set[str]:
    found = set()
    for instance, every in schedule.items():
        seen = last.get(instance) or LastBackup()
        if seen.good is not None and now - seen.good <= every:
            continue  # backed up within its schedule
        if seen.failures:
            wait = 60
            for _ in range(seen.failures - 1):
                wait *= 2
            wait = min(wait, 3600, every)
            if seen.failed is not None and now < seen.failed + wait:
                continue  # still backing off
        found.add(instance)
    return found


@given(schedules, records, NOW)
def test_due_is_the_documented_rule(schedule, last, now):
    assert set(due(schedule, last, now)) == _oracle(schedule, last, now)


@given(schedules, records, NOW)
def test_due_names_each_instance_once_and_only_scheduled_ones(schedule, last, now):
    found = due(schedule, last, now)
    assert len(found) == len(set(found)) and set(found) <= set(schedule)


@given(schedules, records, NOW)
def test_never_backed_up_come_first(schedule, last, now):
    found = due(schedule, last, now)
    never = [i for i in found if (last.get(i) or LastBackup()).good is None]
    assert list(found[:len(never)]) == never


@given(schedules, records, NOW, st.sampled_from(INSTANCES))
def test_an_instance_backed_up_now_is_not_due(schedule, last, now, instance):
    last = {**last, instance: LastBackup(good=now)}
    assert instance not in due(schedule, last, now)


@given(schedules, records, NOW, st.integers(1, 6))
def test_a_failure_is_not_retried_at_once(schedule, last, now, failures):
    for instance in schedule:
        last = {**last, instance: LastBackup(good=None, failed=now, failures=failures)}
    assert due(schedule, last, now) == ()


@given(st.integers(1, 20), seconds)
def test_the_back_off_doubles_within_its_bounds(failures, every):
    wait = retry_after(failures, every)
    assert 0 < wait <= min(every, 3600)
    assert retry_after(failures + 1, every) >= wait
    assert retry_after(0, every) == 0


durations = st.builds(lambda n, u: f"{n}{u}", st.integers(1, 500), st.sampled_from("smh"))


@given(st.dictionaries(st.sampled_from(INSTANCES), durations, max_size=4),
       st.dictionaries(st.sampled_from(INSTANCES), st.integers(0, 2 * 10**9), max_size=4), NOW)
def test_what_the_agent_runs_is_what_status_calls_overdue(every, newest, now):
    mesh = Mesh(mesh="m", nodes=pmap({"n1": Node(address="10.0.0.1"),
                                      "n2": Node(address="10.0.0.2"),
                                      "shelf": Node(address="10.0.0.3")}),
                instances=pmap({i: Instance(module=i.split("@")[0], node=i.split("@")[1])
                                for i in INSTANCES}),
                backups=Backups(target=BackupTarget(node="shelf", repository="/r"),
                                every=pmap(every)))
    schedule = {i: duration_seconds(e) for i, e in every.items()}
    last = {i: LastBackup(good=t) for i, t in newest.items()}
    late = {o.instance for o in overdue_since(mesh, newest, now)}
    assert set(due(schedule, last, now)) == late
    assert late == {i for i in schedule if is_overdue(newest.get(i), schedule[i], now)}


@given(seconds, NOW, st.integers(0, 3))
def test_the_boundary_of_the_schedule(every, now, past):
    """Exactly `every` seconds old is still within it; one second more is due."""
    schedule = {"db@n1": every}
    assert due(schedule, {"db@n1": LastBackup(good=now - every)}, now) == ()
    assert due(schedule, {"db@n1": LastBackup(good=now - every - 1 - past)}, now) == ("db@n1",)
