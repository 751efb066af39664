"""executors/node/apply/neighbours.py: which host neighbour entries a started container needs
replaced (pure, with data), and when the Engine's bridges are not this process's to touch
(a unix socket served from another network namespace, a TCP engine). The behaviour against the
real Engine is tests/test_apply_neighbours.py."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time

import docker
import pytest

from executors.node.apply.neighbours import (
    Address,
    Fix,
    bridge_of,
    container_addresses,
    engine_namespace_problem,
    fixed_mac,
    fixes,
    leftovers,
    parse_entries,
    summary,
)

DEFAULT_NET = {"Id": "f" * 64, "Driver": "bridge",
               "Options": {"com.docker.network.bridge.name": "docker0"}}
USER_NET = {"Id": "0123456789abcdef" * 4, "Driver": "bridge", "Options": {}}


def test_bridge_of_names_the_interface_of_bridge_networks_only():
    assert bridge_of(DEFAULT_NET) == "docker0"
    assert bridge_of(USER_NET) == "br-0123456789ab"
    assert bridge_of({"Id": "a" * 64, "Driver": "host", "Options": {}}) is None
    assert bridge_of({"Id": "a" * 64, "Driver": "macvlan"}) is None


def inspect(**networks):
    return {"NetworkSettings": {"Networks": networks}}


def test_container_addresses_pairs_each_address_with_its_mac_and_bridge():
    data = inspect(
        bridge={"NetworkID": DEFAULT_NET["Id"], "IPAddress": "172.17.0.3",
                "GlobalIPv6Address": "fd00::3", "MacAddress": "0A:6E:00:00:00:01"},
        mine={"NetworkID": USER_NET["Id"], "IPAddress": "10.9.0.2",
              "GlobalIPv6Address": "", "MacAddress": "02:42:0a:09:00:02"},
        hostish={"NetworkID": "h", "IPAddress": "", "MacAddress": ""})
    bridges = {DEFAULT_NET["Id"]: "docker0", USER_NET["Id"]: "br-0123456789ab", "h": None}
    assert container_addresses(data, bridges) == [
        Address("172.17.0.3", "0a:6e:00:00:00:01", "docker0"),
        Address("fd00::3", "0a:6e:00:00:00:01", "docker0"),
        Address("10.9.0.2", "02:42:0a:09:00:02", "br-0123456789ab")]
    assert container_addresses({"NetworkSettings": {}}, bridges) == []


def test_fixed_mac_is_the_mac_a_container_was_created_with_and_none_when_docker_derives_it():
    assert fixed_mac({"Config": {"MacAddress": "0a:6e:00:00:00:01"}}) == "0a:6e:00:00:00:01"
    assert fixed_mac({"Config": {"MacAddress": ""}}) is None  # what Docker 20.10 reports
    assert fixed_mac({"Config": {}}) is None and fixed_mac({}) is None


def test_parse_entries_keeps_entries_with_a_mac_and_canonical_addresses():
    shown = json.dumps([
        {"dst": "172.17.0.3", "lladdr": "0A:6E:00:00:00:01", "state": ["REACHABLE"]},
        {"dst": "172.17.0.4", "state": ["FAILED"]},
        {"dst": "fd00:0:0::3", "lladdr": "02:42:ac:11:00:03", "state": ["STALE"]}])
    assert parse_entries(shown) == {"172.17.0.3": "0a:6e:00:00:00:01",
                                    "fd00::3": "02:42:ac:11:00:03"}
    assert parse_entries("") == {} and parse_entries("[]") == {}


def test_only_an_entry_naming_another_mac_is_fixed():
    mine = Address("172.17.0.3", "02:42:ac:11:00:03", "docker0")
    stale = {"docker0": {"172.17.0.3": "0a:6e:00:00:00:01"}}
    assert fixes([mine], stale) == [Fix("172.17.0.3", "docker0", "0a:6e:00:00:00:01",
                                        "02:42:ac:11:00:03")]
    assert fixes([mine], {"docker0": {"172.17.0.3": "02:42:ac:11:00:03"}}) == []  # right
    assert fixes([mine], {"docker0": {}}) == []  # no entry: the kernel asks the wire
    assert fixes([mine], {"br-x": stale["docker0"]}) == []  # another bridge's entry
    assert fixes([mine], {}) == []  # the bridge could not be read: nothing decided
    v6 = Address("fd00::3", "0a:6e:00:00:00:02", "docker0")
    assert fixes([v6], {"docker0": {"fd00::3": "0a:6e:00:00:00:01"}}) == [
        Fix("fd00::3", "docker0", "0a:6e:00:00:00:01", "0a:6e:00:00:00:02")]


def test_a_removed_container_leaves_only_the_entries_that_still_name_its_mac():
    gone = [Address("172.17.0.3", "0a:6e:00:00:00:01", "docker0"),
            Address("fd00::3", "0a:6e:00:00:00:01", "docker0")]
    assert leftovers(gone, {"docker0": {"172.17.0.3": "0a:6e:00:00:00:01",
                                        "fd00::3": "0a:6e:00:00:00:01"}}) == gone
    # another container answers for the address already: its entry is right, kept
    assert leftovers(gone, {"docker0": {"172.17.0.3": "02:42:ac:11:00:03"}}) == []
    assert leftovers(gone, {"docker0": {}}) == [] and leftovers(gone, {}) == []


def test_summary_names_each_entry_replaced():
    assert summary([]) == ""
    assert summary([Fix("172.17.0.3", "docker0", "0a:00:00:00:00:01", "02:42:ac:11:00:03")]) \
        == "; host neighbour entry 172.17.0.3 on docker0 0a:00:00:00:00:01 → 02:42:ac:11:00:03"


def test_an_engine_over_tcp_is_not_taken_to_share_this_namespace():
    api = docker.APIClient(base_url="tcp://127.0.0.1:1", version="1.41")
    assert "not reached over a local unix socket" in engine_namespace_problem(api)


def _serve(tmp_path, prefix: list[str]):
    path = tmp_path / "engine.sock"
    server = subprocess.Popen(prefix + [sys.executable, "-c", (
        "import socket,sys,time\n"
        "s=socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(4)\n"
        "time.sleep(60)\n"), str(path)])
    deadline = time.monotonic() + 10
    while not path.exists():
        assert server.poll() is None and time.monotonic() < deadline, "listener did not start"
        time.sleep(0.05)
    return server, docker.APIClient(base_url=f"unix://{path}", version="1.41")


def test_a_socket_served_from_this_namespace_is_ours(tmp_path):
    server, api = _serve(tmp_path, [])
    try:
        assert engine_namespace_problem(api) is None
    finally:
        server.kill()
        server.wait()


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                    reason="needs root and unshare(1) for a network namespace")
def test_a_socket_served_from_another_network_namespace_is_not_ours(tmp_path):
    server, api = _serve(tmp_path, ["unshare", "-n"])
    try:
        problem = engine_namespace_problem(api)
        assert problem is not None and "another network namespace" in problem
        assert f"pid {server.pid}" in problem
    finally:
        server.kill()
        server.wait()
    gone = tmp_path / "gone.sock"
    assert "cannot tell" in engine_namespace_problem(
        docker.APIClient(base_url=f"unix://{gone}", version="1.41"))
