"""`mesh ca issue-server DIR NAME --address ADDR --out OUT`: a TLS server certificate from the
mesh CA for a server the mesh does not run itself (a broker of the operator's own, which nodes
then verify against the CA their token pinned).

Invariants:
- Writes OUT/NAME.crt (the certificate, then the CA's: the chain a server presents),
  OUT/NAME.key (its fresh private key, 0600, the only copy) and OUT/ca.crt; each whole or not
  at all, never over a file already there (remove them to issue anew).
- Nothing is recorded in the ledger: the operator keeps the key where the server reads it and
  runs the verb again before `ca.validity-days` run out. The private key is never printed.
"""

from __future__ import annotations

import argparse
import ipaddress
import sys
from pathlib import Path
from typing import Optional, TextIO

from resolver import MeshError

from executors.common.atomic import write_atomic, write_exclusive
from executors.control.ca import ca_pem, load_ca, sign_external_server
from executors.control.loading import load_mesh_dir


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = sub.add_parser(
        "issue-server", help="a TLS server certificate from the mesh CA for a server the mesh "
        "does not run (e.g. your own broker): NAME.crt, NAME.key (0600), ca.crt in --out",
        description="Issue a TLS server certificate from the mesh CA for NAME at ADDRESS (its "
        "SubjectAltName: what clients dial) with a fresh ECDSA P-256 key. Nodes and the control "
        "plane verify the broker against the mesh CA: give a broker the mesh does not run this "
        "certificate (RabbitMQ: ssl_options.certfile/keyfile/cacertfile, listeners.ssl). Not "
        "recorded in the ledger; files already there are never overwritten.")
    parser.add_argument("directory", metavar="DIR", help="the mesh directory holding mesh.yaml")
    parser.add_argument("name", metavar="NAME", help="the server's name (CN; the files' stem)")
    parser.add_argument("--address", required=True, metavar="ADDRESS",
                        help="the address clients dial (an IP or a DNS name)")
    parser.add_argument("--out", required=True, metavar="OUT", help="the directory to write to")
    parser.set_defaults(func=run_issue_server)


def run_issue_server(args: argparse.Namespace, out: Optional[TextIO] = None) -> int:
    out = out or sys.stdout
    name: str = args.name
    address: str = args.address
    if not name or "/" in name or name.startswith("."):
        raise MeshError(f"{name!r} is not a server name (a file stem: no '/', no leading '.')")
    try:
        ipaddress.ip_address(address)
    except ValueError:
        if not address or any(c.isspace() or c in "/:@" for c in address):
            raise MeshError(f"--address {address!r} is neither an IP address nor a DNS "
                            f"name") from None
    inputs = load_mesh_dir(args.directory)
    ca = load_ca(inputs.mesh_dir, inputs.mesh)
    target = Path(args.out)
    certificate_path, key_path = target / f"{name}.crt", target / f"{name}.key"
    for path in (certificate_path, key_path):
        if path.exists():
            raise MeshError(f"{path} exists: remove it to issue anew (never overwritten)")
    target.mkdir(parents=True, exist_ok=True)
    certificate, key = sign_external_server(ca, inputs.mesh, name, address)
    try:
        write_exclusive(key_path, key, mode=0o600)
        write_exclusive(certificate_path, certificate + ca_pem(ca), mode=0o644)
    except FileExistsError as exc:
        raise MeshError(f"{exc.filename}: appeared while issuing; nothing overwritten") from None
    write_atomic(target / "ca.crt", ca_pem(ca), mode=0o644)
    print(f"issued {certificate_path} (CN={name}, SAN={address}, valid "
          f"{inputs.mesh.ca.validity_days} days, with the CA certificate after it), "
          f"{key_path} (mode 0600: the only copy of its key) and {target / 'ca.crt'}", file=out)
    return 0
