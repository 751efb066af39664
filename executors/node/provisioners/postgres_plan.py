"""PostgreSQL grants, the pure half: what the server must hold, what it holds, the statements
between, and what it holds once they ran.

Invariants:
- For a grant with login L: role L (NOLOGIN) owns database `resource`; L_a and L_b are LOGIN
  members of L whose session role is L, so what either creates belongs to L. The slot the
  grant names holds the credential's value, the retiring slot the retiring value while the
  grant has one; an idle slot is NOLOGIN with no password, so a retired password never works.
- CONNECT on a granted database is revoked from PUBLIC: a consumer reaches its own database only.
- parse(rows) → diff → after, all pure (postgres.py does the reading and the running).
  Passwords are compared against the stored verifier (SCRAM-SHA-256 via scramp, or md5), so a
  second run emits no statement at all. `after` is what the server holds once a plan's
  statements ran, read from each statement's SQL text: a statement it cannot read is an
  error, so the model and the diff cannot drift apart unnoticed (tests/diff_cases/postgres).
- A grant any of whose objects another mesh or provider marked is refused and none of its
  objects is touched: not made, not changed, not swept as an orphan.
- Managed roles and databases carry the comment `mesh:<mesh>:<provider>`. When a grant is
  gone its logins are dropped (their objects reassigned to the group role first) and its
  database is kept and reported orphaned: data is never dropped by the mesh. The group role
  that owns a kept database is kept too, NOLOGIN and with no member left, so nobody can act as
  it and ownership of the database and of every object in it never changes: granting it again
  gives its logins back the database with every table usable. A managed role that owns no kept
  database is dropped after its objects are reassigned to the admin.
- A password is only ever a statement parameter: never in a description, a cause or an error.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from typing import Any, Mapping, Optional, Sequence, Union

import attrs
import scramp
from psycopg import sql

from resolver import GrantDecl
from resolver.rotation import SLOTS

from executors.node.extensions import SecretSource

from executors.node.provisioners.base import ProvisionError, held_slots


# --------------------------------------------------------------------------- desired state


@attrs.frozen
class SlotWant:
    generation: int
    password: str = attrs.field(repr=False)


@attrs.frozen
class DesiredGrant:
    group: str  # the NOLOGIN role owning the database; its logins are <group>_a, <group>_b
    database: str
    credential: str  # credential id, named in causes
    slots: Mapping[str, Optional[SlotWant]]  # slot → what it must accept (None: disabled)

    def login(self, slot: str) -> str:
        return f"{self.group}_{slot}"


def desired_grant(grant: GrantDecl, secret_source: SecretSource) -> DesiredGrant:
    """What a grant needs: each slot its holders may use (base.held_slots; a grant without a
    slot uses `a`) holds its generation, the other slot is disabled."""
    slots: dict[str, Optional[SlotWant]] = {s: None for s in SLOTS}
    held = held_slots(grant, unslotted=SLOTS[0])
    for each in reversed(held):  # the retiring value is read first, as it always was
        slots[each.slot or SLOTS[0]] = SlotWant(each.ref.generation or 0,
                                                secret_source(each.ref))
    return DesiredGrant(group=grant.login, database=grant.resource,
                        credential=grant.credential.credential, slots=slots)


# --------------------------------------------------------------------------- observed state


@attrs.frozen
class RoleFacts:
    name: str
    can_login: bool
    verifier: Optional[str] = attrs.field(default=None, repr=False)
    comment: Optional[str] = None
    member_of: frozenset[str] = frozenset()
    config: tuple[str, ...] = ()


@attrs.frozen
class DatabaseFacts:
    name: str
    owner: str
    comment: Optional[str] = None
    public_connect: bool = True


@attrs.frozen
class Observed:
    admin: str  # the role the provisioner is connected as (owner of orphaned databases)
    roles: Mapping[str, RoleFacts]
    databases: Mapping[str, DatabaseFacts]


def parse(rows: Mapping[str, Any]) -> Observed:
    """The observed server from `query`'s rows (pure): roles as [name, can login, verifier,
    comment, [groups], [config]], databases as [name, owner, comment, PUBLIC may connect]."""
    roles = {name: RoleFacts(name, bool(can_login), verifier, comment,
                             frozenset(groups or ()), tuple(config or ()))
             for name, can_login, verifier, comment, groups, config in rows["roles"]}
    databases = {name: DatabaseFacts(name, owner, comment, bool(public))
                 for name, owner, comment, public in rows["databases"]}
    return Observed(rows["admin"], roles, databases)


def verifier_matches(verifier: Optional[str], password: str, role: str) -> bool:
    """Whether `password` is the one the stored verifier was made from (no login attempted).
    SCRAM-SHA-256 keys are derived with scramp, the library pg8000 uses for the same job."""
    if not verifier:
        return False
    if verifier.startswith("SCRAM-SHA-256$"):
        try:
            head, keys = verifier[len("SCRAM-SHA-256$"):].split("$", 1)
            iterations, salt = head.split(":", 1)
            stored_key, server_key = keys.split(":", 1)
            _, stored, server, _ = scramp.ScramMechanism("SCRAM-SHA-256").make_auth_info(
                password, iteration_count=int(iterations), salt=base64.b64decode(salt))
        except (ValueError, TypeError):
            return False
        return (hmac.compare_digest(stored, base64.b64decode(stored_key))
                and hmac.compare_digest(server, base64.b64decode(server_key)))
    if verifier.startswith("md5") and len(verifier) == 35:
        digest = "md5" + hashlib.md5((password + role).encode("utf-8")).hexdigest()
        return hmac.compare_digest(digest, verifier)
    return False


# --------------------------------------------------------------------------- diff (pure)


@attrs.frozen
class Statement:
    op: str  # create-role | alter-role | create-database | drop-role | …
    subject: str
    cause: str
    query: Union[sql.SQL, sql.Composed] = attrs.field(eq=False)
    params: tuple[str, ...] = attrs.field(default=(), repr=False, eq=False)  # passwords
    database: Optional[str] = None  # run connected to this database (None: the admin's)

    @property
    def text(self) -> str:
        """The statement without its parameters (safe to show: passwords are parameters)."""
        return self.query.as_string(None)


@attrs.frozen
class Plan:
    statements: tuple[Statement, ...] = ()
    refusals: tuple[tuple[str, str], ...] = ()  # (subject, reason)
    orphaned: tuple[str, ...] = ()  # databases kept after their grant went
    owners: Mapping[str, str] = attrs.field(factory=dict)  # orphaned db → its kept group role


def marker(mesh: str, provider: str) -> str:
    return f"mesh:{mesh}:{provider}"


def _ident(name: str) -> sql.Identifier:
    return sql.Identifier(name)


def _comment(kind: str, name: str, text: str, cause: str) -> Statement:
    return Statement("comment", f"{kind.lower()} {name}", cause,
                     sql.SQL("COMMENT ON {} {} IS {}").format(sql.SQL(kind), _ident(name),
                                                             sql.Literal(text)))


def _foreign(comment: Optional[str], mark: str) -> bool:
    return comment is not None and comment.startswith("mesh:") and comment != mark


def _group_statements(g: DesiredGrant, observed: Observed, mark: str) -> list[Statement]:
    out: list[Statement] = []
    role = observed.roles.get(g.group)
    if role is None:
        out.append(Statement("create-role", g.group, f"group role of {g.credential}",
                             sql.SQL("CREATE ROLE {} NOLOGIN").format(_ident(g.group))))
        out.append(_comment("ROLE", g.group, mark, "mark as managed"))
        return out
    if role.can_login:
        out.append(Statement("alter-role", g.group, "a group role must not log in",
                             sql.SQL("ALTER ROLE {} NOLOGIN").format(_ident(g.group))))
    if role.comment != mark:
        out.append(_comment("ROLE", g.group, mark, "adopted: was not marked as managed"))
    return out


def _slot_statements(g: DesiredGrant, slot: str, observed: Observed,
                     mark: str) -> list[Statement]:
    name, want, out = g.login(slot), g.slots[slot], []
    role = observed.roles.get(name)
    ident, group = _ident(name), _ident(g.group)
    if role is None:
        if want is not None:
            out.append(Statement("create-role", name,
                                 f"login slot {slot}: {g.credential} generation {want.generation}",
                                 sql.SQL("CREATE ROLE {} LOGIN PASSWORD %s IN ROLE {}")
                                 .format(ident, group), (want.password,)))
        else:
            out.append(Statement("create-role", name, f"idle login slot {slot} (disabled)",
                                 sql.SQL("CREATE ROLE {} NOLOGIN IN ROLE {}").format(ident, group)))
    else:
        if want is not None:
            matches = verifier_matches(role.verifier, want.password, name)
            if not matches or not role.can_login:
                why = [] if role.can_login else ["login disabled"]
                if not matches:
                    why.append("password is not " if role.verifier else "no password, wants ")
                    why[-1] += f"{g.credential} generation {want.generation}"
                out.append(Statement("alter-role", name, f"slot {slot}: " + "; ".join(why),
                                     sql.SQL("ALTER ROLE {} LOGIN PASSWORD %s").format(ident),
                                     (want.password,)))
        elif role.can_login or role.verifier is not None:
            out.append(Statement("alter-role", name,
                                 f"slot {slot} holds no generation in force: disable it",
                                 sql.SQL("ALTER ROLE {} NOLOGIN PASSWORD NULL").format(ident)))
        if g.group not in role.member_of:
            out.append(Statement("grant-role", name, f"member of {g.group}",
                                 sql.SQL("GRANT {} TO {}").format(group, ident)))
    if role is None or f"role={g.group}" not in role.config:
        out.append(Statement("alter-role", name, f"its objects belong to {g.group}",
                             sql.SQL("ALTER ROLE {} SET role = {}").format(
                                 ident, sql.Literal(g.group))))
    if role is None or role.comment != mark:
        out.append(_comment("ROLE", name, mark, "mark as managed"))
    return out


def _database_statements(g: DesiredGrant, observed: Observed, mark: str) -> list[Statement]:
    out: list[Statement] = []
    db, ident = observed.databases.get(g.database), _ident(g.database)
    if db is None:
        out.append(Statement("create-database", g.database, f"database of {g.credential}",
                             sql.SQL("CREATE DATABASE {} OWNER {}").format(
                                 ident, _ident(g.group))))
    elif db.owner != g.group:
        out.append(Statement("alter-database", g.database, f"owner {db.owner} → {g.group}",
                             sql.SQL("ALTER DATABASE {} OWNER TO {}").format(
                                 ident, _ident(g.group))))
    if db is None or db.comment != mark:
        out.append(_comment("DATABASE", g.database, mark, "mark as managed"))
    if db is None or db.public_connect:
        out.append(Statement("revoke", g.database, "only its own login may connect",
                             sql.SQL("REVOKE CONNECT ON DATABASE {} FROM PUBLIC").format(ident)))
    return out


def diff(mesh: str, provider: str, desired: Sequence[DesiredGrant], observed: Observed) -> Plan:
    """The statements that make `observed` carry `desired`, and nothing else; plus the orphans."""
    mark = marker(mesh, provider)
    statements: list[Statement] = []
    refusals: list[tuple[str, str]] = []
    wanted_roles: set[str] = set()
    wanted_dbs: set[str] = set()
    for g in sorted(desired, key=lambda d: d.group):
        names = [g.group] + [g.login(s) for s in SLOTS]
        foreign = [n for n in names if n in observed.roles
                   and _foreign(observed.roles[n].comment, mark)]
        db = observed.databases.get(g.database)
        if db is not None and _foreign(db.comment, mark):
            foreign.append(f"database {g.database}")
        if foreign:
            comments = [observed.roles[n].comment for n in names if n in observed.roles] \
                + [db.comment if db is not None else None]
            owners = sorted({c for c in comments if c is not None and _foreign(c, mark)})
            refusals.append((g.group, f"{', '.join(foreign)} already managed as "
                                      f"{', '.join(owners)}, not {mark}: not touched"))
        wanted_roles.update(names)  # a refused grant's objects are not orphans either
        wanted_dbs.add(g.database)
        if foreign:
            continue
        statements += _group_statements(g, observed, mark)
        for slot in SLOTS:
            statements += _slot_statements(g, slot, observed, mark)
        statements += _database_statements(g, observed, mark)

    orphan_roles = sorted(n for n, r in observed.roles.items()
                          if r.comment == mark and n not in wanted_roles)
    orphan_dbs = sorted(n for n, d in observed.databases.items()
                        if d.comment == mark and n not in wanted_dbs)
    statements += _drop_statements(observed, orphan_roles, orphan_dbs)
    return Plan(tuple(statements), tuple(refusals), tuple(orphan_dbs),
                {db: observed.databases[db].owner for db in orphan_dbs
                 if observed.databases[db].owner in orphan_roles})


def _drop_statements(observed: Observed, orphan_roles: list[str],
                     orphan_dbs: list[str]) -> list[Statement]:
    """Managed roles whose grant is gone: a group role owning a kept database stays (NOLOGIN,
    no members: the data keeps its owner, so a re-grant finds every object usable); its logins
    go, their objects handed to it first; any other such role goes, its objects to the admin."""
    keeper = {observed.databases[db].owner for db in orphan_dbs} & set(orphan_roles)
    out: list[Statement] = []
    for group in sorted(keeper):
        if observed.roles[group].can_login:
            out.append(Statement("alter-role", group, "owner of a kept database: no login",
                                 sql.SQL("ALTER ROLE {} NOLOGIN").format(_ident(group))))
    targets: dict[Optional[str], list[str]] = {}  # group kept (None: the admin) → roles
    for name in orphan_roles:
        if name in keeper:
            continue
        groups = sorted(observed.roles[name].member_of & keeper)
        targets.setdefault(groups[0] if groups else None, []).append(name)
    for target, names in sorted(targets.items(), key=lambda kv: kv[0] or ""):
        who = sql.SQL(", ").join(_ident(n) for n in names)
        heir = _ident(target) if target else sql.SQL("CURRENT_USER")
        to_heir = sql.SQL("REASSIGN OWNED BY {} TO {}").format(who, heir)
        release = sql.SQL("DROP OWNED BY {}").format(who)  # privileges only: nothing owned now
        for db in orphan_dbs + [None]:
            where = f" in {db}" if db else ""
            out.append(Statement("reassign-owned", ", ".join(names),
                                 f"grant gone: objects{where} go to {target or observed.admin}, "
                                 "data kept", to_heir, database=db))
            out.append(Statement("drop-owned", ", ".join(names),
                                 f"grant gone: revoke their privileges{where}", release,
                                 database=db))
        for name in names:
            out.append(Statement("drop-role", name, "grant gone: its login goes",
                                 sql.SQL("DROP ROLE {}").format(_ident(name))))
    return out


# --------------------------------------------------------------------------- the model (pure)

_IDENT = r'"(?:[^"]|"")*"'
_LITERAL = r"'(?:[^']|'')*'"
_IDENTS = rf"{_IDENT}(?:, {_IDENT})*"
_SHAPES = [(kind, re.compile(pattern)) for kind, pattern in [
    ("create-group", rf"CREATE ROLE ({_IDENT}) NOLOGIN"),
    ("create-login", rf"CREATE ROLE ({_IDENT}) LOGIN PASSWORD %s IN ROLE ({_IDENT})"),
    ("create-idle", rf"CREATE ROLE ({_IDENT}) NOLOGIN IN ROLE ({_IDENT})"),
    ("no-login", rf"ALTER ROLE ({_IDENT}) NOLOGIN"),
    ("set-password", rf"ALTER ROLE ({_IDENT}) LOGIN PASSWORD %s"),
    ("disable", rf"ALTER ROLE ({_IDENT}) NOLOGIN PASSWORD NULL"),
    ("grant-role", rf"GRANT ({_IDENT}) TO ({_IDENT})"),
    ("set-role", rf"ALTER ROLE ({_IDENT}) SET role = ({_LITERAL})"),
    ("comment", rf"COMMENT ON (ROLE|DATABASE) ({_IDENT}) IS ({_LITERAL})"),
    ("create-database", rf"CREATE DATABASE ({_IDENT}) OWNER ({_IDENT})"),
    ("owner", rf"ALTER DATABASE ({_IDENT}) OWNER TO ({_IDENT})"),
    ("revoke", rf"REVOKE CONNECT ON DATABASE ({_IDENT}) FROM PUBLIC"),
    ("reassign", rf"REASSIGN OWNED BY ({_IDENTS}) TO ({_IDENT}|CURRENT_USER)"),
    ("drop-owned", rf"DROP OWNED BY ({_IDENTS})"),
    ("drop-role", rf"DROP ROLE ({_IDENT})"),
]]


def _unquote(text: str) -> str:
    quote = text[0]
    return text[1:-1].replace(quote * 2, quote)


def _names(text: str) -> list[str]:
    return [_unquote(n) for n in re.findall(_IDENT, text)]


def model_verifier(password: str, role: str) -> str:
    """A verifier of `password` for `role` as the model stores it (the md5 form, which
    verifier_matches reads like the SCRAM one the server is sent)."""
    return "md5" + hashlib.md5((password + role).encode("utf-8")).hexdigest()


def after(observed: Observed, plan: Plan) -> Observed:
    """What the server holds once every statement of `plan` ran (pure): each statement is
    read from its SQL text, as the server reads it. A statement of a shape this model does
    not know raises ProvisionError, so a new statement cannot go unmodelled."""
    roles, databases = dict(observed.roles), dict(observed.databases)

    def role(name: str) -> RoleFacts:
        if name not in roles:
            raise ProvisionError(f"role {name} does not exist")
        return roles[name]

    def database(name: str) -> DatabaseFacts:
        if name not in databases:
            raise ProvisionError(f"database {name} does not exist")
        return databases[name]

    for statement in plan.statements:
        text = statement.text
        kind, found = next(((k, m) for k, m in ((k, p.fullmatch(text)) for k, p in _SHAPES)
                            if m), (None, None))
        if found is None:
            raise ProvisionError(f"the model of the server cannot read {text!r}")
        groups = found.groups()
        name = _unquote(groups[0]) if kind not in ("comment", "reassign", "drop-owned") else ""
        password = statement.params[0] if statement.params else None

        def verifier(name: str) -> str:
            if password is None:
                raise ProvisionError(f"{text}: no password parameter")
            return model_verifier(password, name)

        if kind in ("create-group", "create-login", "create-idle", "create-database") and \
                (name in roles if kind != "create-database" else name in databases):
            raise ProvisionError(f"{text}: it exists already")
        if kind == "create-group":
            roles[name] = RoleFacts(name, False)
        elif kind == "create-login":
            roles[name] = RoleFacts(name, True, verifier(name),
                                    member_of=frozenset({_unquote(groups[1])}))
        elif kind == "create-idle":
            roles[name] = RoleFacts(name, False, member_of=frozenset({_unquote(groups[1])}))
        elif kind == "no-login":
            roles[name] = attrs.evolve(role(name), can_login=False)
        elif kind == "set-password":
            roles[name] = attrs.evolve(role(name), can_login=True,
                                       verifier=verifier(name))
        elif kind == "disable":
            roles[name] = attrs.evolve(role(name), can_login=False, verifier=None)
        elif kind == "grant-role":
            member = _unquote(groups[1])
            role(name)
            roles[member] = attrs.evolve(role(member), member_of=role(member).member_of | {name})
        elif kind == "set-role":
            kept = tuple(c for c in role(name).config if not c.startswith("role="))
            roles[name] = attrs.evolve(role(name),
                                       config=kept + (f"role={_unquote(groups[1])}",))
        elif kind == "comment":
            target, comment = _unquote(groups[1]), _unquote(groups[2])
            if groups[0] == "ROLE":
                roles[target] = attrs.evolve(role(target), comment=comment)
            else:
                databases[target] = attrs.evolve(database(target), comment=comment)
        elif kind == "create-database":
            owner = _unquote(groups[1])
            role(owner)
            databases[name] = DatabaseFacts(name, owner)
        elif kind == "owner":
            owner = _unquote(groups[1])
            role(owner)
            databases[name] = attrs.evolve(database(name), owner=owner)
        elif kind == "revoke":
            databases[name] = attrs.evolve(database(name), public_connect=False)
        elif kind == "reassign":  # databases are shared objects: reassigned from anywhere
            old = set(_names(groups[0]))
            heir = observed.admin if groups[1] == "CURRENT_USER" else _unquote(groups[1])
            databases = {n: attrs.evolve(d, owner=heir) if d.owner in old else d
                         for n, d in databases.items()}
        elif kind == "drop-owned":  # privileges only: what they owned went to an heir first
            pass
        elif kind == "drop-role":
            owned = sorted(n for n, d in databases.items() if d.owner == name)
            if owned:
                raise ProvisionError(f"{text}: the role owns database {', '.join(owned)}")
            role(name)
            del roles[name]
            roles = {n: attrs.evolve(r, member_of=r.member_of - {name}) if name in r.member_of
                     else r for n, r in roles.items()}
    return Observed(observed.admin, roles, databases)
