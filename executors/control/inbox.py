"""What the nodes say to the control plane: reports, and enrolment requests.

Invariants:
- A report speaks for the node whose account published it: the broker validated the message's
  `user_id` against the account that sent it, and a report whose body names another node, or
  whose `user_id` is no node account of this mesh, is refused and only logged.
- Every report is kept (`reports.json`, per node: the last one, a short history, the drift
  repaired, the last verify, the last word on each state arrival, each instance's last
  backup); a `backup` report (a scheduled backup ended) updates only the backups; a `progress` report (a
  copy under way) is kept apart (`moving`, cleared by the next report of any other kind) and
  never replaces the last report; an `applied` one is recorded in the ledger exactly as `mesh
  applied` records a node's applied.json (control/applied.record_report), in one ledger
  transaction (control/ledger_transaction.transact), and only when the rules accept it
  (succeeded in every phase, the declaration the mesh declares now). A report recorded twice
  changes nothing (generations only move forward). A batch of reports is judged against one
  resolution and recorded one after the other: each node is judged by the declaration it was
  handed, and the ledger is written once, then the reports file, both in one hold of the
  ledger lock. A batch with no applied report loads nothing (a mesh that does not load holds
  up only the reports that need it).
- A report from a node removed from the mesh (control/revocations.py), and an enrolment
  request carrying a revoked node key, are refused naming the removal.
- An enrolment request is kept only when it comes from the account of an open token (the
  broker authenticated it with the token's secret, `user_id` validated), names the token's node
  and carries a valid X25519 public key and an address; anything else is refused and logged.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import ipaddress
from typing import Callable, Optional, Sequence, Union

import attrs

from resolver import Inputs, Ledger, Resolution

from executors.common import messages, revocation
from executors.common.amqp import FleetNames
from executors.common.message_formats import ENROLMENT_REQUEST_FORMAT, REPORT_FORMAT
from executors.control import revocations
from executors.control.applied import record_report, resolve_current
from executors.control.control_state import ControlState, Document
from executors.control.fleet import token_open
from executors.control.ledger_transaction import transact
from executors.control.loading import PathLike, load_mesh_dir, mesh_lock

HISTORY = 20

#: The mesh as it is now, asked under the ledger lock: (inputs, their resolution).
Current = Callable[[], tuple[Inputs, Resolution]]


@attrs.frozen
class Outcome:
    line: str  # what happened, one line for the log
    recorded: bool = False  # the ledger changed
    refused: bool = False


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def summary(report: Document) -> Document:
    return {k: report.get(k) for k in ("at", "trigger", "message_id", "serial", "result",
                                       "superseded_by", "reason", "serial_applied")}


def _parse_report(names: FleetNames, user_id: Optional[str],
                  body: bytes) -> Union[tuple[str, Document], Outcome]:
    """(node, report) or the Outcome refusing it."""
    node = names.node_of(user_id)
    if node is None:
        who = user_id or "an account that did not say who it is (no user_id)"
        return Outcome(f"report refused: published by {who}, which is no node account of "
                       f"mesh {names.mesh}", refused=True)
    try:
        report = messages.open_plain(body, REPORT_FORMAT)
    except messages.MessageRefused as refusal:
        return Outcome(f"report from {node} refused: {refusal.reason}", refused=True)
    if report.get("node") != node or report.get("mesh") != names.mesh:
        return Outcome(f"report refused: it speaks for node {report.get('node')} of mesh "
                       f"{report.get('mesh')}, but account {user_id} published it",
                       refused=True)
    return node, report


def _kept(kept: Document, node: str, report: Document) -> Document:
    backups = report["backups"] if isinstance(report.get("backups"), list) \
        else kept.get("backups")  # each instance's last backup, as the node recorded it
    if report.get("trigger") == "backup":  # a scheduled backup ended: not the last report
        return dict(kept, node=node, backups=backups)
    if report.get("trigger") == "progress":  # a copy under way: kept apart from the last report
        return dict(kept, node=node, received=_now(),
                    moving=dict(report.get("moving") or {}, at=report.get("at")))
    history = ([summary(report)] + list(kept.get("history") or []))[:HISTORY]
    drift = list(report.get("drift") or [])
    return {"node": node, "received": _now(), "last": report, "history": history,
            "drift_repaired": int(kept.get("drift_repaired") or 0) + (1 if drift else 0),
            "last_drift": ({"at": report.get("at"), "operations": drift} if drift
                           else kept.get("last_drift")),
            "last_verify": report.get("verify") or kept.get("last_verify"),
            "last_applied": (summary(report) if report.get("result") == "applied"
                             else kept.get("last_applied")),
            # a move's arrivals on this node: the last word of each (copied and verified, or
            # why not); the progress of a copy under way ends with the apply's report
            "arrivals": dict(kept.get("arrivals") or {}, **{
                str(op.get("subject")): {"at": report.get("at"), "result": op.get("result")}
                for op in report.get("operations") or []
                if isinstance(op, dict) and op.get("op") == "arrive"}),
            "moving": None, "backups": backups}


def _line(node: str, report: Document) -> str:
    if report.get("trigger") == "backup":
        backup = report.get("backup") or {}
        return (f"report from {node}: backup of {backup.get('instance')} "
                + (f"failed: {report.get('reason')}" if report.get("reason") else
                   f"snapshot {str(backup.get('snapshot'))[:8]}"))
    if report.get("trigger") == "progress":
        return f"report from {node}: copying {(report.get('moving') or {}).get('line')}"
    drift = report.get("drift") or []
    return (f"report from {node}: serial {report.get('serial')} {report.get('result')}"
            + (f" (superseded by {report.get('superseded_by')})"
               if report.get("result") == "superseded" else "")
            + (f": {report.get('reason')}" if report.get("reason") else "")
            + (f"; drift repaired: {len(drift)} operation(s)" if drift else ""))


def handle_reports(mesh_dir: PathLike, state: ControlState, names: FleetNames,
                   items: Sequence[tuple[Optional[str], bytes]],
                   current: Optional[Current] = None) -> list[Outcome]:
    """Keep a batch of reports and record the applied ones in the ledger: one lock, one load,
    one resolution, one write of each file for the whole batch. `current()`, called under the
    lock, gives (inputs, resolution) of the mesh as it is (a cache may answer it); by default
    the mesh directory is loaded and resolved."""
    outcomes: dict[int, Outcome] = {}
    parsed: list[tuple[int, str, Document]] = []
    removed = _removed(state)
    for index, (user_id, body) in enumerate(items):
        found = _parse_report(names, user_id, body)
        if not isinstance(found, Outcome) and found[0] in removed:
            found = Outcome(f"report from {found[0]} refused: {removed[found[0]]}", refused=True)
        if isinstance(found, Outcome):
            outcomes[index] = found
        else:
            parsed.append((index, *found))
    if not parsed:
        return [outcomes[i] for i in range(len(items))]
    with mesh_lock(mesh_dir):  # the reports file and the ledger: one hold for the batch
        kept = state.reports()
        applied: list[tuple[int, str, Document, str]] = []
        for index, node, report in parsed:
            kept[node] = _kept(kept.get(node) or {}, node, report)
            line = _line(node, report)
            if report.get("result") != "applied" or not isinstance(report.get("record"), dict):
                outcomes[index] = Outcome(line)
            else:
                applied.append((index, node, report, line))
        if applied:
            loaded = (current or _load_and_resolve(mesh_dir))()
            outcomes.update(transact(mesh_dir, lambda inputs: _record_batch(
                inputs, loaded[1], applied), load=lambda: loaded[0]).result)
        state.write_reports(kept)
    return [outcomes[i] for i in range(len(items))]


def _record_batch(inputs: Inputs, resolution: Resolution,
                  applied: Sequence[tuple[int, str, Document, str]]
                  ) -> tuple[Ledger, dict[int, Outcome]]:
    """Each applied report recorded onto the ledger in turn, judged against `resolution`
    (the declarations the nodes were handed): (the ledger to keep, each report's outcome)."""
    outcomes: dict[int, Outcome] = {}
    ledger = resolution.ledger
    for index, node, report, line in applied:
        recorded = record_report(inputs, node, report["record"], current=resolution,
                                 onto=ledger)
        if recorded.ledger is None:
            outcomes[index] = Outcome(f"{line}; not recorded: {recorded.why}")
            continue
        ledger = recorded.ledger
        if recorded.moved:
            outcomes[index] = Outcome(f"{line}; recorded in the ledger: "
                                      f"{', '.join(recorded.moved)}", recorded=True)
        else:
            outcomes[index] = Outcome(f"{line}; nothing new to record")
    if ledger == resolution.ledger:
        return inputs.ledger, outcomes  # nothing recorded: nothing kept
    return resolve_current(inputs, ledger).ledger, outcomes


def _removed(state: ControlState) -> dict[str, str]:
    """node → why its reports are refused, for every node that left the mesh and was not
    accepted again since (with a new key: `mesh enrol accept` makes its account anew)."""
    accounts = state.accounts()
    return {r.node: f"the node was removed from the mesh at {r.at} (`mesh node remove`); "
                    f"nothing it says is recorded"
            for r in revocations.load(state) if r.node is not None and r.node not in accounts}


def _load_and_resolve(mesh_dir: PathLike) -> Current:
    def load() -> tuple[Inputs, Resolution]:
        inputs = load_mesh_dir(mesh_dir)
        return inputs, resolve_current(inputs)
    return load


def handle_report(mesh_dir: PathLike, state: ControlState, names: FleetNames,
                  user_id: Optional[str], body: bytes) -> Outcome:
    return handle_reports(mesh_dir, state, names, [(user_id, body)])[0]


def _valid_key(text: object) -> bool:
    try:
        return isinstance(text, str) and len(base64.b64decode(text, validate=True)) == 32
    except (binascii.Error, ValueError):
        return False


def _valid_address(text: object) -> bool:
    if not isinstance(text, (str, int)):
        return False
    try:
        ipaddress.ip_address(text)
        return True
    except (ValueError, TypeError):
        return False


def handle_enrolment(mesh_dir: PathLike, state: ControlState, names: FleetNames,
                     user_id: Optional[str], body: bytes,
                     say: Callable[[str], None] = lambda line: None) -> Outcome:
    token_id = names.token_of(user_id)
    if token_id is None:
        who = user_id or "an unnamed account"
        return Outcome(f"enrolment request refused: published by {who}, which is no "
                       f"enrolment account of mesh {names.mesh}", refused=True)
    try:
        request = messages.open_plain(body, ENROLMENT_REQUEST_FORMAT)
    except messages.MessageRefused as refusal:
        return Outcome(f"enrolment request with token {token_id} refused: {refusal.reason}",
                       refused=True)
    with mesh_lock(mesh_dir):  # the control state is written under the ledger's lock
        token = state.tokens().get(token_id)
        if token is None or token.get("state") != "issued" or not token_open(token):
            why = ("unknown" if token is None else "used already" if token.get("state")
                   != "issued" else "expired")
            return Outcome(f"enrolment request with token {token_id} refused: the token is "
                           f"{why} (one request per token; `mesh enrol token` makes another)",
                           refused=True)
        problems = []
        if request.get("node") != token["node"] or request.get("mesh") != names.mesh:
            problems.append(f"it asks for node {request.get('node')} of mesh "
                            f"{request.get('mesh')}, the token is for {token['node']}")
        if request.get("token") != token_id:
            problems.append("it names another token")
        if not _valid_key(request.get("public_key")):
            problems.append("public_key is not a base64 X25519 public key")
        else:
            revoked = revocation.revoking_key(revocations.load(state),
                                              str(request["public_key"]))
            if revoked is not None:
                problems.append(f"its public key is revoked: it is the key of node "
                                f"{revoked.node}, removed from the mesh at {revoked.at} "
                                f"(`mesh node remove`); a node that left comes back only with "
                                f"a new key (move its key file away, then `mesh agent enrol` "
                                f"makes one)")
        if not _valid_address(request.get("address")):
            problems.append(f"address {request.get('address')!r} is not an IP address")
        if problems:
            return Outcome(f"enrolment request with token {token_id} refused: "
                           + "; ".join(problems), refused=True)
        token = dict(token, state="requested",
                     request={"public_key": request["public_key"],
                              "address": request["address"],
                              "hostname": str(request.get("hostname") or ""),
                              "received": _now()})
        state.write_token(token)
    return Outcome(f"enrolment request from {token['node']} ({request['address']}) with token "
                   f"{token_id}: `mesh enrol list` shows it; `mesh enrol accept` or `reject`")
