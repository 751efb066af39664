"""The control node moved to this machine (`mesh control restore --node`): mesh.yaml rewritten
by one round trip, comments and order kept, every change said; refused with nothing changed
when the node is new without an address, holds another key, or cannot run the container; and
through the verb: a restore onto a new node of the homelab archive, whose restored ledger still
issues with the control key (the escrow is found under the old control node's name).
"""

from __future__ import annotations

import base64
import os
import re
from pathlib import Path

import pytest
from nacl.public import PrivateKey
from ruamel.yaml import YAML

from executors.cli.init import TEMPLATE
from executors.control.control_move import ControlLoop, ControlMoveError, Move, moved_text

from _meshdir import run_cli
from test_control_backup import archive, control, mesh  # noqa: F401 (fixtures)

CONTROL = base64.b64encode(bytes(PrivateKey.generate().public_key)).decode()
OTHER = base64.b64encode(bytes(PrivateKey.generate().public_key)).decode()


def _template() -> str:
    text = TEMPLATE.format(mesh="lab", node="n1", address="10.0.0.1", public=CONTROL,
                           directory="/srv/mesh", key="/etc/mesh/node.key",
                           socket="docker-socket")
    # an operator's node and comments of their own, which a move must keep
    return text.replace("\ninstances:\n", "  n2:  # the attic box\n    address: 10.0.0.2\n"
                        f"    public-key: \"{OTHER}\"\n\n# my apps below\ninstances:\n", 1)


def _plain(text: str) -> dict:
    return YAML(typ="safe").load(text)


def _move(node: str, address, loop=ControlLoop.SERVICE) -> Move:
    return Move(node, address, CONTROL, "/var/mesh", "/etc/mesh/control.key", loop)


def test_a_new_node_becomes_the_control_node_and_the_loop_leaves_mesh_yaml():
    text = _template()
    moved, said = moved_text(text, _move("n3", "10.0.0.3"), "mesh.yaml")
    plain = _plain(moved)
    assert plain["nodes"]["n3"] == {"address": "10.0.0.3", "control": True,
                                    "public-key": CONTROL}
    assert "control" not in plain["nodes"]["n1"]
    assert plain["nodes"]["n1"]["facilities"] == ["docker-socket"]
    assert "control@n1" not in plain["instances"]
    # nothing else changed, and every comment is still there
    before = _plain(text)
    for name in ("postgres@n1", "lavinmq@n1", "registry@n1"):
        assert plain["instances"][name] == before["instances"][name]
    assert plain["nodes"]["n2"] == before["nodes"]["n2"]
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            assert line in moved.splitlines(), line
    assert "# the attic box" in moved and moved.index("n1:") < moved.index("n2:") \
        < moved.index("n3:")
    assert said == [
        "added node n3 (10.0.0.3) to mesh.yaml",
        "nodes.n1: control: true removed (the control node is n3 now)",
        "nodes.n3: control: true (the control node)",
        "instances.control@n1 removed (the control loop runs as a host service on n3's "
        "machine)",
        "nodes.n1: facility mesh-dir=/srv/mesh removed (the control loop's directory and key "
        "are not there any more)",
        "nodes.n1: facility control-key=/etc/mesh/node.key removed (the control loop's "
        "directory and key are not there any more)"]
    # a second move to the same place changes nothing more
    assert moved_text(moved, _move("n3", "10.0.0.3"), "mesh.yaml") == (moved, [])


def test_the_control_nodes_own_machine_replaced_keeps_its_name_with_a_new_address():
    moved, said = moved_text(_template(), _move("n1", "10.0.0.9"), "mesh.yaml")
    plain = _plain(moved)
    assert plain["nodes"]["n1"]["address"] == "10.0.0.9" and plain["nodes"]["n1"]["control"]
    assert "control@n1" not in plain["instances"]
    assert said[0] == "n1's address 10.0.0.1 → 10.0.0.9 (what the node said)"


