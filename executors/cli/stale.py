"""`mesh stale DIR [--json]`: which built artifacts must be rebuilt, and why.

The build graph is every artifact of the catalogue (so the foundation a mesh was raised from is
in it from the first run), each built artifact pointing at the bases it builds FROM. An artifact
is stale when a base's current digest (its pin, or its last build in the ledger) differs from the
digest recorded when it was built, when it was never built, or when it builds FROM a stale
artifact. Digests are compared, never commits. Exit code 0 whether or not anything is stale
(the answer is the output); 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Optional, TextIO

from resolver.artifacts import build_graph, current_digests, staleness

from executors.cli._verb import Subparsers
from executors.control.loading import load_mesh_dir


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "stale",
        help="list the built artifacts that must be rebuilt because a base's digest changed",
        description="Compare, for each built artifact, the digests its bases had when it was "
        "built (ledger `builds`) with their digests now (pins and builds); list what must be "
        "rebuilt, transitively, with the reason.",
    )
    parser.add_argument("directory", nargs="?", default=".", metavar="DIR",
                        help="the mesh directory holding mesh.yaml (default: .)")
    parser.add_argument("--json", action="store_true", help="print the answer as JSON on stdout")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, out: Optional[TextIO] = None) -> int:
    out = out or sys.stdout
    directory: str = args.directory
    as_json: bool = args.json
    inputs = load_mesh_dir(directory)
    graph = build_graph(inputs.catalogue)
    current = current_digests(inputs.catalogue, inputs.ledger)
    reasons = staleness(graph, inputs.ledger.builds, current)
    if as_json:
        print(json.dumps({
            "stale": sorted(reasons),
            "reasons": dict(sorted(reasons.items())),
            "graph": {name: list(bases) for name, bases in sorted(graph.items())},
            "digests": {name: digest for name, digest in sorted(current.items())},
        }, indent=2), file=out)
        return 0
    built = sorted(name for name, bases in graph.items() if bases or name in inputs.ledger.builds)
    if not reasons:
        print(f"nothing is stale ({len(built)} built artifacts, {len(graph)} artifacts in the graph)", file=out)
        return 0
    print(f"{len(reasons)} of {len(built)} built artifacts must be rebuilt:", file=out)
    for name, reason in sorted(reasons.items()):
        print(f"  {name}: {reason}", file=out)
    return 0
