"""`mesh ca init DIR` creates the mesh CA; `mesh renew DIR NODE` re-signs one node's certificate
and the server certificate of every instance on it that has one (the registry's, with a new key).

Both run on the control node, where the CA key lives (`ca.path` in mesh.yaml, relative to the
mesh directory). Certificates are otherwise signed only by `mesh plan --issue`, for nodes that
have none or whose certificate is inside the renewal window; `renew` is the explicit act. The
ledger is written atomically and the plan says which declaration changes.
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional, TextIO

from resolver.certificates import tls_credential

from executors.cli import ca_issue_server as issue_server
from executors.cli._verb import Subparsers
from executors.control.ca import ca_cert_path, ca_key_path, init_ca
from executors.control.issuer import renew_in_ledger
from executors.control.loading import load_mesh_dir


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "ca", help="the mesh CA: `mesh ca init DIR` creates its Ed25519 key and certificate",
        description="Manage the mesh CA that signs one certificate per node.")
    sub = parser.add_subparsers(dest="ca_command", metavar="ACTION")
    sub.required = True
    init = sub.add_parser("init", help="create the CA key (0600, never overwritten) and its "
                          "self-signed certificate at ca.path in mesh.yaml")
    init.add_argument("directory", metavar="DIR", help="the mesh directory holding mesh.yaml")
    init.set_defaults(func=run_init)
    issue_server.add_parser(sub)

    renew_parser = subparsers.add_parser(
        "renew", help="sign NODE's certificates anew now, whatever their renewal windows",
        description="Re-sign NODE's certificate with the mesh CA, and the TLS server "
        "certificate of every instance on NODE that has one (the mesh's registry, every "
        "instance with a `tls` listen) with a new "
        "key sealed to NODE; record them in the ledger (atomically) and show the declaration "
        "that changes because of it.")
    renew_parser.add_argument("directory", metavar="DIR", help="the mesh directory")
    renew_parser.add_argument("node", metavar="NODE", help="the node to renew")
    renew_parser.set_defaults(func=run_renew)


def run_init(args: argparse.Namespace, out: Optional[TextIO] = None) -> int:
    out = out or sys.stdout
    directory: str = args.directory
    inputs = load_mesh_dir(directory)
    ca = init_ca(inputs.mesh_dir, inputs.mesh)
    print(f"created the mesh CA key {ca_key_path(inputs.mesh_dir, inputs.mesh)} (mode 0600) "
          f"and certificate {ca_cert_path(inputs.mesh_dir, inputs.mesh)}", file=out)
    print(f"  subject: {ca.certificate.subject.rfc4514_string()}", file=out)
    print("  `mesh plan --issue` signs every node's certificate", file=out)
    return 0


def run_renew(args: argparse.Namespace, out: Optional[TextIO] = None) -> int:
    directory: str = args.directory
    node: str = args.node
    out = out or sys.stdout
    kept = renew_in_ledger(directory, node)  # read → renew → write: one ledger transaction
    done = kept.result
    old, new, after = done.old, done.new, done.after
    print(f"renew {node}: certificate serial {old.serial if old else '(none)'} -> "
          f"{new.serial}, valid {new.not_before} .. {new.not_after}", file=out)
    for instance, was, now in done.servers:
        key = after.ledger.credentials[tls_credential(instance)].active
        assert key is not None, instance  # the renewal issued the new key's generation
        print(f"renew {instance}'s server certificate on {node}: serial "
              f"{was.serial if was else '(none)'} -> {now.serial}, valid {now.not_before} .. "
              f"{now.not_after}, a new key ({tls_credential(instance)} generation "
              f"{key.generation}, sealed "
              f"to {node}); `mesh apply` on {node} writes both and restarts "
              f"{instance}", file=out)
    decl_before = done.before.declarations.get(node)
    decl_after = after.declarations.get(node)
    if decl_after is not None:
        digest_before = decl_before.digest if decl_before is not None else "(none)"
        print(f"  declaration of {node} changes: {digest_before} -> {decl_after.digest} "
              f"(serial {decl_after.serial})", file=out)
    print(f"ledger {'written' if kept.written else 'unchanged'}: {kept.ledger_path}",
          file=sys.stderr)
    return 0
