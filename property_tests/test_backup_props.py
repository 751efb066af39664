"""The pure rules of backups (resolver.backups): which snapshot a restore may put back, when
a schedule is overdue, where a backup may be kept.

Properties: `overdue` agrees with a deliberately simple oracle of the documented rule (newest
snapshot older than the schedule, or none); adding a snapshot never makes an instance overdue
and adding one of another instance changes nothing (metamorphic); `snapshot_to_restore`
returns exactly the one snapshot a prefix names and refuses any other module's, an unknown ID
or an ambiguous prefix; `backup_job` refuses exactly the targets on the instance's own node;
`duration_seconds` reads every spelling it documents and nothing else.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyrsistent import pmap, pvector

from resolver import (BackupError, BackupMethod, Backups, BackupTarget, Container, Instance,
                      Mesh, Module, Node, StateDir)
from resolver.backups import (Snapshot, backup_job, duration_seconds, overdue,
                              snapshot_to_restore)

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
NODES = ("anchor", "shelf", "lab")
INSTANCES = ("postgres@anchor", "gitea@lab", "notes@shelf")
MODULE_OF = {"postgres@anchor": "postgres", "gitea@lab": "gitea", "notes@shelf": "notes"}

durations = st.builds(lambda n, u: f"{n}{u}", st.integers(1, 10_000), st.sampled_from("smhdw"))
ids = st.text("0123456789abcdef", min_size=8, max_size=8)
snapshots = st.lists(
    st.builds(lambda i, t, inst: Snapshot(id=i, time=t, instance=inst, module=MODULE_OF[inst]),
              ids, st.integers(0, 10**9), st.sampled_from(INSTANCES)),
    max_size=8, unique_by=lambda s: s.id).map(tuple)
schedules = st.dictionaries(st.sampled_from(INSTANCES), durations, max_size=3)


def _mesh(every: dict[str, str], target_node: str = "shelf") -> Mesh:
    return Mesh(mesh="m", nodes=pmap({n: Node(address=f"10.0.0.{i}")
                                      for i, n in enumerate(NODES, 1)}),
                instances=pmap({i: Instance(module=MODULE_OF[i], node=i.split("@")[1])
                                for i in INSTANCES}),
                backups=Backups(target=BackupTarget(node=target_node, repository="/r"),
                                every=pmap(every)))


def _oracle(every: dict[str, str], taken: tuple[Snapshot, ...], now: int) -> list[str]:
    late = []
    for instance in sorted(every):
        amount, unit = int(every[instance][:-1]), every[instance][-1]
        newest = None
        for snapshot in taken:
            if snapshot.instance == instance and (newest is None or snapshot.time > newest):
                newest = snapshot.time
        if newest is None or now - newest > amount * UNITS[unit]:
            late.append(instance)
    return late


@given(schedules, snapshots, st.integers(0, 2 * 10**9))
def test_overdue_is_the_documented_rule(every, taken, now):
    assert [o.instance for o in overdue(_mesh(every), taken, now)] == _oracle(every, taken, now)


@given(schedules, snapshots, st.integers(0, 2 * 10**9), st.sampled_from(INSTANCES),
       st.integers(0, 2 * 10**9))
def test_a_new_snapshot_never_makes_an_instance_overdue(every, taken, now, instance, time):
    before = {o.instance for o in overdue(_mesh(every), taken, now)}
    more = taken + (Snapshot(id="f" * 9, time=time, instance=instance,
                             module=MODULE_OF[instance]),)
    after = {o.instance for o in overdue(_mesh(every), more, now)}
    assert after <= before
    assert before - after <= {instance}  # only the instance that got it can leave the list


@given(snapshots, st.sampled_from(INSTANCES), st.data())
def test_a_restore_takes_only_the_one_snapshot_of_its_own_module(taken, instance, data):
    job = backup_job(_mesh({}, target_node=_elsewhere(instance)), _modules(), instance)
    wanted = data.draw(st.one_of(ids, st.sampled_from([s.id for s in taken] or ["0" * 8]))
                       .flatmap(lambda i: st.integers(1, len(i)).map(lambda n: i[:n])))
    named = [s for s in taken if s.id.startswith(wanted)]
    if len(named) == 1 and named[0].module == job.module:
        assert snapshot_to_restore(job, taken, wanted) == named[0]
    else:
        with pytest.raises(BackupError):
            snapshot_to_restore(job, taken, wanted)


@given(st.sampled_from(INSTANCES), st.sampled_from(NODES))
def test_a_target_on_the_instances_own_node_is_refused(instance, target_node):
    mesh = _mesh({}, target_node=target_node)
    if target_node == mesh.instances[instance].node:
        with pytest.raises(BackupError, match="must be kept on another node"):
            backup_job(mesh, _modules(), instance)
    else:
        job = backup_job(mesh, _modules(), instance)
        assert job.target_node == target_node != job.node


@given(st.integers(1, 10**6), st.sampled_from("smhdw"))
def test_every_documented_duration_is_read(amount, unit):
    assert duration_seconds(f"{amount}{unit}") == amount * UNITS[unit]


@given(st.text(max_size=6))
def test_anything_else_is_no_duration(text):
    plain = len(text) >= 2 and text[-1] in UNITS and text[:-1].isascii() \
        and text[:-1].isdigit() and not text.startswith("0")
    if plain:
        return
    with pytest.raises(BackupError):
        duration_seconds(text)


def _elsewhere(instance: str) -> str:
    return next(n for n in NODES if n != instance.split("@")[1])


def _modules() -> dict[str, Module]:
    server = Container(name="server", artifact="a")
    dump = BackupMethod(container="server", dump=pvector(["dump"]), restore=pvector(["load"]))
    return {name: Module(name=name, containers=pvector([server]),
                         state=pmap({"data": StateDir(path=f"{name}/data")}),
                         backup=dump if name == "postgres" else None)
            for name in MODULE_OF.values()}
