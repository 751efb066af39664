"""`mesh verify DECLARATION [--json] [--secrets FILE --key FILE]`: check every binding for real.

Each binding is checked from where its consumer runs: inside the network namespace of each
of the consumer's containers on this node, found through the Docker Engine (`--docker-host`),
so the firewall, routes and addresses are the ones the container has. Needs root (setns).

Exit codes: 0 every binding ok (or the node's instances require nothing); 1 any binding, or
any provider's admin on this node, or any registry account of this node (logged in through
the node's Docker Engine, so its TLS trust and network are the ones its pulls use), is
unreachable, auth-failed, missing-resource or
not-yet-provisioned; 2 bad input. A binding of a grant kind the mesh has no provisioner for is
`not-provisioned`, a warning that does not change the exit code.
Human output: one line per binding (and per instance that requires nothing) on stdout;
`--json` prints {"mesh", "node", "ok", "results": [...]} instead. Secret values come from the
same `--secrets`/`--key` pair as `mesh apply` and are never printed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Optional, TextIO

from executors.cli._verb import Subparsers
from executors.node.apply.runner import load_declaration, secret_source_from
from executors.node.node_paths import FILE_ROOT_ENV, default_file_root
from executors.node.verify.check import engine_client, engine_locator, verify_declaration


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "verify",
        help="check, from inside each consumer's containers, that every binding really works",
        description="For each binding of the declaration: from inside the network namespace "
        "of each of the consumer's running containers, connect to the announced host and "
        "port, log in with the consumer's current credential and check its database or vhost "
        "(a tool server: MCP initialize and tools/list with the consumer's token, and a token "
        "that is no one's refused). "
        "One result per binding: ok, unreachable (naming the consumer and its container), "
        "auth-failed, missing-resource, not-yet-provisioned, or not-provisioned (a grant kind "
        "the mesh has no provisioner for: a warning). For each provider on this node with an "
        "admin credential, one result: does its running server accept it (auth-failed names "
        "the generations tried). Instances with neither say they require nothing. A consumer "
        "the declaration runs no container for is checked from this node, and the result says "
        "so. For each registry account the declaration gives this node (its pull account on the "
        "mesh's registry), the node's Docker Engine logs in to the registry with it: ok, "
        "auth-failed or unreachable (TLS, firewall, registry down), said like a binding. "
        "A TLS binding (postgres verify-full, amqps) is checked as its consumer connects: the "
        "provider's certificate verified against the mesh CA the node holds at "
        "/etc/mesh/ca/ca.crt (under --file-root); a certificate from another CA fails it. "
        "Run as root on the consumer's node.",
    )
    parser.add_argument("declaration", help="the node's declaration (YAML or JSON)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--secrets", metavar="FILE",
                        help="the ledger (or an extract of it) holding values sealed to this node")
    parser.add_argument("--key", metavar="FILE", help="this node's private key file")
    parser.add_argument("--timeout", type=float, default=5.0, metavar="SECONDS",
                        help="per connection attempt (default 5)")
    parser.add_argument("--docker-host", default=os.environ.get("DOCKER_HOST"),
                        help="Docker Engine running the consumers' containers (default: "
                        "$DOCKER_HOST or the local socket)")
    parser.add_argument("--file-root", default=default_file_root(), metavar="DIR",
                        help=f"where `mesh apply` wrote the declaration's files, the mesh CA's "
                        f"certificate among them (default: ${FILE_ROOT_ENV} or /)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, out: Optional[TextIO] = None) -> int:
    out = out or sys.stdout
    declaration = load_declaration(args.declaration)
    secret_source = secret_source_from(args.secrets, args.key, declaration.node)
    engine = engine_client(args.docker_host)
    results = verify_declaration(declaration, secret_source, timeout=args.timeout,
                                 locate=engine_locator(args.docker_host, engine), engine=engine,
                                 file_root=args.file_root)
    ok = all(r.ok for r in results)
    if args.json:
        json.dump({"mesh": declaration.mesh, "node": declaration.node, "ok": ok,
                   "results": [r.to_json() for r in results]}, out, indent=2, sort_keys=True)
        out.write("\n")
    else:
        for r in results:
            edge = (f"{r.consumer} {r.requirement} → {r.provider}" if r.requirement
                    else r.consumer)
            print(f"{r.status:<19} {edge}: {r.message}", file=out)
        bad = sum(not r.ok for r in results)
        warned = sum(r.warning for r in results)
        print(f"node {declaration.node}: {len(results) - bad - warned} ok, {bad} not ok"
              + (f", {warned} not provisioned by the mesh (warning)" if warned else ""), file=out)
    return 0 if ok else 1
