"""The `mesh` command's argparse parser, built from the verbs' modules (cli/main.py's
build_parser calls `build`).

Invariants:
- Its own module so that argparse is imported only when a parser is built: a no-op
  `mesh apply` spelled plainly is read by cli/apply.py's quick_options and never builds one
  (cli/main.py imports this module by name, as it does the verbs, only to build a parser).
- Each verb's module is imported by name, only for the verbs asked for; a verb whose module
  cannot be imported for want of an extra is listed, and running it says which extra to
  install (cli/extras.py), exit 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Callable, Mapping, Sequence

from executors.cli._verb import Subparsers
from executors.cli.extras import extra_for, missing_extra


def build(commands: Sequence[str], also: Mapping[str, tuple[str, ...]],
          module_name: Callable[[str], str]) -> argparse.ArgumentParser:
    """The parser of `commands` (each registered by its module, `module_name(verb)`), listing
    `also`'s further verbs of a module that cannot be imported."""
    parser = argparse.ArgumentParser(
        prog="mesh",
        description="Resolve a mesh of self-hosted nodes from manifests and a ledger, "
        "and make each node match its declaration.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in commands:
        try:  # by name: only the verbs asked for are paid for
            module = importlib.import_module(f"executors.cli.{module_name(name)}")
        except ImportError as error:  # an extra it needs is not installed: say which
            if missing_extra(name, error) is None:
                raise
            for verb in (name, *also.get(name, ())):
                _unavailable(sub, verb, error)
            continue
        register: Callable[[Subparsers], None] = module.register
        register(sub)
    return parser


def _unavailable(sub: Subparsers, verb: str, error: ImportError) -> None:
    """A verb whose module cannot be imported: listed, and running it says what to install."""
    said = missing_extra(verb, error)
    parser = sub.add_parser(verb, help=f"(needs the {extra_for(verb, error.name or '')} extra, "
                            "not installed)", description=said)
    parser.add_argument("arguments", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)

    def run(args: argparse.Namespace) -> int:
        print(said, file=sys.stderr)
        return 2

    parser.set_defaults(func=run)
