"""The control node moved to this machine: mesh.yaml rewritten by `mesh control restore --node`.

Invariants:
- One ruamel round trip of mesh.yaml (comments, order and layout kept), every change said in
  one line; the result must load (resolver.documents.load_mesh), or it is refused and nothing
  is written. The node is added or its address written by enrolment.put_node, the one place a
  node's entry is made.
- Exactly one node is `control: true` afterwards: NAME. Its public-key is the control node's
  key's (the escrow, the kept broker password and backups are sealed to that key): a node
  with another key is refused, a node not in mesh.yaml is added with that key and needs its
  address.
- The control loop runs in one place: with `ControlLoop.SERVICE` every instance of module
  `control` leaves mesh.yaml (the loop is a host service on this machine) and the facilities
  naming the old machine's directory and key (`mesh-dir=`, `control-key=`) leave their node;
  with `ControlLoop.CONTAINER` the control instance moves to NAME (`control@NAME`), whose
  facilities name this machine's directory and key and offer its Engine; NAME must be a node
  already (its agent runs the container).
- `moved_text` reads and writes no file; `move_control` writes mesh.yaml with write_atomic.
"""

from __future__ import annotations

import enum
import io
from pathlib import Path
from typing import Callable, Optional

import attrs
from ruamel.yaml.comments import CommentedMap, CommentedSeq

from resolver import MeshError, documents
from resolver.documents import MESH_FILE

from executors.common.atomic import write_atomic
from executors.common.keys import private_key_from_b64, public_key_b64
from executors.control.enrolment import EnrolmentError, put_node, round_trip_yaml

CONTROL_MODULE = "control"
DIRECTORY_FACILITY, KEY_FACILITY, ENGINE_FACILITY = "mesh-dir", "control-key", "docker-socket"


class ControlMoveError(MeshError):
    """mesh.yaml cannot name this machine the control node as asked."""


class ControlLoop(enum.Enum):
    SERVICE = "service"  # a host service on this machine (systemd unit or `mesh supervise`)
    CONTAINER = "container"  # the control instance's container, on NAME's Engine


@attrs.frozen
class Move:
    node: str  # this machine's node
    address: Optional[str]  # its address: needed when it is not a node yet, else a new one
    public_key: str  # the control node's key's public half (base64)
    mesh_dir: str  # this machine's mesh directory, absolute (the mesh-dir facility)
    control_key: str  # the control node's key file here, absolute (the control-key facility)
    loop: ControlLoop = ControlLoop.SERVICE


def _facilities_of(entry: CommentedMap) -> Optional[CommentedSeq]:
    found = entry.get("facilities")
    return found if isinstance(found, CommentedSeq) else None


def _drop_paths(entry: CommentedMap, node: str, said: list[str]) -> None:
    """The facilities that name the old control machine's directory and key, out of `node`."""
    facilities = _facilities_of(entry)
    if facilities is None:
        return
    gone = [f for f in facilities if isinstance(f, str)
            and f.split("=", 1)[0] in (DIRECTORY_FACILITY, KEY_FACILITY)]
    for facility in gone:
        facilities.remove(facility)
        said.append(f"nodes.{node}: facility {facility} removed (the control loop's directory "
                    f"and key are not there any more)")
    if gone and not facilities:
        del entry["facilities"]


def _offer(entry: CommentedMap, node: str, wanted: list[str], said: list[str]) -> None:
    """`node` offers each of `wanted` (NAME=VALUE replaces NAME=other)."""
    facilities = _facilities_of(entry)
    if facilities is None:
        facilities = CommentedSeq()
        facilities.fa.set_flow_style()
        entry["facilities"] = facilities
    for facility in wanted:
        name = facility.split("=", 1)[0]
        same = [i for i, f in enumerate(facilities) if isinstance(f, str)
                and f.split("=", 1)[0] == name]
        if facility in facilities:
            continue
        if same:
            said.append(f"nodes.{node}: facility {facilities[same[0]]} → {facility}")
            facilities[same[0]] = facility
        else:
            facilities.append(facility)
            said.append(f"nodes.{node}: facility {facility} added (control@{node}'s)")


def _move_flag(nodes: CommentedMap, node: str, said: list[str]) -> None:
    for name, entry in list(nodes.items()):
        if name != node and isinstance(entry, CommentedMap) and entry.get("control"):
            del entry["control"]
            said.append(f"nodes.{name}: control: true removed (the control node is {node} "
                        f"now)")
    entry = nodes[node]
    if entry.get("control") is not True:
        keys = list(entry)
        at = keys.index("address") + 1 if "address" in keys else 0
        entry.insert(at, "control", True)
        said.append(f"nodes.{node}: control: true (the control node)")


def _control_instances(document: CommentedMap) -> list[str]:
    instances = document.get("instances")
    if not isinstance(instances, CommentedMap):
        return []
    return [name for name, entry in instances.items()
            if isinstance(entry, dict) and entry.get("module") == CONTROL_MODULE]


