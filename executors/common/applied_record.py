"""The applied record: what a node says is in force, and what `mesh applied` may believe of it.

Invariants:
- Pure: plain data in, plain data out (the JSON document `<state root>/.mesh/applied.json`);
  no I/O, clock or environment. Standard library only: the no-op check of `mesh apply`
  (node/apply/fast.py) reads the record with `in_force` too, without loading attrs.
- The record names a declaration (`serial`, `digest`, `generations`, `granted`) as in force only
  when an apply of it succeeded in every phase: the admin checks, the firewall, the containers
  (directories, files, containers, run-once steps) and provisioning. A failed apply keeps the
  last good declaration in force and adds `failed`: the serial and digest attempted,
  the phase that failed, each failed operation or check with its result, and what the attempt
  did put in force on this node's providers (`granted`), so a partial apply is stated, never
  passed off as the new serial.
- `generations` are what the node's containers and files hold; `granted` what its provisioners
  reported in force on its providers (grants and providers' admin secrets); a grant of a kind
  no provisioner handles is listed under `not_provisioned`, never as granted.
- `acceptance` is the one rule `mesh applied` follows: a report moves rotations only when its
  last apply succeeded, it names the declaration the mesh declares now, and it was written by
  this version (an earlier version wrote its record before its provisioners ran).
"""

# No `from __future__ import annotations`: NamedTuple and TypedDict compile each string
# annotation of a field when the class is made (the no-op check of `mesh apply` imports this).
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import NamedTuple, TypedDict

from .marks import APPLIED_RECORD_VERSION as RECORD_VERSION

PHASES = ("checks", "firewall", "containers", "provisioning")
APPLIED, FAILED = "applied", "failed"


class InForce(TypedDict):
    """The declaration a record names as in force."""

    serial: int
    digest: str
    generations: dict[str, int]
    granted: dict[str, int]


class Attempt(NamedTuple):
    """One real apply of a declaration on a node, as it ended."""

    mesh: str
    node: str
    serial: int
    digest: str
    generations: Mapping[str, int] = MappingProxyType({})  # held by containers and files
    granted: Mapping[str, int] = MappingProxyType({})  # put in force on the providers
    not_provisioned: Sequence[Mapping[str, str]] = ()  # grants of a kind nothing provisions
    phase: str | None = None  # the phase that failed; None: every phase succeeded
    failures: Sequence[Mapping[str, str]] = ()  # {op, subject, result} of each failure

    @property
    def succeeded(self) -> bool:
        return self.phase is None


def _counts(value: object) -> dict[str, int]:
    return {str(k): int(v) for k, v in value.items()} if isinstance(value, Mapping) else {}


def in_force(record: Mapping[str, object] | None) -> InForce | None:
    """The declaration a record says is in force: {serial, digest, generations, granted}, or
    None when none ever was (or the record is unreadable)."""
    if not isinstance(record, Mapping):
        return None
    serial = record.get("serial")
    if not isinstance(serial, int):
        return None
    return {"serial": serial, "digest": str(record.get("digest", "")),
            "generations": _counts(record.get("generations")),
            "granted": _counts(record.get("granted"))}


def newest_serial(record: Mapping[str, object] | None) -> int | None:
    """The newest serial this node has seen applied or attempted (older ones are superseded)."""
    serials = []
    good = in_force(record)
    if good is not None:
        serials.append(good["serial"])
    failed = record.get("failed") if isinstance(record, Mapping) else None
    if isinstance(failed, Mapping) and isinstance(failed.get("serial"), int):
        serials.append(failed["serial"])
    return max(serials) if serials else None


def record_after(previous: Mapping[str, object] | None, attempt: Attempt) -> dict[str, object]:
    """The record once `attempt` ended, given the record before it."""
    head = {"version": RECORD_VERSION, "mesh": attempt.mesh, "node": attempt.node}
    if attempt.succeeded:
        return {**head, "result": APPLIED, "serial": attempt.serial, "digest": attempt.digest,
                "generations": dict(sorted(attempt.generations.items())),
                "granted": dict(sorted(attempt.granted.items())),
                "not_provisioned": [dict(g) for g in attempt.not_provisioned], "failed": None}
    good: Mapping[str, object] = in_force(previous) or {
        "serial": None, "digest": None, "generations": {}, "granted": {}}
    kept = previous.get("not_provisioned") if isinstance(previous, Mapping) else None
    return {**head, "result": FAILED, **good,
            "not_provisioned": list(kept) if isinstance(kept, list) else [],
            "failed": {"serial": attempt.serial, "digest": attempt.digest,
                       "phase": attempt.phase,
                       "operations": [dict(f) for f in attempt.failures],
                       "granted": dict(sorted(attempt.granted.items()))}}


def describe_failure(record: Mapping[str, object]) -> str:
    """One sentence: what the last apply attempted and what failed."""
    failed = record.get("failed")
    if not isinstance(failed, Mapping):
        failed = {}
    operations = failed.get("operations")
    if not isinstance(operations, list):
        operations = []
    what = "; ".join(f"{o.get('op')} {o.get('subject')}: {o.get('result')}"
                     for o in operations[:5]) or "no operation named"
    more = f" (and {len(operations) - 5} more)" if len(operations) > 5 else ""
    return (f"its last apply (serial {failed.get('serial')}, {failed.get('digest')}) failed "
            f"in the {failed.get('phase')} phase: {what}{more}")


def acceptance(record: object, node: str,
               declared_digest: str) -> tuple[str | None, dict[str, int]]:
    """(why not, granted): `mesh applied` records `node`'s report only when why-not is None;
    then `granted` is what its providers put in force."""
    if not isinstance(record, Mapping):
        return "not an applied record (a JSON object)", {}
    if record.get("version") != RECORD_VERSION:
        return ("written by an earlier version of `mesh apply`, which recorded a declaration "
                "as applied before its provisioners ran: apply again with this version, then "
                "report"), {}
    if record.get("node") not in (None, node):
        return f"it is node {record.get('node')}'s record, not {node}'s", {}
    if record.get("result") != APPLIED:
        return (f"{describe_failure(record)}. Nothing is recorded: a rotation moves holders "
                f"only to what every phase put in force. Fix what failed, apply again, then "
                f"report"), {}
    if record.get("digest") != declared_digest:
        return (f"{node} reported declaration {record.get('digest')}, but the mesh declares "
                f"{declared_digest} for it now: nothing recorded (apply the newest declaration "
                f"on {node}, then report it)"), {}
    return None, _counts(record.get("granted"))
