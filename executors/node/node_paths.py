"""Where a node keeps what: the executor's own files apart from the instances' state.

Invariants:
- Under the state root (default /var/lib/mesh) there are two namespaces that never meet:
  `<state root>/<instance>/…` for instances' state directories (the resolver's relative state
  paths), and `<state root>/.mesh/` for the executor's own files: env/ and bindings/ (files the
  mesh writes, 0600), secrets/ (containers' secret files, 0400 owned by the container's
  user, one directory per container, mounted read-only), steps/ (run-once markers), dirs.json, applied.json, noop.json,
  answered.json (which containers an apply saw answer their health check), firewall.digest
  and the apply lock. An instance name never starts with a dot, and a declared
  state or accessed path inside `.mesh/` is refused at render, so neither can reach the other.
- Where instances' state lives on a node is the resolver's rule
  (`resolver.rendering.STATE_ROOT`: the declarations name `<state root>/<instance>/<path>`), so
  the resolver owns the default; this
  module is the executors' one place that names it (`DEFAULT_STATE_ROOT`, its value checked
  equal to `resolver.rendering.STATE_ROOT` by tests/test_state_layout.py) and every file of the
  executor's own directory. It imports the standard library only: the no-op check of
  `mesh apply` (apply_fast) and the verb's argument defaults read it without paying for attrs.
- Nodes applied by an earlier version kept the executor's files directly under the state root.
  `migrate_legacy_layout` moves exactly those files (by name and suffix: `*.env` in env/ and
  bindings/, `*.digest` in steps/, the four records) into `.mesh/`, one rename each, so an apply
  killed half-way continues on the next run; anything else in those directories (an instance's
  state that collided with them) is left where it is. Leftover temp files (`.*.tmp`, which may
  hold secrets) are removed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Union

EXECUTOR_DIR = ".mesh"
DEFAULT_STATE_ROOT = "/var/lib/mesh"  # = resolver.rendering.STATE_ROOT, spelled out: no import
STATE_ROOT_ENV = "MESH_STATE_ROOT"  # overrides the default of `mesh apply --state-root`
FILE_ROOT_ENV = "MESH_FILE_ROOT"  # overrides the default of `mesh apply --file-root`
DEFAULT_FILE_ROOT = "/"
FILES_RECORD = "files.json"  # the declared files the executor wrote (what it may remove)
APPLIED_FILE, NOOP_FILE, DIRS_FILE = "applied.json", "noop.json", "dirs.json"
FIREWALL_DIGEST_FILE = "firewall.digest"
ANSWERED_FILE = "answered.json"  # container name → the container ID an apply saw answer
LOCK_FILE = "lock"
RECORDS = (APPLIED_FILE, NOOP_FILE, DIRS_FILE, FIREWALL_DIGEST_FILE)
FILE_DIRS = {"env": ".env", "bindings": ".env", "steps": ".digest"}


def default_file_root() -> str:
    """Where a declaration's files (absolute paths such as /etc/docker/certs.d/…) are written:
    $MESH_FILE_ROOT, else `/`. A test points it at a directory of its own."""
    return os.environ.get(FILE_ROOT_ENV) or DEFAULT_FILE_ROOT


def default_state_root() -> str:
    """The state root a command uses when none is given: $MESH_STATE_ROOT, else the default."""
    return os.environ.get(STATE_ROOT_ENV) or DEFAULT_STATE_ROOT


class NodePaths:
    """The paths of one node's state root (`state_root`); `root` is the executor's own.

    A plain immutable value (equal, hashable) without attrs, so the no-op
    check can use it for the cost of pathlib alone."""

    __slots__ = ("state_root", "file_root")
    state_root: Path
    file_root: Path

    def __init__(self, state_root: Union[str, "os.PathLike[str]"],
                 file_root: Union[str, "os.PathLike[str]"] = DEFAULT_FILE_ROOT) -> None:
        object.__setattr__(self, "state_root", Path(state_root))
        object.__setattr__(self, "file_root", Path(file_root))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"NodePaths is immutable ({name})")

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, NodePaths) and other.state_root == self.state_root
                and other.file_root == self.file_root)

    def __hash__(self) -> int:
        return hash(("NodePaths", self.state_root, self.file_root))

    def __repr__(self) -> str:
        return (f"NodePaths(state_root={str(self.state_root)!r}, "
                f"file_root={str(self.file_root)!r})")

    def on_node(self, path: str) -> str:
        """Where a declared absolute path (a file, a TLS directory) is, under the file root."""
        return os.path.normpath(os.path.join(str(self.file_root), path.lstrip("/")))

    @property
    def files_record(self) -> Path:
        return self.root / FILES_RECORD

    @property
    def root(self) -> Path:
        return self.state_root / EXECUTOR_DIR

    @property
    def env_dir(self) -> Path:
        return self.root / "env"

    @property
    def bindings_dir(self) -> Path:
        return self.root / "bindings"

    @property
    def secrets_dir(self) -> Path:
        """Containers' secret files: `<name>/<file>`, each directory mounted read-only at the
        container's /run/secrets (apply/secret_files.py)."""
        return self.root / "secrets"

    @property
    def steps_dir(self) -> Path:
        return self.root / "steps"

    @property
    def dirs_record(self) -> Path:
        return self.root / DIRS_FILE

    @property
    def applied(self) -> Path:
        return self.root / APPLIED_FILE

    @property
    def answered_record(self) -> Path:
        return self.root / ANSWERED_FILE

    @property
    def noop_record(self) -> Path:
        return self.root / NOOP_FILE

    @property
    def firewall_digest(self) -> Path:
        return self.root / FIREWALL_DIGEST_FILE

    @property
    def lock(self) -> Path:
        return self.root / LOCK_FILE

    def marker(self, step: str) -> Path:
        return self.steps_dir / f"{step}.digest"

    def owns(self, path: str) -> bool:
        """Whether `path` is the executor's directory or inside it."""
        mine = os.path.normpath(str(self.root))
        path = os.path.normpath(path)
        return path == mine or path.startswith(mine + os.sep)


