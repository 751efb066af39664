"""A container's secret files on the node: where each is written, what its container mounts,
and what its config digest says of them.

Invariants:
- Each container's secret files live in `<state root>/.mesh/secrets/<container>/` (the
  executor's own directory, never an instance's state), written whole, mode 0400 and owned by
  the uid:gid its declaration names; that directory, and it alone, is bind-mounted read-only
  at the container's SECRETS_DIR (/run/secrets). The directory is root's, mode 0711: a process
  in the container opens the file it owns by name and lists nothing.
- A value is substituted here only (through the same substituter as env values) and goes
  only into the file's bytes: never into an Op, a cause, a label or the container's
  environment. The config digest carries a one-way fingerprint of each file's content, so a
  new generation recreates the container, as a changed env value does; a provider's admin
  secret its own server holds is fingerprinted as written (its token): the provisioner puts a
  new generation in force on the running server, the file is rewritten and the server is not
  recreated (resolver.rotation.server_held_secrets).
- A declared path that is not a plain file directly in SECRETS_DIR is a Refusal, never a
  write outside the container's directory.
"""

from __future__ import annotations

import hashlib
import re
from typing import Optional, Protocol

import attrs

from resolver import ContainerDecl, SecretRef
from resolver.rendering import SECRETS_DIR, secret_token

from executors.node.apply.compare import DesiredFile, Refusal
from executors.node.apply.diff import fingerprint
from executors.node.node_paths import NodePaths

SECRET_FILE_MODE = 0o400
SECRET_DIR_MODE = 0o711  # traverse, not list: each file is readable by its owner alone
_FILE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")

class Substitute(Protocol):
    """render.py's substituter: the value with its tokens filled, None when refused."""

    def __call__(self, value: str, refs: dict[str, SecretRef], subject: str, key: str, *,
                 multiline: bool = False) -> Optional[str]: ...


@attrs.frozen
class SecretFiles:
    """What one container's secret files add to the node: the files (with their bytes), the
    read-only bind of their directory, and the config summary's entries."""

    files: tuple[DesiredFile, ...] = ()
    contents: dict[str, bytes] = attrs.field(factory=dict, repr=False, eq=False)
    binds: tuple[tuple[str, str, str], ...] = ()
    summary: dict[str, str] = attrs.field(factory=dict)


def directory_of(paths: NodePaths, container: str) -> str:
    """The node's directory of a container's secret files."""
    return str(paths.secrets_dir / container.replace("/", "_"))


def secret_files(c: ContainerDecl, paths: NodePaths, substitute: Substitute,
                 in_place: frozenset[str], refusals: list[Refusal]) -> SecretFiles:
    """The container's secret files rendered (`in_place`: the credentials its provisioner puts
    in force on the running server, fingerprinted by token)."""
    if not c.secret_files:
        return SecretFiles()
    refs = {ref.credential: ref for ref in c.secrets}
    directory = directory_of(paths, c.name)
    files: list[DesiredFile] = []
    contents: dict[str, bytes] = {}
    summary: dict[str, str] = {}
    for f in c.secret_files:
        parent, _, name = f.path.rpartition("/")
        if parent != SECRETS_DIR or not _FILE_NAME.match(name):
            refusals.append(Refusal(c.name, f"secret file {f.path!r} is not a file directly in "
                                    f"{SECRETS_DIR}, the container's secret directory"))
            continue
        owner = _owner(f.owner)
        if owner is None:
            refusals.append(Refusal(c.name, f"secret file {f.path}: owner {f.owner!r} is not "
                                    "uid:gid"))
            continue
        value = substitute(f.content, refs, c.name, f"secret file {f.path}", multiline=True)
        if value is None:
            continue
        data = value.encode()
        path = f"{directory}/{name}"
        files.append(DesiredFile(path, hashlib.sha256(data).hexdigest(), SECRET_FILE_MODE,
                                 owner))
        contents[path] = data
        held = any(secret_token(credential) in f.content for credential in in_place)
        summary[f"secret-file {f.path}"] = fingerprint(c.name, f.path,
                                                       f.content if held else value)
        summary[f"secret-file {f.path} owner"] = f"{owner[0]}:{owner[1]}"
    binds = ((directory, SECRETS_DIR, "ro"),)
    return SecretFiles(tuple(files), contents, binds, summary)


def _owner(text: Optional[str]) -> Optional[tuple[int, int]]:
    uid, sep, gid = (text or "0:0").partition(":")
    if not (uid.isdigit() and sep and gid.isdigit()):
        return None
    return int(uid), int(gid)
