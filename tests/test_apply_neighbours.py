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
measured here. The apply (executors/node/apply/neighbours.py) deletes the entry naming a removed
container's MAC, and replaces an entry naming another MAC than a started container's. Three
scenarios: one apply removes A and creates B; the apply removes A and another tool starts B;
another tool's container (derived MAC) is removed and the apply creates B with a fixed MAC.

Each test connects to the first container just before the step under test (the entry is
REACHABLE then), and asks B to answer within 5 s of the apply returning (or, when another tool
starts B, of B starting): far below the stale window, far above the milliseconds B's httpd
takes to answer when nothing stands in the way. No health check is declared, so nothing in
the apply waits the stale entry out.

The scenarios need B to get A's address: the Engine's default bridge hands out the lowest free
address, and B is created right after A is removed; so each test holds the host's Engine alone
(`engine_alone`: no other worker of a parallel run creates a container meanwhile, and a test
beside this one taking the address in between would fail the test with that reason).
A keeper container (not the mesh's) holds the bridge up throughout: when the last container
leaves a bridge, its carrier drops and the kernel flushes its neighbour entries, which would
hide the defect. Touches neighbour entries on the Engine's bridge only, never nftables.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.request

import attrs
import docker
import pytest

from executors.node import docker_engine
from executors.node.apply.pipeline import apply_declaration
from _docker import HTTP_PORT, cleanup, container, declaration, engine, env_image, free_port, \
    http_get, unique_mesh

pytestmark = [pytest.mark.integration, pytest.mark.engine_alone]  # B must get A's address

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
    for leftover in (keeper, f"{name}-raw"):
        try:
            api.remove_container(leftover, force=True)
        except docker.errors.NotFound:
            pass


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


def raw_container(api, name: str, port: int) -> None:
    """A container the mesh does not manage (Docker derives its MAC from its address)."""
    api.create_container(env_image(api), name=name, ports=[HTTP_PORT],
                         labels={"mesh-test.raw": name}, host_config=api.create_host_config(
                             port_bindings={HTTP_PORT: ("127.0.0.1", port)}))
    api.start(name)


def apply(api, state, mesh, serial, *containers):
    report = apply_declaration(declaration(mesh, serial=serial, containers=list(containers)),
                               api=api, state_root=state, stop_timeout=1)
    assert report.result == "applied", report.to_json()
    assert report.notices == [], report.notices
    return {(o.op, o.subject): o.result for o in report.ops if o.op.endswith("-container")}


def learnt(api, bridge: str, name: str, port: int) -> tuple[str, str]:
    """Connect to `name` through its published port so the host learns its MAC; its (IP, MAC)."""
    ip, mac = network_of(api, name)
    assert http_get(f"http://127.0.0.1:{port}/").strip() == "ok"  # through docker-proxy
    assert entries(bridge).get(ip) == mac, f"the host learnt {name}'s MAC for {ip}"
    return ip, mac


def answers_at_once(api, bridge: str, name: str, port: int, ip_before: str) -> str:
    reply = answer_within(f"http://127.0.0.1:{port}/", DEADLINE)
    ip, mac = network_of(api, name)
    assert ip == ip_before, (f"{name} got {ip}, not {ip_before}: another container took the "
                             "address meanwhile (a test running beside this one); the scenario "
                             "needs it")
    assert reply is not None and reply.strip() == "ok", (
        f"{name} ({ip}, {mac}) did not answer through its published port within {DEADLINE}s "
        f"of the apply returning; the host's neighbour entry for {ip} on {bridge} names "
        f"{entries(bridge).get(ip)!r}")
    assert entries(bridge).get(ip) in (None, mac)
    return mac


@pytest.mark.parametrize("b_mac", ["0a:6e:65:69:67:02", None], ids=["b-fixed-mac", "b-derived"])
def test_a_container_given_the_address_of_a_removed_fixed_mac_container_answers_at_once(
        api, mesh, tmp_path, b_mac):
    """One apply removes A (fixed MAC) and creates B, which is given A's address."""
    image, bridge, state = env_image(api), docker_engine.default_bridge(api), tmp_path / "state"
    a_port, b_port = free_port(), free_port()
    a = attrs.evolve(container(mesh, "a", image, port=a_port), mac=A_MAC)
    b = attrs.evolve(container(mesh, "b", image, port=b_port), mac=b_mac)
    apply(api, state, mesh, 1, a)
    a_ip, _ = learnt(api, bridge, a.name, a_port)

    results = apply(api, state, mesh, 2, b)
    b_mac_seen = answers_at_once(api, bridge, b.name, b_port, a_ip)

    assert list(results) == [("remove-container", a.name), ("create-container", b.name)]
    assert b_mac_seen != A_MAC
    assert results[("remove-container", a.name)] == \
        f"removed; host neighbour entry {a_ip} on {bridge} {A_MAC} deleted"


def test_a_container_the_mesh_does_not_manage_given_a_removed_fixed_mac_address_answers(
        api, mesh, tmp_path):
    """The apply removes A (fixed MAC); then another tool starts B, which is given A's address:
    the apply deleted the host's entry naming A's MAC, so B is asked for."""
    image, bridge, state = env_image(api), docker_engine.default_bridge(api), tmp_path / "state"
    a_port, b_port = free_port(), free_port()
    a = attrs.evolve(container(mesh, "a", image, port=a_port), mac=A_MAC)
    apply(api, state, mesh, 1, a)
    a_ip, _ = learnt(api, bridge, a.name, a_port)

    results = apply(api, state, mesh, 2)
    raw_container(api, f"{mesh}-raw", b_port)
    answers_at_once(api, bridge, f"{mesh}-raw", b_port, a_ip)
    assert results == {("remove-container", a.name):
                       f"removed; host neighbour entry {a_ip} on {bridge} {A_MAC} deleted"}


def test_a_fixed_mac_container_given_the_address_of_a_removed_container_answers_at_once(
        api, mesh, tmp_path):
    """A container the mesh does not manage (Docker's derived MAC) is removed by another tool;
    the apply creates B with a fixed MAC, given that address: the host's entry still names the
    removed container's MAC, and the apply replaces it with B's."""
    image, bridge, state = env_image(api), docker_engine.default_bridge(api), tmp_path / "state"
    x_port, b_port = free_port(), free_port()
    raw_container(api, f"{mesh}-raw", x_port)
    x_ip, x_mac = learnt(api, bridge, f"{mesh}-raw", x_port)
    api.remove_container(f"{mesh}-raw", force=True)
    b = attrs.evolve(container(mesh, "b", image, port=b_port), mac=A_MAC)

    results = apply(api, state, mesh, 1, b)
    answers_at_once(api, bridge, b.name, b_port, x_ip)
    assert results[("create-container", b.name)] == \
        f"running; host neighbour entry {x_ip} on {bridge} {x_mac} → {A_MAC}"


RELAY = """
import os, socket, sys, threading
listener = socket.socket(socket.AF_UNIX)
listener.bind(sys.argv[1])
listener.listen(16)

def pipe(source, sink):
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for s in (source, sink):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

while True:
    client, _ = listener.accept()
    engine = socket.socket(socket.AF_UNIX)
    engine.connect(sys.argv[2])
    threading.Thread(target=pipe, args=(client, engine), daemon=True).start()
    threading.Thread(target=pipe, args=(engine, client), daemon=True).start()
"""


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1) (util-linux)")
def test_an_engine_served_from_another_network_namespace_is_a_notice_and_nothing_is_touched(
        api, mesh, tmp_path):
    """The same Engine, reached through a relay listening in a network namespace of its own
    (`unshare -n`): to the apply, the Engine's bridges are not its own to see. It says so, once,
    as a notice naming the reason; the apply succeeds; the host's entries are left as they are
    (here: the entry naming the removed A's MAC stays)."""
    image, bridge, state = env_image(api), docker_engine.default_bridge(api), tmp_path / "state"
    relay = tmp_path / "engine.sock"
    server = subprocess.Popen(["unshare", "-n", sys.executable, "-c", RELAY, str(relay),
                               api.get_adapter(api.base_url).socket_path])
    try:
        deadline = time.monotonic() + 10
        while not relay.exists():
            assert server.poll() is None and time.monotonic() < deadline, "relay did not start"
            time.sleep(0.05)
        elsewhere = docker_engine.connect(f"unix://{relay}")
        a_port = free_port()
        a = attrs.evolve(container(mesh, "a", image, port=a_port), mac=A_MAC)
        first = apply_declaration(declaration(mesh, containers=[a]), api=elsewhere,
                                  state_root=state, stop_timeout=1)
        a_ip, _ = learnt(api, bridge, a.name, a_port)
        second = apply_declaration(declaration(mesh, serial=2), api=elsewhere,
                                   state_root=state, stop_timeout=1)
    finally:
        server.kill()
        server.wait()
    for report in (first, second):
        assert report.result == "applied", report.to_json()
        assert len(report.notices) == 1, report.notices
        assert "another network namespace" in report.notices[0]["message"]
    assert [(o.op, o.result) for o in second.ops if o.op.endswith("-container")] == [
        ("remove-container", "removed")]
    assert entries(bridge).get(a_ip) == A_MAC  # not the apply's to touch: left as it was
