"""Properties of the pure apply diff (executors/node/apply/diff.py).

- Convergence: applying a plan (through the model `after`) leaves nothing to do.
- Determinism: the same inputs give the same plan, whatever order sets were given in.
- Latest wins: applying a sequence of declarations ends where applying its last one ends.
- Order: a run-once step runs before the containers declared after it; removals come first.
- Refusals stop everything; kept directories are never changed.
- choose_latest: the newest is chosen, every other is superseded by a named serial.
"""

from __future__ import annotations

from hypothesis import given, settings, strategies as st
from pyrsistent import pmap

from executors.node.apply.diff import (
    AccessFacts,
    Applied,
    Candidate,
    ContainerFacts,
    Desired,
    DesiredAccess,
    DesiredContainer,
    DesiredDir,
    DesiredFile,
    DirFacts,
    FileFacts,
    Observed,
    after,
    choose_latest,
    diff,
)

NAMES = ["aa", "bb", "cc", "dd", "ee"]
DIR_PATHS = ["/srv/a", "/srv/b", "/srv/c"]
ACCESS_PATHS = ["/data/x", "/data/y"]
FILE_PATHS = ["/m/env/aa.env", "/m/env/bb.env", "/m/bindings/cc--db.env"]
DIGESTS = ["sha256:1", "sha256:2", "sha256:3"]
OWNERS = [0, 1000]
MODES = [0o700, 0o750]


def _summary(digest: str) -> pmap:
    return pmap({"image": "img", "env X": digest})


@st.composite
def desired_states(draw, refusable: bool = True):
    names = draw(st.lists(st.sampled_from(NAMES), unique=True, max_size=5))
    containers = tuple(
        DesiredContainer(n, once, d, _summary(d), health=not once and draw(st.booleans()))
        for n in names for d in [draw(st.sampled_from(DIGESTS))] for once in [draw(st.booleans())])
    dirs = tuple(sorted(DesiredDir(p, draw(st.sampled_from(OWNERS)), draw(st.sampled_from(OWNERS)),
                                   draw(st.sampled_from(MODES)))
                        for p in draw(st.lists(st.sampled_from(DIR_PATHS), unique=True))))
    accesses = tuple(sorted(DesiredAccess(p, draw(st.sampled_from(["ro", "rw"])))
                            for p in draw(st.lists(st.sampled_from(ACCESS_PATHS), unique=True))))
    files = tuple(sorted(DesiredFile(p, draw(st.sampled_from(DIGESTS)))
                         for p in draw(st.lists(st.sampled_from(FILE_PATHS), unique=True))))
    generations = pmap(draw(st.dictionaries(st.sampled_from(["c1", "c2"]), st.integers(1, 3))))
    return Desired("m", "n", draw(st.integers(0, 5)), draw(st.sampled_from(DIGESTS)), dirs,
                   accesses, files, containers, generations)


@st.composite
def observed_states(draw, refusable: bool = True):
    kinds = ["absent", "dir", "other"] if refusable else ["absent", "dir"]
    dirs = {p: DirFacts(p, draw(st.sampled_from(kinds)), draw(st.sampled_from(OWNERS)),
                        draw(st.sampled_from(OWNERS)), draw(st.sampled_from(MODES)),
                        draw(st.booleans()), draw(st.booleans()))
            for p in draw(st.lists(st.sampled_from(DIR_PATHS), unique=True))}
    dirs = {p: f for p, f in dirs.items() if f.kind != "absent" or f.recorded}
    accesses = {p: AccessFacts(p, draw(st.booleans()) if refusable else True, True,
                               draw(st.booleans()) if refusable else True)
                for p in ACCESS_PATHS}
    files = {p: FileFacts(p, draw(st.sampled_from(DIGESTS)), draw(st.sampled_from([0o600, 0o644])))
             for p in draw(st.lists(st.sampled_from(FILE_PATHS), unique=True))}
    containers = {}
    for n in draw(st.lists(st.sampled_from(NAMES), unique=True)):
        running = draw(st.booleans())
        digest = draw(st.sampled_from(DIGESTS))
        containers[n] = ContainerFacts(n, digest, running, "running" if running else "exited",
                                       draw(st.booleans()),
                                       draw(st.sampled_from([pmap(), _summary(digest)])),
                                       answered=draw(st.booleans()))
    markers = draw(st.dictionaries(st.sampled_from(NAMES), st.sampled_from(DIGESTS)))
    applied = draw(st.one_of(st.none(), st.builds(
        Applied, st.integers(0, 5), st.sampled_from(DIGESTS),
        st.dictionaries(st.sampled_from(["c1", "c2"]), st.integers(1, 3)).map(pmap))))
    return Observed(pmap(dirs), pmap(accesses), pmap(files), pmap(containers), pmap(markers),
                    applied)


def converge(desired: Desired, observed: Observed) -> Observed:
    plan = diff(desired, observed)
    return after(desired, observed, plan.ops)


def projection(desired: Desired, observed: Observed):
    """The node's state as far as the last declaration governs it.

    Directories no longer declared stay on disk with their data (the mesh never deletes data),
    so only declared ones are compared."""
    governed = {d.path for d in desired.dirs}
    dirs = {p: (f.kind, f.uid, f.gid, f.mode, f.recorded) for p, f in observed.dirs.items()
            if p in governed}
    containers = {n: (c.digest, c.running) for n, c in observed.containers.items()}
    return (dirs, dict(observed.files), containers, dict(observed.markers), observed.applied)


