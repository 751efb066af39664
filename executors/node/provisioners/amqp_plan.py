"""AMQP grants, the pure half: what the broker must hold, what it holds, the requests between,
and what it holds once they succeeded.

Invariants:
- One vhost per consumer login, named by the grant's `resource`; one account, named by its
  `login`, with no tags (no management rights) and configure/write/read `.*` on that vhost
  only. The vhost is the isolation boundary, so the account may declare its own server-named
  reply queues and use `amq.rabbitmq.reply-to`: a module can ask its own question.
- What the mesh manages is marked by a global parameter `mesh-mark:<user|vhost>:<name>` whose
  value is `mesh:<mesh>:<provider>`, put before the object is made. Global parameters take any
  name and JSON value on RabbitMQ and LavinMQ alike; LavinMQ keeps no unknown user tag and no
  vhost description, so neither can be the mark (a created vhost gets the description anyway,
  for the operator's eyes on RabbitMQ). An unmarked object of a granted name is adopted.
- A managed account whose grant is gone is deleted (its login goes); its vhost is kept with its
  queues and messages and reported orphaned on every run, with the command that deletes it.
  An object marked by another mesh or provider is never touched; the admin account, the `/`
  vhost and unmarked administrator accounts are never managed.
- parse(rows) → diff → after, all pure (amqp.py does the requests): a second run issues no
  PUT or DELETE; `after` is what the broker holds once a plan's requests succeeded, read from
  each request's method, path and body (tests/diff_cases/amqp). A password is compared
  against the broker's salted hash (sha256/sha512/md5 of salt+password, the broker's own
  scheme), never by logging in.
- Two accounts per grant, as PostgreSQL's two logins: a grant with a slot (`a`|`b`) has the
  account `<login>_<slot>` hold its generation and, while a rotation retires the other slot's
  generation, `<login>_<other slot>` the retiring one, both with the same permissions on the
  one vhost; an idle slot's account is deleted, so a retired password never works. A
  consumer dialling through a whole rotation never fails to log in: its old account stays
  until every holder applied the new one. A grant without a slot (an account issued before
  accounts had two) keeps its one account named `<login>`.
- A password is only ever a request body: never in a cause or an error message.
"""

from __future__ import annotations

import base64
import hashlib
import shlex
from typing import Any, Mapping, Optional, Sequence
from urllib.parse import unquote

import attrs

from resolver import GrantDecl

from executors.common.broker_marks import (  # noqa: F401  (path, marker, hash_matches: this module's API)
    DEFAULT_VHOST,
    MARK_PREFIX,
    USER,
    VHOST,
    Call,
    hash_matches,
    mark_call,
    mark_name,
    marker,
    parse_marks,
    path,
    tags_of,
    unmark_call,
)

from executors.node.extensions import SecretSource

from executors.node.provisioners.base import ProvisionError, held_slots, idle_slot_of

FULL = ".*"


@attrs.frozen
class DesiredAccount:
    vhost: str
    user: str
    credential: str
    generation: int
    password: str = attrs.field(repr=False)
    login: str = ""  # the grant's login, whose slot accounts (<login>_a, <login>_b) this is one of


@attrs.frozen
class UserFacts:
    name: str
    password_hash: Optional[str] = attrs.field(default=None, repr=False)
    hashing: str = ""
    tags: tuple[str, ...] = ()


@attrs.frozen
class Observed:
    admin: str  # the account the provisioner uses: never managed
    users: Mapping[str, UserFacts]
    vhosts: frozenset[str]
    permissions: Mapping[tuple[str, str], tuple[str, str, str]]  # (vhost, user) → c, w, r
    marks: Mapping[tuple[str, str], str]  # (user|vhost, name) → marker it carries


@attrs.frozen
class Plan:
    calls: tuple[Call, ...] = ()
    refusals: tuple[tuple[str, str], ...] = ()  # (account, reason): grants not provisioned
    orphaned: tuple[str, ...] = ()  # vhosts kept after their grant went
    untouched: tuple[tuple[str, str], ...] = ()  # (subject, why): marked ours, never touched


def delete_vhost_command(vhost: str) -> str:
    return f"rabbitmqctl delete_vhost {shlex.quote(vhost)}"


