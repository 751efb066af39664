"""Backing up and restoring the control node: one archive, encrypted with a passphrase.

Invariants:
- What the control node needs to go on is the whole mesh directory (mesh.yaml, the catalogue
  when it lies inside, the ledger with its escrow, the CA key and certificate, the delivery
  key and certificate beside them, the control state `.control/`: published declarations,
  reports, enrolment tokens, node accounts, the control account's broker password) and the
  control node's own key (it opens the escrow). All of it goes into one archive, taken under
  the ledger lock so that no writer is half way through.
- The archive is `HEADER` (magic, format version, KDF id, argon2id opslimit and memlimit,
  salt) followed by a PyNaCl SecretBox (XSalsa20-Poly1305) of the header again and a gzipped
  tar. The key is argon2id(passphrase, salt) with the parameters the header names (bounded on
  reading, so a hostile header cannot ask for unbounded memory). The header's copy inside the
  box authenticates it: a header changed by a bit makes another key or fails the comparison.
  No cryptography here but PyNaCl's.
- Nothing is written until everything was checked: a wrong passphrase, an altered or
  truncated archive, a file that is not an archive, a target that exists are refused first.
  The archive is written with write_atomic (0600). A restore unpacks into a temp directory
  beside the target, lets the caller's edit change the staged copy (control_move: this machine
  the control node; an edit's refusal is a refusal with nothing written) and renames it into
  place; the key file is created exclusively.
- A tar member is taken only when it is a regular file or a directory with a relative name
  under `mesh/`, `state/` or `key/` and no `..`; modes and mtimes are kept, owners are not.
"""

from __future__ import annotations

import datetime
import gzip
import io
import json
import os
import shutil
import struct
import tarfile
import tempfile
from pathlib import Path
from typing import Callable, Optional, Sequence

import attrs
import nacl.exceptions
import nacl.pwhash
import nacl.secret
import nacl.utils

from resolver import MeshError
from resolver.documents import MESH_FILE, load_mesh

from executors.common.atomic import write_atomic, write_exclusive
from executors.common.keys import public_key_of_file
from executors.control.control_state import DEFAULT_DIRNAME
from executors.control.loading import PathLike, mesh_lock, mesh_paths

MAGIC = b"MESHBKUP"
VERSION = 1
KDF_ARGON2ID = 1
#: magic, version, KDF id, opslimit, memlimit (bytes), salt: 38 bytes, big-endian.
HEADER = struct.Struct(">8sBBIQ16s")
OPSLIMIT = nacl.pwhash.argon2id.OPSLIMIT_MODERATE  # 3 passes
MEMLIMIT = nacl.pwhash.argon2id.MEMLIMIT_MODERATE  # 256 MiB
#: The most a header may ask for (libsodium's "sensitive" level): more is not our archive.
MAX_OPSLIMIT = nacl.pwhash.argon2id.OPSLIMIT_SENSITIVE
MAX_MEMLIMIT = nacl.pwhash.argon2id.MEMLIMIT_SENSITIVE
#: What SecretBox adds to what it encrypts: its nonce and its MAC.
BOX_OVERHEAD = nacl.secret.SecretBox.NONCE_SIZE + nacl.secret.SecretBox.MACBYTES
MIN_PASSPHRASE = 8
MANIFEST = "BACKUP.json"
MESH, STATE, KEY = "mesh", "state", "key/control.key"


class BackupError(MeshError):
    """A backup cannot be made or an archive cannot be restored."""


@attrs.frozen
class Backup:
    """What a backup holds, as said to the operator."""
    mesh: str
    files: int
    key: bool
    state_outside: bool
    catalogue_outside: Optional[str]  # the catalogue's path as mesh.yaml names it, when outside


@attrs.frozen
class Restored:
    mesh: str
    directory: Path
    files: int
    key: Optional[Path]
    catalogue_outside: Optional[str]
    catalogue_missing: bool
    changes: tuple[str, ...] = ()  # what `edit` said it changed


#: An edit of the restored mesh directory before it is put in place: (the staged directory,
#: the control node's key from the archive or --key, when there is one) → the lines it said.
Edit = Callable[[Path, Optional[bytes]], Sequence[str]]


