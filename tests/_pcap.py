"""A packet capture on a test segment, and a search of it for secret values.

`Capture(topology)` runs tcpdump on the bridge of a tests/_netns.py topology (inside its
"switch" namespace: the bridge in promiscuous mode sees every frame it forwards between the
machines, the host side's included), writing whole packets to a pcap file. `scan(pcap, values)`
searches what crossed for each value: every packet's payload (TCP and UDP, IPv4 and IPv6), the
payload of each TCP direction reassembled in sequence order (a value split over two segments
is still found), and the raw file. It returns counts only, never a value, so a failing test can
say "found in N packets" with the value's label and print nothing secret.

Invariants:
- Nothing runs in the root namespace: tcpdump is started through `nsenter --net` into the
  switch namespace and stopped by its own process id.
- The parser reads the classic pcap format tcpdump writes with `-w` (Ethernet link type); a
  file in another format is an error, never an empty (and so passing) scan.
"""

from __future__ import annotations

import shutil
import signal
import socket
import struct
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional

ETHERNET = 1


def missing() -> Optional[str]:
    """Why a capture cannot run here, or None."""
    if shutil.which("tcpdump") is None:
        return "tcpdump is not installed (apt package tcpdump; scripts/services.sh installs it)"
    return None


class Capture:
    """tcpdump on the topology's bridge, from start() to stop()."""

    def __init__(self, topology: Any, path: Path):  # tests/_netns.Topology
        self.topology, self.path = topology, path
        self.process: Optional[subprocess.Popen[bytes]] = None
        self.summary = ""

    def start(self) -> "Capture":
        log = open(self.path.with_suffix(".log"), "w")
        # -U: each packet written as it comes; -s 0: whole packets; -Z root: keep writing into
        # pytest's root-only directory; -n: no name lookups on the way
        self.process = subprocess.Popen(
            self.topology.argv(self.topology.switch, "tcpdump", "-i", "br0", "-U", "-s", "0",
                               "-n", "-Z", "root", "-w", str(self.path)),
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()
        deadline = time.monotonic() + 20
        while "listening on br0" not in self.path.with_suffix(".log").read_text():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("tcpdump did not start:\n"
                                   + self.path.with_suffix(".log").read_text())
            time.sleep(0.1)
        return self

    def stop(self) -> bytes:
        """The capture's bytes (tcpdump stopped, its buffer written)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
        log = self.path.with_suffix(".log")
        self.summary = " ".join(log.read_text().split()[-12:]) if log.exists() else ""
        return self.path.read_bytes() if self.path.exists() else b""


@dataclass
class Packets:
    """What a capture holds: each packet's transport payload and each TCP direction's bytes."""

    payloads: list[bytes] = field(default_factory=list)
    streams: dict[tuple[bytes, bytes, bytes], dict[int, bytes]] = field(default_factory=dict)
    count: int = 0

    def reassembled(self) -> list[bytes]:
        joined = []
        for segments in self.streams.values():
            first = min(segments)
            data, end = bytearray(), None
            for seq in sorted(segments, key=lambda s: (s - first) % 2 ** 32):
                offset = (seq - first) % 2 ** 32
                chunk = segments[seq]
                if end is not None and offset < end:  # overlap: a retransmission's repeat
                    chunk = chunk[end - offset:]
                data += chunk
                end = max(end or 0, offset + len(segments[seq]))
            joined.append(bytes(data))
        return joined


def parse(pcap: bytes) -> Packets:
    if len(pcap) < 24:
        raise ValueError("not a pcap file: shorter than its header")
    magic = pcap[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        order = "<"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        order = ">"
    else:
        raise ValueError(f"not a classic pcap file (magic {magic.hex()})")
    (linktype,) = struct.unpack(order + "I", pcap[20:24])
    if linktype != ETHERNET:
        raise ValueError(f"pcap link type {linktype}, not Ethernet")
    found = Packets()
    at = 24
    while at + 16 <= len(pcap):
        _, _, length, _ = struct.unpack(order + "IIII", pcap[at:at + 16])
        frame = pcap[at + 16:at + 16 + length]
        at += 16 + length
        found.count += 1
        _transport(frame, found)
    return found


def _transport(frame: bytes, found: Packets) -> None:
    ethertype, at = struct.unpack("!H", frame[12:14])[0], 14
    while ethertype == 0x8100 and len(frame) >= at + 4:  # VLAN tags
        ethertype, at = struct.unpack("!H", frame[at + 2:at + 4])[0], at + 4
    if ethertype == 0x0800 and len(frame) >= at + 20:
        header = (frame[at] & 0x0F) * 4
        total = struct.unpack("!H", frame[at + 2:at + 4])[0]
        protocol, source, target = frame[at + 9], frame[at + 12:at + 16], frame[at + 16:at + 20]
        body = frame[at + header:at + total]
    elif ethertype == 0x86DD and len(frame) >= at + 40:
        total = struct.unpack("!H", frame[at + 4:at + 6])[0]
        protocol, source, target = frame[at + 6], frame[at + 8:at + 24], frame[at + 24:at + 40]
        body = frame[at + 40:at + 40 + total]  # extension headers are not used on the segment
    else:
        found.payloads.append(frame[at:])  # ARP and the like: searched as they are
        return
    if protocol == 6 and len(body) >= 20:
        ports = body[:4]
        seq = struct.unpack("!I", body[4:8])[0]
        payload = body[(body[12] >> 4) * 4:]
        found.payloads.append(payload)
        if payload:
            found.streams.setdefault((source, target, ports), {}).setdefault(seq, payload)
    elif protocol == 17 and len(body) >= 8:
        found.payloads.append(body[8:])
    else:
        found.payloads.append(body)


@dataclass(frozen=True)
class Finding:
    packets: int  # packets whose payload holds the value whole
    streams: int  # TCP directions whose reassembled bytes hold it
    in_file: bool  # anywhere in the capture file's bytes

    @property
    def found(self) -> bool:
        return bool(self.packets or self.streams or self.in_file)

    def __str__(self) -> str:
        return (f"found in {self.packets} packets, {self.streams} TCP streams"
                + (", the raw capture" if self.in_file else "")) if self.found else "not found"


def tcp_bytes(pcap: bytes, source: str, target: str, port: int) -> int:
    """Payload bytes the capture holds from IPv4 `source` to `target`'s TCP `port`: what shows
    it saw that path at all."""
    wanted = (socket.inet_aton(source), socket.inet_aton(target))
    return sum(len(chunk) for (src, dst, ports), segments in parse(pcap).streams.items()
               if (src, dst) == wanted and struct.unpack("!H", ports[2:4])[0] == port
               for chunk in segments.values())


def scan(pcap: bytes, values: Mapping[str, str]) -> dict[str, Finding]:
    """label → where its value was found in the capture (never the value)."""
    packets = parse(pcap)
    streams = packets.reassembled()
    findings = {}
    for label, value in values.items():
        needle = value.encode()
        findings[label] = Finding(sum(needle in p for p in packets.payloads),
                                  sum(needle in s for s in streams), needle in pcap)
    return findings