@given(desired_states(), observed_states())
def test_applying_the_plan_leaves_nothing_to_do(desired, observed):
    plan = diff(desired, observed)
    if plan.refused:
        assert plan.ops == ()
        return
    second = diff(desired, after(desired, observed, plan.ops))
    assert second.ops == ()
    assert second.refusals == ()


@given(desired_states(), observed_states(), st.randoms(use_true_random=False))
def test_the_plan_is_deterministic_and_ignores_the_order_of_sets(desired, observed, rnd):
    shuffled = list(desired.dirs), list(desired.files), list(desired.accesses)
    for items in shuffled:
        rnd.shuffle(items)
    reordered = Desired(desired.mesh, desired.node, desired.serial, desired.digest,
                        tuple(shuffled[0]), tuple(shuffled[2]), tuple(shuffled[1]),
                        desired.containers, desired.generations)
    assert diff(desired, observed) == diff(reordered, observed) == diff(desired, observed)


@settings(max_examples=max(settings.default.max_examples, 250))  # sequences need breadth
@given(st.lists(desired_states(), min_size=1, max_size=4), observed_states(refusable=False))
def test_applying_a_sequence_ends_where_applying_its_last_element_ends(sequence, observed):
    state = observed
    for desired in sequence:
        state = converge(desired, state)
    last = sequence[-1]
    direct = converge(last, observed)
    assert projection(last, state) == projection(last, direct)
    assert diff(last, state).ops == ()


@given(desired_states(), observed_states())
def test_steps_run_before_the_containers_declared_after_them(desired, observed):
    ops = diff(desired, observed).ops
    position = {c.name: i for i, c in enumerate(desired.containers)}
    container_ops = [op for op in ops
                     if op.op in ("run-step", "create-container", "recreate-container",
                                  "start-container")]
    order = [position[op.subject] for op in container_ops]
    assert order == sorted(order)
    kinds = [op.op for op in ops]
    if "remove-container" in kinds and container_ops:
        assert max(i for i, k in enumerate(kinds) if k == "remove-container") < \
            kinds.index(container_ops[0].op)
    assert kinds.count("record-applied") <= 1
    if "record-applied" in kinds:
        assert kinds[-1] == "record-applied"


@given(desired_states(), observed_states())
def test_refusals_stop_everything_and_kept_directories_are_never_changed(desired, observed):
    plan = diff(desired, observed)
    absent = [a.path for a in desired.accesses if not observed.accesses[a.path].exists]
    if absent:
        assert plan.refused and plan.ops == ()
        assert {r.subject for r in plan.refusals} >= set(absent)
    for notice in plan.notices:
        facts = observed.dirs[notice.subject]
        assert not facts.recorded and not facts.empty
        assert all(op.subject != notice.subject for op in plan.ops)


@given(desired_states(), observed_states())
def test_every_operation_has_a_cause_and_no_operation_touches_undeclared_paths(desired, observed):
    plan = diff(desired, observed)
    declared_dirs = {d.path for d in desired.dirs}
    for op in plan.ops:
        assert op.cause
        if op.op in ("create-dir", "fix-dir", "adopt-dir"):
            assert op.subject in declared_dirs


candidates = st.lists(
    st.builds(Candidate, st.sampled_from(["a.json", "b.json", "c.json", "d.json"]),
              st.just("n"), st.integers(0, 6), st.sampled_from(DIGESTS)),
    min_size=1, max_size=5, unique_by=lambda c: c.label)


@given(candidates, st.one_of(st.none(), st.integers(0, 6)), st.randoms(use_true_random=False))
def test_latest_wins_and_nothing_is_silently_dropped(given_candidates, applied, rnd):
    choice = choose_latest(given_candidates, applied)
    newest = max(c.serial for c in given_candidates)
    listed = [c for c, _ in choice.superseded] + ([choice.chosen] if choice.chosen else [])
    assert sorted(listed, key=lambda c: c.label) == sorted(given_candidates, key=lambda c: c.label)
    if applied is not None and applied > newest:
        assert choice.chosen is None
        assert all(by == applied for _, by in choice.superseded)
    else:
        assert choice.chosen is not None and choice.chosen.serial == newest
        assert all(by == newest and c.serial <= by for c, by in choice.superseded)
    shuffled = list(given_candidates)
    rnd.shuffle(shuffled)
    again = choose_latest(shuffled, applied)
    assert again.chosen == choice.chosen
    assert set(again.superseded) == set(choice.superseded)


@given(desired_states(refusable=False), observed_states(refusable=False), st.data())
def test_a_running_container_no_apply_saw_answer_is_awaited(desired, observed, data):
    """Same digest and running is not done for a container with a health check that no apply
    saw answer (the apply that started it was killed while waiting): the plan awaits it, and
    only such a container."""
    # independent draws rarely observe a declared container running with its declared digest
    # (the derandomized `ci` profile drew none that was unanswered): some declared containers
    # are observed that way here, answered or not
    observed = observed._replace(containers=observed.containers.update({
        c.name: ContainerFacts(c.name, c.digest, True, "running", c.run_once, c.summary,
                               answered=data.draw(st.booleans()))
        for c in desired.containers if data.draw(st.booleans())}))
    ops = diff(desired, observed)
    if ops.refused:
        return
    awaited = {op.subject for op in ops.ops if op.op == "await-health"}
    expected = {c.name for c in desired.containers
                if c.health and c.name in observed.containers
                and observed.containers[c.name].digest == c.digest
                and observed.containers[c.name].running
                and not observed.containers[c.name].answered}
    assert awaited == expected