def _inside(path: Path, directory: Path) -> bool:
    try:
        path.resolve().relative_to(directory.resolve())
    except ValueError:
        return False
    return True


def _is_temp(name: str) -> bool:
    return name.startswith(".") and name.endswith(".tmp")  # write_atomic's, mid-write


def _add_tree(archive: tarfile.TarFile, root: Path, prefix: str) -> int:
    """Every directory and regular file under `root` as `prefix/…`: their count."""
    count = 0
    archive.add(root, arcname=prefix, recursive=False)
    for current, directories, names in os.walk(root):
        here = Path(current)
        directories[:] = sorted(d for d in directories if not (here / d).is_symlink())
        for name in sorted(directories):
            archive.add(here / name, arcname=f"{prefix}/{(here / name).relative_to(root)}",
                        recursive=False)
        for name in sorted(names):
            path = here / name
            if _is_temp(name) or path.is_symlink() or not path.is_file():
                continue
            archive.add(path, arcname=f"{prefix}/{path.relative_to(root)}", recursive=False)
            count += 1
    return count


def _derive(passphrase: bytes, salt: bytes, opslimit: int, memlimit: int) -> bytes:
    return nacl.pwhash.argon2id.kdf(nacl.secret.SecretBox.KEY_SIZE, passphrase, salt,
                                    opslimit=opslimit, memlimit=memlimit)


def backup(directory: PathLike, out: PathLike, passphrase: bytes,
           key_file: Optional[PathLike], state_dir: Optional[PathLike] = None,
           now: Optional[datetime.datetime] = None) -> Backup:
    """Write the control node's archive of `directory` (and its state directory, and the
    control node's key) to `out`, encrypted with `passphrase`."""
    root = Path(directory)
    if not (root / MESH_FILE).is_file():
        raise BackupError(f"{root / MESH_FILE}: not found; name the mesh directory of the "
                          f"control node")
    if len(passphrase) < MIN_PASSPHRASE:
        raise BackupError(f"the passphrase is shorter than {MIN_PASSPHRASE} characters; "
                          f"choose a longer one")
    target = Path(out)
    if _inside(target, root):
        raise BackupError(f"{target}: inside the mesh directory {root}; write the archive "
                          f"elsewhere (it would be backed up into the next one)")
    mesh, _ = load_mesh((root / MESH_FILE).read_bytes(), str(root / MESH_FILE))
    catalogue, ledger = mesh_paths(root)
    ca_key = root / mesh.ca.path
    for what, path in (("the ledger (mesh.yaml `ledger:`)", ledger),
                       ("the CA key (mesh.yaml `ca.path`)", ca_key)):
        if not _inside(path, root):
            raise BackupError(f"{path}: {what} lies outside the mesh directory {root}; a "
                              f"backup holds the mesh directory: move it inside")
    state = Path(state_dir) if state_dir else root / DEFAULT_DIRNAME
    state_outside = not _inside(state, root)
    public_key = None
    if key_file is not None:
        public_key = public_key_of_file(key_file)
        control = [name for name, node in mesh.nodes.items() if node.control]
        known = mesh.nodes[control[0]].public_key if control else None
        if known and known != public_key:
            raise BackupError(f"{key_file}: not the control node's key ({control[0]}'s "
                              f"public-key in mesh.yaml differs); name the control node's "
                              f"key with --key")
    stamp = now or datetime.datetime.now(datetime.timezone.utc)
    manifest = {"format": VERSION, "mesh": mesh.mesh,
                "made": stamp.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "state-outside": state_outside, "key": key_file is not None,
                "catalogue-outside": None if _inside(catalogue, root) else str(
                    os.path.relpath(catalogue, root))}
    buffer = io.BytesIO()
    with mesh_lock(root):  # no ledger or control-state writer is half way through
        with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
            files = _add_tree(archive, root, MESH)
            if state_outside and state.is_dir():
                files += _add_tree(archive, state, STATE)
            if key_file is not None:
                archive.add(Path(key_file), arcname=KEY, recursive=False)
                files += 1
            data = json.dumps(manifest, sort_keys=True).encode("utf-8")
            info = tarfile.TarInfo(MANIFEST)
            info.size, info.mode, info.mtime = len(data), 0o600, int(stamp.timestamp())
            archive.addfile(info, io.BytesIO(data))
    salt = nacl.utils.random(nacl.pwhash.argon2id.SALTBYTES)
    header = HEADER.pack(MAGIC, VERSION, KDF_ARGON2ID, OPSLIMIT, MEMLIMIT, salt)
    box = nacl.secret.SecretBox(_derive(passphrase, salt, OPSLIMIT, MEMLIMIT))
    sealed = box.encrypt(header + gzip.compress(buffer.getvalue(), mtime=0))
    try:
        write_atomic(target, header + bytes(sealed), mode=0o600)
    except OSError as exc:
        raise BackupError(f"{target}: cannot be written: {exc.strerror or exc}; name a "
                          f"writable place with --out") from None
    return Backup(mesh.mesh, files, key_file is not None, state_outside,
                  manifest["catalogue-outside"] if isinstance(
                      manifest["catalogue-outside"], str) else None)


