"""The `mesh` command line.

Each subcommand lives in its own module `executors/cli/<name>.py` exposing
`register(subparsers)`, which adds a parser whose `func(args) -> int` runs it (the types are
cli/_verb.py's). Exit codes:
0 success, 1 refusals or failed checks, 2 bad input (every fault printed as file:line:col).
No traceback reaches a user for bad input: InputError is caught here, and so is a missing
optional dependency, which is said with the extra that brings it (cli/extras.py), exit 2.
Only the chosen subcommand's module is imported when the first argument names one (a no-op
`mesh apply` must not pay for every other command); `mesh --help`, no command or an unknown
one build the full parser, so help and usage errors list every command. `mesh apply` with
plainly spelled options builds no parser at all (cli/apply.py's quick_options reads them;
anything else goes through the parser), and does not even import argparse: the parser is
built by cli/_parser.py, imported by name in build_parser like the verbs' modules. Those
imports by name are the deferred imports here; what this module imports at its top is the
standard library (not argparse) and cli/'s own standard-library modules (extras, terminal).
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Callable, Optional, Sequence, TextIO

from executors.cli.extras import missing_extra
from executors.cli.terminal import with_printable_output

if TYPE_CHECKING:  # the resolver is imported by the commands that need it, not here; argparse
    # by cli/_parser.py, when a parser is built
    import argparse

    from executors.cli._verb import Run
    from resolver import InputError

COMMANDS: list[str] = [
    "check",
    "schema",
    "plan", "graph", "names",
    "pin", "mirror", "stale", "build",
    "firewall",
    "apply",
    "node-key", "ca", "rotate",
    "verify", "logs", "backup", "restore", "backups", "rollback",
    "serve-state", "forget-state",
    "control", "publish", "collect", "status", "enrol", "agent",
    "control backup", "control restore",
    "node",
    "init", "join", "supervise",
]
# the verbs a command module registers besides its own name
ALSO: dict[str, tuple[str, ...]] = {"ca": ("renew",), "rotate": ("applied",)}


def build_parser(commands: Sequence[str] = COMMANDS) -> argparse.ArgumentParser:
    """The parser of `commands` (cli/_parser.py builds it, importing each verb's module)."""
    parsing = importlib.import_module("executors.cli._parser")  # by name: argparse with it
    built: argparse.ArgumentParser = parsing.build(commands, ALSO, _module_name)
    return built


def _module_name(verb: str) -> str:
    """The module of a verb: `node-key` → node_key, `control backup` → control_backup."""
    return verb.replace("-", "_").replace(" ", "_")


def _joined(argv: Sequence[str]) -> list[str]:
    """`mesh control backup …` as the one verb `control backup` (a verb of two words), so that
    `mesh control DIR` keeps its DIR."""
    if len(argv) >= 2 and f"{argv[0]} {argv[1]}" in COMMANDS:
        return [f"{argv[0]} {argv[1]}", *argv[2:]]
    return list(argv)


def print_faults(error: InputError, stream: Optional[TextIO] = None) -> None:
    stream = stream or sys.stderr  # looked up per call, so redirected stderr is honoured
    for fault in error.faults:
        print(str(fault), file=stream)
    count = len(error.faults)
    print(f"{count} error{'s' if count != 1 else ''}", file=stream)


def commands_for(argv: Sequence[str]) -> list[str]:
    """The subcommands to register: only the one named first, else all (help, usage errors)."""
    if argv and argv[0] in COMMANDS:
        return [argv[0]]
    return COMMANDS


def main(argv: Optional[Sequence[str]] = None) -> int:
    return with_printable_output(lambda: _main(argv))


def _main(argv: Optional[Sequence[str]] = None) -> int:
    arguments = _joined(sys.argv[1:] if argv is None else argv)
    command, run = _quick_apply(arguments, entry=argv is None) or _parsed(arguments)
    try:
        return int(run() or 0)
    except KeyboardInterrupt:
        print("mesh: interrupted", file=sys.stderr)
        return 130
    except ImportError as error:
        said = missing_extra(command, error)
        if said is None:
            raise
        print(said, file=sys.stderr)
        return 2
    except Exception as error:
        resolver = sys.modules.get("resolver")  # whoever raised these imported it
        if resolver is not None and isinstance(error, resolver.InputError):
            print_faults(error)
            return 2
        if resolver is not None and isinstance(error, resolver.MeshError):
            print(f"mesh: {error}", file=sys.stderr)
            return 2
        raise


def _parsed(arguments: list[str]) -> tuple[str, Callable[[], int]]:
    """The verb `arguments` name and its run, read by the parser of that verb (or of all)."""
    args = build_parser(commands_for(arguments)).parse_args(arguments)
    run: Run = args.func
    return args.command, lambda: run(args)


def _quick_apply(arguments: list[str], *, entry: bool,
                 ) -> Optional[tuple[str, Callable[[], int]]]:
    """`mesh apply` with plainly spelled options, read without building any parser (a no-op
    apply must not pay for argparse's parsers): cli/apply.py's quick_options; None otherwise."""
    if arguments[:1] != ["apply"]:
        return None
    # by its verb's name, as build_parser imports each verb's module (lazily)
    apply = importlib.import_module(f"executors.cli.{_module_name(arguments[0])}")
    options = apply.quick_options(arguments[1:])
    if options is None:
        return None
    run_options: Callable[..., int] = apply.run_options
    return "apply", lambda: run_options(options, entry=entry)


class _Command(types.ModuleType):
    """This module, callable: `executors.cli.main(argv)` runs the command as `main(argv)` does.
    A console script written for the entry point `executors.cli:main` (installed before the
    verbs moved into cli/) imports this module by that name and calls it."""

    def __call__(self, argv: Optional[Sequence[str]] = None) -> int:
        return main(argv)


sys.modules[__name__].__class__ = _Command

if __name__ == "__main__":
    sys.exit(main())
