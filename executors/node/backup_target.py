"""The restic repository one backup duty names (resolver.backups.BackupDuty), opened on the node
that runs the instance: the store's login and the repository's password unsealed with the node
key, written where only restic reads them.

Invariants:
- The sealed values are opened the way `mesh apply` opens a container's secrets (a
  SecretSource over the values sealed to this node; by default the declaration in force's
  ledger, `<state root>/.mesh/agent/current/secrets.yaml`, and the node key), each at the
  generation the duty was told (`refs`).
- The location WITH its login (`rest:https://LOGIN:PASSWORD@ADDR:PORT/LOGIN/`) goes to a 0600
  `--repository-file` and the repository password to a 0600 password file, both in a private
  (0700) temporary directory removed when the context ends, also on failure; nothing secret is
  on a command line, in an environment variable's value or in what is said (`location` is the
  duty's repository, without credentials). The store's TLS is verified against the mesh CA
  (`--cacert`, the node's path of the CA the duty names).
- A duty without a login (an outside repository) has no sealed login: it is refused here; such
  a repository is opened with `--password-file` as before (executors/cli/_backup_args.py).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Iterator, Optional
from urllib.parse import quote

from resolver import BackupError, Declaration, MeshError, SecretRef
from resolver.backups import BackupDuty
from resolver.documents import load_document, load_ledger
from resolver.rendering import secret_tokens

from executors.common import keys
from executors.common.atomic import write_exclusive
from executors.node.extensions import SecretSource
from executors.node.node_paths import NodePaths
from executors.node.restic import Repository

DEFAULT_KEY_FILE = "/etc/mesh/node.key"  # where `mesh join` keeps the node key
KEY_ENV = "MESH_NODE_KEY"  # overrides DEFAULT_KEY_FILE


def in_force_files(paths: NodePaths) -> tuple[Path, Path]:
    """The declaration in force on this node and its sealed values, as the agent keeps them
    (`<state root>/.mesh/agent/current/declaration.json` and `secrets.yaml`)."""
    current = paths.root / "agent" / "current"
    return current / "declaration.json", current / "secrets.yaml"


def in_force_declaration(paths: NodePaths, path: Optional[str] = None) -> Declaration:
    """The declaration at `path`, else the one in force on this node; a BackupError naming
    what to do when there is none."""
    where = Path(path) if path else in_force_files(paths)[0]
    try:
        text = where.read_text(encoding="utf-8")
    except OSError as exc:
        raise BackupError(f"no declaration in force at {where} ({exc.strerror}); apply this "
                          "node's declaration first (or name one with --declaration FILE)"
                          ) from None
    declaration, _ = load_document(text, str(where), Declaration)
    return declaration


def in_force_secrets(paths: NodePaths, node: str, key_file: Optional[str] = None,
                     secrets_path: Optional[str] = None) -> SecretSource:
    """SecretRef → value, from the ledger of the declaration in force on this node (the
    agent's `current/secrets.yaml`, or `secrets_path`) opened with the node key (`key_file`,
    $MESH_NODE_KEY, else /etc/mesh/node.key)."""
    secrets_file = Path(secrets_path) if secrets_path else in_force_files(paths)[1]
    try:
        text = secrets_file.read_text(encoding="utf-8")
    except OSError as exc:
        raise BackupError(f"cannot read the sealed values in force ({secrets_file}): "
                          f"{exc.strerror}; apply this node's declaration first") from None
    ledger, _ = load_ledger(text, str(secrets_file))
    key = key_file or os.environ.get(KEY_ENV) or DEFAULT_KEY_FILE
    values = keys.unseal_for_node(ledger, node, keys.load_private_key(key))

    def source(ref: SecretRef) -> str:
        generation = (values.get(ref.credential, {}).get(ref.generation)
                      if ref.generation is not None else None)
        if generation is None:
            raise MeshError(f"{secrets_file} holds no generation {ref.generation} of "
                            f"{ref.credential} sealed to {node}")
        return generation

    return source


def _credential(token: str, what: str, duty: BackupDuty) -> SecretRef:
    found = secret_tokens(token)
    if len(found) != 1:
        raise BackupError(f"the backup duty of {duty.instance} names no {what} credential; "
                          "plan and apply again")
    for ref in duty.refs:
        if ref.credential == found[0]:
            if ref.generation is None:
                raise BackupError(f"{duty.instance}: the backup {what} ({ref.credential}) "
                                  "has not been issued yet; `mesh plan` issues it")
            return ref
    raise BackupError(f"the backup duty of {duty.instance} does not say which generation of "
                      f"{found[0]} it holds; plan and apply again")


def login_location(repository: str, login: str, password: str) -> str:
    """`rest:https://ADDR:PORT/LOGIN/` with the login in it: rest:https://LOGIN:PW@ADDR…"""
    scheme, separator, rest = repository.partition("://")
    if not separator or not scheme.startswith("rest:"):
        raise BackupError(f"the backup repository {repository!r} is not a rest: URL")
    return f"{scheme}://{quote(login, safe='')}:{quote(password, safe='')}@{rest}"


def _private_file(directory: str, name: str, content: str) -> str:
    path = os.path.join(directory, name)
    write_exclusive(path, content, 0o600)
    return path


@contextlib.contextmanager
def open_repository(duty: BackupDuty, declaration: Declaration, paths: NodePaths,
                    secrets: Optional[SecretSource] = None,
                    key_file: Optional[str] = None,
                    secrets_path: Optional[str] = None) -> Iterator[Repository]:
    """The duty's repository, ready for restic for as long as the context lasts: its login
    and password unsealed (by `secrets`, default: the values in force opened with the node
    key) into 0600 files of a private temporary directory, removed afterwards."""
    if duty.login is None:
        raise BackupError(f"{duty.instance} is backed up to an outside repository "
                          f"({duty.repository}); open it with --password-file")
    unseal = secrets or in_force_secrets(paths, declaration.node, key_file, secrets_path)
    password_ref = _credential(duty.password, "store login", duty)
    key_ref = _credential(duty.key, "repository password", duty)
    try:
        password, key = unseal(password_ref), unseal(key_ref)
    except MeshError:
        raise
    except Exception as exc:  # the unsealer's error, named (never a value)
        raise BackupError(f"{duty.instance}: the backup credentials cannot be unsealed: "
                          f"{exc}") from None
    ca = paths.on_node(duty.ca) if duty.ca else None
    if ca is not None and not Path(ca).is_file():
        raise BackupError(f"the mesh CA {ca} that verifies the backup store is not on this "
                          "node; apply its declaration first")
    with tempfile.TemporaryDirectory(prefix="mesh-backup-") as private:
        os.chmod(private, 0o700)
        location_file = _private_file(private, "repository",
                                      login_location(duty.repository, duty.login, password))
        password_file = _private_file(private, "password", key)
        del password, key
        yield Repository(location=duty.repository, password_file=password_file,
                         repository_file=location_file, cacert=ca)


def duty_of(declaration: Declaration, instance: str) -> BackupDuty:
    """The backup duty of `instance` in this node's declaration; a BackupError without."""
    for duty in declaration.backups:
        if duty.instance == instance:
            return duty
    raise BackupError(f"the declaration in force on {declaration.node} has no backup duty for "
                      f"{instance!r}; backed up here: "
                      + (", ".join(d.instance for d in declaration.backups) or "none"))


__all__ = ["open_repository", "duty_of", "in_force_secrets", "in_force_declaration",
           "in_force_files", "login_location",
           "DEFAULT_KEY_FILE"]
