"""What an apply is asked to do, as one value: `mesh apply` builds it from its options, the
node agent from its configuration; the no-op check (apply_fast) and the full apply (runner)
read it.

Invariants:
- The same names as `mesh apply`'s options, nothing else; frozen.
- Imports nothing heavy (a NamedTuple: not attrs, and not even a dataclass, whose module pulls
  in `inspect`): the no-op check answers without the resolver, attrs, the docker SDK or
  dataclasses loaded.
"""

# No `from __future__ import annotations`: NamedTuple compiles each string annotation of a
# field when the class is made, on every run of the no-op check.
from collections.abc import Sequence
from typing import NamedTuple


class ApplyOptions(NamedTuple):
    """The declarations to apply (files or a spool directory) and how."""

    declarations: Sequence[str]
    state_root: str
    file_root: str | None = None  # None: the node's own (node_paths.default_file_root)
    secrets: str | None = None
    key: str | None = None
    docker_host: str | None = None
    stop_timeout: int = 10
    no_firewall: bool = False
    no_fast: bool = False
    dry_run: bool = False
    json: bool = False
    backup_password_file: str | None = None  # a guarded upgrade's snapshot (node/upgrade.py)
