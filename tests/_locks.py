"""Locks between the test run's worker processes (pytest-xdist runs the suite in several).

Invariants:
- Every lock is an flock(2) on a file in /run/mesh-test/locks (or $MESH_TEST_LOCK_DIR), so it
  goes with the process that holds it: a crashed or killed worker never leaves one held.
- `built(name)`: one worker at a time builds a shared artefact (an image imported into the
  host's Engine, kept by its fingerprint); the others wait and then find it built.
- The host's Docker Engine: a test that creates containers there shares it (`share_engine`,
  taken by `_docker.engine()` and held until the test ends); a test that needs the Engine's
  default bridge to itself (it asserts which address the Engine hands out next) holds it
  alone (`engine_alone`). A writer waiting at the gate keeps new sharers out, so it is never
  starved by a stream of them. Namespaced dockerds (tests/_netns.py) are each a test's own
  and need no lock.
- One process never waits on itself: sharing while holding it alone is a no-op.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence

LOCK_DIR = Path(os.environ.get("MESH_TEST_LOCK_DIR", "/run/mesh-test/locks"))

_engine_fd: Optional[int] = None
_engine_mode: Optional[int] = None


def _open(name: str) -> int:
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    return os.open(LOCK_DIR / f"{name}.lock", os.O_CREAT | os.O_RDWR, 0o600)


@contextlib.contextmanager
def built(name: str) -> Iterator[None]:
    """Held while this worker builds (or checks for) the shared artefact `name`."""
    fd = _open(f"build-{name.replace('/', '_')}")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def kept_image(api, repository: str, tag: str, rootfs: Callable[[], bytes],
               changes: Sequence[str]) -> str:
    """`repository:tag` in the host's Engine: imported (`docker import` of `rootfs()` with
    `changes`) by the first worker that asks, found by the others, kept between runs."""
    reference = f"{repository}:{tag}"
    with built(repository):
        try:
            api.inspect_image(reference)
            return reference
        except Exception:  # noqa: BLE001 - not imported yet
            pass
        api.import_image_from_data(rootfs(), repository=repository, tag=tag,
                                   changes=list(changes))
    return reference


def _take(mode: int) -> int:
    gate = _open("engine-gate")
    try:
        fcntl.flock(gate, fcntl.LOCK_EX)  # a waiting writer holds the gate: sharers queue
        fd = _open("engine")
        fcntl.flock(fd, mode)
        return fd
    finally:
        os.close(gate)


def share_engine() -> None:
    """This test creates containers on the host's Engine: held until `release_engine()`."""
    global _engine_fd, _engine_mode
    if _engine_fd is None:
        _engine_fd, _engine_mode = _take(fcntl.LOCK_SH), fcntl.LOCK_SH


@contextlib.contextmanager
def engine_alone() -> Iterator[None]:
    """The host's Engine to this test alone while the block runs."""
    global _engine_fd, _engine_mode
    release_engine()
    _engine_fd, _engine_mode = _take(fcntl.LOCK_EX), fcntl.LOCK_EX
    try:
        yield
    finally:
        release_engine()


def release_engine() -> None:
    global _engine_fd, _engine_mode
    if _engine_fd is not None:
        os.close(_engine_fd)
        _engine_fd, _engine_mode = None, None
