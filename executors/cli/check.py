"""`mesh check DIR`: load and validate a mesh directory, then resolve it and list refusals.

Exit codes: 0 everything loads and resolves without an error-severity problem; 1 the
documents load but the resolver refuses something (each problem printed as
`file:line:col: [code] message`); 2 a document is malformed (every fault printed, by cli.py).
"""

from __future__ import annotations

import sys

import resolver
from executors.control.loading import load_mesh_dir


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "check",
        help="load and validate a mesh directory (mesh.yaml, its catalogue, its ledger)",
        description="Load mesh.yaml, the catalogue it names and the ledger; print every fault "
        "as file:line:col, then resolve and print every refusal, and every refused instance "
        "held at its last good declaration. Prints OK when there is no refusal.",
    )
    parser.add_argument("directory", nargs="?", default=".", metavar="DIR",
                        help="the mesh directory holding mesh.yaml (default: .)")
    parser.set_defaults(func=run)


def run(args, out=None) -> int:
    out = out or sys.stdout
    inputs = load_mesh_dir(args.directory)  # InputError → every fault printed, exit 2 (cli.py)
    resolve = getattr(resolver, "resolve", None)
    if resolve is not None:
        resolution = resolve(inputs.catalogue, inputs.mesh, inputs.ledger, sources=inputs.sources)
        errors = [p for p in resolution.problems if p.severity == "error"]
        held = [p for p in resolution.problems if p.code == resolver.HELD]
        for problem in errors + held:  # what a refusal holds is said with it
            print(f"{problem.where}: [{problem.code}] {problem.message}", file=out)
        if errors:
            print(f"{len(errors)} problem{'s' if len(errors) != 1 else ''}", file=out)
            return 1
    mesh = inputs.mesh
    print(f"OK: {len(mesh.nodes)} nodes, {len(mesh.instances)} instances, "
          f"{len(inputs.catalogue.modules)} modules", file=out)
    return 0