def _move(source: Path, target: Path, moved: list[str]) -> None:
    if not source.is_file() or source.is_symlink():
        return
    if target.exists():  # the new layout's copy is the one in force; the old may hold a secret
        os.unlink(source)
        return
    os.rename(source, target)
    moved.append(f"{source} → {target}")


def migrate_legacy_layout(paths: NodePaths) -> list[str]:
    """Move the executor's files of an earlier layout into `paths.root`; what moved."""
    moved: list[str] = []
    legacy = paths.state_root
    if not legacy.is_dir():
        return moved
    found = [legacy / name for name in RECORDS if (legacy / name).is_file()]
    found += [legacy / name for name in FILE_DIRS if (legacy / name).is_dir()]
    if not found:
        return moved
    paths.root.mkdir(mode=0o700, parents=True, exist_ok=True)
    for name in RECORDS:
        _move(legacy / name, paths.root / name, moved)
    for name, suffix in FILE_DIRS.items():
        old = legacy / name
        if not old.is_dir() or old.is_symlink():
            continue
        new = paths.root / name
        for entry in sorted(os.scandir(old), key=lambda e: e.name):
            if not entry.is_file(follow_symlinks=False):
                continue
            if entry.name.startswith(".") and entry.name.endswith(".tmp"):
                os.unlink(entry.path)  # an interrupted write's temp file: may hold a secret
            elif entry.name.endswith(suffix) and not entry.name.startswith("."):
                new.mkdir(mode=0o700, exist_ok=True)
                _move(Path(entry.path), new / entry.name, moved)
        try:
            old.rmdir()  # only when nothing else (an instance's state) is in it
        except OSError:
            pass
    lock = legacy / LOCK_FILE
    if lock.is_file() and not lock.is_symlink() and lock.stat().st_size == 0:
        os.unlink(lock)
    return moved
