"""`mesh apply DECLARATION... [--dry-run] [--json]`: make this node match its newest declaration.

Exit codes: 0 applied (or nothing newer to apply, or a dry run); 1 refused, a check or an
operation failed (the report says which and why); 2 bad input (every fault as file:line:col).
A grant of a kind the mesh has no provisioner for (bucket+key, client+secret) is a warning:
reported on every apply with its kind, never counted as in force, and the exit code stays 0.
The record `<state root>/.mesh/applied.json` names the new serial only when every phase
succeeded; otherwise it keeps the last good serial and states what failed.
Every step is printed to stderr as it happens; `--json` prints the final report to stdout.
A DECLARATION may be a file (JSON or YAML of resolver.documents.unstructure(declaration)) or a spool
directory of them; of all given, only the newest by serial is applied, the rest are reported
as superseded. Sealed secrets come from `--secrets FILE` (a ledger holding the values sealed
to this node) opened with `--key FILE` (the node's private key).
A stateful instance about to run another image is snapshotted into mesh.yaml's backup target
first (`--backup-password-file FILE`, node/upgrade.py); without the file, or when the snapshot
fails, the apply fails before changing anything (exit 1).
The apply itself is executors/node/apply/runner.py's `apply_files`, the one path every caller
(this verb, the node agent) takes. A no-op is answered first by apply_fast's check (standard
library only), which declines to this full path on any doubt; `--no-fast` or
MESH_APPLY_NO_FAST=1 skips it. Heavy imports (the resolver, the docker SDK) happen only on the
full path. cli/main.py hands the plain spellings of these options to `quick_options` before it
builds any parser (anything else goes through argparse as for every verb), and a no-op
answered for the `mesh` process itself ends it without the interpreter's teardown.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Optional, Sequence, TextIO

# Only what the no-op check needs is imported at the top (standard library only, like it):
# the full path's modules (the resolver, attrs, the docker SDK) are imported in `run` when it
# runs, never for an answered no-op.
from executors.node.apply import fast as apply_fast
from executors.node.apply.options import ApplyOptions
from executors.node.apply.outcome import write_outcome
from executors.node.node_paths import (
    DEFAULT_STATE_ROOT,
    FILE_ROOT_ENV,
    STATE_ROOT_ENV,
    default_file_root,
    default_state_root,
)

if TYPE_CHECKING:  # named in annotations only: a no-op answered by quick_options never loads it
    import argparse

    from executors.cli._verb import Subparsers


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "apply",
        help="make this node match the newest of its declarations (containers, files, dirs)",
        description="Observe the node, diff against the newest declaration by serial, apply "
        "the operations and report each with its cause. Older declarations are reported as "
        "superseded, never applied. Phases: checks (each provider's running server accepts "
        "its admin credential), firewall, containers, provisioning; the record "
        "<state-root>/.mesh/applied.json names the new serial only when every phase succeeded. "
        "Readiness and admin checks are observations, listed under checks, not operations. A "
        "grant of a kind with no provisioner is a warning (exit 0), reported on every apply. "
        "Instances the declaration holds (refused in mesh.yaml, kept at their last good "
        "declaration) are reported as held and left as they run.",
    )
    parser.add_argument("declarations", nargs="+", metavar="DECLARATION",
                        help="declaration files, or spool directories of them")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the plan of operations and change nothing")
    parser.add_argument("--json", action="store_true", help="print the final report as JSON")
    parser.add_argument("--state-root", default=default_state_root(),
                        help=f"node-side state root (default: ${STATE_ROOT_ENV} or "
                        f"{DEFAULT_STATE_ROOT}): instances' state "
                        "directories under <root>/<instance>/, the executor's own files (env "
                        "files, step markers, applied record) under <root>/.mesh/")
    parser.add_argument("--file-root", default=default_file_root(), metavar="DIR",
                        help=f"where the declaration's files are written (default: "
                        f"${FILE_ROOT_ENV} or /): /etc/docker/certs.d/<registry>/ca.crt, the "
                        "mesh CA this node's container runtime trusts for the mesh's registry, "
                        "and the registry's certificate and key under /etc/mesh/tls/<instance>/")
    parser.add_argument("--secrets", metavar="FILE",
                        help="the ledger (or an extract of it) holding values sealed to this node")
    parser.add_argument("--key", metavar="FILE", help="this node's private key file")
    parser.add_argument("--docker-host", default=os.environ.get("DOCKER_HOST"),
                        help="Docker Engine address (default: $DOCKER_HOST or the local socket)")
    parser.add_argument("--stop-timeout", type=int, default=10, metavar="SECONDS",
                        help="grace period when stopping a container to replace it (default 10)")
    parser.add_argument("--no-firewall", action="store_true",
                        help="leave the firewall as it is even if the declaration has an intent")
    parser.add_argument("--backup-password-file", metavar="FILE",
                        default=os.environ.get("MESH_BACKUP_PASSWORD_FILE"),
                        help="the backup repository's password file ($MESH_BACKUP_PASSWORD_FILE): "
                        "a stateful instance about to run another image is snapshotted into "
                        "mesh.yaml's backup target first, and the apply fails before changing "
                        "anything when it cannot be")
    parser.add_argument("--no-fast", action="store_true",
                        help="skip the quick no-op check and always observe and diff in full "
                        "(also MESH_APPLY_NO_FAST=1)")
    parser.set_defaults(func=run)


# --------------------------------------------------------------------------- run


def options_from(args: argparse.Namespace) -> ApplyOptions:
    """The apply asked for by `mesh apply`'s arguments."""
    return ApplyOptions(
        declarations=tuple(args.declarations), state_root=args.state_root,
        file_root=args.file_root, secrets=args.secrets, key=args.key,
        docker_host=args.docker_host, stop_timeout=args.stop_timeout,
        no_firewall=args.no_firewall, no_fast=args.no_fast, dry_run=args.dry_run,
        json=args.json, backup_password_file=args.backup_password_file)


