"""`mesh check DIR`: load and validate a mesh directory, then resolve it and list its problems.

Exit codes: 0 everything loads and resolves without an error-severity problem (warnings are
printed and do not fail it); 1 the documents load but the resolver states an error (each
problem printed as `file:line:col: error [code] message`); 2 a document is malformed (every
fault printed, by cli.py). Then every certificate of the mesh expired or inside the CA's
renewal window at this moment (resolver.certificates.certificates_due; `now` is the only
thing this verb adds), each with what to run: a reminder, it does not fail the check.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from typing import Iterable, Optional, TextIO

import resolver
from resolver import Problem
from resolver.certificates import CertificateKind, DueCertificate, certificates_due

from executors.cli._verb import Subparsers
from executors.control.loading import load_mesh_dir

DESCRIPTION = """\
Load mesh.yaml, the catalogue it names and the ledger; print every fault as file:line:col
(exit 2). Then resolve and print every problem, errors and warnings, as
`file:line:col: error|warning [code] message`. Errors fail the check (exit 1): a refusal of
an instance (unknown-module, unknown-node, unknown-provision, no-provider,
ambiguous-provider, port-conflict, unpinned-artifact, ...), and a default or substrate that
names no instance (unknown-default). Warnings do not (missing-public-key, an optional
requirement left unbound, a refused instance held at its last good declaration: held). The
last line names the codes on each side; OK when no error. Before it, each certificate
(a node's, or an instance's TLS server certificate such as the registry's) that is expired or
inside the CA's renewal window (`ca.renew-before-days` in mesh.yaml) is listed with its node,
its expiry date and the `mesh renew DIR NODE` that signs it anew; that does not fail the
check."""


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "check",
        help="load and validate a mesh directory (mesh.yaml, its catalogue, its ledger)",
        description=DESCRIPTION,
    )
    parser.add_argument("directory", nargs="?", default=".", metavar="DIR",
                        help="the mesh directory holding mesh.yaml (default: .)")
    parser.set_defaults(func=run)


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'s' if n != 1 else ''}"


def _codes(problems: Iterable[Problem]) -> str:
    return ", ".join(sorted({p.code for p in problems}))


def now_iso() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def due_line(due: DueCertificate, directory: str) -> str:
    """One line for a certificate expired or inside its renewal window, with what to run."""
    what = (f"the certificate of node {due.node}" if due.kind is CertificateKind.NODE
            else f"the TLS server certificate of {due.name} on node {due.node}")
    when = (f"expired {due.not_after}" if due.expired else
            f"expires {due.not_after}, inside the {due.renew_before_days}-day renewal window")
    return f"certificate: {what} (serial {due.serial}) {when}: run `mesh renew {directory} " \
        f"{due.node}`"


def run(args: argparse.Namespace, out: Optional[TextIO] = None) -> int:
    out = out or sys.stdout
    directory: str = args.directory
    inputs = load_mesh_dir(directory)  # InputError → every fault printed, exit 2 (cli.py)
    resolution = resolver.resolve_inputs(inputs)
    for due in certificates_due(inputs.mesh, inputs.ledger, now_iso()):
        print(due_line(due, directory), file=out)
    errors = [p for p in resolution.problems if p.severity == "error"]
    warnings = [p for p in resolution.problems if p.severity == "warning"]
    for problem in errors + warnings:  # one line each, whatever the documents held
        print(resolver.one_line(f"{problem.seen_at}: {problem.severity} [{problem.code}] "
                                f"{problem.message}"), file=out)
    warned = ""
    if warnings:
        warned = (f"{_count(len(warnings), 'warning')} ({_codes(warnings)}) "
                  f"{'does' if len(warnings) == 1 else 'do'} not fail the check")
    if errors:
        print(f"{_count(len(errors), 'error')} ({_codes(errors)}) "
              f"{'fails' if len(errors) == 1 else 'fail'} the check"
              + (f"; {warned}" if warned else ""), file=out)
        return 1
    mesh = inputs.mesh
    print(f"OK: {len(mesh.nodes)} nodes, {len(mesh.instances)} instances, "
          f"{len(inputs.catalogue.modules)} modules" + (f"; {warned}" if warned else ""),
          file=out)
    return 0
