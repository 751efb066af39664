"""The `mesh` command line.

Each subcommand lives in its own module `executors/cmd_<name>.py` exposing
`register(subparsers)`, which adds a parser whose `func(args) -> int` runs it. Exit codes:
0 success, 1 refusals or failed checks, 2 bad input (every fault printed as file:line:col).
No traceback reaches a user for bad input: InputError is caught here.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from resolver import InputError, MeshError

COMMANDS = [
    "check",
    "schema",
    "plan",
    "pin", "mirror", "stale",
    "firewall",
    "apply",
    "node-key", "ca", "rotate",
    "verify",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mesh",
        description="Resolve a mesh of self-hosted nodes from manifests and a ledger, "
        "and make each node match its declaration.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS:
        importlib.import_module(f"executors.cmd_{name.replace('-', '_')}").register(sub)
    return parser


def print_faults(error: InputError, stream=None) -> None:
    stream = stream or sys.stderr  # looked up per call, so redirected stderr is honoured
    for fault in error.faults:
        print(str(fault), file=stream)
    count = len(error.faults)
    print(f"{count} error{'s' if count != 1 else ''}", file=stream)


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except InputError as error:
        print_faults(error)
        return 2
    except MeshError as error:
        print(f"mesh: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("mesh: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