def _opened(archive_file: Path, passphrase: bytes) -> bytes:
    """The tar inside the archive; BackupError for anything that is not our archive whole."""
    try:
        data = archive_file.read_bytes()
    except OSError as exc:
        raise BackupError(f"{archive_file}: cannot be read: {exc.strerror or exc}") from None
    if data[:len(MAGIC)] != MAGIC:
        raise BackupError(f"{archive_file}: not a mesh control backup (no {MAGIC.decode()} "
                          f"header); name the file `mesh control backup` wrote")
    if len(data) < HEADER.size + BOX_OVERHEAD:
        raise BackupError(f"{archive_file}: truncated ({len(data)} bytes, less than a header "
                          f"and an empty box); use another copy of the archive")
    magic, version, kdf, opslimit, memlimit, salt = HEADER.unpack(data[:HEADER.size])
    if version != VERSION or kdf != KDF_ARGON2ID:
        raise BackupError(f"{archive_file}: backup format {version} (KDF {kdf}) is not one "
                          f"this mesh reads (format {VERSION}, argon2id); restore it with the "
                          f"mesh version that wrote it")
    if not (1 <= opslimit <= MAX_OPSLIMIT and nacl.pwhash.argon2id.MEMLIMIT_MIN <= memlimit
            <= MAX_MEMLIMIT):
        raise BackupError(f"{archive_file}: the header asks for argon2id opslimit {opslimit}, "
                          f"memlimit {memlimit}, beyond what a backup uses: the file was "
                          f"altered; use another copy of the archive")
    box = nacl.secret.SecretBox(_derive(passphrase, salt, opslimit, memlimit))
    try:
        plain = box.decrypt(data[HEADER.size:])
    except (nacl.exceptions.CryptoError, ValueError):
        raise BackupError(f"{archive_file}: cannot be opened: a wrong passphrase, or the "
                          f"archive is truncated or altered; try the passphrase again or "
                          f"another copy of the archive") from None
    if plain[:HEADER.size] != data[:HEADER.size]:
        raise BackupError(f"{archive_file}: its header was altered; use another copy of the "
                          f"archive")
    try:
        return gzip.decompress(plain[HEADER.size:])
    except (OSError, EOFError, ValueError) as exc:
        raise BackupError(f"{archive_file}: the archive's contents are damaged ({exc}); "
                          f"use another copy") from None


def _members(archive: tarfile.TarFile, archive_file: Path) -> list[tarfile.TarInfo]:
    found = archive.getmembers()
    for member in found:
        parts = Path(member.name).parts
        if (member.name.startswith("/") or ".." in parts or not parts
                or parts[0] not in (MESH, STATE, "key", MANIFEST)
                or not (member.isreg() or member.isdir())):
            raise BackupError(f"{archive_file}: holds {member.name!r}, which a backup never "
                              f"does; use another copy of the archive")
    return found


