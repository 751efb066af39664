"""What a verb module and cli/main.py agree on: the types of `register` and of a parser's `func`.

Invariants:
- A verb module `executors/cli/<name>.py` defines `register(subparsers: Subparsers) -> None`,
  which adds its parser(s) with `set_defaults(func=...)`; `func` is a `Run`: it takes the parsed
  arguments and returns the exit code (cli/main.py says which codes mean what).
- Standard library only, and only what the annotations name: cli/main.py imports this before it
  knows which verb runs, and a no-op `mesh apply` must not pay for more.
"""

from __future__ import annotations

import argparse
from typing import Callable, TypeAlias

# argparse has no public name for what add_subparsers returns; typeshed's generic class is it.
# A string, so that nothing subscripts the (not generic at run time) class.
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"

Run: TypeAlias = Callable[[argparse.Namespace], int]
