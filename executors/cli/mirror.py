"""`mesh mirror DIR [--registry HOST:PORT]`: copy pinned images into the mesh's own registry.

Registry to registry over the HTTP API, by digest: manifests (an index and every manifest it
lists) and blobs move as exact bytes, so the digest at the mesh's registry is the pinned one;
no Docker Engine is needed. Each copied digest is recorded in the ledger (`mirrored`: digest →
registry address), which is what lets declarations name the mesh's registry (self-hosting).
Artifacts marked `mirror: false` and built artifacts are not copied. The target is the mesh's
artifact-store instance unless --registry names one. Exit codes: 0 everything is mirrored,
1 something could not be (printed as file:line:col; the rest is still recorded), 2 bad input.
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional, TextIO

from executors.cli._verb import Subparsers
from executors.control.loading import load_mesh_dir
from executors.control.mirroring import mirror
from executors.control.registry import RegistryClient
from executors.control.trust import push_auth, registry_trust


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "mirror",
        help="copy every pinned image into the mesh's own registry, by digest",
        description="Copy each pinned upstream image the mesh runs into the mesh's registry "
        "(its artifact-store instance, or --registry) at the same digest, and record it in the "
        "ledger. Nothing goes through a Docker Engine.",
    )
    parser.add_argument("directory", nargs="?", default=".", metavar="DIR",
                        help="the mesh directory holding mesh.yaml (default: .)")
    parser.add_argument("--registry", metavar="HOST:PORT",
                        help="the registry to copy into (default: the mesh's artifact-store instance)")
    parser.add_argument("--all", action="store_true",
                        help="mirror every pinned artifact of the catalogue, not only those the mesh runs")
    parser.add_argument("--key", metavar="FILE",
                        help="the control node's private key: opens the mesh registry's push "
                        "account (sealed to the control node), sent to that registry alone")
    parser.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS",
                        help="per-request timeout (default 30)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, out: Optional[TextIO] = None,
        client: Optional[RegistryClient] = None) -> int:
    out = out or sys.stdout
    directory: str = args.directory
    timeout: float = args.timeout
    key: Optional[str] = args.key
    registry: Optional[str] = args.registry
    every_artifact: bool = args.all
    inputs = load_mesh_dir(directory)
    done = mirror(inputs, client=client or RegistryClient(
        timeout=(timeout, timeout), trust=registry_trust(inputs), auth=push_auth(inputs, key)),
                  registry=registry, every_artifact=every_artifact,
                  say=lambda line: print(line, file=out, flush=True))
    print(f"artifacts: {done.state}" + ("" if done.registry_of_mesh == done.target else
                                        f" (the mesh's own registry is "
                                        f"{done.registry_of_mesh or 'not assigned'}, not "
                                        f"{done.target})"), file=out)
    if done.failures:
        print(f"{done.failures} artifact{'s' if done.failures != 1 else ''} could not be "
              "mirrored", file=out)
        return 1
    return 0
