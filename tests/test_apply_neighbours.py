"""`mesh apply` against the real Docker Engine: a container that takes the address of a removed
container with a fixed MAC answers through its published port as soon as the apply returns.

Same-node consumers' containers get a fixed MAC (the firewall lets them in by it). Docker 20.10
on its default bridge otherwise derives a container's MAC from its address, so the host's
neighbour (ARP) entry for an address stays right when the address passes to another container.
With a fixed MAC it does not: A (fixed MAC) is removed, B is given A's address, and the host
keeps A's MAC for that address; docker-proxy accepts connections to B's published port and its
connection to B goes to A's MAC, i.e. nowhere, until the entry ages out: 8 s at the very least
(a STALE entry: 5 s delay_first_probe_time, then 3 unicast probes a second apart) and up to
about 45 s (a REACHABLE one: base_reachable_time 30 s, randomised ×0.5–1.5), 28 s when
measured here. The apply (executors/node/neighbours.py) replaces that entry with B's MAC.

The test connects to A just before the second apply (the entry is REACHABLE then), and asks B
to answer within 5 s of the apply returning: far below the stale window, far above the
milliseconds B's httpd takes to answer when nothing stands in the way. No health check is
declared, so nothing in the apply waits the stale entry out.

The scenario needs B to get A's address: the Engine's default bridge hands out the lowest free
address, and the removal of A and the creation of B are consecutive operations of one apply.
A keeper container (not the mesh's) holds the bridge up throughout: when the last container
leaves a bridge, its carrier drops and the kernel flushes its neighbour entries, which would
hide the defect. Touches neighbour entries on the Engine's bridge only, never nftables.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request

import attrs
import pytest

from executors.node import docker_engine
from executors.node.apply import apply_declaration
from _docker import cleanup, container, declaration, engine, env_image, free_port, http_get, \
    unique_mesh

pytestmark = pytest.mark.integration

DEADLINE = 5.0  # seconds for B to answer after the apply returns (see the module docstring)
A_MAC = "0a:6e:65:69:67:01"


@pytest.fixture
def api():
    return engine()


@pytest.fixture
def mesh(api):
    name = unique_mesh("nb")
    keeper = f"{name}-keeper"
    api.create_container(env_image(api), name=keeper, labels={"mesh-test.keeper": name},
                         command=["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"])
    api.start(keeper)
    yield name
    cleanup(api, name)
    api.remove_container(keeper, force=True)


def entries(bridge: str) -> dict[str, str]:
    shown = subprocess.run(["ip", "-j", "neigh", "show", "dev", bridge], capture_output=True,
                           text=True, check=True).stdout
    return {e["dst"]: e.get("lladdr", "").lower() for e in json.loads(shown or "[]")}


def network_of(api, name: str) -> tuple[str, str]:
    settings = api.inspect_container(name)["NetworkSettings"]["Networks"]["bridge"]
    return settings["IPAddress"], settings["MacAddress"].lower()


def answer_within(url: str, seconds: float):
    """The body GET `url` answers with within `seconds`, or None."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=max(0.1, deadline - time.monotonic())) \
                    as reply:
                return reply.read().decode()
        except OSError:
            time.sleep(0.1)
    return None


@pytest.mark.parametrize("b_mac", ["0a:6e:65:69:67:02", None], ids=["b-fixed-mac", "b-derived"])
def test_a_container_given_the_address_of_a_removed_fixed_mac_container_answers_at_once(
        api, mesh, tmp_path, b_mac):
    image = env_image(api)
    bridge = docker_engine.default_bridge(api)
    state = tmp_path / "state"
    a_port, b_port = free_port(), free_port()
    a = attrs.evolve(container(mesh, "a", image, port=a_port), mac=A_MAC)
    b = attrs.evolve(container(mesh, "b", image, port=b_port), mac=b_mac)

    first = apply_declaration(declaration(mesh, containers=[a]), api=api, state_root=state,
                              stop_timeout=1)
    assert first.facts["result"] == "applied", first.to_json()
    a_ip, a_mac = network_of(api, a.name)
    assert a_mac == A_MAC
    assert http_get(f"http://127.0.0.1:{a_port}/").strip() == "ok"  # through docker-proxy
    assert entries(bridge).get(a_ip) == A_MAC, "the host learnt A's MAC for its address"

    second = apply_declaration(declaration(mesh, serial=2, containers=[b]), api=api,
                               state_root=state, stop_timeout=1)
    reply = answer_within(f"http://127.0.0.1:{b_port}/", DEADLINE)

    assert second.facts["result"] == "applied", second.to_json()
    containers = [o for o in second.ops if o.op.endswith("-container")]
    assert [(o.op, o.subject) for o in containers] == [
        ("remove-container", a.name), ("create-container", b.name)]
    b_ip, b_actual_mac = network_of(api, b.name)
    assert b_ip == a_ip, (f"B got {b_ip}, not A's {a_ip}: another container took the address "
                          "meanwhile (a test running beside this one); the scenario needs it")
    assert b_actual_mac != A_MAC
    assert reply is not None and reply.strip() == "ok", (
        f"B ({b_ip}, {b_actual_mac}) did not answer through its published port within "
        f"{DEADLINE}s of the apply returning; the host's neighbour entry for {b_ip} on "
        f"{bridge} names {entries(bridge).get(b_ip)!r}")
    assert entries(bridge).get(b_ip) == b_actual_mac
    assert f"host neighbour entry {a_ip} on {bridge} {A_MAC} → {b_actual_mac}" in containers[1].result
    assert second.notices == []
