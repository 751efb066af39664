"""Where a node keeps what: the executor's own files apart from the instances' state.

Invariants:
- Under the state root (default /var/lib/mesh) there are two namespaces that never meet:
  `<state root>/<instance>/…` for instances' state directories (the resolver's relative state
  paths), and `<state root>/.mesh/` for the executor's own files: env/ and bindings/ (files the
  mesh writes, 0600), steps/ (run-once markers), dirs.json, applied.json, noop.json,
  firewall.digest and the apply lock. An instance name never starts with a dot, and a declared
  state or accessed path inside `.mesh/` is refused at render, so neither can reach the other.
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

import attrs

EXECUTOR_DIR = ".mesh"
DEFAULT_STATE_ROOT = "/var/lib/mesh"
RECORDS = ("applied.json", "noop.json", "dirs.json", "firewall.digest")
FILE_DIRS = {"env": ".env", "bindings": ".env", "steps": ".digest"}


@attrs.frozen
class NodePaths:
    """The paths of one node's state root (`state_root`); `root` is the executor's own."""

    state_root: Path = attrs.field(converter=Path)

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
    def steps_dir(self) -> Path:
        return self.root / "steps"

    @property
    def dirs_record(self) -> Path:
        return self.root / "dirs.json"

    @property
    def applied(self) -> Path:
        return self.root / "applied.json"

    @property
    def noop_record(self) -> Path:
        return self.root / "noop.json"

    @property
    def lock(self) -> Path:
        return self.root / "lock"

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
    lock = legacy / "lock"
    if lock.is_file() and not lock.is_symlink() and lock.stat().st_size == 0:
        os.unlink(lock)
    return moved
