"""Two writers ensuring one mesh's broker objects at once (the control loop starting while
`mesh enrol token` runs), on the real RabbitMQ of scripts/services.sh: both converge, neither
fails, neither locks the other out. The interleavings are made by holding the real client's
requests (the broker answers every one of them); nothing stands in for the broker."""

from __future__ import annotations

import threading
import uuid

import pytest

from _meshdir import FIXTURES, prepare
from executors.common.amqp import BrokerAddress, FleetNames
from executors.common.broker_api import Api, hash_matches, path
from executors.common.keys import create_node_key
from executors.control.broker_settings import BrokerSettings
from executors.control.control_state import ControlState
from executors.control.enrolment import make_node_account
from executors.control.fleet import Fleet
from executors.control.fleet_broker import FleetError, WantedAccount, ensure, observe

ROUNDS = 40  # fresh meshes tried until two PUTs of the new control account collide


class Held(Api):
    """The real management API client; before each request that `meets` names, it first runs
    that hook with the request's method and path (wait for the other writer, or let it run)."""

    def __init__(self, base, user, password, meets):
        super().__init__(base, user, password)
        self.meets = list(meets)  # [(which request, what to do first)], each once, in order

    def send(self, method, api_path, body):
        self._meet(method, api_path)
        super().send(method, api_path, body)

    def get(self, api_path):
        self._meet("GET", api_path)
        return super().get(api_path)

    def _meet(self, method, api_path):
        if self.meets and self.meets[0][0](method, api_path):
            self.meets.pop(0)[1](method, api_path)


@pytest.fixture
def broker():
    import _rabbit

    base, user, password = _rabbit.rabbit_admin()
    prefix = f"fr{uuid.uuid4().hex[:6]}"
    yield base, user, password, prefix
    _rabbit.cleanup(f"mesh.{prefix}")


def _wanted(names: FleetNames, *extra: WantedAccount) -> list[WantedAccount]:
    return [WantedAccount(names.control_user, names.control_permissions(), "pw-control"),
            *extra]


