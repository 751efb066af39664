"""A restic repository, driven through Debian's `restic` command: the versioned, encrypted,
deduplicated store the node's backups are written to (the mesh writes no store of its own).

Invariants:
- The repository password is read by restic from a file (RESTIC_PASSWORD_FILE), and a
  location with credentials (a backup store's login) from a file (`--repository-file`),
  never passed on a command line, in the environment's value or in what is printed.
- restic's output goes to temporary files, never to a pipe left unread, so a long backup can
  not deadlock on a full pipe; a failure is a ResticError carrying restic's last lines.
- Every snapshot the mesh writes carries the tags `mesh-instance=<instance>` and
  `mesh-module=<module>`; snapshots without them are listed by no mesh command.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from datetime import datetime
from typing import IO, Any, Iterator, Optional, Sequence

import attrs

from resolver import MeshError
from resolver.backups import Snapshot

TAG_INSTANCE = "mesh-instance="
TAG_MODULE = "mesh-module="
STDIN_SUFFIX = ".dump"  # a dump is kept in the snapshot as /<instance>.dump


class ResticError(MeshError):
    """restic failed, or is not installed."""


@attrs.frozen
class Written:
    """What one backup wrote: the snapshot, the bytes read, the bytes the repository grew by
    (after deduplication and compression), and the seconds it took."""

    snapshot: str
    read: int
    added: int
    seconds: float


@attrs.frozen
class Repository:
    location: str  # what restic calls the repository (a path, sftp:..., rest:...): printable
    password_file: str
    # a 0600 file holding the location WITH its credentials (a store's login), read by restic
    # instead of `location` (which then names it without them, for what is said)
    repository_file: Optional[str] = None
    cacert: Optional[str] = None  # the CA certificate that verifies a rest: server's TLS

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        for name in ("RESTIC_PASSWORD", "RESTIC_REPOSITORY", "RESTIC_REPOSITORY_FILE",
                     "RESTIC_PASSWORD_COMMAND", "RESTIC_CACERT"):
            env.pop(name, None)
        if self.repository_file is None:
            env.update(RESTIC_REPOSITORY=self.location)
        env.update(RESTIC_PASSWORD_FILE=self.password_file)
        return env

    def _globals(self) -> list[str]:
        """Global options: paths only (the files hold the secrets)."""
        found = []
        if self.repository_file is not None:
            found += ["--repository-file", self.repository_file]
        if self.cacert:
            found += ["--cacert", self.cacert]
        return found

    def run(self, args: Sequence[str], stdin: Optional[IO[bytes]] = None,
            stdout: Optional[IO[bytes]] = None) -> str:
        """restic `args`; its standard output as text (unless `stdout` takes it)."""
        binary = shutil.which("restic")
        if binary is None:
            raise ResticError("restic is not installed; install it (apt-get install restic)")
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            done = subprocess.run([binary, *self._globals(), *args], stdin=stdin or subprocess.DEVNULL,
                                  stdout=stdout or out, stderr=err, env=self._env(),
                                  check=False)
            err.seek(0)
            if done.returncode != 0:
                last = err.read().decode(errors="replace").strip().splitlines()[-3:]
                raise ResticError(f"restic {args[0]} failed (exit {done.returncode}): "
                                  + " / ".join(last))
            out.seek(0)
            return out.read().decode(errors="replace")

    def exists(self) -> bool:
        try:
            self.run(["cat", "config"])
        except ResticError:
            return False
        return True

    def ensure(self) -> bool:
        """Initialise the repository when there is none: True if it was made now."""
        if not os.path.isfile(self.password_file):
            raise ResticError(f"the backup password file {self.password_file} does not exist")
        if self.exists():
            return False
        self.run(["init"])
        return True

    def backup_stream(self, chunks: Iterator[bytes], instance: str, module: str,
                      host: str) -> Written:
        """One snapshot of the bytes `chunks` yields, kept as /<instance>.dump."""
        started = datetime.now().timestamp()
        binary = shutil.which("restic") or "restic"
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            process = subprocess.Popen(
                [binary, *self._globals(), "backup", "--json", "--stdin", "--stdin-filename",
                 instance + STDIN_SUFFIX, "--host", host, "--tag", TAG_INSTANCE + instance,
                 "--tag", TAG_MODULE + module],
                stdin=subprocess.PIPE, stdout=out, stderr=err, env=self._env())
            assert process.stdin is not None
            try:
                for chunk in chunks:
                    process.stdin.write(chunk)
            except BrokenPipeError:
                pass
            finally:
                process.stdin.close()
                code = process.wait()
            out.seek(0)
            err.seek(0)
            if code != 0:
                last = err.read().decode(errors="replace").strip().splitlines()[-3:]
                raise ResticError(f"restic backup failed (exit {code}): " + " / ".join(last))
            return _written(out.read().decode(errors="replace"),
                            datetime.now().timestamp() - started)

    def backup_paths(self, paths: Sequence[str], instance: str, module: str,
                     host: str) -> Written:
        started = datetime.now().timestamp()
        text = self.run(["backup", "--json", "--host", host, "--tag", TAG_INSTANCE + instance,
                         "--tag", TAG_MODULE + module, *paths])
        return _written(text, datetime.now().timestamp() - started)

    def snapshots(self, sizes: bool = True) -> tuple[Snapshot, ...]:
        """The mesh's snapshots, oldest first; `sizes`: with what each restores to."""
        rows: list[dict[str, Any]] = json.loads(self.run(["snapshots", "--json"]) or "[]")
        found = []
        for row in rows:
            tags = row.get("tags") or []
            instance = _tag(tags, TAG_INSTANCE)
            module = _tag(tags, TAG_MODULE)
            if instance is None or module is None:
                continue
            size = 0
            if sizes:
                stats = json.loads(self.run(["stats", "--json", "--mode", "restore-size",
                                             str(row["id"])]))
                size = int(stats.get("total_size", 0))
            found.append(Snapshot(id=str(row["id"]), time=_epoch(str(row["time"])),
                                  instance=instance, module=module, size=size))
        return tuple(sorted(found, key=lambda s: (s.time, s.id)))

    def stored_bytes(self) -> int:
        """What the repository holds on its disk (deduplicated, compressed)."""
        stats = json.loads(self.run(["stats", "--json", "--mode", "raw-data"]))
        return int(stats.get("total_size", 0))

    def paths_of(self, snapshot: str) -> tuple[str, ...]:
        rows: list[dict[str, Any]] = json.loads(self.run(["snapshots", "--json", snapshot]))
        return tuple(str(p) for row in rows for p in row.get("paths") or [])

    def dump(self, snapshot: str, instance: str, into: IO[bytes]) -> None:
        """Write the dump kept in `snapshot` to `into`."""
        self.run(["dump", snapshot, "/" + instance + STDIN_SUFFIX], stdout=into)

    def restore_into(self, snapshot: str, target: str, path: str) -> None:
        """`path` as `snapshot` holds it, under the directory `target` (owners and modes
        kept)."""
        self.run(["restore", snapshot, "--target", target, "--include", path])


def _tag(tags: list[str], prefix: str) -> Optional[str]:
    return next((t[len(prefix):] for t in tags if t.startswith(prefix)), None)


def _epoch(text: str) -> int:
    # restic writes RFC 3339 with nanoseconds; Python reads at most microseconds
    head, _, rest = text.partition(".")
    zone = rest.lstrip("0123456789") if rest else ""
    return int(datetime.fromisoformat(head + (zone or "")).timestamp())


def _written(text: str, seconds: float) -> Written:
    summary: dict[str, Any] = {}
    for line in text.splitlines():
        if '"summary"' in line:
            summary = json.loads(line)
    if not summary:
        raise ResticError("restic backup printed no summary")
    return Written(snapshot=str(summary["snapshot_id"]),
                   read=int(summary.get("total_bytes_processed", 0)),
                   added=int(summary.get("data_added", 0)), seconds=seconds)
