"""Observing a node, as far as the standard library reaches: everything the pure `diff`
(compare.py) compares except the Engine's list call, which the caller makes its own way and
hands over as the Engine's rows.

Invariants:
- One owner of observing: the full path (execute.observe, rows from the docker SDK) and the
  no-op check (fast.py, rows over a raw unix socket) both read the node here, so they see the
  same facts: declared directories, accessed paths, the files the mesh writes (env/,
  bindings/ and secrets/ under the executor's own directory, and declared files elsewhere, present now or
  written before), the managed containers, run-once markers, the applied record and
  answered.json (which containers an apply saw answer their health check).
- Standard library only (json, os, stat, pathlib; SHA-256 through sha.py, which spares the
  no-op check OpenSSL), like compare.py, node_paths.py and applied_record.py it reads with:
  the no-op check loads nothing heavier.
- Reads only; an unreadable record is taken as absent (the diff then rewrites it).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Mapping, Optional, Sequence

from executors.common import applied_record
from executors.common.marks import (
    APPLIED_RECORD_VERSION,
    LABEL_DIGEST,
    LABEL_RUN_ONCE,
    LABEL_SUMMARY,
)
from executors.node.apply.compare import (
    AccessFacts,
    Applied,
    ContainerFacts,
    Desired,
    DirFacts,
    FileFacts,
    Observed,
)
from executors.node.apply.sha import sha256_file
from executors.node.node_paths import NodePaths

# --------------------------------------------------------------------------- records


def read_json(path: Path, default: object) -> object:
    """The JSON document at `path`, or `default` when absent or unreadable."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return default
    except ValueError:  # unreadable record: treat as absent, the diff will rewrite it
        return default


def read_list(path: Path) -> list[str]:
    """A record that is a list of paths (dirs.json, files.json); empty when absent."""
    record = read_json(path, [])
    return [str(entry) for entry in record] if isinstance(record, list) else []


def read_answered(paths: NodePaths) -> dict[str, str]:
    """container name → the container ID an apply saw answer its health check."""
    record = read_json(paths.answered_record, {})
    return {str(k): str(v) for k, v in record.items()} if isinstance(record, dict) else {}


def read_record(paths: NodePaths) -> Optional[dict[str, object]]:
    """The node's applied record (applied_record's format), None when absent or unreadable."""
    record = read_json(paths.applied, None)
    return record if isinstance(record, dict) else None


def applied_facts(record: Optional[Mapping[str, object]]) -> Optional[Applied]:
    """What the record says is in force, and how its last apply ended."""
    good = applied_record.in_force(record)
    if good is None or record is None:
        return None
    result = (str(record.get("result", "unrecorded"))
              if record.get("version") == APPLIED_RECORD_VERSION else "unrecorded")
    return Applied(good["serial"], good["digest"], good["generations"], result)


# --------------------------------------------------------------------------- the filesystem


def dir_facts(path: str, recorded: bool) -> DirFacts:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return DirFacts(path, "absent", recorded=recorded)
    if not stat.S_ISDIR(st.st_mode):
        return DirFacts(path, "other", st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode), False,
                        recorded)
    with os.scandir(path) as entries:
        empty = next(entries, None) is None
    return DirFacts(path, "dir", st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode), empty, recorded)


def file_facts(directory: Path) -> dict[str, FileFacts]:
    """The mesh's files in one of its directories (env/, bindings/)."""
    found: dict[str, FileFacts] = {}
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return found
    for entry in entries:
        if entry.name.startswith(".") or not entry.name.endswith(".env") or not entry.is_file():
            continue  # temp files of an interrupted write are not the mesh's files
        found[entry.path] = FileFacts(entry.path, sha256_file(entry.path),
                                      stat.S_IMODE(entry.stat().st_mode))
    return found


def secret_file_facts(directory: Path) -> dict[str, FileFacts]:
    """The containers' secret files (`<directory>/<container>/<file>`), with their owners."""
    found: dict[str, FileFacts] = {}
    try:
        containers = [e for e in os.scandir(directory) if e.is_dir(follow_symlinks=False)]
    except FileNotFoundError:
        return found
    for container in containers:
        for entry in os.scandir(container.path):
            if entry.name.startswith(".") or not entry.is_file(follow_symlinks=False):
                continue  # temp files of an interrupted write are not the mesh's files
            st = entry.stat(follow_symlinks=False)
            found[entry.path] = FileFacts(entry.path, sha256_file(entry.path),
                                          stat.S_IMODE(st.st_mode), (st.st_uid, st.st_gid))
    return found


def markers(paths: NodePaths) -> dict[str, str]:
    """run-once step name → the digest it completed with."""
    found: dict[str, str] = {}
    if paths.steps_dir.is_dir():
        for entry in os.scandir(paths.steps_dir):
            if entry.name.endswith(".digest") and not entry.name.startswith("."):
                found[entry.name[: -len(".digest")]] = Path(entry.path).read_text().strip()
    return found


def observe_files(paths: NodePaths, desired: Desired) -> Observed:
    """Everything `diff` compares but the containers (left empty)."""
    recorded = set(read_list(paths.dirs_record))
    dirs = {d.path: dir_facts(d.path, d.path in recorded) for d in desired.dirs}
    accesses = {a.path: AccessFacts(a.path, os.path.exists(a.path),
                                    os.access(a.path, os.R_OK), os.access(a.path, os.W_OK))
                for a in desired.accesses}
    files = {**file_facts(paths.env_dir), **file_facts(paths.bindings_dir),
             **secret_file_facts(paths.secrets_dir)}
    # declared files elsewhere: those declared now, and those written before (to remove them)
    written = set(read_list(paths.files_record))
    for path in written | {f.path for f in desired.files if not paths.owns(f.path)}:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        if stat.S_ISREG(st.st_mode):
            files[path] = FileFacts(path, sha256_file(path), stat.S_IMODE(st.st_mode),
                                    (st.st_uid, st.st_gid))
    return Observed(dirs, accesses, files, {}, markers(paths),
                    applied_facts(read_record(paths)))


# --------------------------------------------------------------------------- containers


def row_name(row: Mapping[str, object]) -> str:
    """A container's name in a row of the Engine's list call (its ID's start when unnamed)."""
    names = row.get("Names")
    if isinstance(names, list) and names:
        return str(names[0]).lstrip("/")
    return str(row["Id"])[:12]


def row_labels(row: Mapping[str, object]) -> dict[str, str]:
    labels = row.get("Labels")
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}


def summary_of(labels: Mapping[str, str]) -> dict[str, str]:
    """The config summary a container's label carries (empty when unreadable)."""
    try:
        summary = json.loads(labels.get(LABEL_SUMMARY, "{}"))
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in summary.items()} if isinstance(summary, dict) else {}


def container_facts(rows: Sequence[Mapping[str, object]], answered: Mapping[str, str],
                    *, summaries: bool = True) -> dict[str, ContainerFacts]:
    """The managed containers, by name, from the rows of the Engine's label-filtered list call.
    `summaries=False` leaves each config summary unread: it only explains a changed digest."""
    found: dict[str, ContainerFacts] = {}
    for row in rows:
        name, labels = row_name(row), row_labels(row)
        state = str(row.get("State", ""))
        found[name] = ContainerFacts(
            name, labels.get(LABEL_DIGEST, ""), state == "running", state,
            labels.get(LABEL_RUN_ONCE) == "true", summary_of(labels) if summaries else {},
            answered.get(name) == row.get("Id"))
    return found
