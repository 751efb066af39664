"""The mesh's own objects on its broker: its vhost and its accounts, kept by the provisioner's
rules (common/broker_api.py), through the management API as the broker's admin.

Invariants:
- Everything here is marked `mesh:<mesh>:.fleet` (no instance name starts with a dot, so no
  grant of the AMQP provisioner ever carries this mark, and neither touches the other's
  objects), the mark put before the object is made. An object marked by another owner (another
  mesh, a grant) is refused by name and left alone; the admin account, unmarked administrators
  and the `/` vhost are never managed.
- observe (GET) → diff (pure, `fleet_diff`) → apply: a second run issues no request. Two
  runs at once (the control loop starting while `mesh enrol` runs) converge: a request that
  lost to the other writer (`400 user_already_exists`, a DELETE answered 404) ends the round,
  and the next round diffs against the broker as it is now (bounded: ROUNDS, then a
  FleetError). The wanted accounts are read after each observation, never before it, so an
  account another process made for a state it wrote first is never taken for a stale one.
- Accounts: the control account (all rights in the mesh's vhost), one account per enrolled
  node and one per open enrolment token, each with exactly the permissions
  common/amqp.FleetNames states. A password is given only when an account is made or reset
  (`password=None` keeps whatever it has); an account of ours that is no longer wanted is
  deleted and its mark removed. The vhost is never deleted: it holds the queues.
- No tags on any account: none may use the management API or impersonate another (`user_id`
  is validated for every account without the `impersonator` tag).
- Passwords are only request bodies; a report or an error never holds one.
"""

from __future__ import annotations

from typing import Callable, Mapping, Optional, Sequence, Union

import attrs
import requests

from executors.common.amqp import FleetNames, Permissions
from executors.common.broker_api import (
    DEFAULT_VHOST,
    USER,
    VHOST,
    Api,
    ApiError,
    Call,
    hash_matches,
    lost_race,
    mark_call,
    marker,
    path,
    read_marks,
    tags_of,
    unmark_call,
)
from resolver import MeshError

FLEET_OWNER = ".fleet"
ROUNDS = 3  # observe → diff → apply rounds when a concurrent writer wins a request


class FleetError(MeshError):
    """The broker's objects for the mesh cannot be made as wanted."""


@attrs.frozen
class WantedAccount:
    user: str
    permissions: Permissions
    password: Optional[str] = attrs.field(default=None, repr=False)  # None: keep its own


Wanted = Union[Sequence[WantedAccount], Callable[[], Sequence[WantedAccount]]]


@attrs.frozen
class Account:
    name: str
    password_hash: Optional[str] = attrs.field(default=None, repr=False)
    hashing: str = ""
    tags: tuple[str, ...] = ()


@attrs.frozen
class FleetObserved:
    admin: str
    users: Mapping[str, Account]
    vhosts: frozenset[str]
    permissions: Mapping[str, Permissions]  # user → its permissions on the mesh's vhost
    marks: Mapping[tuple[str, str], str]


@attrs.frozen
class FleetPlan:
    calls: tuple[Call, ...] = ()
    refusals: tuple[tuple[str, str], ...] = ()  # (object, why): left alone


def fleet_mark(mesh: str) -> str:
    return marker(mesh, FLEET_OWNER)


def fleet_diff(names: FleetNames, wanted: Sequence[WantedAccount],
               observed: FleetObserved) -> FleetPlan:
    """The requests that make the mesh's vhost and wanted accounts exist as wanted, and delete
    the accounts of ours no longer wanted (pure)."""
    mark = fleet_mark(names.mesh)
    vhost = names.vhost
    calls: list[Call] = []
    refusals: list[tuple[str, str]] = []
    vhost_mark = observed.marks.get((VHOST, vhost))
    if vhost == DEFAULT_VHOST or (vhost_mark is not None and vhost_mark != mark):
        return FleetPlan((), ((f"vhost {vhost}", f"marked {vhost_mark}, not {mark}: "
                                                 f"not touched"),))
    if vhost_mark != mark:
        calls.append(mark_call(VHOST, vhost, mark, "adopted: was not marked as managed"
                               if vhost in observed.vhosts else
                               "mark as managed, before it is made"))
    if vhost not in observed.vhosts:
        calls.append(Call("create-vhost", vhost, f"the mesh {names.mesh}'s delivery", "PUT",
                          path("vhosts", vhost), {"description": mark}))
    wanted_users = set()
    for want in sorted(wanted, key=lambda w: w.user):
        wanted_users.add(want.user)
        why = _refusal(want, observed, mark)
        if why is not None:
            refusals.append((f"user {want.user}", why))
            continue
        calls += _account_calls(want, observed, mark, vhost)
    for (kind, name), carried in sorted(observed.marks.items()):
        if kind != USER or carried != mark or name in wanted_users:
            continue
        if name == observed.admin:
            refusals.append((f"user {name}", "marked ours, but the admin is never managed"))
        elif name in observed.users:
            calls.append(Call("delete-user", name, "no longer wanted (token used or expired, "
                              "node gone)", "DELETE", path("users", name)))
            calls.append(unmark_call(USER, name, "its account is deleted"))
        else:
            calls.append(unmark_call(USER, name, "the account is gone: its mark goes"))
    return FleetPlan(tuple(calls), tuple(refusals))


