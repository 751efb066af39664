"""Secrets as files: a container's `secret-files:` checked, and rendered into the files its
declaration carries (ContainerDecl.files) and the variables that name them.

Invariants:
- A secret file lives in the container's one secret directory, SECRETS_DIR (`/run/secrets`),
  which the node mounts read-only from its own directory (`<state root>/.mesh/secrets/
  <container>/`); a path outside it, a directory the container mounts something else over, or
  a secret directory under another mount is a fault at the key that says it (file:line:col).
- A file's content is a template read exactly as an env value (_placeholders, compiled by
  _shape.compile_env): a secret in it is a `${secret:<credential id>}` token and its SecretRef
  joins the container's `secrets`, so a new generation changes the container's declaration
  (and its config digest on the node) as an env secret does. No value is ever here.
- The variable a file is read through (`env:`) is set to the file's path: the value itself is
  in no environment, no `docker inspect` and no process's environ.
- Each file is declared mode 0400, owned by its `owner` (the uid:gid the container's process
  reads it as); the node writes it whole, in place before the container starts.
"""

from __future__ import annotations

import posixpath
import re
from typing import Callable, Iterable, Mapping, Optional, Union

from pyrsistent import pvector
from pyrsistent.typing import PVector

from ._declaration import FileDecl
from ._model import SECRETS_DIR, Container, Module

SECRET_FILE_MODE = "0400"
#: A secret file's name in SECRETS_DIR: plain, never hidden (a leading dot is the node's temp
#: files'), never a path.
FILE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
_OWNER = re.compile(r"^[0-9]+:[0-9]+$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

Path = tuple[Union[str, int], ...]
FaultAt = tuple[Path, str, str, bool]
"""A fault of a container's secret files: (key path below the container, message, expected,
whether it points at the key rather than the value)."""


def secret_file_faults(module: Module, container: Container,
                       placeholder_faults: Callable[[str], list[str]]) -> list[FaultAt]:
    """What is wrong with `container`'s `secret-files:` in `module` (its mounts' targets are
    read to keep SECRETS_DIR free); `placeholder_faults(content)` checks a content as an env
    value."""
    faults: list[FaultAt] = []
    if not container.secret_files:
        return faults
    for j, mount in enumerate(container.mounts):
        target = posixpath.normpath(mount.target) if mount.target.startswith("/") else ""
        if target and _overlaps(target, SECRETS_DIR):
            faults.append((("mounts", j, "target"),
                           f"mount target {mount.target!r} covers the secret directory "
                           f"{SECRETS_DIR}, where the container's secret files are mounted",
                           f"a target outside {SECRETS_DIR} (and not a directory above it)",
                           False))
    seen_paths: set[str] = set()
    seen_env: set[str] = set()
    for i, secret_file in enumerate(container.secret_files):
        at: Path = ("secret-files", i)
        name = _file_name(secret_file.path)
        if name is None:
            faults.append((at + ("path",),
                           f"secret file path {secret_file.path!r} is outside the container's "
                           f"secret directory {SECRETS_DIR}",
                           f"{SECRETS_DIR}/<name>: a plain file name (letters, digits, '.', "
                           "'-', '_'; not starting with '.')", False))
        elif secret_file.path in seen_paths:
            faults.append((at + ("path",), f"secret file {secret_file.path!r} is declared twice",
                           "each path once", False))
        seen_paths.add(secret_file.path)
        if not _OWNER.match(secret_file.owner):
            faults.append((at + ("owner",), f"owner {secret_file.owner!r} is not uid:gid",
                           'numeric "uid:gid" of the user the container reads it as, e.g. '
                           '"999:999"', False))
        variable = secret_file.env
        if variable is not None:
            if not _ENV_NAME.match(variable):
                faults.append((at + ("env",), f"{variable!r} is not an environment variable name",
                               "letters, digits and '_', not starting with a digit", False))
            elif variable in container.env:
                faults.append((at + ("env",), f"{variable} is also set in the container's env",
                               "a variable set in one place: the secret file names it", False))
            elif variable in seen_env:
                faults.append((at + ("env",), f"{variable} names two secret files",
                               "each variable once", False))
            seen_env.add(variable)
        for fault in placeholder_faults(secret_file.content):
            faults.append((at + ("content",), f"secret file {secret_file.path}: {fault}",
                           "${<as>.<key>}, ${self.<secret>.password}, ${self.<listen>.port}, "
                           "${self.address}, ${self.instance}, ${self.node}, or $$ for a "
                           "literal $", False))
    return faults


def _file_name(path: str) -> Optional[str]:
    """The file's name when `path` is a file directly in SECRETS_DIR, else None."""
    directory, _, name = path.rpartition("/")
    if directory != SECRETS_DIR or not FILE_NAME.match(name):
        return None
    return name


def _overlaps(a: str, b: str) -> bool:
    """Whether one of two absolute normalised paths is the other or inside it."""
    return a == b or a == "/" or b == "/" or a.startswith(b + "/") or b.startswith(a + "/")


def file_variables(container: Container) -> list[tuple[str, str]]:
    """(variable, path) of each secret file read through a variable: what the container's env
    holds for it, the path and never the value."""
    return [(f.env, f.path) for f in container.secret_files if f.env is not None]


def declared_files(container: Container, contents: Iterable[str]) -> PVector[FileDecl]:
    """The container's secret files as its declaration carries them, with `contents` (each
    file's template filled for one instance: tokens, never values), sorted by path."""
    files = [FileDecl(f.path, content, SECRET_FILE_MODE, owner=f.owner,
                      reason=f"read through {f.env}" if f.env is not None else "")
             for f, content in zip(container.secret_files, contents)]
    return pvector(sorted(files))


def secret_file_name(decl: FileDecl) -> str:
    """The name a declared secret file has in its container's secret directory (the part of
    its path after SECRETS_DIR/)."""
    return decl.path.rpartition("/")[2]

