"""The `mesh` command line.

Each subcommand lives in its own module `executors/cli/<name>.py` exposing
`register(subparsers)`, which adds a parser whose `func(args) -> int` runs it. Exit codes:
0 success, 1 refusals or failed checks, 2 bad input (every fault printed as file:line:col).
No traceback reaches a user for bad input: InputError is caught here.
Only the chosen subcommand's module is imported when the first argument names one (a no-op
`mesh apply` must not pay for every other command); `mesh --help`, no command or an unknown
one build the full parser, so help and usage errors list every command.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the resolver is imported by the commands that need it, not here
    from resolver import InputError

COMMANDS = [
    "check",
    "schema",
    "plan", "graph",
    "pin", "mirror", "stale",
    "firewall",
    "apply",
    "node-key", "ca", "rotate",
    "verify",
    "control", "publish", "collect", "status", "enrol", "agent",
]


def build_parser(commands=COMMANDS) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mesh",
        description="Resolve a mesh of self-hosted nodes from manifests and a ledger, "
        "and make each node match its declaration.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in commands:
        importlib.import_module(f"executors.cli.{name.replace('-', '_')}").register(sub)
    return parser


def print_faults(error: InputError, stream=None) -> None:
    stream = stream or sys.stderr  # looked up per call, so redirected stderr is honoured
    for fault in error.faults:
        print(str(fault), file=stream)
    count = len(error.faults)
    print(f"{count} error{'s' if count != 1 else ''}", file=stream)


def commands_for(argv) -> list[str]:
    """The subcommands to register: only the one named first, else all (help, usage errors)."""
    if argv and argv[0] in COMMANDS:
        return [argv[0]]
    return COMMANDS


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(commands_for(argv))
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("mesh: interrupted", file=sys.stderr)
        return 130
    except Exception as error:
        resolver = sys.modules.get("resolver")  # whoever raised these imported it
        if resolver is not None and isinstance(error, resolver.InputError):
            print_faults(error)
            return 2
        if resolver is not None and isinstance(error, resolver.MeshError):
            print(f"mesh: {error}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