def _account_calls(want: DesiredAccount, observed: Observed, mark: str) -> list[Call]:
    calls: list[Call] = []
    vhost_exists = want.vhost in observed.vhosts
    if observed.marks.get((VHOST, want.vhost)) != mark:
        calls.append(mark_call(VHOST, want.vhost, mark, "adopted: was not marked as managed"
                                if vhost_exists else "mark as managed, before it is made"))
    if not vhost_exists:
        calls.append(Call("create-vhost", want.vhost, f"vhost of {want.credential}", "PUT",
                          path("vhosts", want.vhost), {"description": mark}))
    user = observed.users.get(want.user)
    if observed.marks.get((USER, want.user)) != mark:
        calls.append(mark_call(USER, want.user, mark, "adopted: was not marked as managed"
                                if user is not None else "mark as managed, before it is made"))
    why = []
    if user is None:
        why.append(f"account of {want.credential} generation {want.generation}")
    else:
        if not hash_matches(user.password_hash, user.hashing, want.password):
            why.append(f"password is not {want.credential} generation {want.generation}")
        if user.tags:
            why.append(f"tags {','.join(user.tags)} → none")
    if why:
        calls.append(Call("create-user" if user is None else "update-user", want.user,
                          "; ".join(why), "PUT", path("users", want.user),
                          {"password": want.password, "tags": ""}))
    if observed.permissions.get((want.vhost, want.user)) != (FULL, FULL, FULL):
        calls.append(Call("set-permissions", f"{want.user} on {want.vhost}",
                          "configure/write/read .* on its own vhost (reply queues included)",
                          "PUT", path("permissions", want.vhost, want.user),
                          {"configure": FULL, "write": FULL, "read": FULL}))
    return calls


def _refusal(want: DesiredAccount, observed: Observed, mark: str) -> Optional[str]:
    if want.user == observed.admin:
        return f"account {want.user} is the broker's admin, which the mesh never manages"
    if want.vhost == DEFAULT_VHOST:
        return "the default vhost / is never managed by the mesh"
    user = observed.users.get(want.user)
    if (user is not None and "administrator" in user.tags
            and observed.marks.get((USER, want.user)) != mark):
        return f"account {want.user} is an unmarked administrator: never adopted"
    foreign = [f"{kind} {name} (marked {observed.marks[(kind, name)]})"
               for kind, name in ((USER, want.user), (VHOST, want.vhost))
               if observed.marks.get((kind, name), mark) != mark]
    if foreign:
        return f"{', '.join(foreign)}: managed by another, not {mark}: not touched"
    return None


def diff(mesh: str, provider: str, desired: Sequence[DesiredAccount],
         observed: Observed) -> Plan:
    """The requests that make each granted account, vhost and permission exist, marked as this
    provider's; the deletion of this provider's accounts whose grant is gone; the vhosts kept
    (orphaned). Objects marked by another mesh or provider are refused, never changed (pure)."""
    mark = marker(mesh, provider)
    calls: list[Call] = []
    refusals: list[tuple[str, str]] = []
    untouched: list[tuple[str, str]] = []
    wanted: dict[str, set[str]] = {USER: set(), VHOST: set()}
    logins = {want.login for want in desired if want.login}
    for want in sorted(desired, key=lambda d: d.user):
        wanted[USER].add(want.user)
        wanted[VHOST].add(want.vhost)
        reason = _refusal(want, observed, mark)
        if reason is not None:
            refusals.append((want.user, reason))
            continue
        calls += _account_calls(want, observed, mark)

    orphaned: list[str] = []
    for (kind, name), carried in sorted(observed.marks.items()):
        if carried != mark or name in wanted[kind]:
            continue
        if (kind, name) in ((USER, observed.admin), (VHOST, DEFAULT_VHOST)):
            untouched.append((f"{kind} {name}", f"marked {mark}, but the mesh never manages "
                                                 "the admin account or the default vhost"))
        elif kind == USER and name in observed.users:
            idle = idle_slot_of(name, logins)
            calls.append(Call("delete-user", name,
                              f"idle slot {idle} of {name[:-2]}: its retired password goes"
                              if idle else "grant gone: its login goes (its vhost and "
                              "messages are kept)", "DELETE", path("users", name)))
            calls.append(unmark_call(USER, name, "its account is deleted"))
        elif kind == VHOST and name in observed.vhosts:
            orphaned.append(name)
        else:
            calls.append(unmark_call(kind, name, f"the {kind} is gone (removed by hand): "
                                                  "its mark goes"))
    return Plan(tuple(calls), tuple(refusals), tuple(orphaned), tuple(untouched))


