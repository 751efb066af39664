"""`mesh names DIR`: what a LAN needs to resolve the mesh's web names.

Thin: load and resolve as `mesh plan` does, take each named instance and the addresses of the
ingresses routing it from the pure `resolver.picture.name_records`, and print them as a hosts
file, DNS records for a router's zone and dnsmasq `address=` lines (or one of them, with
`--format`). A name no ingress routes is printed as a comment. Exit 0; 2 for bad input.
"""

from __future__ import annotations

import argparse
import ipaddress
import sys

import resolver
from resolver.picture import NameRecord, name_records

from executors.cli._verb import Subparsers
from executors.common.runtime import now_iso, resolving
from executors.control.loading import load_mesh_dir

FORMATS = ("all", "hosts", "zone", "dnsmasq")


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "names",
        help="print the mesh's web names: a hosts file and records for a router",
        description="Resolve the mesh in DIR and print every instance's web name "
        "(`name:` in mesh.yaml, in the mesh `domain`) with the addresses of the ingresses "
        "that serve it: as /etc/hosts lines, as DNS records for a router's zone (A, or AAAA "
        "for an IPv6 node), and as dnsmasq address= lines. A name no ingress routes yet is "
        "a comment. Exit 0, 2 for bad input.",
    )
    parser.add_argument("directory", metavar="DIR", help="the mesh directory holding mesh.yaml")
    parser.add_argument("--format", choices=FORMATS, default="all",
                        help="hosts, zone or dnsmasq alone (default: all three, each headed)")
    parser.set_defaults(func=run)


def hosts_lines(records: tuple[NameRecord, ...]) -> list[str]:
    return [f"{address}\t{r.name}" for r in records for address in r.addresses]


def zone_lines(records: tuple[NameRecord, ...]) -> list[str]:
    return [f"{r.name}.\tIN\t{'AAAA' if ipaddress.ip_address(a).version == 6 else 'A'}\t{a}"
            for r in records for a in r.addresses]


def dnsmasq_lines(records: tuple[NameRecord, ...]) -> list[str]:
    return [f"address=/{r.name}/{a}" for r in records for a in r.addresses]


def run(args: argparse.Namespace) -> int:
    directory: str = args.directory
    fmt: str = args.format
    inputs = load_mesh_dir(directory)
    with resolving():
        resolution = resolver.resolve_inputs(inputs, now=now_iso())
    records = name_records(inputs.mesh, resolution.bindings)
    out: list[str] = []
    sections = (("hosts", "# /etc/hosts: each web name at its ingress", hosts_lines),
                ("zone", f"# DNS records for a router (zone {inputs.mesh.domain})", zone_lines),
                ("dnsmasq", "# dnsmasq (a router running it): address= lines", dnsmasq_lines))
    for name, heading, lines in sections:
        if fmt not in ("all", name):
            continue
        if fmt == "all":
            out.append(heading if not out else "\n" + heading)
        out.extend(lines(records))
    for record in records:
        if not record.addresses:
            out.append(f"# {record.name} ({record.instance}): no ingress routes it yet")
    if not records:
        out.append("# no instance has a name (`name:` under an instance in mesh.yaml, "
                   "with a mesh `domain`)")
    sys.stdout.write("\n".join(out) + "\n")
    return 0
