"""The mesh registry's htpasswd as data: the provisioner's pure half (parse, diff, after, text),
by examples and a property: whatever the file held, after the plan a second diff is empty, the
lines the mesh does not manage are kept in order, and another mesh's accounts are untouched."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from executors.node.provisioners.htpasswd_plan import (
    Desired,
    Entry,
    after,
    diff,
    entries,
    mark,
    parse,
    text,
)

MESH, PROVIDER = "home", "registry"
OURS, THEIRS = mark(MESH, PROVIDER), mark("other", PROVIDER)


def want(*users: str) -> list[Desired]:
    return [Desired(u, f"registry-pull/registry/{u}", 1, u) for u in users]


def test_examples():
    observed = parse({"text": f"# the operator's own\nalice:$2b$x\n{OURS}\nnode-gone:$2b$y\n"
                              f"{THEIRS}\nnode-b:$2b$z\nnode-a:$2b$w\n",
                      "matches": {"node-a": True}})
    steps = {(s.action, s.user) for s in diff(MESH, PROVIDER, want("node-a", "node-b", "node-c"),
                                              observed)}
    assert steps == {("mark", "node-a"),  # unmarked, granted name, matching: adopted only
                     ("refuse", "node-b"),  # another mesh's: left alone
                     ("set", "node-c"),  # absent
                     ("remove", "node-gone")}  # ours, no longer granted
    result = text(after(observed, diff(MESH, PROVIDER, want("node-a", "node-b", "node-c"),
                                       observed), MESH, PROVIDER), {"node-c": "$2b$new"})
    assert result == (f"# the operator's own\nalice:$2b$x\n{THEIRS}\nnode-b:$2b$z\n"
                      f"{OURS}\nnode-a:$2b$w\n{OURS}\nnode-c:$2b$new\n")


users = st.sampled_from(["alice", "node-a", "node-b", "node-c", "mesh-push"])
marks = st.sampled_from([None, OURS, THEIRS])
lines = st.one_of(st.tuples(users, marks, st.booleans()),
                  st.sampled_from(["", "# a comment", "  "]))


@settings(max_examples=300, deadline=None)
@given(st.lists(lines, max_size=8), st.lists(users, unique=True, max_size=4))
def test_after_the_plan_nothing_is_left_to_do(raw, granted):
    seen, body, matches = set(), [], {}
    for line in raw:
        if isinstance(line, tuple):
            user, owner, match = line
            if user in seen:
                continue
            seen.add(user)
            body += ([owner] if owner else []) + [f"{user}:$2b$h-{user}"]
            matches[user] = match
        else:
            body.append(line)
    observed = parse({"text": "".join(f"{b}\n" for b in body), "matches": matches})
    steps = diff(MESH, PROVIDER, want(*granted), observed)
    done = after(observed, steps, MESH, PROVIDER)
    assert [s for s in diff(MESH, PROVIDER, want(*granted), done)
            if s.action != "refuse"] == []
    final = entries(done)
    for user in granted:  # every grant is there and ours, unless another mesh holds the name
        assert final[user].mark in (OURS, THEIRS)
    for user, entry in entries(observed).items():
        if entry.mark == THEIRS or (entry.mark is None and user not in granted):
            assert final[user] == entry  # not ours: untouched
    kept = [line for line in observed.lines if not isinstance(line, Entry)]
    assert [line for line in done.lines if not isinstance(line, Entry)] == kept
    rendered = parse({"text": text(done, {u: "$2b$n" for u in granted}),
                      "matches": {u: True for u in granted}})
    assert set(entries(rendered)) == set(final)
