"""Writing a file whole or not at all: the one place the executors write a file that matters.

Invariants:
- A temp file beside the target, created with its final mode (so a secret is never readable
  by others, not even for an instant), written, fsynced, then put in place in one step, and
  the directory fsynced so that step survives a crash. A failure removes the temp file and
  leaves the target as it was; a reader sees the old file or the new one, never a part.
- `write_atomic` replaces the target (rename). `write_exclusive` never does: the temp file is
  hard-linked to the target name, which fails when the name exists, so a key created once is
  never overwritten and never seen half-written (an O_EXCL create written in place would be).
- Standard library only.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable, Optional, Union

Data = Union[bytes, str]
PathLike = Union[str, "os.PathLike[str]"]  # a path as callers hold it: text or a Path


def _staged(path: Path, data: Data, mode: int, place: Callable[[str, Path], None],
            owner: Optional[tuple[int, int]] = None) -> None:
    """Write `data` to a temp file beside `path` with `mode` (and `owner`, uid and gid, when
    given), fsync it, `place(temp, path)`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        if owner is not None:  # before any byte is written: only its owner ever reads it
            os.fchown(fd, *owner)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        place(temp, path)
    finally:
        try:
            os.unlink(temp)  # after a rename it is gone already; after a link it is the spare
        except FileNotFoundError:
            pass
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def write_atomic(path: PathLike, data: Data, mode: int = 0o644,
                 owner: Optional[tuple[int, int]] = None) -> None:
    """Replace `path` with `data` (text is written as UTF-8), whole or not at all; `owner`
    (uid, gid) is who owns it (the writer when None)."""
    _staged(Path(path), data, mode, lambda temp, target: os.replace(temp, target), owner)


def write_exclusive(path: PathLike, data: Data, mode: int = 0o600) -> None:
    """Create `path` holding `data`, whole or not at all; FileExistsError when it exists (the
    file there is left as it is)."""
    _staged(Path(path), data, mode, lambda temp, target: os.link(temp, target))


def open_new_for_streaming(path: PathLike, mode: int = 0o600) -> int:
    """A descriptor open for writing on a new file `path` (FileExistsError when anything is
    there, a symlink included): for a file streamed in pieces into a staging directory that is
    renamed into place whole only once every file in it is verified (the state-move arrival),
    so no reader ever sees it half-written."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