def parse(rows: Mapping[str, Any]) -> Observed:
    """The observed broker from `query`'s answers (pure)."""
    users = {u["name"]: UserFacts(u["name"], u.get("password_hash"),
                                  u.get("hashing_algorithm", ""), tags_of(u.get("tags")))
             for u in rows["users"]}
    vhosts = frozenset(v["name"] for v in rows["vhosts"])
    marks = parse_marks(rows["global-parameters"])
    permissions = {(p["vhost"], p["user"]): (p["configure"], p["write"], p["read"])
                   for p in rows["permissions"]}
    return Observed(rows["admin"], users, vhosts, permissions, marks)


# --------------------------------------------------------------------------- the model (pure)

MODEL_HASHING = "rabbit_password_hashing_sha256"
MODEL_SALT = b"mesh"


def model_hash(password: str) -> str:
    """The broker's stored hash of `password` as the model makes it: base64(salt + sha256(salt
    + password)), the scheme hash_matches reads (a fixed salt: the model is deterministic)."""
    return base64.b64encode(MODEL_SALT + hashlib.sha256(MODEL_SALT + password.encode("utf-8"))
                            .digest()).decode("ascii")


def after(observed: Observed, plan: Plan) -> Observed:
    """What the broker holds once every request of `plan` succeeded (pure), read from each
    request's method, path and body as the management API reads them. A request this model
    does not know raises ProvisionError."""
    users, vhosts = dict(observed.users), set(observed.vhosts)
    permissions, marks = dict(observed.permissions), dict(observed.marks)
    for call in plan.calls:
        parts = [unquote(p) for p in call.path.split("/")[2:]]  # "/api/<what>/…"
        what, args = (parts[0], parts[1:]) if parts else ("", [])
        if (call.method, what, len(args)) == ("PUT", "global-parameters", 1) and \
                args[0].startswith(MARK_PREFIX):
            kind, _, name = args[0][len(MARK_PREFIX):].partition(":")
            marks[(kind, name)] = call.body["value"]
        elif (call.method, what, len(args)) == ("DELETE", "global-parameters", 1):
            kind, _, name = args[0][len(MARK_PREFIX):].partition(":")
            marks.pop((kind, name), None)
        elif (call.method, what, len(args)) == ("PUT", "vhosts", 1):
            vhosts.add(args[0])
        elif (call.method, what, len(args)) == ("PUT", "users", 1):
            users[args[0]] = UserFacts(args[0], model_hash(call.body["password"]),
                                       MODEL_HASHING, tags_of(call.body.get("tags")))
        elif (call.method, what, len(args)) == ("DELETE", "users", 1):
            if args[0] not in users:
                raise ProvisionError(f"{call.method} {call.path}: no such account")
            del users[args[0]]
            permissions = {k: v for k, v in permissions.items() if k[1] != args[0]}
        elif (call.method, what, len(args)) == ("PUT", "permissions", 2):
            vhost, user = args
            if vhost not in vhosts or user not in users:
                raise ProvisionError(f"{call.method} {call.path}: no such vhost or account")
            permissions[(vhost, user)] = (call.body["configure"], call.body["write"],
                                          call.body["read"])
        else:
            raise ProvisionError(f"the model of the broker cannot read {call.method} "
                                 f"{call.path}")
    return Observed(observed.admin, users, frozenset(vhosts), permissions, marks)


def account_name(grant: GrantDecl) -> str:
    """The account a grant's holders are told: `<login>_<slot>`, or `<login>` for a grant
    issued before accounts had two slots."""
    return f"{grant.login}_{grant.slot}" if grant.slot else grant.login


def desired_accounts(grant: GrantDecl, secret_source: SecretSource) -> list[DesiredAccount]:
    """The accounts a grant needs on the broker, one per slot its holders may use
    (base.held_slots): its slot's with the newest generation, and the retiring slot's with the
    generation holders may still use."""
    return [DesiredAccount(vhost=grant.resource,
                           user=f"{grant.login}_{held.slot}" if held.slot else grant.login,
                           credential=grant.credential.credential,
                           generation=held.ref.generation or 0,
                           password=secret_source(held.ref),
                           login=grant.login if grant.slot else "")
            for held in held_slots(grant)]