def run(args: argparse.Namespace, out: Optional[TextIO] = None) -> int:
    return run_options(options_from(args), out)


def run_options(options: ApplyOptions, out: Optional[TextIO] = None, *,
                entry: bool = False) -> int:
    """The apply `options` ask for: the no-op check first, else the full path. `entry`: this
    call is the whole `mesh` process (cli/main.py's main with the process's own arguments), so
    an answered no-op ends the process at once once its output is flushed: the interpreter's
    teardown of every loaded module costs more than the rest of the answer."""
    out = out or sys.stdout
    if not apply_fast.fast_path_disabled(options):
        code = apply_fast.try_noop(options, out)
        if code is not None:
            if entry:
                _end_process(code, out)
            return code
    # the full path: imported only now (start-up cost of a no-op answered above)
    from executors.common.report import LivePrinter, Report
    from executors.node.apply.runner import apply_files

    outcome = apply_files(options, Report(printer=LivePrinter()))
    write_outcome(outcome, options.json, out)
    return 0 if outcome.succeeded else 1


def _end_process(code: int, out: TextIO) -> None:
    """Flush what was written and exit with `code` without the interpreter's teardown (nothing
    is left to release: the check closed its files and its lock). If a flush fails (a reader
    gone), return: the ordinary exit handles it as for any verb."""
    try:
        for stream in (out, sys.stdout, sys.stderr):
            stream.flush()
    except (OSError, ValueError):
        return
    os._exit(code)


# --------------------------------------------------------------------------- quick argv

# `mesh apply`'s options as quick_options reads them, without argparse: the same names as
# register's (tests/test_apply_fast.py holds the two to the same ApplyOptions).
_FLAGS = {"--dry-run": "dry_run", "--json": "json", "--no-firewall": "no_firewall",
          "--no-fast": "no_fast"}
_VALUES = {"--state-root": "state_root", "--file-root": "file_root", "--secrets": "secrets",
           "--key": "key", "--docker-host": "docker_host", "--stop-timeout": "stop_timeout",
           "--backup-password-file": "backup_password_file"}


def quick_options(argv: Sequence[str]) -> Optional[ApplyOptions]:
    """The ApplyOptions `mesh apply ARGV` means, read without building any parser, for the
    plain spellings only (each option whole, `--name VALUE` or `--name=VALUE`); None for
    anything else (help, an abbreviation, `--`, an unknown or malformed option, no
    declaration), which the argparse parser then reads and reports exactly as before."""
    values: dict[str, str] = {}
    flags: set[str] = set()
    declarations: list[str] = []
    previous_was_declaration = False
    tokens = iter(argv)
    for token in tokens:
        if not token.startswith("-") or token == "-":
            if declarations and not previous_was_declaration:
                return None  # argparse takes one run of them: it would refuse the second
            declarations.append(token)
            previous_was_declaration = True
            continue
        previous_was_declaration = False
        name, equals, value = token.partition("=")
        if name in _FLAGS and not equals:
            flags.add(_FLAGS[name])
        elif name in _VALUES:
            if not equals:
                value = next(tokens, "-")
                if value.startswith("-"):
                    return None
            values[_VALUES[name]] = value
        else:
            return None
    stop_timeout = values.get("stop_timeout", "10")
    if not declarations or not stop_timeout.isdecimal():
        return None
    return ApplyOptions(
        declarations=tuple(declarations),
        state_root=values.get("state_root", default_state_root()),
        file_root=values.get("file_root", default_file_root()), secrets=values.get("secrets"),
        key=values.get("key"),
        docker_host=values.get("docker_host", os.environ.get("DOCKER_HOST")),
        stop_timeout=int(stop_timeout), no_firewall="no_firewall" in flags,
        no_fast="no_fast" in flags, dry_run="dry_run" in flags, json="json" in flags,
        backup_password_file=values.get("backup_password_file",
                                        os.environ.get("MESH_BACKUP_PASSWORD_FILE")))


def main(argv: Optional[Sequence[str]] = None) -> int:
    """`python -m executors.cli.apply …`: the same as `mesh apply …` (which, too, loads no
    other subcommand of the `mesh` CLI)."""
    from .main import main as cli_main  # the CLI imports this verb: imported here, no circle

    return cli_main(["apply", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
