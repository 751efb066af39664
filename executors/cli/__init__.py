"""The `mesh` command's verbs: one module per verb, each `register(subparsers)`; `main` runs one.

Verbs are thin: they parse arguments, call the node, control or common room, and print.
"""

from executors.cli.main import main

__all__ = ["main"]