def _refusal(want: WantedAccount, observed: FleetObserved, mark: str) -> Optional[str]:
    if want.user == observed.admin:
        return "the broker's admin, which the mesh never manages"
    carried = observed.marks.get((USER, want.user))
    account = observed.users.get(want.user)
    if carried is not None and carried != mark:
        return f"marked {carried}, not {mark}: not touched"
    if account is not None and "administrator" in account.tags and carried != mark:
        return "an unmarked administrator: never adopted"
    if account is None and want.password is None:
        return ("the account is gone from the broker and its password is not known here "
                "(a node: enrol it again; a token: make a new one)")
    return None


def _account_calls(want: WantedAccount, observed: FleetObserved, mark: str,
                   vhost: str) -> list[Call]:
    calls: list[Call] = []
    account = observed.users.get(want.user)
    if observed.marks.get((USER, want.user)) != mark:
        calls.append(mark_call(USER, want.user, mark, "adopted: was not marked as managed"
                               if account is not None else "mark as managed, before it is made"))
    why = []
    if account is None:
        why.append("the account is made")
    else:
        if want.password is not None and not hash_matches(account.password_hash,
                                                          account.hashing, want.password):
            why.append("its password is reset")
        if account.tags:
            why.append(f"tags {','.join(account.tags)} → none")
    if why:
        body = {"tags": ""}
        if want.password is not None:
            body["password"] = want.password
        elif account is not None:  # keep the stored hash: a PUT without a password clears it
            # (an account gone with no password known was refused: _refusal)
            body.update(password_hash=account.password_hash or "",
                        hashing_algorithm=account.hashing)
        calls.append(Call("create-user" if account is None else "update-user", want.user,
                          "; ".join(why), "PUT", path("users", want.user), body))
    if observed.permissions.get(want.user) != want.permissions:
        calls.append(Call("set-permissions", f"{want.user} on {vhost}",
                          f"configure {want.permissions.configure}, write "
                          f"{want.permissions.write}, read {want.permissions.read}", "PUT",
                          path("permissions", vhost, want.user), want.permissions.as_body()))
    return calls


def observe(api: Api, names: FleetNames) -> FleetObserved:
    users = {u["name"]: Account(u["name"], u.get("password_hash"),
                                u.get("hashing_algorithm", ""), tags_of(u.get("tags")))
             for u in api.get("/api/users") or []}
    vhosts = frozenset(v["name"] for v in api.get("/api/vhosts") or [])
    permissions = {}
    if names.vhost in vhosts:
        for entry in api.get(path("vhosts", names.vhost, "permissions")) or []:
            permissions[entry["user"]] = Permissions(entry["configure"], entry["write"],
                                                     entry["read"])
    return FleetObserved(api.user, users, vhosts, permissions, read_marks(api))


def ensure(api: Api, names: FleetNames, wanted: Wanted,
           say: Callable[[str], None] = lambda line: None, rounds: int = ROUNDS) -> FleetPlan:
    """Make the broker match (observe → diff → apply); every request said as it is sent.

    `wanted` is the list, or a function read again after each observation (the accounts wanted
    follow a state another process may be changing). A request that loses to a concurrent
    writer (broker_api.lost_race) ends its round: the broker is observed again and the diff
    made against what is there now, at most `rounds` rounds in all; losing the last round too is
    a FleetError. What is returned is every request sent, with the last round's refusals."""
    want = wanted if callable(wanted) else (lambda: wanted)
    sent: list[Call] = []
    for round_ in range(1, rounds + 1):
        plan = _plan(api, names, want)
        lost = _apply(api, plan, say, sent)
        if lost is None:
            break
        call, error = lost
        if round_ == rounds:
            raise FleetError(f"broker: {call.op} {call.subject}: {error}; another writer kept "
                             f"changing the mesh's objects ({rounds} rounds), try again")
        detail = f"answered {error.status}: {error.reason}".rstrip(": ")
        say(f"broker: {call.op} {call.subject}: lost to another writer ({detail}); "
            f"observing the broker again")
    for subject, why in plan.refusals:
        say(f"broker: {subject}: {why}")
    if any(subject == f"vhost {names.vhost}" for subject, _ in plan.refusals):
        raise FleetError(f"the vhost {names.vhost} belongs to another owner on this broker")
    return FleetPlan(tuple(sent), plan.refusals)


def _plan(api: Api, names: FleetNames,
          want: Callable[[], Sequence[WantedAccount]]) -> FleetPlan:
    try:
        observed = observe(api, names)
    except requests.exceptions.SSLError:
        raise FleetError(f"the broker's management API at {api.base}: its TLS certificate is "
                         f"not the mesh CA's for that address; refused before the admin's "
                         f"password was sent") from None
    except (ApiError, OSError) as error:
        raise FleetError(f"the broker's management API: {error}") from None
    except Exception as error:  # requests' connection errors
        raise FleetError(f"the broker's management API is not reachable: {error}") from None
    return fleet_diff(names, want(), observed)  # read after observing: see ensure


def _apply(api: Api, plan: FleetPlan, say: Callable[[str], None],
           sent: list[Call]) -> Optional[tuple[Call, ApiError]]:
    """Send the plan's requests in order: None when all were done, (the call, its error) for
    the first that lost to another writer; any other failure is a FleetError."""
    for call in plan.calls:
        try:
            api.send(call.method, call.path, call.body)
        except Exception as error:  # noqa: BLE001 - connection errors too, said in one line
            if isinstance(error, ApiError) and lost_race(call.method, error):
                return call, error
            raise FleetError(f"broker: {call.op} {call.subject}: {error}") from None
        sent.append(call)
        say(f"broker: {call.op} {call.subject} ({call.cause})")
    return None
