"""Log limits: mesh.yaml's `logs:` reaches every container of every node unchanged and changes
nothing else (erase the containers' limits and the declarations are the ones the defaults
give); `mesh logs --since` reads a duration back from the clock it is handed, and an ISO time
as the instant it names; a logs answer through the agent holds no secret value the node holds.

Seen failing when broken on purpose: the renderer giving containers the default limits instead
of the mesh's (the first property), and a `--since` unit worth a minute counted as seconds."""

from __future__ import annotations

import datetime

import attrs
from hypothesis import given
from hypothesis import strategies as st

from resolver import Logs, LogsDecl, resolve

from executors.node.agent.logs_answer import scrub
from executors.node.logs import since_epoch

from .strategies import worlds

limits = st.builds(Logs, driver=st.sampled_from(["json-file", "local"]),
                   max_size=st.builds(lambda n, unit: f"{n}{unit}", st.integers(1, 4096),
                                      st.sampled_from("kmg")),
                   max_files=st.integers(1, 50))


def _without_limits(declarations):
    return {node: attrs.evolve(d, digest="", containers=[
        attrs.evolve(c, logs=LogsDecl()) for c in d.containers])
        for node, d in declarations.items()}


@given(worlds(), limits)
def test_the_meshs_limits_reach_every_container_and_change_nothing_else(world, logs):
    plain = resolve(world.catalogue, world.mesh, world.ledger)
    limited = resolve(world.catalogue, attrs.evolve(world.mesh, logs=logs), world.ledger)
    want = LogsDecl(logs.driver, logs.max_size, logs.max_files)
    assert all(c.logs == want for d in limited.declarations.values() for c in d.containers)
    assert _without_limits(limited.declarations) == _without_limits(plain.declarations)
    assert limited.problems == plain.problems


@given(st.integers(0, 10**6), st.sampled_from(list("smhd")),
       st.floats(1e9, 4e9, allow_nan=False))
def test_a_duration_is_that_long_before_now(count, unit, now):
    seconds = {"s": 1, "m": 60, "h": 3600, "d": 86400}[unit]
    assert since_epoch(f"{count}{unit}", now) == now - count * seconds


@given(st.datetimes(min_value=datetime.datetime(1971, 1, 1),
                    max_value=datetime.datetime(2200, 1, 1),
                    timezones=st.sampled_from([datetime.timezone.utc,
                                               datetime.timezone(datetime.timedelta(hours=2)),
                                               datetime.timezone(datetime.timedelta(hours=-5))])),
       st.floats(0, 4e9, allow_nan=False))
def test_an_iso_time_is_that_instant_whatever_now_is(moment, now):
    text = moment.isoformat()
    assert since_epoch(text, now) == moment.timestamp()
    if moment.utcoffset() == datetime.timedelta(0):
        assert since_epoch(text.replace("+00:00", "Z"), now) == moment.timestamp()


_VALUE = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789",
                 min_size=8, max_size=24)


@given(st.lists(_VALUE, min_size=1, max_size=4, unique=True),
       st.lists(st.tuples(st.text(max_size=20), st.integers(-1, 3), st.text(max_size=20)),
                max_size=8))
def test_an_answer_holds_no_value_the_node_holds_and_counts_the_lines_it_cleaned(values, parts):
    tokens = dict(sorted(((v, "${secret:c%d}" % i) for i, v in enumerate(values)),
                         key=lambda item: -len(item[0])))
    lines = [before + (values[which] if 0 <= which < len(values) else "") + after
             for before, which, after in parts]
    cleaned, touched = scrub(lines, tokens)
    assert len(cleaned) == len(lines)
    assert not any(value in line for line in cleaned for value in values)
    assert touched == sum(any(v in line for v in values) for line in lines)
    assert [c for c, line in zip(cleaned, lines) if not any(v in line for v in values)] == \
        [line for line in lines if not any(v in line for v in values)]
