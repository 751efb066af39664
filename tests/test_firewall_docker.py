"""Ports published by the real Docker Engine are filtered: the seeds' "38 published ports".

A dockerd runs inside the provider's namespace (own socket, data root, exec root), so its
iptables-nft tables and DNAT rules exist only there. A container publishes two ports on the
provider's address: 8080 is bound to n2 in the intent, 8081 to nobody. DNAT'd traffic never
reaches the input hook, so only the forward hook can close them.
"""

from __future__ import annotations

import json
import shutil

import pytest
from pyrsistent import pvector

try:
    from . import _netns
except ImportError:
    import _netns
from resolver import Declaration, FirewallAllow, FirewallFloor, FirewallIntent, documents

pytestmark = pytest.mark.integration

_why = _netns.have_tools()
if not _why and shutil.which("dockerd") is None:
    _why = "dockerd is not installed (scripts/services.sh installs docker.io)"
if not _why and shutil.which("busybox") is None:
    _why = "busybox is not installed (busybox-static): the test image is built from it"
if _why:
    pytest.skip(f"firewall docker test: {_why}", allow_module_level=True)

BOUND, UNBOUND = 8080, 8081
HTTP_GET = b"GET / HTTP/1.0\r\n\r\n"


@pytest.fixture(scope="module")
def provider():
    with _netns.Topology("dk") as topology:
        dockerd = _netns.NamespacedDockerd(topology, "n1")
        try:
            dockerd.start()
            image = dockerd.load_busybox()
            address = topology.addresses["n1"]
            dockerd.docker(
                "run", "-d", "--name", "web", "-p", f"{address}:{BOUND}:80",
                "-p", f"{address}:{UNBOUND}:80", image,
                "/bin/busybox", "httpd", "-f", "-p", "80", "-h", "/www",
            )
            yield topology, dockerd
        finally:
            dockerd.stop()


def test_published_port_reachable_from_bound_node_only(provider, tmp_path):
    topology, dockerd = provider
    a = topology.addresses
    # Without our table, Docker's DNAT makes both ports reachable from every node.
    for port in (BOUND, UNBOUND):
        assert topology.connects("n3", "n1", port, request=HTTP_GET, expect=b"ok from the container")
    runtime_tables = topology.nft_tables("n1")
    assert "ip nat" in runtime_tables  # docker's iptables-nft rules live in this namespace

    intent = FirewallIntent(
        address=a["n1"],
        allow=pvector([FirewallAllow(BOUND, "tcp", pvector([a["n2"]]), "web@n1 for app@n2",
                                     published=True)]),
        floors=pvector([FirewallFloor(22, "tcp", pvector(), "ssh")]),
        mesh_sources=pvector(sorted(a.values())),
    )
    declaration = tmp_path / "declaration.json"
    declaration.write_text(json.dumps(documents.unstructure(
        Declaration(mesh="test", node="n1", address=a["n1"], firewall=intent))))
    result = topology.mesh("n1", "firewall", str(declaration), "--state-dir", str(tmp_path / "s"))
    assert result.returncode == 0, result.stdout + result.stderr

    get = dict(request=HTTP_GET, expect=b"ok from the container")
    assert topology.connects("n2", "n1", BOUND, **get)
    assert not topology.connects("n3", "n1", BOUND, **get)
    assert not topology.connects("n2", "n1", UNBOUND, **get)  # published, bound to nobody
    assert not topology.connects("n3", "n1", UNBOUND, **get)
    # The container runtime's tables are exactly as Docker left them.
    assert topology.nft_tables("n1") == runtime_tables
    # Docker still manages its container and its ports after our apply.
    assert dockerd.docker("inspect", "-f", "{{.State.Running}}", "web").stdout.strip() == "true"
