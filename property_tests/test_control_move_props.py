"""The control node moved by `mesh control restore --node` (executors/control/control_move.py),
checked against an oracle written from the documented rule on plain dicts: whatever mesh.yaml
(nodes block or flow, a control instance or none, comments anywhere but on the control
instance), the rewrite equals the oracle, keeps every comment and the order of what it keeps,
leaves exactly one control node holding the control key, loads, and a second move changes
nothing."""

from __future__ import annotations

import base64
import copy
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from ruamel.yaml import YAML

from resolver.documents import load_mesh

from executors.control.control_move import ControlLoop, ControlMoveError, Move, moved_text

CONTROL_KEY = base64.b64encode(bytes(range(32))).decode()
OTHER_KEY = base64.b64encode(bytes(range(1, 33))).decode()
PATHS = ("mesh-dir=", "control-key=")


@st.composite
def mesh_texts(draw: Any) -> tuple[str, list[str]]:
    """A mesh.yaml text and its nodes' names."""
    count = draw(st.integers(1, 4))
    names = [f"n{i}" for i in range(count)]
    control = draw(st.sampled_from([None, *names]))
    flow = draw(st.booleans())
    lines = ["# made by hand", "mesh: m", "catalogue: catalogue", "", "nodes:"]
    for i, name in enumerate(names):
        if draw(st.booleans()):
            lines.append(f"  # about {name}")
        fields = [f"address: 10.0.0.{i + 1}"]
        if name == control:
            fields.append("control: true")
        if draw(st.booleans()) or name == control:
            fields.append(f'public-key: "{CONTROL_KEY if name == control else OTHER_KEY}"')
        facilities = draw(st.lists(st.sampled_from(
            ["mesh-dir=/srv/mesh", "control-key=/etc/k", "docker-socket", "gpu"]),
            unique=True, max_size=4))
        if facilities:
            fields.append("facilities: [" + ", ".join(f'"{f}"' for f in facilities) + "]")
        trailing = f"  # {name}'s" if draw(st.booleans()) else ""
        if flow:
            lines.append(f"  {name}: {{" + ", ".join(fields) + "}" + trailing)
        else:
            lines.append(f"  {name}:{trailing}")
            lines.extend(f"    {field}" for field in fields)
    lines += ["", "instances:"]
    for i, name in enumerate(draw(st.lists(st.sampled_from(names), min_size=1, max_size=3))):
        lines.append(f"  # app {i}")
        lines.append(f"  app{i}@{name}: {{module: app, node: {name}}}  # mine")
    host = draw(st.sampled_from([None, *names]))
    if host is not None:
        lines.append(f"  control@{host}: {{module: control, node: {host}}}")
    return "\n".join(lines) + "\n", names


def _plain(text: str) -> Any:
    return YAML(typ="safe").load(text)


def oracle(plain: Any, move: Move) -> Any:
    """The documented rule, on plain dicts."""
    expected = copy.deepcopy(plain)
    nodes, instances = expected["nodes"], expected.get("instances") or {}
    entry = nodes.setdefault(move.node, {})
    if move.address is not None:
        entry["address"] = move.address
    entry.setdefault("public-key", move.public_key)
    for name, node in nodes.items():
        node.pop("control", None)
    entry["control"] = True
    controls = [n for n, i in instances.items() if i["module"] == "control"]
    hosts = {instances[n]["node"] for n in controls}
    if move.loop is ControlLoop.SERVICE:
        for name in controls:
            del instances[name]
    else:
        for name in controls:
            old = instances.pop(name)
            renamed = f"control@{move.node}" if name == f"control@{old['node']}" else name
            instances[renamed] = {**old, "node": move.node}
        if not controls:
            instances[f"control@{move.node}"] = {"module": "control", "node": move.node}
    for host in hosts:
        if move.loop is ControlLoop.SERVICE or host != move.node:
            kept = [f for f in nodes[host].get("facilities", []) if not f.startswith(PATHS)]
            if "facilities" in nodes[host]:
                if kept:
                    nodes[host]["facilities"] = kept
                else:
                    del nodes[host]["facilities"]
    if move.loop is ControlLoop.CONTAINER:
        wanted = [f"mesh-dir={move.mesh_dir}", f"control-key={move.control_key}",
                  "docker-socket"]
        have = [f for f in entry.get("facilities", [])
                if f.split("=", 1)[0] not in ("mesh-dir", "control-key")]
        entry["facilities"] = have + [f for f in wanted if f not in have]
    return expected


def _normalised(plain: Any) -> Any:
    """Facilities compared as sets: where a replaced one stands is not the rule."""
    for node in plain["nodes"].values():
        if "facilities" in node:
            node["facilities"] = sorted(node["facilities"])
    return plain


@given(mesh_texts(), st.integers(0, 4), st.booleans(), st.sampled_from(list(ControlLoop)))
def test_the_move_is_the_documented_rule_and_keeps_every_comment(
        drawn, which, with_address, loop):
    text, names = drawn
    node = f"n{which}"
    move = Move(node, "10.0.9.9" if with_address else None, CONTROL_KEY, "/var/mesh",
                "/etc/mesh/control.key", loop)
    load_mesh(text, "mesh.yaml")  # a mesh that loads, as a restored one does
    plain = _plain(text)
    entry = plain["nodes"].get(node)
    refused = ((entry is None and not with_address)
               or (entry is not None and entry.get("public-key") not in (None, CONTROL_KEY))
               or (loop is ControlLoop.CONTAINER and entry is None))
    try:
        moved, said = moved_text(text, move, "mesh.yaml")
    except ControlMoveError:
        assert refused
        return
    assert not refused, moved
    after = _plain(moved)
    assert _normalised(after) == _normalised(oracle(plain, move))
    assert [n for n, e in after["nodes"].items() if e.get("control")] == [node]
    assert after["nodes"][node]["public-key"] == CONTROL_KEY
    for line in text.splitlines():
        if "#" in line:
            assert line.split("#", 1)[1] in moved, line
    order = [n for n in plain["nodes"]]
    assert [n for n in after["nodes"] if n in order] == order
    assert bool(said) == (moved != text)
    assert moved_text(moved, move, "mesh.yaml") == (moved, [])
