"""Exposures beyond the mesh and the floors, against real nftables in four namespaces.

n1 is the node (listeners on its IPv4 and IPv6 addresses); n2..n4 stand for machines on the
LAN, with 10.77.0.<i> and fd77::<i>. The intent comes from a declaration file through
`mesh firewall`, as an operator would apply it; nothing runs in the root namespace.
"""

from __future__ import annotations

import json

import pytest
from pyrsistent import pvector

from resolver import Declaration, FirewallExposure, FirewallFloor, FirewallIntent, documents

try:
    from . import _netns
except ImportError:
    import _netns

pytestmark = pytest.mark.integration

_why = _netns.have_tools()
if _why:
    pytest.skip(f"firewall namespace tests: {_why}", allow_module_level=True)

UI, MAIL, BROKER, SSH, CLOSED = 8443, 2525, 5672, 22, 9090


@pytest.fixture(scope="module")
def lan():
    with _netns.Topology("ex", count=4) as topology:
        for port in (UI, MAIL, BROKER, SSH, CLOSED):
            topology.listen("n1", port)
            topology.listen("n1", port, topology.addresses6["n1"])
        yield topology


def apply(topology, tmp_path, intent):
    path = tmp_path / "declaration.json"
    path.write_text(json.dumps(documents.unstructure(Declaration(
        mesh="test", node="n1", address=topology.addresses["n1"], firewall=intent))))
    return topology.mesh("n1", "firewall", str(path), "--state-dir", str(tmp_path / "state"))


def intent_for(topology, expose) -> FirewallIntent:
    mesh = [topology.addresses["n1"], topology.addresses["n2"]]
    return FirewallIntent(
        address=topology.addresses["n1"], mesh_sources=pvector(mesh), expose=pvector(expose),
        floors=pvector([FirewallFloor(SSH, "tcp", pvector(), "ssh"),
                        FirewallFloor(BROKER, "tcp", pvector(mesh), "broker (enrolment)")]))


@pytest.fixture
def applied(lan, tmp_path):
    intent = intent_for(lan, [
        FirewallExposure(UI, "tcp", pvector(["10.77.0.2/31", "fd77::4/126"]),
                         "web@n1/http exposed: the LAN"),
        FirewallExposure(MAIL, "tcp", pvector(["any"]), "mail@n1/smtp exposed: the internet"),
    ])
    result = apply(lan, tmp_path, intent)
    assert result.returncode == 0, result.stdout + result.stderr
    yield lan, intent, tmp_path
    lan.python("n1", "import nftables; nftables.Nftables().cmd('delete table inet mesh')")


def test_exposure_to_an_ipv4_network_lets_in_its_members_only(applied):
    lan, _, _ = applied
    assert lan.connects("n2", "n1", UI)  # 10.77.0.2 in 10.77.0.2/31
    assert lan.connects("n3", "n1", UI)  # 10.77.0.3 in 10.77.0.2/31
    assert not lan.connects("n4", "n1", UI)  # 10.77.0.4 outside


def test_exposure_to_an_ipv6_network_lets_in_its_members_only(applied):
    lan, _, _ = applied
    node6 = lan.addresses6["n1"]
    assert lan.connects("n4", node6, UI)  # fd77::4 in fd77::4/126
    assert not lan.connects("n2", node6, UI)  # fd77::2 outside
    assert not lan.connects("n3", node6, UI)


def test_exposure_to_anywhere_and_the_floors(applied):
    lan, _, _ = applied
    node6 = lan.addresses6["n1"]
    for source in ("n2", "n3", "n4"):
        assert lan.connects(source, "n1", MAIL) and lan.connects(source, node6, MAIL)
        assert lan.connects(source, "n1", SSH) and lan.connects(source, node6, SSH)
        assert not lan.connects(source, "n1", CLOSED)
        assert not lan.connects(source, node6, CLOSED)
    assert lan.connects("n2", "n1", BROKER)  # a mesh node
    assert not lan.connects("n3", "n1", BROKER) and not lan.connects("n4", "n1", BROKER)


def test_unchanged_intent_sends_no_transaction_changed_exposure_one(applied):
    lan, intent, tmp_path = applied
    again = apply(lan, tmp_path, intent)
    assert again.returncode == 0 and "up to date" in again.stdout
    assert "[applied]" not in again.stdout and "checking the batch" not in again.stdout
    widened = intent_for(lan, [FirewallExposure(UI, "tcp", pvector(["10.77.0.0/29"]), "wider")])
    changed = apply(lan, tmp_path, widened)
    assert changed.returncode == 0 and "[applied]" in changed.stdout
    assert "one transaction" in changed.stdout
    assert lan.connects("n4", "n1", UI)
    assert not lan.connects("n4", "n1", MAIL)  # the mail exposure is gone with it
