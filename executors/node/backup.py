"""Back up and restore one instance on the node that runs it: a consistent dump read from its
running container (the module's `backup:`), or its state directories copied while its
containers are stopped; written to / read from the restic repository (node/restic.py).

Invariants:
- The dump streams from the container's exec straight into `restic backup --stdin`; it is
  never written to the node's disk whole.
- A dump whose command exits non-zero makes no snapshot the mesh lists as good: the error is
  raised after restic finished, and the snapshot it wrote is forgotten.
- A restore checks everything it can before it changes anything (the snapshot exists, is of
  the instance's module, the repository opens) and reads the whole dump out of the
  repository (into an unlinked 0600 temporary file) before the restore command starts, so a
  repository failure changes nothing; stop-copy restarts what it stopped, also when the copy
  failed, and replaces each state directory whole.
- Progress is said as it happens (`say`); nothing secret is said.
"""

from __future__ import annotations

import os
import socket
import struct
import tempfile
import threading
from typing import IO, Callable, Iterator, Optional

import docker

from resolver import BackupError, MeshError
from resolver.backups import BackupJob, Snapshot, snapshot_to_restore
from resolver.rendering import STATE_ROOT

from executors.common.marks import LABEL_CONTAINER, LABEL_INSTANCE, LABEL_MESH
from executors.node.node_paths import DEFAULT_STATE_ROOT
from executors.node.restic import Repository, ResticError, Written

Say = Callable[[str], None]


class CommandFailed(MeshError):
    """The module's dump or restore command exited non-zero in the container."""
CHUNK = 1 << 20


def _container(api: docker.APIClient, job: BackupJob, container: str) -> str:
    rows = api.containers(filters={"label": [f"{LABEL_MESH}={job.mesh}",
                                             f"{LABEL_INSTANCE}={job.instance}",
                                             f"{LABEL_CONTAINER}={container}"]})
    if not rows:
        raise BackupError(f"no running container {container!r} of {job.instance} on this "
                          "node; a dump is read from the running server")
    return str(rows[0]["Id"])


def _running(api: docker.APIClient, job: BackupJob) -> list[str]:
    """The instance's running containers (of its own mesh only), in the order they run."""
    rows = api.containers(filters={"label": [f"{LABEL_MESH}={job.mesh}",
                                             f"{LABEL_INSTANCE}={job.instance}"]})
    return [str(r["Id"]) for r in sorted(rows, key=lambda r: int(r.get("Created", 0)))]


def state_paths(job: BackupJob, state_root: str = DEFAULT_STATE_ROOT) -> tuple[str, ...]:
    """The job's state directories on this node, under `state_root` (as `mesh apply
    --state-root` puts them) instead of under the declarations' state root (the resolver's
    `STATE_ROOT`, which names them)."""
    return tuple(state_root.rstrip("/") + path[len(STATE_ROOT):]
                 if path.startswith(STATE_ROOT + "/") else path for path in job.state)


def backup(api: docker.APIClient, job: BackupJob, repository: Repository,
           paths: tuple[str, ...], say: Say) -> Written:
    """One snapshot of the job's instance; what it wrote."""
    if repository.ensure():
        say(f"initialised the restic repository {repository.location}")
    if job.method is None:
        return _stop_copy(api, job, repository, paths, say)
    container = _container(api, job, job.method.container)
    say(f"{job.instance}: dumping with {' '.join(job.method.dump[:1])} in "
        f"{job.method.container} into {repository.location}")
    exec_id = api.exec_create(container, list(job.method.dump), stdout=True,
                              stderr=True)["Id"]
    errors: list[bytes] = []

    def chunks() -> Iterator[bytes]:
        for out, err in api.exec_start(exec_id, stream=True, demux=True):
            if err:
                errors.append(err[-2000:])
            if out:
                yield out

    try:
        written: Optional[Written] = repository.backup_stream(chunks(), job.instance,
                                                              job.module, job.node)
    except ResticError:
        if api.exec_inspect(exec_id).get("ExitCode") in (0, None):
            raise
        written = None  # restic refused an empty dump: the dump's failure is what to say
    code = api.exec_inspect(exec_id).get("ExitCode")
    if code != 0 or written is None:
        if written is not None:
            repository.run(["forget", written.snapshot])
        detail = b"".join(errors).decode(errors="replace").strip().splitlines()[-2:]
        raise CommandFailed(f"{job.instance}: {job.method.dump[0]} exited {code}: "
                            + " / ".join(detail) + "; no snapshot was kept")
    return written


