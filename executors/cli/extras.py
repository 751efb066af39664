"""Which optional dependencies each `mesh` verb needs, and what to say when one is missing.

Invariants:
- `pip install mesh-resolver` brings only what resolver/ imports (attrs, cattrs, orjson,
  pyrsistent, ruamel.yaml): enough to embed the library and to run `mesh check`, `schema`, `plan` (without
  --issue), `stale` and `graph` (DOT). What runs on a node comes with the `node` extra, what
  runs on the control node with the `control` extra (pyproject.toml declares both; a test
  holds these tables to it).
- A verb that needs a package of an extra that is not installed says which extra to install
  and exits 2, never with a traceback (`missing_extra` is asked by cli/main.py).
- Where an extra's package is imported: a verb that needs the extra for all its work imports
  it (through the control or node modules) at the top of its module, and cli/main.py lists
  the verb as needing the extra when that import fails. A verb that needs it for part of its
  work only imports it where that part runs: an ImportError there reaches cli/main.py, which
  says the same (`mesh plan --issue`); `mesh graph` catches its own, to add that DOT text
  needs none of it.
- Standard library only: cli/main.py imports this before it knows which verb runs.
"""

from __future__ import annotations

from typing import Optional

DISTRIBUTION = "mesh-resolver"

# extra → the distributions it installs (as pyproject.toml lists them, without versions)
EXTRAS: dict[str, tuple[str, ...]] = {
    "node": ("docker", "PyNaCl", "psycopg[binary]", "requests", "pika", "scramp", "cryptography",
             "bcrypt"),
    "control": ("PyNaCl", "cryptography", "requests", "pika", "graphviz", "docker"),
}

# top-level import name → the distribution that provides it
PROVIDED_BY: dict[str, str] = {
    "docker": "docker",
    "nacl": "PyNaCl",
    "psycopg": "psycopg[binary]",
    "psycopg_binary": "psycopg[binary]",
    "requests": "requests",
    "urllib3": "requests",
    "pika": "pika",
    "scramp": "scramp",
    "cryptography": "cryptography",
    "graphviz": "graphviz",
    "bcrypt": "bcrypt",
}

# verb → the extra it needs (verbs that need none are absent)
VERB_EXTRA: dict[str, str] = {
    "apply": "node", "verify": "node", "firewall": "node", "node-key": "node", "logs": "node",
    "backup": "node", "restore": "node", "backups": "node",  # the Engine (restic: Debian)
    "rollback": "control",  # a ledger transaction (the restore runs in the next apply)
    "serve-state": "node", "forget-state": "node",  # the Engine, the node key (PyNaCl)
    "plan": "control",  # --issue: sealing and signing
    "graph": "control",  # svg and png through Graphviz
    "pin": "control", "mirror": "control", "build": "control",
    "ca": "control", "renew": "control", "rotate": "control", "applied": "control",
    "agent": "node",  # the broker (pika), opening sealed values, checking signatures
    "control": "control", "publish": "control", "collect": "control", "enrol": "control",
    "status": "control", "control backup": "control", "control restore": "control",
    "node": "control",  # `mesh node remove`: the control node's state and revocation list
    "init": "control",  # and the node extra, which `mesh init` checks for itself
    "join": "node",  # `mesh agent enrol` and the agent as a service (`supervise`: none)
}


def install_command(extra: str) -> str:
    return f"python3 -m pip install '{DISTRIBUTION}[{extra}]'"


def extra_for(verb: Optional[str], module: str) -> Optional[str]:
    """The extra that brings import `module` for `verb`: the verb's own when it lists the
    module's distribution, else the first that does; None for a module no extra brings."""
    distribution = PROVIDED_BY.get(module.split(".")[0])
    if distribution is None:
        return None
    own = VERB_EXTRA.get(verb or "")
    if own is not None and distribution in EXTRAS[own]:
        return own
    return next((extra for extra, names in EXTRAS.items() if distribution in names), None)


def missing_extra(verb: Optional[str], error: ImportError) -> Optional[str]:
    """What to tell the operator about an ImportError of an extra's package, or None when the
    missing module is not one an extra brings (then it is a defect, and surfaces as one)."""
    module = error.name or ""
    extra = extra_for(verb, module)
    if extra is None:
        return None
    what = f"mesh {verb}" if verb else "mesh"
    return (f"{what}: needs the Python package {PROVIDED_BY[module.split('.')[0]]}, which is "
            f"not installed; it comes with the `{extra}` extra: {install_command(extra)}")
