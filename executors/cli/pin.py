"""`mesh pin DIR [--refresh [ARTIFACT]]`: record what each upstream tag points at, by digest.

Asks each artifact's registry what its tag points at now (a manifest HEAD; nothing is pulled)
and records "repository:tag" → digest in the ledger. A tag already pinned is not asked about
again unless --refresh names it (or names nothing: every tag), so pins never move by themselves.
After a refresh it lists every container the moved pins change. Exit codes: 0 every tag pinned,
1 some tag could not be resolved (each printed as file:line:col; the others are still recorded),
2 bad input.
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional, TextIO

from executors.cli._verb import Subparsers
from executors.control.loading import load_mesh_dir
from executors.control.pinning import EVERYTHING, pin
from executors.control.registry import RegistryClient
from executors.control.trust import push_auth, registry_trust


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "pin",
        help="resolve each upstream artifact's tag to a digest and record it in the ledger",
        description="For every artifact named by repository and tag, ask its registry what the "
        "tag points at (nothing is pulled) and record the digest in the ledger. Existing pins "
        "never change unless --refresh names them.",
    )
    parser.add_argument("directory", nargs="?", default=".", metavar="DIR",
                        help="the mesh directory holding mesh.yaml (default: .)")
    parser.add_argument("--refresh", nargs="?", const=EVERYTHING, metavar="ARTIFACT",
                        help="ask again about pinned tags: all of them, or one ARTIFACT "
                        "(module/artifact or repository:tag)")
    parser.add_argument("--all", action="store_true",
                        help="pin every artifact of the catalogue, not only those the mesh runs")
    parser.add_argument("--key", metavar="FILE",
                        help="the control node's private key: opens the mesh registry's push "
                        "account (sealed to the control node), sent to that registry alone")
    parser.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                        help="per-request timeout (default 10)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, out: Optional[TextIO] = None,
        client: Optional[RegistryClient] = None) -> int:
    out = out or sys.stdout
    directory: str = args.directory
    timeout: float = args.timeout
    key: Optional[str] = args.key
    refresh: Optional[str] = args.refresh
    every_artifact: bool = args.all
    inputs = load_mesh_dir(directory)
    pinned = pin(inputs, client=client or RegistryClient(
        timeout=(timeout, timeout), trust=registry_trust(inputs), auth=push_auth(inputs, key)),
                 refresh=refresh, every_artifact=every_artifact,
                 say=lambda line: print(line, file=out, flush=True))
    if not pinned.asked:
        print(f"nothing to pin: every tag of {len(pinned.wanted)} artifacts is pinned "
              "(--refresh asks the registries again)", file=out)
        return 0
    if pinned.moved:
        print(f"{len(pinned.changed)} container{'s' if len(pinned.changed) != 1 else ''} change "
              f"because pins moved ({', '.join(pinned.moved)}):", file=out)
        for container in pinned.changed:
            print(f"  {container}", file=out)
    if pinned.failures:
        print(f"{pinned.failures} tag{'s' if pinned.failures != 1 else ''} could not be pinned",
              file=out)
        return 1
    return 0
