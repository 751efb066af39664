"""Diff cases stored as data: desired state + observed facts → the operations expected.

Each `tests/diff_cases/<executor>/<case>.json` holds `description`, `desired`, `observed` and
`expected` (see tests/diff_cases/README.md for each executor's shapes). One generic runner
checks every case twice:
1. the pure diff of desired against observed gives exactly `expected` (operations with their
   subjects, causes and the SQL or HTTP request they send; refusals; orphans; notices);
2. a second run does nothing: the diff of the same desired state against what the machine
   holds once those operations succeeded (the executor's own model `after`) has no operation.

For the provisioners and the firewall, `observed` is what their query reads (catalog rows,
management API documents, nftables listings), so each case goes through `parse(rows)` too.

After an intended change, `MESH_UPDATE_DIFF_CASES=1 pytest tests/test_diff_cases.py` rewrites
each case's `expected` from the diff (the second-run check still applies); review the diff of
the JSON like code.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable

import attrs
import pytest
from pyrsistent import pmap

from executors.node.apply import diff as apply_diff
from executors.node.firewall import executor as fw
from executors.node.provisioners import amqp_plan as amqp
from executors.node.provisioners import postgres_plan as postgres

CASES = Path(__file__).resolve().parent / "diff_cases"
UPDATE = os.environ.get("MESH_UPDATE_DIFF_CASES") == "1"


@attrs.frozen
class Executor:
    """How the runner reads one executor's cases and asks its diff and its model."""

    load: Callable[[dict], tuple[Any, Any]]  # case → (desired, observed)
    diff: Callable[[Any, Any], Any]  # (desired, observed) → plan
    expected: Callable[[Any], dict]  # plan → the `expected` document
    after: Callable[[Any, Any, Any], Any]  # (desired, observed, plan) → observed after it


# --------------------------------------------------------------------------- apply


def _mode(text) -> int:
    return int(text, 8) if isinstance(text, str) else text


def _apply_load(case: dict) -> tuple:
    d, o = case["desired"], case["observed"]
    desired = apply_diff.Desired(
        mesh=d["mesh"], node=d["node"], serial=d["serial"], digest=d["digest"],
        dirs=tuple(sorted(apply_diff.DesiredDir(x["path"], x["uid"], x["gid"], _mode(x["mode"]))
                          for x in d.get("dirs", []))),
        accesses=tuple(sorted(apply_diff.DesiredAccess(x["path"], x["mode"])
                              for x in d.get("accesses", []))),
        files=tuple(sorted(apply_diff.DesiredFile(x["path"], x["sha256"],
                                                  _mode(x.get("mode", "0600")),
                                                  tuple(x["owner"]) if "owner" in x else None)
                           for x in d.get("files", []))),
        containers=tuple(apply_diff.DesiredContainer(x["name"], x.get("run_once", False),
                                                     x["digest"], pmap(x.get("summary", {})))
                         for x in d.get("containers", [])),
        generations=pmap(d.get("generations", {})),
        refusals=tuple(apply_diff.Refusal(x["subject"], x["message"])
                       for x in d.get("refusals", [])))
    applied = o.get("applied")
    observed = apply_diff.Observed(
        dirs=pmap({x["path"]: apply_diff.DirFacts(
            x["path"], x["kind"], x.get("uid", 0), x.get("gid", 0), _mode(x.get("mode", 0)),
            x.get("empty", True), x.get("recorded", False)) for x in o.get("dirs", [])}),
        accesses=pmap({x["path"]: apply_diff.AccessFacts(
            x["path"], x["exists"], x.get("readable", False), x.get("writable", False))
            for x in o.get("accesses", [])}),
        files=pmap({x["path"]: apply_diff.FileFacts(x["path"], x["sha256"],
                                                     _mode(x.get("mode", "0600")),
                                                     tuple(x.get("owner", (0, 0))))
                    for x in o.get("files", [])}),
        containers=pmap({x["name"]: apply_diff.ContainerFacts(
            x["name"], x["digest"], x.get("running", True), x.get("status", "running"),
            x.get("run_once", False), pmap(x.get("summary", {})))
            for x in o.get("containers", [])}),
        markers=pmap(o.get("markers", {})),
        applied=None if applied is None else apply_diff.Applied(
            applied["serial"], applied["digest"], pmap(applied.get("generations", {})),
            applied.get("result", "applied")))
    return desired, observed


def _refusal_list(refusals) -> list:
    return [{"subject": r.subject, "message": r.message} for r in refusals]


APPLY = Executor(
    load=_apply_load,
    diff=apply_diff.diff,
    expected=lambda plan: {
        "ops": [{"op": o.op, "subject": o.subject, "cause": o.cause} for o in plan.ops],
        "refusals": _refusal_list(plan.refusals),
        "notices": _refusal_list(plan.notices)},
    after=lambda desired, observed, plan: apply_diff.after(desired, observed, plan.ops),
)


# --------------------------------------------------------------------------- postgres


