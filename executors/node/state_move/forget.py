"""Letting the old copy of a moved instance's state go (`mesh forget-state INSTANCE@NODE`).

Invariants:
- Removes only directories of an instance this node's newest declaration neither declares
  nor still carries (a transfer, either way): while the move is declared, or the instance
  runs here, nothing is removed and the refusal says why.
- Removes the instance's own directory (`<STATE_ROOT>/<instance>`, what a relative state
  path names) and the directories the executor recorded creating below it, nothing else:
  an absolute state path is the operator's to remove. The executor's record (dirs.json) and
  this node's arrival record forget them in the same step, each written atomically.
"""

from __future__ import annotations

import json
import os
import shutil

from resolver import Declaration, MeshError
from resolver.rendering import STATE_ROOT

from executors.common.atomic import write_atomic
from executors.node.node_paths import NodePaths
from executors.node.state_move.arrive import marker


class ForgetRefused(MeshError):
    """A forget-state that would remove state still in use or still being carried."""


def _recorded_dirs(paths: NodePaths) -> list[str]:
    """The executor's record of the directories it made (dirs.json, a list of paths)."""
    try:
        record = json.loads(paths.dirs_record.read_text())
    except FileNotFoundError:
        return []
    except ValueError:
        raise ForgetRefused(f"{paths.dirs_record} is not JSON: nothing removed") from None
    return [str(entry) for entry in record] if isinstance(record, list) else []


def forget(declaration: Declaration, instance: str, paths: NodePaths) -> list[str]:
    """Remove `instance`'s state directories on this node; the paths removed."""
    node = declaration.node
    if instance in declaration.instances:
        raise ForgetRefused(f"{instance} is declared on {node} (serial {declaration.serial}): "
                            f"its state here is in use; nothing removed")
    for t in declaration.transfers:
        if t.instance == instance:
            raise ForgetRefused(f"{instance}'s state is still carried from {t.source} to "
                                f"{t.target}: remove `state-from` once it arrived and apply "
                                f"the new declaration here first; nothing removed")
    own = f"{STATE_ROOT}/{instance}"
    if not os.path.isdir(own):
        raise ForgetRefused(f"{instance} has no state on {node} ({own} is not there)")
    recorded = _recorded_dirs(paths)
    kept = [p for p in recorded if p != own and not p.startswith(own + "/")]
    shutil.rmtree(own)
    if kept != recorded:
        write_atomic(paths.dirs_record, json.dumps(sorted(kept), indent=1) + "\n")
    marker(paths, instance).unlink(missing_ok=True)
    return [own]
