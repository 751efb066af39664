"""`mesh node remove DIR NAME`: a node leaves the mesh cleanly.

Invariants:
- Refused, with nothing changed, while an instance is assigned to the node (each named with its
  mesh.yaml line), for the control node (it holds the CA, the ledger and the escrow), and for a
  node mesh.yaml does not name.
- mesh.yaml changes only in the node's own entry: the entry's lines are cut from the text (its
  own comments inside it go with it; comments before and after it stay), or, for a node written
  in flow style on a shared line, the mapping loses the key by a ruamel round trip. The result
  must load and must read as the old document less that one node, or nothing is written.
- Everything happens under the ledger lock, in an order a crash can resume: the revocation
  (the node's key, its certificate's serial) is recorded first, then mesh.yaml written, then
  the node's broker account record and its open enrolment tokens closed in the control state.
  Running it again after a crash finishes what was left (the node is gone from mesh.yaml:
  its records are still cleared).
- The broker is not asked here: the next `mesh publish` or the control loop deletes the
  account (control/fleet_broker: an account no longer wanted) and the queue
  (control_loop.Control.connect); the resolver, with the node gone from mesh.yaml, drops its
  registry pull account, its firewall openings on other nodes and its declaration.
"""

from __future__ import annotations

import datetime
import io
from pathlib import Path
from typing import Any, Optional

import attrs
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap

from resolver import MeshError, documents
from resolver.documents import MESH_FILE
from resolver.rendering import STATE_ROOT

from executors.common.atomic import write_atomic
from executors.common.revocation import Revocation
from executors.control import revocations
from executors.control.control_state import ControlState
from executors.control.fleet import OPEN
from executors.control.loading import PathLike, ledger_path_of, mesh_lock

#: What the mesh leaves on the machine of a node that left (said by the command and in
#: docs/fleet.md): nothing of it is removed from there by the mesh.
LEFT_ON_THE_MACHINE = (
    "the agent's configuration and the node's private key (`mesh agent enrol --config`, "
    "`--key`: /etc/mesh/agent.yaml and /etc/mesh/node.key as the docs enrol them)",
    f"its state root (`state-root`, default {STATE_ROOT}): the state directories of the "
    "instances it ran, and .mesh/ (the applied record, the agent's last declaration and its "
    "sealed values in .mesh/agent/current/)",
    "its firewall table `inet mesh` and the agent's service unit, if one was written",
    "containers of instances it ran, if its agent had not applied a declaration without them "
    "(`mesh status` showed it BEHIND): stop them there",
)


class NodeRemovalError(MeshError):
    """The node cannot be removed as asked (unknown, the control node, mesh.yaml unreadable)."""


class NodeAssigned(NodeRemovalError):
    """Instances are still assigned to the node: nothing was changed."""

    def __init__(self, node: str, assigned: list[tuple[str, str]]):
        self.assigned = assigned
        listed = "; ".join(f"{instance} ({where})" for instance, where in assigned)
        super().__init__(f"node {node} still runs {len(assigned)} instance(s): {listed}; "
                         f"move them to another node or delete them in mesh.yaml first")


@attrs.frozen
class Removal:
    node: str
    address: str
    revocation: Revocation
    lines: tuple[str, ...]  # what was done, one line each
    behind: Optional[str]  # why its containers may still run there, when they may


def _load(text: str) -> tuple[YAML, Any]:
    yaml = YAML()
    yaml.preserve_quotes = True
    yaml.width = 4096
    return yaml, yaml.load(text)


def _plain(text: str) -> Any:
    return YAML(typ="safe").load(text)


def assigned_to(mesh_file: Path, text: str, node: str) -> list[tuple[str, str]]:
    """(instance, `mesh.yaml:LINE`) of every instance whose `node:` is `node`."""
    _, document = _load(text)
    instances = document.get("instances") if isinstance(document, dict) else None
    found = []
    if isinstance(instances, CommentedMap):
        for name, entry in instances.items():
            if isinstance(entry, dict) and entry.get("node") == node:
                line = instances.lc.key(name)[0] + 1
                found.append((str(name), f"{mesh_file}:{line}"))
    return found


def without_node(text: str, node: str, where: str) -> str:
    """mesh.yaml's text with `node`'s entry cut out and nothing else changed."""
    yaml, document = _load(text)
    nodes = document.get("nodes") if isinstance(document, dict) else None
    if not isinstance(nodes, CommentedMap) or node not in nodes:
        raise NodeRemovalError(f"{where}: no node {node} under `nodes:`")
    keys = list(nodes)
    index = keys.index(node)
    start = nodes.lc.key(node)[0]
    following = nodes.lc.key(keys[index + 1])[0] if index + 1 < len(keys) else None
    lines = text.splitlines(keepends=True)
    if nodes.fa.flow_style() or following == start or (
            index > 0 and nodes.lc.key(keys[index - 1])[0] == start):
        del nodes[node]  # shares its line with another node: the round trip cuts the key
        buffer = io.StringIO()
        yaml.dump(document, buffer)
        cut = buffer.getvalue()
    else:
        end = following if following is not None else _end_of_nodes(document, lines, start)
        while end > start + 1 and _blank_or_comment(lines[end - 1]):
            end -= 1  # comments after the entry belong to what follows it
        cut = "".join(lines[:start] + lines[end:])
    expected = _plain(text)
    del expected["nodes"][node]
    if _plain(cut) != expected:
        raise NodeRemovalError(f"{where}: cannot cut node {node}'s entry without changing "
                               f"anything else; remove it by hand")
    return cut