def moved_text(text: str, move: Move, where: str) -> tuple[str, list[str]]:
    """mesh.yaml's `text` with `move.node` the control node (the module's invariants), and
    the lines said about each change. ControlMoveError (nothing changed) when it cannot be."""
    yaml = round_trip_yaml()
    document = yaml.load(text)
    nodes = document.get("nodes") if isinstance(document, CommentedMap) else None
    if not isinstance(nodes, CommentedMap):
        raise ControlMoveError(f"{where}: has no `nodes:` mapping")
    node = move.node
    entry = nodes.get(node)
    if entry is None and move.address is None:
        raise ControlMoveError(
            f"{where}: {node} is not a node of the mesh (nodes: {', '.join(nodes)}): give this "
            f"machine's address with --address IP to add it as the control node, or name its "
            f"node with --node")
    if entry is not None and not isinstance(entry, CommentedMap):
        raise ControlMoveError(f"{where}: nodes.{node} is not a mapping")
    known = entry.get("public-key") if entry is not None else None
    if known and known != move.public_key:
        holder = next((n for n, e in nodes.items() if isinstance(e, dict)
                       and e.get("public-key") == move.public_key), None)
        raise ControlMoveError(
            f"{where}: nodes.{node} has another public-key than the control node's key "
            f"restored into {move.control_key}, which opens the escrow: name "
            + (f"its node ({holder}) or " if holder else "")
            + "a new node (--node NAME --address IP) for this machine")
    if move.loop is ControlLoop.CONTAINER and entry is None:
        raise ControlMoveError(
            f"{where}: {node} is not a node of the mesh yet, so no agent runs control@{node}'s "
            f"container there: make this machine a node first (`mesh join`), or run the "
            f"control loop as a host service (--control-loop service)")
    said: list[str] = []
    try:
        said += put_node(document, node, None if known else move.public_key, move.address,
                         where)
    except EnrolmentError as exc:
        raise ControlMoveError(str(exc)) from None
    _move_flag(nodes, node, said)
    instances = document.get("instances")
    hosts = []
    for name in _control_instances(document):
        hosts.append(str(instances[name].get("node")))
        if move.loop is ControlLoop.SERVICE:
            del instances[name]
            said.append(f"instances.{name} removed (the control loop runs as a host service on "
                        f"{node}'s machine)")
            continue
        old = str(instances[name].get("node"))
        if old == node:
            continue
        renamed = f"{CONTROL_MODULE}@{node}" if name == f"{CONTROL_MODULE}@{old}" else name
        if renamed != name and renamed in instances:
            raise ControlMoveError(f"{where}: instances.{renamed} exists already; cannot move "
                                   f"{name} there")
        value = instances[name]
        position = list(instances).index(name)
        del instances[name]
        value["node"] = node
        instances.insert(position, renamed, value)
        said.append(f"instances.{name} → instances.{renamed} (node: {node})")
    if move.loop is ControlLoop.CONTAINER and not hosts:
        instances = document.get("instances")
        if not isinstance(instances, CommentedMap):
            raise ControlMoveError(f"{where}: has no `instances:` mapping for control@{node}")
        value = CommentedMap([("module", CONTROL_MODULE), ("node", node)])
        value.fa.set_flow_style()
        instances[f"{CONTROL_MODULE}@{node}"] = value
        said.append(f"instances.control@{node} added (the control loop's container)")
    for host in dict.fromkeys(hosts):
        if host in nodes and (move.loop is ControlLoop.SERVICE or host != node):
            _drop_paths(nodes[host], host, said)
    if move.loop is ControlLoop.CONTAINER:
        _offer(nodes[node], node, [f"{DIRECTORY_FACILITY}={move.mesh_dir}",
                                   f"{KEY_FACILITY}={move.control_key}", ENGINE_FACILITY], said)
    buffer = io.StringIO()
    yaml.dump(document, buffer)
    result = buffer.getvalue()
    documents.load_mesh(result, where)  # InputError (located) rather than a bad write
    return result, said


def move_control(mesh_dir: Path, move: Move, shown_as: Optional[Path] = None) -> list[str]:
    """Rewrite `mesh_dir`'s mesh.yaml so that this machine is the control node; what changed.
    `shown_as`: the directory to name in what is said (a restore edits its staged copy)."""
    path = mesh_dir / MESH_FILE
    where = str((shown_as or mesh_dir) / MESH_FILE)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ControlMoveError(f"{path}: cannot be read: {exc}") from None
    result, said = moved_text(text, move, where)
    if result != text:
        write_atomic(path, result, mode=path.stat().st_mode & 0o777)
    return said


def restore_edit(node: str, address: Optional[str], mesh_dir: Path, control_key: Path,
                 loop: ControlLoop) -> Callable[[Path, Optional[bytes]], list[str]]:
    """What `mesh control restore --node` does to the staged mesh directory (backup.Edit):
    `move_control` with the archive's control node's key, named by where it is restored."""

    def edit(staged: Path, key: Optional[bytes]) -> list[str]:
        if key is None:
            raise ControlMoveError(
                f"the archive holds no control node's key and {control_key} is none: give the "
                f"control node's key with --key FILE to make {node} the control node (nothing "
                f"was written)")
        try:
            public_key = public_key_b64(private_key_from_b64(
                key.decode("ascii").strip(), str(control_key)))
        except UnicodeDecodeError:
            raise ControlMoveError(f"{control_key}: not a base64 X25519 private key") from None
        return move_control(staged, Move(node, address, public_key, str(mesh_dir),
                                         str(control_key), loop), shown_as=mesh_dir)

    return edit
