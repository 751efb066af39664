"""The mesh registry's accounts, the pure half: its htpasswd file as data, the diff, after.

Invariants:
- The file is Apache htpasswd as the distribution registry reads it: `user:bcrypt-hash` lines,
  `#` comments. The mesh marks each account it manages with the comment line
  `# mesh-mark:<mesh>:<provider>` right above it; every other line (an operator's own account,
  comments, blank lines) is kept byte for byte, in place.
- Whether a stored hash matches a password is observed (bcrypt is checked by the shell, which
  hands `matches` in), so parse, diff and after read data only and decide the same every time.
- diff: an account of a grant that is absent or does not match is `set` (a new hash); an
  unmarked account with a granted name is adopted (`mark`, and `set` unless it matches); an
  account another mesh or provider marks is refused and left alone; an account this mesh marks
  for this provider whose grant went is `remove`d (a registry account owns no data: nothing is
  left to orphan) and said so. A second diff against `after` is empty.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence, Union

import attrs

from resolver import GrantDecl
from resolver.artifacts import registry_user

from executors.node.provisioners.base import held_slots, idle_slot_of

MARK_PREFIX = "# mesh-mark:"


def mark(mesh: str, provider: str) -> str:
    return f"{MARK_PREFIX}{mesh}:{provider}"


@attrs.frozen
class Entry:
    user: str
    hash: str
    mark: Optional[str] = None  # the mark line right above it, when it has one
    matches: bool = False  # whether the hash matches the password its grant wants (observed)


@attrs.frozen
class Observed:
    lines: tuple[Union["Entry", str], ...]  # each an Entry or a line the mesh does not manage


@attrs.frozen
class Desired:
    user: str
    credential: str
    generation: int
    consumer: str
    login: str = ""  # the account whose slot entry (<login>_a, <login>_b) this is


def desired_entries(grant: GrantDecl) -> list[Desired]:
    """The entries an issued account grant needs: `<login>_<slot>` with its newest generation,
    and, while a rotation retires the other slot's generation, `<login>_<other>` with that one
    (holders still log in with it); an idle slot's entry is removed as no longer granted. An
    account issued before accounts had two slots has its one entry `<login>`."""
    login = grant.login if grant.slot else ""
    return [Desired(registry_user(grant.login, held.slot), grant.credential.credential,
                    held.ref.generation or 0, grant.consumer, login)
            for held in held_slots(grant)]


@attrs.frozen
class Step:
    action: str  # set | mark | remove | refuse
    user: str
    cause: str


def parse(rows: Mapping[str, Any]) -> Observed:
    """`rows`: {"text": the file's text, "matches": {user: bool}} (the shell's observation)."""
    matches = rows.get("matches", {})
    lines: list[Union[Entry, str]] = []
    pending_mark: Optional[str] = None
    for line in rows.get("text", "").splitlines():
        stripped = line.strip()
        if stripped.startswith(MARK_PREFIX):
            if pending_mark is not None:
                lines.append(pending_mark)
            pending_mark = stripped
            continue
        if stripped and not stripped.startswith("#") and ":" in stripped:
            user, hashed = stripped.split(":", 1)
            lines.append(Entry(user, hashed, pending_mark, bool(matches.get(user))))
        else:
            if pending_mark is not None:
                lines.append(pending_mark)
            lines.append(line)
        pending_mark = None
    if pending_mark is not None:
        lines.append(pending_mark)
    return Observed(tuple(lines))


def entries(observed: Observed) -> dict[str, Entry]:
    return {e.user: e for e in observed.lines if isinstance(e, Entry)}


GONE = "no longer granted (its node or the push account went): the account is removed"


def diff(mesh: str, provider: str, desired: Sequence[Desired], observed: Observed,
         gone: str = GONE) -> list[Step]:
    """The steps that make `observed` hold exactly `desired` (of this mesh and provider);
    `gone` says why an entry whose grant went is removed (the file's own wording)."""
    ours = mark(mesh, provider)
    have = entries(observed)
    wanted = {d.user: d for d in desired}
    logins = {d.login for d in desired if d.login}
    steps = []
    for user, want in sorted(wanted.items()):
        entry = have.get(user)
        what = f"{want.credential} generation {want.generation}"
        if entry is None:
            steps.append(Step("set", user, f"not present: {what}"))
        elif entry.mark is not None and entry.mark != ours:
            steps.append(Step("refuse", user, f"marked by another mesh or provider "
                              f"({entry.mark[len(MARK_PREFIX):]}): left as it is"))
        else:
            if entry.mark is None:
                steps.append(Step("mark", user, "an unmarked account with a granted name: "
                              "adopted"))
            if not entry.matches:
                steps.append(Step("set", user, f"its hash is not of {what}"))
    for user, entry in sorted(have.items()):
        if user not in wanted and entry.mark == ours:
            idle = idle_slot_of(user, logins)
            steps.append(Step("remove", user, f"idle slot {idle} of {user[:-2]}: its retired "
                              "password goes" if idle else gone))
    return steps


def after(observed: Observed, steps: Sequence[Step], mesh: str, provider: str) -> Observed:
    """The file's contents once `steps` ran (new hashes as the placeholder `<new>`)."""
    ours = mark(mesh, provider)
    by_user: dict[str, list[str]] = {}
    for step in steps:
        by_user.setdefault(step.user, []).append(step.action)
    lines = []
    for line in observed.lines:
        if isinstance(line, Entry) and line.user in by_user:
            actions = by_user.pop(line.user)
            if "remove" in actions:
                continue
            if "refuse" not in actions:
                line = attrs.evolve(line, mark=ours, matches=True,
                                    hash="<new>" if "set" in actions else line.hash)
        lines.append(line)
    for user, actions in sorted(by_user.items()):  # accounts not present yet
        if "set" in actions:
            lines.append(Entry(user, "<new>", ours, True))
    return Observed(tuple(lines))


def text(observed: Observed, hashes: Mapping[str, str]) -> str:
    """The file for `observed`, each `<new>` hash replaced by the user's in `hashes`."""
    out = []
    for line in observed.lines:
        if isinstance(line, Entry):
            if line.mark:
                out.append(line.mark)
            out.append(f"{line.user}:{hashes.get(line.user, line.hash) if line.hash == '<new>' else line.hash}")
        else:
            out.append(line)
    return "".join(f"{line}\n" for line in out)
