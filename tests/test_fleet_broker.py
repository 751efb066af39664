"""The mesh's own objects on its broker, kept by the provisioner's marking rules: the pure diff
(properties) and the real RabbitMQ of scripts/services.sh (a second run sends nothing; another
owner's objects, the admin and `/` are never touched)."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from executors.common.amqp import FleetNames, Permissions
from executors.common.broker_api import USER, VHOST, Api, hash_matches, mark_name
from executors.control.fleet_broker import (Account, FleetError, FleetObserved, WantedAccount,
                                            ensure, fleet_diff, fleet_mark, observe)

NAMES = FleetNames("m")
USERS = st.sampled_from(["mesh.m.control", "mesh.m.node.a", "mesh.m.node.b", "admin", "guest"])
MARKS = st.sampled_from([fleet_mark("m"), fleet_mark("other"), "mesh:m:postgres@x"])


@st.composite
def broker_states(draw):
    users = draw(st.sets(USERS))
    observed = FleetObserved(
        admin="admin",
        users={u: Account(u, None, "", draw(st.sampled_from([(), ("administrator",)])))
               for u in users},
        vhosts=frozenset(draw(st.sets(st.sampled_from(["/", "mesh.m", "other"])))),
        permissions={},
        marks={**{(USER, u): draw(MARKS) for u in draw(st.sets(USERS))},
               **{(VHOST, v): draw(MARKS) for v in draw(st.sets(st.sampled_from(
                   ["/", "mesh.m"])))}})
    wanted = [WantedAccount(u, Permissions("^$", "^reports$", "^x$"),
                            draw(st.sampled_from([None, "pw"])))
              for u in draw(st.sets(USERS))]
    return observed, wanted


@settings(max_examples=300, deadline=None)
@given(broker_states())
def test_another_owners_objects_the_admin_and_slash_are_never_changed(state):
    observed, wanted = state
    mark = fleet_mark("m")
    plan = fleet_diff(NAMES, wanted, observed)
    for call in plan.calls:
        subject = call.subject.split(" ")[-1] if call.op in ("mark", "unmark") else \
            call.subject.split(" on ")[0]
        kind = call.subject.split(" ")[0] if call.op in ("mark", "unmark") else (
            VHOST if call.op == "create-vhost" else USER)
        assert subject != "admin", call
        assert subject != "/", call
        carried = observed.marks.get((kind, subject))
        assert carried in (None, mark), f"{call} touches an object marked {carried}"
        if call.op in ("delete-user",):
            assert observed.marks.get((USER, subject)) == mark
        if kind == USER and call.op != "unmark":
            account = observed.users.get(subject)
            assert account is None or "administrator" not in account.tags \
                or carried == mark, f"{call} adopts an unmarked administrator"


@settings(max_examples=300, deadline=None)
@given(broker_states())
def test_a_mark_always_comes_before_the_object_it_marks_is_made(state):
    observed, wanted = state
    made = [f"{kind} {name}" for (kind, name), mark in observed.marks.items()
            if mark == fleet_mark("m")]  # marked already (a run that stopped half-way)
    for call in fleet_diff(NAMES, wanted, observed).calls:
        if call.op == "mark":
            made.append(call.subject)
        elif call.op in ("create-user", "create-vhost"):
            kind = USER if call.op == "create-user" else VHOST
            assert f"{kind} {call.subject}" in made, call


# --------------------------------------------------------------------------- the real broker


@pytest.fixture
def broker():
    import _rabbit

    api, user, password = _rabbit.rabbit_admin()
    mesh = f"fb{uuid.uuid4().hex[:8]}"
    names = FleetNames(mesh)
    client = Api(api, user, password)
    yield client, names, (user, password), api
    _rabbit.cleanup(f"mesh.{mesh}")  # the vhost, the accounts and their marks
    client.close()


@pytest.mark.integration
def test_made_once_then_a_second_run_sends_nothing(broker):
    client, names, admin, api = broker
    wanted = [WantedAccount(names.control_user, names.control_permissions(), "pw-control"),
              WantedAccount(names.node_user("a"), names.node_permissions("a"), "pw-a")]
    first = ensure(client, names, wanted)
    assert {c.op for c in first.calls} >= {"mark", "create-vhost", "create-user",
                                           "set-permissions"}
    observed = observe(client, names)
    assert hash_matches(observed.users[names.node_user("a")].password_hash,
                        observed.users[names.node_user("a")].hashing, "pw-a")
    assert observed.permissions[names.node_user("a")] == names.node_permissions("a")
    again = [WantedAccount(w.user, w.permissions, None if "node" in w.user else w.password)
             for w in wanted]
    assert ensure(client, names, again).calls == ()
    # a node gone from the wanted list: its account and mark go, the vhost stays
    gone = ensure(client, names, again[:1])
    assert [c.op for c in gone.calls] == ["delete-user", "unmark"]
    observed = observe(client, names)
    assert names.node_user("a") not in observed.users and names.vhost in observed.vhosts


@pytest.mark.integration
def test_a_vhost_marked_by_another_mesh_is_refused_and_left_alone(broker):
    client, names, (user, password), api = broker
    client.send("PUT", f"/api/global-parameters/{mark_name(VHOST, names.vhost)}",
                {"value": fleet_mark("someone-else")})
    with pytest.raises(FleetError, match="another owner"):
        ensure(client, names, [WantedAccount(names.control_user, names.control_permissions(),
                                             "pw")])
    observed = observe(client, names)
    assert names.vhost not in observed.vhosts and names.control_user not in observed.users
    assert observed.marks[(VHOST, names.vhost)] == fleet_mark("someone-else")