def test_the_container_moves_to_a_node_that_runs_an_agent_with_its_facilities():
    text = _template().replace(f'    public-key: "{OTHER}"', f'    public-key: "{CONTROL}"')
    text = text.replace(f'    public-key: "{CONTROL}"\n    facilities', f'    public-key: '
                        f'"{OTHER}"\n    facilities', 1)
    moved, said = moved_text(text, _move("n2", None, ControlLoop.CONTAINER), "mesh.yaml")
    plain = _plain(moved)
    assert plain["nodes"]["n2"]["control"] and "control" not in plain["nodes"]["n1"]
    assert plain["instances"]["control@n2"] == {"module": "control", "node": "n2"}
    assert "control@n1" not in plain["instances"]
    assert list(plain["instances"]).index("control@n2") == 3  # where control@n1 was
    assert plain["nodes"]["n2"]["facilities"] == [
        "mesh-dir=/var/mesh", "control-key=/etc/mesh/control.key", "docker-socket"]
    assert plain["nodes"]["n1"]["facilities"] == ["docker-socket"]
    assert "instances.control@n1 → instances.control@n2 (node: n2)" in said


@pytest.mark.parametrize("move, expected", [
    (_move("n3", None), r"n3 is not a node of the mesh \(nodes: n1, n2\): give this machine's "
                        r"address with --address IP"),
    (_move("n2", None), r"nodes.n2 has another public-key than the control node's key "
                        r"restored into /etc/mesh/control.key, which opens the escrow: name its "
                        r"node \(n1\) or a new node"),
    (_move("n3", "10.0.0.3", ControlLoop.CONTAINER),
     r"n3 is not a node of the mesh yet, so no agent runs control@n3's container there"),
    (_move("n3", "not-an-ip"), r"mesh.yaml:\d+"),
])
def test_a_move_that_cannot_be_is_refused_in_one_line(move, expected):
    with pytest.raises(Exception) as raised:
        moved_text(_template(), move, "mesh.yaml")
    assert re.search(expected, str(raised.value)), str(raised.value)
    assert "\n" not in str(raised.value).strip() or move.address == "not-an-ip"
    if move.address != "not-an-ip":
        assert isinstance(raised.value, ControlMoveError)


def test_restore_onto_a_new_node_moves_the_control_node_and_issues_with_its_key(
        control, archive, tmp_path):  # noqa: F811
    target, key = tmp_path / "machine-3" / "mesh", tmp_path / "machine-3" / "control.key"
    text = (control / "mesh" / "mesh.yaml").read_text()
    done = mesh("control", "restore", archive, "--dir", target, "--key", key,
                "--passphrase-file", control / "pass", "--node", "attic", "--address",
                "10.44.0.30", "--no-service")
    assert done.returncode == 0, done.stderr
    assert "mesh.yaml: added node attic (10.44.0.30)" in done.stderr
    assert "mesh.yaml: instances.control@home removed" in done.stderr
    assert f"run `mesh control {target} --key {key}` as a service" in done.stderr
    moved = (target / "mesh.yaml").read_text()
    plain = _plain(moved)
    assert plain["nodes"]["attic"]["control"] and "control" not in plain["nodes"]["home"]
    assert plain["nodes"]["attic"]["public-key"] == plain["nodes"]["home"]["public-key"]
    assert plain["nodes"]["home"]["facilities"] == ["docker-socket"]
    assert moved.splitlines()[:9] == text.splitlines()[:9]  # the header comments
    # the restored control node issues: a value re-sealed to it opens from the old escrow
    code, said = run_cli("plan", target, "--issue", "--key", key)
    assert code == 0, said
    assert "re-sealed registry-push/registry@lab/control generation(s) 1 to attic" in said


def test_a_refused_move_writes_nothing(control, archive, tmp_path):  # noqa: F811
    place = tmp_path / "machine-3"
    done = mesh("control", "restore", archive, "--dir", place / "mesh", "--key",
                place / "control.key", "--passphrase-file", control / "pass", "--node",
                "attic")
    assert done.returncode == 2, done.stderr
    assert "attic is not a node of the mesh" in done.stderr and "--address IP" in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not place.exists() or os.listdir(place) == []