def _blank_or_comment(line: str) -> bool:
    stripped = line.strip()
    return not stripped or stripped.startswith("#")


def _end_of_nodes(document: CommentedMap, lines: list[str], start: int) -> int:
    """The line after the last node's entry: the next top-level key's line, or the end."""
    keys = list(document)
    after = keys.index("nodes") + 1
    later = [document.lc.key(k)[0] for k in keys[after:]]
    candidates = [line for line in later if line > start]
    return min(candidates) if candidates else len(lines)


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def remove_node(mesh_dir: PathLike, state: ControlState, node: str) -> Removal:
    """Remove `node` from the mesh (the module's invariants); NodeAssigned or NodeRemovalError
    with nothing changed when it cannot be."""
    mesh_file = Path(mesh_dir) / MESH_FILE
    with mesh_lock(mesh_dir):
        try:
            text = mesh_file.read_text(encoding="utf-8")
        except OSError as error:
            raise NodeRemovalError(f"{mesh_file}: {error}") from None
        mesh, _ = documents.load_mesh(text, str(mesh_file))  # InputError: located faults
        described = mesh.nodes.get(node)
        kept = revocations.load(state)
        earlier = revocations.removal_of(kept, node)
        if described is None:
            if earlier is None or node in state.accounts():
                raise NodeRemovalError(f"{mesh_file}: no node {node} (nodes: "
                                       f"{', '.join(sorted(mesh.nodes))})")
            lines = _clear_records(state, node)  # a removal a crash cut short: finished
            return Removal(node, "", earlier, ("node already gone from mesh.yaml",
                                               *lines), None)
        if described.control:
            raise NodeRemovalError(f"{node} is the control node (`control: true`): it holds "
                                   f"the mesh CA, the ledger and the escrow and cannot leave "
                                   f"this way")
        assigned = assigned_to(mesh_file, text, node)
        if assigned:
            raise NodeAssigned(node, assigned)
        cut = without_node(text, node, str(mesh_file))
        documents.load_mesh(cut, str(mesh_file))  # InputError (located): nothing written
        ledger = _ledger(mesh_dir)
        certificate = ledger.certificates.get(node) if ledger is not None else None
        serials = (certificate.serial,) if certificate is not None else ()
        entry = Revocation(at=_now(), reason=f"node {node} removed from the mesh "
                           f"(mesh node remove)", serials=serials, node=node,
                           public_key=described.public_key)
        revocations.add(state, entry)
        write_atomic(mesh_file, cut, mode=mesh_file.stat().st_mode & 0o777)
        lines = [f"removed node {node} ({described.address}) from {mesh_file}"]
        if serials:
            lines.append(f"revoked {node}'s certificate (serial {serials[0]})")
        if described.public_key:
            lines.append(f"revoked {node}'s key: it cannot enrol again with it")
        lines += _clear_records(state, node)
        return Removal(node, described.address, entry, tuple(lines), _behind(state, node))


def _ledger(mesh_dir: PathLike) -> Any:
    path = ledger_path_of(mesh_dir)
    if not path.exists():
        return None
    return documents.load_ledger(path.read_text(encoding="utf-8"), str(path))[0]


def _clear_records(state: ControlState, node: str) -> list[str]:
    """The node's broker account record and its open enrolment tokens, closed (under the
    ledger lock): the next ensure of the broker's accounts deletes their accounts."""
    lines = []
    account = state.accounts_dir / f"{node}.json"
    if account.exists():
        user = (state.accounts().get(node) or {}).get("user") or node
        account.unlink()
        lines.append(f"its broker account {user} and its queue are deleted by the next "
                     f"`mesh publish` or the control loop")
    for token in state.tokens().values():
        if token.get("node") == node and token.get("state") in OPEN:
            state.write_token(dict(token, state="closed", reason="the node was removed"))
            lines.append(f"enrolment token {token['id']} for {node} closed")
    return lines


def _behind(state: ControlState, node: str) -> Optional[str]:
    """Why containers may still run on the node: it had not reported applying the last
    declaration published to it (which had no instances, or it would not be removable)."""
    published = (state.published().get(node) or {}).get("serial")
    if published is None:
        return None
    kept = state.reports().get(node) or {}
    last = kept.get("last") or {}
    in_force = last.get("serial_applied")
    if in_force is None:
        in_force = (kept.get("last_applied") or {}).get("serial")
    if isinstance(in_force, int) and isinstance(published, int) and in_force >= published:
        return None
    return (f"{node} had not reported applying serial {published}, the last declaration "
            f"published to it (in force: {in_force if in_force is not None else 'unknown'}): "
            f"containers of instances it ran may still run there")
