"""The host's neighbour (ARP/NDP) entries for a container just started: made to agree with the
container's MAC on its network's bridge.

Why: the mesh gives same-node consumers' containers a fixed MAC (the firewall lets them in by
it). Docker 20.10 otherwise derives a container's MAC from its IP (02:42:<ip>), so a host
neighbour entry for an address stays right when another container takes the address. With
fixed MACs it does not: a container removed, another given its address, and the host keeps
the old MAC for that address until the entry ages out (10–45 s), so connections through a
published port (docker-proxy or DNAT on the host) go nowhere meanwhile.

Invariants:
- Deciding is pure (`bridge_of`, `fixed_mac`, `container_addresses`, `parse_entries`, `fixes`,
  `leftovers`), tested with data; the impure part is `align` (after a start: one inspect per
  network, one `ip -j neigh show` per bridge and one `ip neigh replace` per stale entry) and
  `forget` (after a removal: the entries still naming the removed container's MAC are
  deleted, so a container created later by anyone, the mesh or not, is asked for).
- Only an entry that exists and names another MAC is changed, and it is replaced by the
  container's own MAC in state `reachable` (never `permanent`: the kernel ages it out as
  usual). No entry, or the right one: nothing is done.
- The bridge is touched only when it is known to be the Engine's: the Engine is reached over a
  local unix socket, and the process listening on it is in this process's network namespace
  (SO_PEERCRED, then /proc/PID/ns/net). Otherwise nothing is touched and the reason is
  returned, so an apply driving an Engine elsewhere (another namespace, another machine) never
  rewrites a bridge of the same name that is not the container's.
- `align` never raises: what it could not do is returned as problems, for the caller to report.
- `HostNeighbours` is what `mesh apply` (execute.py) calls around each container it removes
  and starts: it asks the Engine's namespace once per apply and says every problem.
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import struct
import subprocess
from typing import Any, Iterable, Mapping, Optional, Sequence

import attrs
import docker
from docker.errors import NotFound

from executors.common.report import Operation, Report

IP_COMMAND = "ip"  # iproute2
BRIDGE_NAME_OPTION = "com.docker.network.bridge.name"
USER_BRIDGE_PREFIX = "br-"  # a user-defined bridge network's interface: br-<first 12 of its ID>
COMMAND_TIMEOUT = 10


@attrs.frozen
class Address:
    """One address a container has on a bridge, with the MAC it answers with there."""
    ip: str
    mac: str
    bridge: str


@attrs.frozen
class Fix:
    """A host neighbour entry that names another MAC than the container's."""
    ip: str
    bridge: str
    was: str
    mac: str


# --------------------------------------------------------------------------- pure


def bridge_of(network: Mapping[str, Any]) -> Optional[str]:
    """The Linux interface of a Docker network (its inspect data), None unless a bridge."""
    if network.get("Driver") != "bridge":
        return None
    named = (network.get("Options") or {}).get(BRIDGE_NAME_OPTION)
    if named:
        return str(named)
    identifier = str(network.get("Id") or "")
    return USER_BRIDGE_PREFIX + identifier[:12] if identifier else None


def fixed_mac(inspect: Mapping[str, Any]) -> Optional[str]:
    """The MAC a container was created with (`mac_address`), from its inspect data; None when
    Docker derives it."""
    return (inspect.get("Config") or {}).get("MacAddress") or None


def container_addresses(inspect: Mapping[str, Any], bridges: Mapping[str, Optional[str]]) -> list[Address]:
    """Each (address, MAC, bridge) of a container (its inspect data); `bridges` maps a network
    ID to its interface (None: not a bridge). IPv4 and global IPv6 addresses alike."""
    networks = (inspect.get("NetworkSettings") or {}).get("Networks") or {}
    found = []
    for name in sorted(networks):
        network = networks[name] or {}
        bridge = bridges.get(network.get("NetworkID") or "")
        mac = (network.get("MacAddress") or "").lower()
        if not bridge or not mac:
            continue
        for key in ("IPAddress", "GlobalIPv6Address"):
            if network.get(key):
                found.append(Address(str(network[key]), mac, bridge))
    return found


def _canonical(ip: str) -> str:
    try:
        return str(ipaddress.ip_address(ip))
    except ValueError:
        return ip


def parse_entries(text: str) -> dict[str, str]:
    """`ip -j neigh show dev BRIDGE` → address → MAC, for the entries that carry a MAC (an
    INCOMPLETE or FAILED entry has none, and a new resolution asks the wire anyway)."""
    entries = {}
    for entry in json.loads(text or "[]"):
        if entry.get("dst") and entry.get("lladdr"):
            entries[_canonical(entry["dst"])] = str(entry["lladdr"]).lower()
    return entries


def fixes(addresses: Iterable[Address], entries: Mapping[str, Mapping[str, str]]) -> list[Fix]:
    """The entries to replace: those present on the address's bridge (`entries`: bridge →
    address → MAC) naming another MAC than the container's."""
    wanted = []
    for address in addresses:
        was = entries.get(address.bridge, {}).get(_canonical(address.ip))
        if was is not None and was != address.mac:
            wanted.append(Fix(address.ip, address.bridge, was, address.mac))
    return wanted


