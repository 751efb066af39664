"""The `mesh` command's verbs: one module per verb, each `register(subparsers)`; `main` runs one.

Verbs are thin: they parse arguments, call the node, control or common room, and print.
`executors.cli.main` is the module (`main.main(argv)` runs the command); the package re-exports
nothing, so `from executors.cli import main` is always that module, which may also be called
(`main(argv)`), as console scripts of the entry point `executors.cli:main` do.
"""
