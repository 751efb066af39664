"""State directories as a stream of records with a manifest: written on the source, read into
staging directories on the target, and compared.

Invariants:
- The stream is records (channel.py: a kind byte, a length, the payload): `H` an entry's
  header (JSON: name, type dir | file | link, size, mode, uid, gid, mtime, link target), `D`
  a piece of the current file's content, `E` the end. Names are `<state dir name>/<path
  inside it>`. Both ends are the mesh's, so no archive format is needed; a file's content is
  read, hashed and sent in large pieces, without an archive library's copies.
- The manifest says every regular file (size and SHA-256), directory and symbolic link
  sent. The source hashes each file as it reads it (one read); the target hashes what it
  writes (one pass). A copy is verified when the target's manifest equals the source's,
  entry for entry. Each side hashes in a thread of its own (reading ahead on the source,
  writing behind on the target), so hashing overlaps the network; hashlib, os.read/write
  and TLS release the GIL.
- Sockets and other special files (a server's socket directory) are not carried; they are
  counted in the manifest's `skipped`.
- The target writes only below its staging directories: a name that is absolute, climbs out
  (`..`), names no declared directory, or content beyond a file's declared size, is refused.
  Ownership, mode and times are those of the source (numeric ids).
- Progress is reported at most once a second, as bytes, percent and rate.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import stat
import threading
import time
from typing import Any, BinaryIO, Callable, Iterator, Mapping, Optional, cast

from resolver import StateTransfer

from executors.common.atomic import open_new_for_streaming
from executors.node.state_move.channel import (
    TransferError,
    read_record,
    write_record,
)

CHUNK = 1 << 20  # a file's content travels in pieces of this size
Manifest = dict[str, object]
Progress = Callable[[int, int], None]  # (bytes so far, bytes in all)
AHEAD = 8  # batches read (or written) ahead of the network, per side
BATCH_BYTES = CHUNK  # a batch between threads holds at most this much content…
BATCH_EVENTS = 512  # …or this many events (headers, pieces, digests)


def _empty_manifest() -> dict[str, object]:
    return {"files": {}, "dirs": [], "links": {}, "skipped": 0}


class _Meter:
    def __init__(self, progress: Progress, total: int) -> None:
        self.progress, self.total, self.said = progress, total, time.monotonic()
        self.done = 0

    def tick(self, count: int, last: bool = False) -> None:
        self.done += count
        now = time.monotonic()
        if last or now - self.said >= 1.0:
            self.said = now
            self.progress(self.done, self.total)


def totals(transfer: StateTransfer) -> tuple[int, int]:
    """(bytes, files) of the regular files under the transfer's directories on this node;
    a directory that is not here is refused (the instance never ran here)."""
    size = count = 0
    for d in transfer.dirs:
        if not os.path.isdir(d.path):
            raise TransferError(f"{transfer.instance} never ran on {transfer.source}: its "
                                f"state directory {d.path} is not there")
        for top, _dirs, files in os.walk(d.path):
            for name in files:
                facts = os.lstat(os.path.join(top, name))
                if stat.S_ISREG(facts.st_mode):
                    size += facts.st_size
                    count += 1
    return size, count


def _entries(transfer: StateTransfer) -> Iterator[tuple[str, str]]:
    """(path, name in the stream) of every entry, a directory before what it holds."""
    for d in transfer.dirs:
        for top, subdirs, names in os.walk(d.path):
            subdirs.sort()
            inside = os.path.relpath(top, d.path)
            base = d.name if inside == "." else f"{d.name}/{inside}"
            yield top, base
            for n in sorted(names) + [n for n in subdirs if os.path.islink(os.path.join(top, n))]:
                yield os.path.join(top, n), f"{base}/{n}"


class _Batches:
    """Events handed between threads in batches (a list per hand-over, at most BATCH_BYTES of
    content or BATCH_EVENTS events): one queue hand-over per small file would cost more than
    the file (the threads' switches), so a data directory of many small files is not slower
    per byte than one large file."""

    def __init__(self, out: "queue.Queue[Any]") -> None:
        self.out, self.size = out, 0
        self.events: list[Any] = []

    def put(self, event: Any, size: int = 0) -> None:
        self.events.append(event)
        self.size += size
        if self.size >= BATCH_BYTES or len(self.events) >= BATCH_EVENTS:
            self.flush()

    def flush(self) -> None:
        if self.events:
            self.out.put(self.events)
            self.events, self.size = [], 0


def _read_ahead(transfer: StateTransfer, queue_out: "queue.Queue[Any]",
                stop: threading.Event) -> None:
    """The source's reading thread: headers, content pieces and each file's digest, in
    stream order, into `queue_out` in batches; an error is put last."""
    out = _Batches(queue_out)
    try:
        for path, name in _entries(transfer):
            if stop.is_set():
                return
            facts = os.lstat(path)
            header = {"name": name, "mode": stat.S_IMODE(facts.st_mode), "uid": facts.st_uid,
                      "gid": facts.st_gid, "mtime": int(facts.st_mtime)}
            if stat.S_ISDIR(facts.st_mode):
                out.put(("H", dict(header, type="dir")))
            elif stat.S_ISLNK(facts.st_mode):
                out.put(("H", dict(header, type="link", link=os.readlink(path))))
            elif stat.S_ISREG(facts.st_mode):
                digest, size = hashlib.sha256(), 0
                # a bare descriptor: no file object per file (most files of a data
                # directory are small); a symbolic link put there since the lstat is refused
                descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
                try:
                    out.put(("H", dict(header, type="file", size=facts.st_size)))
                    while size < facts.st_size:
                        piece = os.read(descriptor, min(CHUNK, facts.st_size - size))
                        if not piece:
                            break
                        digest.update(piece)
                        size += len(piece)
                        out.put(("D", piece), len(piece))
                finally:
                    os.close(descriptor)
                if size != facts.st_size:
                    raise TransferError(f"{path} changed while it was read ({size} bytes "
                                        f"of {facts.st_size}): is the instance stopped?")
                out.put(("F", (name, size, digest.hexdigest())))
            else:
                out.put(("S", None))
        out.put(("E", None))
        out.flush()
    except BaseException as exc:  # handed to the sending thread
        out.put(("X", exc))
        out.flush()


def send(stream: BinaryIO, transfer: StateTransfer, progress: Progress, total: int) -> Manifest:
    """Stream the transfer's directories into `stream`; their manifest."""
    manifest = _empty_manifest()
    files = cast(dict[str, list[object]], manifest["files"])
    dirs, links = cast(list[str], manifest["dirs"]), cast(dict[str, str], manifest["links"])
    meter = _Meter(progress, total)
    pieces: queue.Queue[Any] = queue.Queue(maxsize=AHEAD)
    stop = threading.Event()
    reader = threading.Thread(target=_read_ahead, args=(transfer, pieces, stop),
                              name="mesh-state-reader", daemon=True)
    reader.start()
    try:
        for kind, value in _events(pieces):
            if kind == "X":
                raise cast(BaseException, value)
            if kind == "E":
                write_record(stream, b"E", b"")
                break
            if kind == "D":
                piece = cast(bytes, value)
                write_record(stream, b"D", piece)
                meter.tick(len(piece))
            elif kind == "H":
                header = cast(dict[str, object], value)
                write_record(stream, b"H", json.dumps(header).encode())
                if header["type"] == "dir":
                    dirs.append(cast(str, header["name"]))
                elif header["type"] == "link":
                    links[cast(str, header["name"])] = cast(str, header["link"])
            elif kind == "F":
                name, size, digest = cast(tuple[str, int, str], value)
                files[name] = [size, digest]
            elif kind == "S":
                manifest["skipped"] = cast(int, manifest["skipped"]) + 1
    finally:
        stop.set()
        while reader.is_alive():  # let a reader blocked on a full queue finish
            try:
                pieces.get(timeout=0.1)
            except queue.Empty:
                pass
    stream.flush()
    meter.tick(0, last=True)
    return manifest


def _events(batches: "queue.Queue[Any]") -> Iterator[tuple[str, object]]:
    while True:
        yield from cast(list[tuple[str, object]], batches.get())


class _DiskWorker:
    """The target's writing thread: hashes and writes the files' contents while the stream
    is read and decrypted in the caller's. An error stops the writing and is raised by the
    next `put` or by `finish`; the queue is drained so the reader never blocks on it."""

    def __init__(self) -> None:
        self.queue: queue.Queue[Optional[list[tuple[object, ...]]]] = queue.Queue(maxsize=AHEAD)
        self.batch = _Batches(self.queue)
        self.error: Optional[BaseException] = None
        self.written: dict[str, tuple[int, str]] = {}
        # the file being written (the writing thread's alone)
        self.descriptor: Optional[int] = None
        self.digest, self.size, self.name, self.path = hashlib.sha256(), 0, "", ""
        self.header: dict[str, object] = {}
        self.thread = threading.Thread(target=self._run, name="mesh-state-writer", daemon=True)
        self.thread.start()

    def put(self, item: tuple[object, ...], size: int = 0) -> None:
        if self.error is not None:
            raise self.error
        self.batch.put(item, size)

    def finish(self) -> None:
        if self.error is None:
            self.batch.flush()
        self.queue.put(None)
        self.thread.join()
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        try:
            while True:
                items = self.queue.get()
                if items is None:
                    return
                for item in items:
                    self._one(item)
        except BaseException as exc:  # handed to the reading thread
            self.error = exc
            while self.queue.get() is not None:
                pass
        finally:
            if self.descriptor is not None:
                os.close(self.descriptor)

    def _one(self, item: tuple[object, ...]) -> None:
        """One event of a batch: a piece of the open file's content, a file to open, or the
        open file complete."""
        if item[0] == "data":
            data = memoryview(cast(bytes, item[1]))
            self.digest.update(data)
            self.size += len(data)
            while data:
                data = data[os.write(cast(int, self.descriptor), data):]
        elif item[0] == "open":
            self.name, self.path = cast(str, item[1]), cast(str, item[2])
            self.header = cast(dict[str, object], item[3])
            self.digest, self.size = hashlib.sha256(), 0
            self.descriptor = open_new_for_streaming(self.path, 0o600)
        elif item[0] == "close" and self.descriptor is not None:
            header, descriptor = self.header, self.descriptor
            os.fchown(descriptor, cast(int, header["uid"]), cast(int, header["gid"]))
            os.fchmod(descriptor, cast(int, header["mode"]) & 0o7777)
            mtime = cast(int, header["mtime"])
            os.utime(descriptor, (mtime, mtime))  # through the descriptor: no path lookup
            self.descriptor = None
            os.close(descriptor)
            self.written[self.name] = (self.size, self.digest.hexdigest())


def _target(staging: Mapping[str, str], name: object) -> str:
    if not isinstance(name, str) or name.startswith("/") or "\\" in name or "\0" in name:
        raise TransferError(f"the stream names {name!r}: not a relative path")
    parts = name.split("/")
    if any(p in ("", ".", "..") for p in parts) or parts[0] not in staging:
        raise TransferError(f"the stream names {name!r}: outside the declared directories")
    return os.path.join(staging[parts[0]], *parts[1:])


def _number(header: Mapping[str, object], key: str) -> int:
    value = header.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise TransferError(f"an entry's header has no {key}: {header.get('name')!r}")
    return value


def receive(stream: BinaryIO, staging: Mapping[str, str], progress: Progress,
            total: int) -> Manifest:
    """Write the stream's entries below `staging` (state dir name → staging path, each
    absent); the manifest of what was written, hashed as written."""
    manifest = _empty_manifest()
    dirs, links = cast(list[str], manifest["dirs"]), cast(dict[str, str], manifest["links"])
    meter = _Meter(progress, total)
    later: list[tuple[str, int, int]] = []  # directories: (path, mode, mtime) once filled
    disk = _DiskWorker()
    try:
        left = -1  # bytes still due for the file being received; -1: none open
        while True:
            kind, body = read_record(stream)
            if kind == b"D":
                if len(body) > left:
                    raise TransferError("the stream sends more content than a file holds")
                left -= len(body)
                disk.put(("data", body), len(body))
                meter.tick(len(body))
                if left == 0:
                    disk.put(("close",))
                    left = -1
                continue
            if left > 0:
                raise TransferError("the stream ended a file before its declared size")
            if kind == b"E":
                break
            if kind != b"H":
                raise TransferError(f"the stream holds a record of kind {kind!r}")
            try:
                header = json.loads(body)
            except ValueError:
                raise TransferError("an entry's header is not JSON") from None
            if not isinstance(header, dict):
                raise TransferError("an entry's header is not a JSON object")
            path = _target(staging, header.get("name"))
            name = cast(str, header["name"])
            uid, gid = _number(header, "uid"), _number(header, "gid")
            mode, mtime = _number(header, "mode"), _number(header, "mtime")
            kind_of = header.get("type")
            if kind_of == "dir":
                os.makedirs(path, mode=0o700, exist_ok=True)
                os.chown(path, uid, gid)
                later.append((path, mode, mtime))
                dirs.append(name)
            elif kind_of == "file":
                disk.put(("open", name, path, header))
                left = _number(header, "size")
                if left == 0:
                    disk.put(("close",))
                    left = -1
            elif kind_of == "link" and isinstance(header.get("link"), str):
                os.symlink(cast(str, header["link"]), path)
                os.lchown(path, uid, gid)
                links[name] = cast(str, header["link"])
            else:
                raise TransferError(f"the stream holds {name!r}, a kind of entry a transfer "
                                    f"never sends")
    finally:
        disk.finish()
    files = cast(dict[str, list[object]], manifest["files"])
    for name, (size, digest) in sorted(disk.written.items()):
        files[name] = [size, digest]
    for path, mode, mtime in reversed(later):
        os.chmod(path, mode & 0o7777)
        os.utime(path, (mtime, mtime))
    meter.tick(0, last=True)
    return manifest


def differences(sent: Mapping[str, object], received: Mapping[str, object],
                limit: int = 5) -> list[str]:
    """What the target's manifest says otherwise than the source's (empty: verified)."""
    found: list[str] = []
    theirs = cast(Mapping[str, list[object]], sent.get("files", {}))
    ours = cast(Mapping[str, list[object]], received.get("files", {}))
    if len(theirs) != len(ours):
        found.append(f"{len(ours)} file(s) arrived, {len(theirs)} were sent")
    for name in sorted(set(theirs) | set(ours)):
        a, b = theirs.get(name), ours.get(name)
        if a is None or b is None:
            found.append(f"{name}: {'not sent' if a is None else 'did not arrive'}")
        elif list(a) != list(b):
            what = "size" if a[0] != b[0] else "SHA-256"
            found.append(f"{name}: its {what} differs ({a[0]} bytes sent, {b[0]} arrived)")
    if sorted(cast(list[str], sent.get("dirs", []))) != sorted(
            cast(list[str], received.get("dirs", []))):
        found.append("the directories differ")
    if dict(cast(Mapping[str, str], sent.get("links", {}))) != dict(
            cast(Mapping[str, str], received.get("links", {}))):
        found.append("the symbolic links differ")
    return found[:limit] + ([f"… and {len(found) - limit} more"] if len(found) > limit else [])


def human(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.1f} {unit}" if unit != "B" else f"{int(count)} B"
        count /= 1024
    return f"{count:.1f} GiB"  # pragma: no cover


def progress_line(instance: str, verb: str, done: int, total: int, seconds: float) -> str:
    rate = done / seconds if seconds > 0 else 0.0
    percent = f" ({100 * done // total}%)" if total else ""
    return f"{instance}: {human(done)} of {human(total)}{percent} {verb}, {human(rate)}/s"