def leftovers(addresses: Iterable[Address],
              entries: Mapping[str, Mapping[str, str]]) -> list[Address]:
    """The entries a removed container leaves: those on its bridges that still name its MAC
    for its addresses (whoever is given the address next must be asked for, not assumed)."""
    return [a for a in addresses
            if entries.get(a.bridge, {}).get(_canonical(a.ip)) == a.mac]


def describe(fix: Fix) -> str:
    return (f"host neighbour entry for {fix.ip} on {fix.bridge} named {fix.was} (a container "
            f"that had this address); replaced with the container's {fix.mac}")


# --------------------------------------------------------------------------- impure


def _engine_socket(api: docker.APIClient) -> Optional[str]:
    """The path of the unix socket `api` reaches the Engine over, None for any other transport."""
    try:
        return getattr(api.get_adapter(api.base_url), "socket_path", None)
    except Exception:  # noqa: BLE001 - no adapter for it: not a unix socket
        return None


def engine_namespace_problem(api: docker.APIClient) -> Optional[str]:
    """None when the Engine's bridges are in this process's network namespace; else why they
    cannot be taken to be (then nothing may be touched)."""
    path = _engine_socket(api)
    if path is None:
        return "the Docker Engine is not reached over a local unix socket"
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.settimeout(COMMAND_TIMEOUT)
            probe.connect(path)
            pid, _, _ = struct.unpack("3i", probe.getsockopt(
                socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
        if pid <= 0:
            return f"the process serving {path} is not in this process's PID namespace"
        theirs, ours = os.stat(f"/proc/{pid}/ns/net"), os.stat("/proc/self/ns/net")
    except OSError as exc:
        return f"cannot tell which network namespace serves {path}: {exc.strerror or exc}"
    if (theirs.st_dev, theirs.st_ino) != (ours.st_dev, ours.st_ino):
        return (f"the Engine at {path} (pid {pid}) runs in another network namespace than "
                "this apply, so its bridges are not this apply's to see")
    return None


def _ip(*arguments: str) -> str:
    done = subprocess.run([IP_COMMAND, *arguments], capture_output=True, text=True,
                          timeout=COMMAND_TIMEOUT, check=False)
    if done.returncode != 0:
        raise OSError(f"`{IP_COMMAND} {' '.join(arguments)}` exited {done.returncode}: "
                      f"{done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


def inspected(api: docker.APIClient, name: str) -> tuple[Optional[Mapping[str, Any]], list[str]]:
    """Container `name`'s inspect data (None when there is no such container), or the
    problem. Never raises."""
    try:
        return api.inspect_container(name), []
    except NotFound:
        return None, []
    except Exception as exc:  # noqa: BLE001 - the Engine's fault is reported, never raised
        return None, [_not_inspected(name, exc)]


def addresses_of(api: docker.APIClient, name: str, inspect: Optional[Mapping[str, Any]]) -> tuple[list[Address], list[str]]:
    """Container `name`'s addresses on bridges, from its inspect data (one inspect per
    network), or the problem. Never raises; no container is no addresses."""
    if inspect is None:
        return [], []
    networks = (inspect.get("NetworkSettings") or {}).get("Networks") or {}
    bridges = {}
    try:
        for network in networks.values():
            identifier = (network or {}).get("NetworkID")
            if identifier and identifier not in bridges:
                bridges[identifier] = bridge_of(api.inspect_network(identifier))
    except NotFound:
        return [], []
    except Exception as exc:  # noqa: BLE001 - the Engine's fault is reported, never raised
        return [], [_not_inspected(name, exc)]
    return container_addresses(inspect, bridges), []


def _not_inspected(name: str, exc: BaseException) -> str:
    return f"neighbour entries not checked: cannot inspect {name} or its networks: {exc}"


def _entries(addresses: Sequence[Address]) -> tuple[dict[str, dict[str, str]], list[str]]:
    entries: dict[str, dict[str, str]] = {}
    problems: list[str] = []
    for bridge in sorted({a.bridge for a in addresses}):
        try:
            entries[bridge] = parse_entries(_ip("-j", "neigh", "show", "dev", bridge))
        except (OSError, ValueError, subprocess.SubprocessError) as exc:
            problems.append(f"neighbour entries on {bridge} not checked: {_reason(exc)}")
    return entries, problems


def forget(addresses: Sequence[Address]) -> tuple[list[Address], list[str]]:
    """After a container is removed: delete the host's entries that still name its MAC for
    the `addresses` it had (taken before removal): (the entries deleted, the problems met).
    Call it only when `engine_namespace_problem` found none. Never raises."""
    entries, problems = _entries(addresses)
    done = []
    for address in leftovers(addresses, entries):
        try:
            _ip("neigh", "del", address.ip, "dev", address.bridge)
            done.append(address)
        except (OSError, subprocess.SubprocessError) as exc:
            problems.append(f"host neighbour entry for {address.ip} on {address.bridge} still "
                            f"names the removed container's {address.mac}: {_reason(exc)}")
    return done, problems


def align(api: docker.APIClient, name: str) -> tuple[list[Fix], list[str]]:
    """Make the host's neighbour entries for container `name`'s addresses name its MAC:
    (the entries replaced, the problems met). Call it only when `engine_namespace_problem`
    found none. Never raises."""
    inspect, problems = inspected(api, name)
    if not problems:
        addresses, problems = addresses_of(api, name, inspect)
    if problems:
        return [], problems
    entries, problems = _entries(addresses)
    done = []
    for fix in fixes(addresses, entries):
        try:
            _ip("neigh", "replace", fix.ip, "lladdr", fix.mac, "dev", fix.bridge,
                "nud", "reachable")
            done.append(fix)
        except (OSError, subprocess.SubprocessError) as exc:
            problems.append(f"host neighbour entry for {fix.ip} on {fix.bridge} still names "
                            f"{fix.was}, not {fix.mac}: {_reason(exc)}")
    return done, problems


def _reason(exc: BaseException) -> str:
    if isinstance(exc, FileNotFoundError):
        return f"`{IP_COMMAND}` (iproute2) is not installed"
    return str(exc)


def summary(fixed: Sequence[Fix]) -> str:
    """What an operation's result adds for the entries replaced ("" for none)."""
    return "".join(f"; host neighbour entry {f.ip} on {f.bridge} {f.was} → {f.mac}"
                   for f in fixed)


def consequence(problems: Sequence[str]) -> str:
    return ("; ".join(problems) + " (connections through its published ports may go nowhere "
            "until the host's entry ages out, up to about 45 s)")


# --------------------------------------------------------------------------- in an apply


@attrs.frozen
class Leaving:
    """A container about to be removed: whether it had a fixed MAC, and its addresses (taken
    before removal; none when the bridges are not this apply's to touch)."""
    name: str
    fixed: bool
    addresses: list[Address]
    problems: list[str]


@attrs.define
class HostNeighbours:
    """One apply's keeper of the host's neighbour entries (what `mesh apply` calls around each
    container it starts or removes). What cannot be done is said, never silent, and fails
    nothing: a notice when a fixed MAC is involved (the declaration gives containers one, or
    the container removed had one: the case that makes entries stale), a progress line
    otherwise. The Engine's namespace is asked once per apply and its problem said once (again
    as a notice if it first came as a progress line and a fixed MAC is involved later)."""

    api: docker.APIClient
    report: Report
    declared_fixed: bool  # the declaration gives some container a fixed MAC
    problem: Optional[str] = None  # why the Engine's bridges are not ours ("": they are)
    said: str = ""  # how that problem was said: "" (not yet), "progress" or "notice"

    def before_removal(self, name: str, operation: Operation) -> Leaving:
        inspect, problems = inspected(self.api, name)  # once: its MAC and its addresses
        fixed = inspect is not None and fixed_mac(inspect) is not None
        if not self._visible(name, operation, fixed):
            return Leaving(name, fixed, [], [])
        if problems:
            return Leaving(name, fixed, [], problems)
        addresses, problems = addresses_of(self.api, name, inspect)
        return Leaving(name, fixed, addresses, problems)

    def after_removal(self, leaving: Leaving, operation: Operation) -> str:
        """Delete the entries still naming the removed container's MAC; what to add to the
        operation's result."""
        forgotten, problems = forget(leaving.addresses) if leaving.addresses else ([], [])
        for address in forgotten:
            self.report.progress(operation, f"host neighbour entry for {address.ip} on "
                                 f"{address.bridge} named the removed {address.mac}; deleted")
        self._say(leaving.name, operation, leaving.problems + problems, leaving.fixed)
        return "".join(f"; host neighbour entry {a.ip} on {a.bridge} {a.mac} deleted"
                       for a in forgotten)

    def after_start(self, name: str, operation: Operation) -> str:
        """Make the entries for the started container's addresses name its MAC; what to add
        to the operation's result (the entries replaced)."""
        if not self._visible(name, operation):
            return ""
        fixed, problems = align(self.api, name)
        for fix in fixed:
            self.report.progress(operation, describe(fix))
        self._say(name, operation, problems)
        return summary(fixed)

    def _visible(self, name: str, operation: Operation, fixed: bool = False) -> bool:
        if self.problem is None:
            self.problem = engine_namespace_problem(self.api) or ""
        if not self.problem:
            return True
        notice = fixed or self.declared_fixed
        if not self.said or (notice and self.said != "notice"):
            self._say(name, operation, [f"neighbour entries not checked for any container of "
                                        f"this apply: {self.problem}"], fixed)
            self.said = "notice" if notice else "progress"
        return False

    def _say(self, name: str, operation: Operation, problems: list[str], fixed: bool = False) -> None:
        if problems and (fixed or self.declared_fixed):
            self.report.notice(name, consequence(problems))
        elif problems:
            self.report.progress(operation, "; ".join(problems))