def _postgres_load(case: dict) -> tuple:
    desired = [postgres.DesiredGrant(
        group=g["group"], database=g["database"], credential=g["credential"],
        slots={slot: None if want is None else postgres.SlotWant(want["generation"],
                                                                  want["password"])
               for slot, want in g["slots"].items()})
        for g in case["desired"]["grants"]]
    return desired, postgres.parse(case["observed"])


def _postgres_diff(case: dict) -> Callable:
    return lambda desired, observed: postgres.diff(case["desired"]["mesh"],
                                                   case["desired"]["provider"], desired,
                                                   observed)


def _postgres_expected(plan) -> dict:
    return {"ops": [{"op": s.op, "subject": s.subject, "cause": s.cause, "sql": s.text,
                     **({"database": s.database} if s.database else {}),
                     **({"parameters": len(s.params)} if s.params else {})}
                    for s in plan.statements],
            "refusals": [list(r) for r in plan.refusals],
            "orphaned": list(plan.orphaned),
            "owners": dict(sorted(plan.owners.items()))}


# --------------------------------------------------------------------------- amqp


def _amqp_load(case: dict) -> tuple:
    desired = [amqp.DesiredAccount(a["vhost"], a["user"], a["credential"], a["generation"],
                                   a["password"], a.get("login", ""))
               for a in case["desired"]["accounts"]]
    return desired, amqp.parse(case["observed"])


def _amqp_diff(case: dict) -> Callable:
    return lambda desired, observed: amqp.diff(case["desired"]["mesh"],
                                               case["desired"]["provider"], desired, observed)


def _amqp_expected(plan) -> dict:
    return {"ops": [{"op": c.op, "subject": c.subject, "cause": c.cause, "method": c.method,
                     "path": c.path, **({"body": sorted(c.body)} if c.body else {})}
                    for c in plan.calls],
            "refusals": [list(r) for r in plan.refusals],
            "orphaned": list(plan.orphaned),
            "untouched": [list(u) for u in plan.untouched]}


# --------------------------------------------------------------------------- firewall


FIREWALL = Executor(
    load=lambda case: (case["desired"]["digest"], fw.parse(case["observed"])),
    diff=fw.diff,
    expected=lambda ops: {"ops": [{"op": o.kind, "digest": o.digest, "cause": o.cause}
                                  for o in ops]},
    after=lambda desired, observed, ops: fw.after(observed, ops),
)


def executor_for(kind: str, case: dict) -> Executor:
    if kind == "apply":
        return APPLY
    if kind == "postgres":
        return Executor(_postgres_load, _postgres_diff(case), _postgres_expected,
                        lambda desired, observed, plan: postgres.after(observed, plan))
    if kind == "amqp":
        return Executor(_amqp_load, _amqp_diff(case), _amqp_expected,
                        lambda desired, observed, plan: amqp.after(observed, plan))
    if kind == "firewall":
        return FIREWALL
    raise AssertionError(f"no runner for diff cases of {kind!r}")


# --------------------------------------------------------------------------- the runner


def run_case(kind: str, case: dict) -> tuple[dict, dict]:
    """(what the diff gives, what a second run gives), both as `expected` documents."""
    executor = executor_for(kind, case)
    desired, observed = executor.load(case)
    plan = executor.diff(desired, observed)
    first = executor.expected(plan)
    second = executor.expected(executor.diff(desired, executor.after(desired, observed, plan)))
    return first, second


def check_case(kind: str, case: dict) -> None:
    first, second = run_case(kind, case)
    assert first == case["expected"], "the diff differs from the case's expected operations"
    assert second["ops"] == [], \
        f"a second run is not a no-op once the operations succeeded: {second['ops']}"


PATHS = sorted(CASES.glob("*/*.json"))


@pytest.mark.parametrize("path", PATHS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_diff_case(path):
    case = json.loads(path.read_text())
    kind = path.parent.name
    if UPDATE:
        first, _ = run_case(kind, case)
        if first != case.get("expected"):
            case["expected"] = first
            path.write_text(json.dumps(case, indent=2, ensure_ascii=False) + "\n")
    check_case(kind, case)


def test_every_executor_has_cases_and_every_case_says_what_it_shows():
    kinds = {p.parent.name for p in PATHS}
    assert kinds == {"apply", "postgres", "amqp", "firewall"}
    for path in PATHS:
        case = json.loads(path.read_text())
        assert case.get("description"), f"{path.name}: say what the case shows"
        assert set(case) == {"description", "desired", "observed", "expected"}, path.name
    counts = {k: sum(p.parent.name == k for p in PATHS) for k in kinds}
    assert min(counts.values()) >= 5, counts


def test_the_runner_catches_a_wrong_expectation_and_a_diff_that_never_settles(monkeypatch):
    """Break the case or the model once: the runner fails."""
    path = CASES / "firewall" / "table-absent.json"
    case = json.loads(path.read_text())
    wrong = {**case, "expected": {"ops": []}}
    with pytest.raises(AssertionError, match="expected operations"):
        check_case("firewall", wrong)
    monkeypatch.setattr(fw, "after", lambda observed, ops: observed)  # a model that does nothing
    with pytest.raises(AssertionError, match="second run"):
        check_case("firewall", case)
