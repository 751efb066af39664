"""`mesh status`: where each node and each rotation stands, from what the control plane keeps.

Invariants:
- Read-only: the ledger, the control state directory (published.json, reports/, accounts/);
  the broker is not asked, so status answers with the broker down.
- Per node: enrolled or not, the serial published and when, the serial in force by its last
  report, when it last reported and with what result (and why, for anything but applied),
  drift repaired, `mesh verify` results; `behind` when the serial in force is older than the
  one published.
- Per move that carries data (`state-from:` in mesh.yaml): copying (the arriving node's
  latest progress report: bytes, percent, rate), arrived, failed (why) or waiting, and the old
  copy kept on the source until `mesh forget-state`.
- Per node, each instance's last backup as the node last reported it (the snapshot, when,
  the last failure); executors/cli/_backup_status.py judges it overdue by the one rule.
- Per rotation in progress (the rotation functions of resolver): the credential, where it stands, and the nodes
  it still waits for (the provider's node while pending, the holders that have not reported
  the new generation while the old one is retiring).
"""

from __future__ import annotations

from typing import Optional

from resolver.rotation import holder_nodes, in_progress, waiting_holders

from resolver import Mesh

from executors.control.control_state import ControlState, Document
from executors.control.loading import PathLike, load_mesh_dir


def _provider_node(mesh: Mesh, credential_id: str) -> Optional[str]:
    parts = credential_id.split("/")
    if len(parts) < 2:
        return None
    instance = mesh.instances.get(parts[1])
    return instance.node if instance is not None else None


def status(mesh_dir: PathLike, state: ControlState) -> Document:
    inputs = load_mesh_dir(mesh_dir)
    mesh, ledger = inputs.mesh, inputs.ledger
    published, accounts, reports = state.published(), state.accounts(), state.reports()
    nodes: list[Document] = []
    for node in sorted(mesh.nodes):
        sent = published.get(node) or {}
        written = ledger.nodes.get(node)
        kept = reports.get(node) or {}
        last = kept.get("last") or {}
        applied = kept.get("last_applied") or {}
        in_force = last.get("serial_applied")
        if in_force is None:
            in_force = applied.get("serial")
        verify = kept.get("last_verify")
        results = (verify or {}).get("results") or []
        bad = [r for r in results if r.get("status") not in
               ("ok", "requires-nothing", "not-provisioned")]
        entry = {
            "node": node, "address": mesh.nodes[node].address, "enrolled": node in accounts,
            "serial_written": written.serial if written is not None else None,
            "serial_published": sent.get("serial"), "published_at": sent.get("at"),
            "serial_applied": in_force, "last_report_at": kept.get("received"),
            "last_result": last.get("result"), "last_trigger": last.get("trigger"),
            "last_serial": last.get("serial"), "reason": last.get("reason"),
            "superseded_by": last.get("superseded_by"),
            "drift_repaired": kept.get("drift_repaired", 0),
            "last_drift": kept.get("last_drift"),
            "verify": None if verify is None else {
                "ok": len(results) - len(bad), "not_ok": [
                    {"consumer": r.get("consumer"), "requirement": r.get("requirement"),
                     "status": r.get("status"), "message": r.get("message")} for r in bad]},
        }
        entry["moving"] = kept.get("moving")
        entry["backups"] = list(kept.get("backups") or [])  # as the node last reported
        entry["behind"] = bool(sent.get("serial") is not None and
                               (in_force is None or in_force < sent["serial"]))
        nodes.append(entry)
    rotations: list[Document] = []
    for credential_id, credential in sorted(ledger.credentials.items()):
        why = in_progress(credential)
        if why is None:
            continue
        if credential.pending is not None:
            provider = _provider_node(mesh, credential_id)
            waiting = [provider] if provider else []
            stage = "pending"
            generation: Optional[int] = credential.pending.generation
        else:  # retiring: the active generation replaces it
            waiting = list(waiting_holders(credential))
            stage = "retiring"
            generation = credential.active.generation if credential.active else None
        rotations.append({"credential": credential_id, "stage": stage,
                          "generation": generation, "holders": list(holder_nodes(credential)),
                          "waiting_for": waiting, "why": why})
    return {"mesh": mesh.mesh, "nodes": nodes, "rotations": rotations,
            "moves": _moves(mesh, reports)}


def _moves(mesh: Mesh, reports: dict[str, Document]) -> list[Document]:
    """Each move that carries data (`state-from:` declared): where it stands by the target's
    reports, and that the old copy stays on the source until `mesh forget-state`."""
    moves: list[Document] = []
    for name, instance in sorted(mesh.instances.items()):
        if instance.state_from is None or instance.state_from == instance.node:
            continue
        kept = reports.get(instance.node) or {}
        moving = kept.get("moving") or {}
        word = (kept.get("arrivals") or {}).get(name) or {}
        result = str(word.get("result") or "")
        stage = ("copying" if moving.get("instance") == name else
                 "arrived" if result.startswith(("done", "skipped")) or "verified and in place"
                 in result else "failed" if result.startswith("failed") else "waiting")
        moves.append({"instance": name, "from": instance.state_from, "to": instance.node,
                      "stage": stage, "progress": moving.get("line") if stage == "copying"
                      else None, "last": word or None,
                      "old_copy": f"kept on {instance.state_from} until `mesh forget-state "
                                  f"{name}@{instance.state_from}` (run there once "
                                  f"state-from is removed)"})
    return moves
