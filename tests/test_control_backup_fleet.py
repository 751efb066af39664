"""The control node lost and restored elsewhere, as an operator does it: a fleet of one
enrolled node (its agent a `mesh agent` process applying to the real Docker Engine, the
broker a RabbitMQ of the test's own serving TLS with a certificate from the mesh CA) converges; `mesh control backup` writes the
archive; the control node's directory and key are destroyed; `mesh control restore` brings
them back in another directory (another machine's), and a `mesh publish` from there is
accepted and applied by the same agent process: it was not enrolled again, its account and
queue are the ones it had, the serial goes on from the ledger, and its report is recorded in
the restored ledger. The restored control plane verifies the broker against the mesh CA the
archive brought back.
"""

from __future__ import annotations

import json
import shutil

import pytest

from _fleet import APP, FleetMesh
from _private_rabbit import available

pytestmark = pytest.mark.integration

_why = available()
if _why:
    pytest.skip(f"private RabbitMQ: {_why}", allow_module_level=True)

PASSPHRASE = "the fleet's backup passphrase"


def test_a_control_node_restored_elsewhere_publishes_and_the_agent_applies_it(tmp_path):
    fleet = FleetMesh(tmp_path / "machine-1", {"app@solo": ("app", "solo")})
    rabbit = None
    try:
        fleet.setup()
        rabbit = fleet.tls_rabbit()
        fleet.enrol("solo")
        agent = fleet.start_agent("solo")
        fleet.publish()
        assert fleet.collect().returncode == 0
        assert fleet.env_of("app@solo")["GREETING"] == "hello"
        serial = json.loads((fleet.dir / ".control" / "out" / "solo.declaration.json")
                            .read_text())["serial"]
        account = (fleet.dir / ".control" / "accounts" / "solo.json").read_bytes()

        passphrase = tmp_path / "passphrase"
        passphrase.write_text(PASSPHRASE + "\n")
        archive = tmp_path / "offsite" / "control.mesh-backup"
        key = fleet.node_dir("solo") / "node.key"
        fleet.mesh("control", "backup", fleet.dir, "--out", archive, "--key", key,
                   "--passphrase-file", passphrase, cwd=tmp_path)

        lost = fleet.dir
        shutil.rmtree(lost)  # the control node's disk dies (its agent's files are elsewhere)
        control_key = tmp_path / "machine-3" / "control.key"
        restored = tmp_path / "machine-3" / "mesh"
        fleet.mesh("control", "restore", archive, "--dir", restored, "--key", control_key,
                   "--passphrase-file", passphrase, cwd=tmp_path)
        assert (restored / ".control" / "accounts" / "solo.json").read_bytes() == account
        assert control_key.read_bytes() == key.read_bytes()
        assert not lost.exists()

        machine_1 = fleet.dir.parent
        fleet.node_dir = lambda node: machine_1 / "nodes" / node  # the agent stays where it is
        fleet.dir = restored  # every control command runs on machine 3 from now on
        fleet.write_module("app", APP.replace("GREETING: hello", "GREETING: restored"))
        size = fleet.log_size("solo")
        fleet.publish()
        log = fleet.wait_log("solo", f"reported applied for serial {serial + 1}",
                             timeout=120, after=size)[size:]
        assert "enrol" not in log.lower(), log
        assert agent.poll() is None, "the agent stopped: it should never notice the move"
        assert fleet.collect().returncode == 0
        assert fleet.env_of("app@solo")["GREETING"] == "restored"
        solo = next(n for n in fleet.status()["nodes"] if n["node"] == "solo")
        assert solo["enrolled"] and solo["serial_applied"] == serial + 1, solo
        printed = fleet.everything_printed()
        assert PASSPHRASE not in printed
    finally:
        fleet.close()
        if rabbit is not None:
            rabbit.remove()