def restore(archive_file: PathLike, directory: PathLike, passphrase: bytes,
            key_file: Optional[PathLike], edit: Optional[Edit] = None) -> Restored:
    """Unpack the archive into `directory` (which must not exist, or be empty) and the control
    node's key into `key_file`, the staged directory changed by `edit` first; nothing is
    written when anything is wrong (an error `edit` raises included)."""
    source, target = Path(archive_file), Path(directory)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise BackupError(f"{target}: exists and is not empty; restore into a new directory "
                          f"(nothing was written)")
    tar_bytes = _opened(source, passphrase)
    try:
        archive = tarfile.open(fileobj=io.BytesIO(tar_bytes), mode="r:")
        members = _members(archive, source)
        manifest_member = archive.extractfile(MANIFEST)
        manifest = json.loads(manifest_member.read()) if manifest_member else None
    except (tarfile.TarError, KeyError, ValueError) as exc:
        raise BackupError(f"{source}: the archive's contents are damaged ({exc}); use another "
                          f"copy") from None
    if not isinstance(manifest, dict):
        raise BackupError(f"{source}: the archive has no {MANIFEST}; use another copy")
    names = {member.name for member in members}
    has_key = KEY in names
    key_path = Path(key_file) if key_file is not None else None
    if has_key and key_path is None:
        raise BackupError("the archive holds the control node's key: say where to write it "
                          "with --key FILE (or MESH_CONTROL_KEY); nothing was written")
    key_member = archive.extractfile(KEY) if has_key else None
    key_data = key_member.read() if key_member is not None else b""
    control_key = key_data if has_key else _read_key(key_path)
    if key_path is not None and has_key and (key_path.exists() or key_path.is_symlink()):
        try:
            same = key_path.read_bytes() == key_data
        except OSError:
            same = False
        if not same:
            raise BackupError(f"{key_path}: a different key file exists already; name "
                              f"another path with --key (nothing was written)")
        key_path = None  # the same key is there already
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".restore",
                                        dir=target.parent))
    except OSError as exc:
        raise BackupError(f"{target.parent}: cannot write there: {exc.strerror or exc}; "
                          f"name another --dir (nothing was written)") from None
    placed_key = False
    try:
        archive.extractall(staging, members=[m for m in members if m.name.split("/")[0]
                                             in (MESH, STATE)], filter="data")
        for member in members:  # the "data" filter keeps no directory's mode: ca/ is 0700
            if member.isdir() and member.name.split("/")[0] in (MESH, STATE):
                os.chmod(staging / member.name, member.mode & 0o777)
        mesh_root = staging / MESH
        if (staging / STATE).is_dir():
            state = mesh_root / DEFAULT_DIRNAME
            if state.exists():
                raise BackupError(f"{source}: holds a state directory and {DEFAULT_DIRNAME}/ "
                                  f"both; use another copy of the archive")
            (staging / STATE).rename(state)
        files = sum(1 for m in members if m.isreg() and m.name.split("/")[0] in (MESH, STATE))
        changes = tuple(edit(mesh_root, control_key)) if edit is not None else ()
        for path in (mesh_root, *(p for p in mesh_root.rglob("*") if p.is_file())):
            _fsync(path)
        if key_path is not None:
            write_exclusive(key_path, key_data, mode=0o600)
            placed_key = True
        if target.exists():
            target.rmdir()  # empty, checked above: rename needs it gone
        os.rename(mesh_root, target)
        _fsync(target.parent)
    except BaseException as exc:
        if placed_key and key_path is not None:
            key_path.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise BackupError(f"{target}: cannot restore there: {exc.strerror or exc} "
                              f"(nothing was left behind)") from None
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    catalogue_outside = manifest.get("catalogue-outside")
    outside = catalogue_outside if isinstance(catalogue_outside, str) else None
    return Restored(str(manifest.get("mesh", "")), target, files + (1 if has_key else 0),
                    Path(key_file) if has_key and key_file is not None else None, outside,
                    outside is not None and not (target / outside).is_dir(), changes)


def _read_key(path: Optional[Path]) -> Optional[bytes]:
    """The key kept at `path` when the archive holds none (a backup made --without-key)."""
    if path is None or not path.is_file():
        return None
    try:
        return path.read_bytes()
    except OSError:
        return None


def _fsync(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