def _stop_copy(api: docker.APIClient, job: BackupJob, repository: Repository,
               paths: tuple[str, ...], say: Say) -> Written:
    running = _running(api, job)
    say(f"{job.instance}: stopping {len(running)} container(s) to copy "
        + ", ".join(paths))
    for container in reversed(running):
        api.stop(container, timeout=30)
    try:
        return repository.backup_paths(paths, job.instance, job.module, job.node)
    finally:
        for container in running:
            api.start(container)
        say(f"{job.instance}: started again")


def restore(api: docker.APIClient, job: BackupJob, repository: Repository, wanted: str,
            paths: tuple[str, ...], say: Say) -> Snapshot:
    """Put snapshot `wanted` back into the job's instance; the snapshot restored."""
    if not repository.exists():
        raise BackupError(f"there is no restic repository at {repository.location} (or its "
                          "password is not this one)")
    snapshot = snapshot_to_restore(job, repository.snapshots(sizes=False), wanted)
    if job.method is None:
        running = _running(api, job)
        say(f"{job.instance}: stopping {len(running)} container(s) to put back "
            f"snapshot {snapshot.id[:8]}")
        for container in reversed(running):
            api.stop(container, timeout=30)
        try:
            _put_back(repository, snapshot, paths)
        finally:
            for container in running:
                api.start(container)
        return snapshot
    container = _container(api, job, job.method.container)
    say(f"{job.instance}: restoring snapshot {snapshot.id[:8]} with "
        f"{job.method.restore[0]} in {job.method.container}")
    with tempfile.TemporaryFile() as dumped:
        repository.dump(snapshot.id, job.instance, dumped)
        dumped.seek(0)
        code, output = _exec_with_input(api, container, list(job.method.restore), dumped)
    if code != 0:
        raise CommandFailed(f"{job.instance}: {job.method.restore[0]} exited {code}: "
                          + " / ".join(output.strip().splitlines()[-2:]))
    return snapshot


def _put_back(repository: Repository, snapshot: Snapshot, paths: tuple[str, ...]) -> None:
    """Each state directory replaced whole by the snapshot's copy: restored beside it first,
    then swapped in by renames (no file of the newer state is left among the older)."""
    taken = set(repository.paths_of(snapshot.id))
    missing = [p for p in paths if p not in taken]
    if missing:
        raise BackupError(f"snapshot {snapshot.id[:8]} holds no copy of {', '.join(missing)}")
    for path in paths:
        parent = os.path.dirname(path)
        with tempfile.TemporaryDirectory(dir=parent, prefix=".mesh-restore-") as scratch:
            repository.restore_into(snapshot.id, scratch, path)
            old = os.path.join(scratch, "before")
            if os.path.lexists(path):
                os.rename(path, old)
            os.rename(scratch + path, path)


def _exec_with_input(api: docker.APIClient, container: str, command: list[str],
                     source: IO[bytes]) -> tuple[int, str]:
    """Run `command` in `container` with `source` on its standard input: exit code, output."""
    exec_id = api.exec_create(container, command, stdin=True, stdout=True, stderr=True)["Id"]
    attached = api.exec_start(exec_id, socket=True)
    raw: socket.socket = getattr(attached, "_sock")  # the unix socket under the SDK's SocketIO
    output: list[bytes] = []

    def read() -> None:  # the output is read while the input is written: no full buffer
        buffered = b""
        while True:
            data = raw.recv(65536)
            if not data:
                break
            buffered += data
            while len(buffered) >= 8:  # the Engine's stream frames: kind, 3 zeros, length
                length = struct.unpack(">I", buffered[4:8])[0]
                if len(buffered) < 8 + length:
                    break
                output.append(buffered[8:8 + length])
                buffered = buffered[8 + length:]
                del output[:-200]

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        while True:
            chunk = source.read(CHUNK)
            if not chunk:
                break
            raw.sendall(chunk)
        raw.shutdown(socket.SHUT_WR)
    except OSError:
        pass  # the command stopped reading (it failed): its exit code and output say why
    reader.join()
    raw.close()
    code = api.exec_inspect(exec_id).get("ExitCode")
    return int(code if code is not None else -1), b"".join(output).decode(errors="replace")


__all__ = ["backup", "restore", "state_paths", "CommandFailed", "ResticError"]