@pytest.mark.integration
def test_two_ensures_creating_the_control_account_at_once_both_converge(broker):
    """Both observe the fresh mesh, then both PUT the new control account at the same moment:
    RabbitMQ answers one `400 user_already_exists`; that writer observes again and finishes."""
    base, user, password, prefix = broker
    raced = None
    for attempt in range(ROUNDS):
        names = FleetNames(f"{prefix}{attempt}")
        control = path("users", names.control_user)
        together = threading.Barrier(2)
        meet = lambda m, p: together.wait(timeout=60)  # noqa: E731
        said: list[list[str]] = [[], []]
        failures: list[BaseException] = []

        def writer(index: int) -> None:
            api = Held(base, user, password,
                       [(lambda m, p: m != "GET", meet),  # both observed before either sends
                        (lambda m, p: m == "PUT" and p == control, meet)])
            try:
                ensure(api, names, _wanted(names), say=said[index].append)
            except BaseException as error:  # noqa: BLE001 - reported by the test below
                failures.append(error)
            finally:
                api.close()

        threads = [threading.Thread(target=writer, args=(i,)) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not failures, f"attempt {attempt}: {failures[0]}"
        client = Api(base, user, password)
        try:
            observed = observe(client, names)
            account = observed.users[names.control_user]
            assert hash_matches(account.password_hash, account.hashing, "pw-control")
            assert observed.permissions[names.control_user] == names.control_permissions()
            assert ensure(client, names, _wanted(names)).calls == ()  # converged
        finally:
            client.close()
        lost = [line for lines in said for line in lines if "lost to another writer" in line]
        if lost:
            raced = lost[0]
            break
    assert raced is not None, f"the two PUTs never collided in {ROUNDS} fresh meshes"
    assert "user_already_exists" in raced and "pw-control" not in raced


@pytest.mark.integration
def test_a_writer_whose_plan_went_stale_observes_again_and_keeps_the_new_account(broker):
    """A plans from what it saw; before its first request, B records a token, makes its account
    and deletes the gone node's account. A's DELETE of that account is answered 404: A looks
    again, reads the wanted accounts again (the token is there now) and keeps B's account."""
    base, user, password, prefix = broker
    names = FleetNames(prefix)
    admin = Api(base, user, password)
    node_a = WantedAccount(names.node_user("a"), names.node_permissions("a"), "pw-a")
    ensure(admin, names, _wanted(names, node_a))  # node a enrolled once; then it is gone
    tokens: list[str] = []  # the control state both read

    def wanted_now() -> list[WantedAccount]:
        return _wanted(names, *[WantedAccount(names.enrol_user(t), names.enrol_permissions(t))
                                for t in tokens])

    def b_runs_whole(method, api_path) -> None:
        tokens.append("t1")  # recorded first, then its account made (as make_token does)
        ensure(admin, names, _wanted(names, WantedAccount(
            names.enrol_user("t1"), names.enrol_permissions("t1"), "pw-token")))

    said: list[str] = []
    a = Held(base, user, password, [(lambda m, p: m != "GET", b_runs_whole)])
    try:
        plan = ensure(a, names, wanted_now, say=said.append)
    finally:
        a.close()
    assert any("lost to another writer" in line and "answered 404" in line for line in said), said
    observed = observe(admin, names)
    token = observed.users[names.enrol_user("t1")]
    assert hash_matches(token.password_hash, token.hashing, "pw-token")
    assert names.node_user("a") not in observed.users
    assert ensure(admin, names, wanted_now).calls == ()
    assert all(call.op != "delete-user" or "enrol" not in call.subject for call in plan.calls)
    admin.close()


@pytest.mark.integration
def test_losing_every_round_is_a_plain_error_without_the_password(broker):
    """Another writer that wins every round: after ROUNDS the writer stops with one line."""
    base, user, password, prefix = broker
    names = FleetNames(prefix)
    admin = Api(base, user, password)
    node_a = WantedAccount(names.node_user("a"), names.node_permissions("a"), "pw-a")

    def made_again(method, api_path) -> None:  # before A looks: the account is there again
        ensure(admin, names, _wanted(names, node_a))

    def deleted_first(method, api_path) -> None:  # before A deletes it: deleted already
        admin.send("DELETE", api_path, {})

    ensure(admin, names, _wanted(names, node_a))
    users = lambda m, p: m == "GET" and p == "/api/users"  # noqa: E731
    delete = lambda m, p: m == "DELETE"  # noqa: E731
    a = Held(base, user, password, [(users, made_again), (delete, deleted_first)] * 3)
    try:
        with pytest.raises(FleetError) as raised:
            ensure(a, names, _wanted(names), rounds=3)
    finally:
        a.close()
        admin.close()
    message = str(raised.value)
    assert "3 rounds" in message and "answered 404" in message
    assert "pw-" not in message


@pytest.mark.integration
def test_a_node_account_made_while_the_control_loop_ensures_is_kept(broker, tmp_path):
    """`mesh enrol accept` makes the node's account while the control loop's own ensure runs
    right after it: the loop reads the accounts wanted after it looks, and the node's record
    is already there, so the new account is kept (not deleted as one no longer wanted)."""
    base, user, password, prefix = broker
    mesh_dir, _, _ = prepare(FIXTURES / "homelab", tmp_path)
    settings = BrokerSettings(BrokerAddress("127.0.0.1"), base, user, password,
                              BrokerAddress("127.0.0.1"))
    said: list[str] = []
    accepting = Fleet(prefix, settings, ControlState(mesh_dir).ensure(), lambda line: None)
    loop = Fleet(prefix, settings, ControlState(mesh_dir).ensure(), said.append)
    loop.ensure_accounts()  # the loop started: the vhost and the control account
    made = accepting.ensure_accounts

    def and_then_the_loop(*args, **kwargs) -> None:
        made(*args, **kwargs)
        loop.ensure_accounts()

    accepting.ensure_accounts = and_then_the_loop
    node_user, _ = make_node_account(mesh_dir, accepting, "attic",
                                     create_node_key(tmp_path / "attic.key"), "t1")
    client = Api(base, user, password)
    try:
        observed = observe(client, FleetNames(prefix))
    finally:
        client.close()
    kept = node_user in observed.users
    assert kept, said  # the loop's lines: what it sent
    assert observed.permissions[node_user] == FleetNames(prefix).node_permissions("attic")


def test_two_processes_making_the_control_password_at_once_get_the_same_one(tmp_path):
    """Both callers set the control account's password from the control state: on a fresh
    mesh they must read one password, or the later PUT locks the earlier process out."""
    for attempt in range(20):
        state = ControlState(tmp_path, tmp_path / f"state{attempt}")
        start = threading.Barrier(8)
        got: list[str] = []

        def make() -> None:
            start.wait(timeout=60)
            got.append(state.control_password())

        threads = [threading.Thread(target=make) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        different = len(set(got))  # counted, never shown: they are secrets
        assert different == 1, f"attempt {attempt}: {different} different passwords"
        kept = state.control_password() == got[0]
        assert kept, "the password read afterwards is not the one handed out"


def test_an_empty_control_password_file_is_replaced(tmp_path):
    state = ControlState(tmp_path, tmp_path / "state").ensure()
    state.control_secret.write_text("")
    made = state.control_password()
    kept = bool(made) and state.control_secret.read_text().strip() == made
    assert kept and state.control_password() == made
