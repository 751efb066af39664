"""What the control plane keeps besides the ledger, in its state directory (`DIR/.control` by
default): the declarations it published, what it published when, each node's last reports
(`reports.json`), enrolment tokens and requests, node accounts, the control account's
password.

Invariants:
- Every file is written whole or not at all (write_atomic); the directory is 0700, files
  holding anything secret 0600. Nothing here is plaintext but the control account's own
  broker password (like the CA key beside the mesh: the control node's secret); node account
  passwords are kept only sealed to their node, tokens only as a SHA-256 of their secret.
- Readers tolerate absence (nothing published yet, no report yet) and say nothing is known;
  an unreadable file is treated as absent and is rewritten by the next writer.
- Only writers under the ledger lock change `published.json` and `reports.json`; tokens are
  written by `mesh enrol` and the control loop under the same lock.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Any, Optional, Union

from executors.common.atomic import write_atomic, write_exclusive

DEFAULT_DIRNAME = ".control"

#: A JSON object as kept in a state file (a token, an account, a node's kept reports, what
#: was published to a node): read from disk, so its shape is checked where it is used.
Document = dict[str, Any]

#: A file's (inode, size, mtime): every write replaces the file, so a write changes it.
Stamp = tuple[int, int, int]


def _stamp(path: Path) -> Optional[Stamp]:
    try:
        facts = path.stat()
    except OSError:
        return None
    return (facts.st_ino, facts.st_size, facts.st_mtime_ns)


class ControlState:
    def __init__(self, mesh_dir: Union[str, os.PathLike[str]],
                 state_dir: Union[str, os.PathLike[str], None] = None):
        self.root = Path(state_dir) if state_dir else Path(mesh_dir) / DEFAULT_DIRNAME
        # (reports.json's stamp, its documents) last seen
        self._reports: tuple[Optional[Stamp], dict[str, Document]] = (None, {})

    # -- paths

    @property
    def out(self) -> Path:
        return self.root / "out"

    @property
    def published_file(self) -> Path:
        return self.root / "published.json"

    @property
    def reports_file(self) -> Path:
        return self.root / "reports.json"

    @property
    def enrolment_dir(self) -> Path:
        return self.root / "enrolment"

    @property
    def accounts_dir(self) -> Path:
        return self.root / "accounts"

    @property
    def control_secret(self) -> Path:
        return self.root / "broker-control.secret"

    def ensure(self) -> "ControlState":
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)
        return self

    # -- documents

    @staticmethod
    def _read(path: Path) -> object:
        """The JSON in `path`; None when it is absent or unreadable."""
        try:
            found: object = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return found

    @staticmethod
    def _read_object(path: Path) -> Document:
        """The JSON object in `path`; {} when it is absent, unreadable or not an object."""
        found = ControlState._read(path)
        return found if isinstance(found, dict) else {}

    @staticmethod
    def _write(path: Path, document: object, mode: int = 0o600, compact: bool = False) -> None:
        text = (json.dumps(document, sort_keys=True, separators=(",", ":")) if compact
                else json.dumps(document, indent=2, sort_keys=True))  # indent: pure Python
        write_atomic(path, text + "\n", mode=mode)

    def published(self) -> dict[str, Document]:
        return self._read_object(self.published_file)

    def write_published(self, published: dict[str, Document]) -> None:
        self.ensure()
        self._write(self.published_file, published)

    def reports(self) -> dict[str, Document]:
        """Each node's kept reports (one file: a batch of reports is one write). The file is
        read again only when it changed (another inode, size or mtime: every write replaces
        it); what is returned is a new mapping, its values are never changed in place."""
        stamp = _stamp(self.reports_file)
        if stamp is not None and self._reports[0] == stamp:
            return dict(self._reports[1])
        found = self._read_object(self.reports_file)
        self._reports = (stamp, found) if stamp is not None else (None, {})
        return dict(found)

    def report(self, node: str) -> Optional[Document]:
        return self.reports().get(node)

    def write_reports(self, documents: dict[str, Document]) -> None:
        self.ensure()
        self._write(self.reports_file, documents, compact=True)  # large: the C encoder
        self._reports = (_stamp(self.reports_file), dict(documents))

    def tokens(self) -> dict[str, Document]:
        found: dict[str, Document] = {}
        if self.enrolment_dir.is_dir():
            for path in sorted(self.enrolment_dir.glob("*.json")):
                document = self._read(path)
                if isinstance(document, dict) and document.get("id") == path.stem:
                    found[path.stem] = document
        return found

    def write_token(self, document: Document) -> None:
        self.ensure()
        self._write(self.enrolment_dir / f"{document['id']}.json", document)

    def accounts(self) -> dict[str, Document]:
        found: dict[str, Document] = {}
        if self.accounts_dir.is_dir():
            for path in sorted(self.accounts_dir.glob("*.json")):
                document = self._read(path)
                if isinstance(document, dict):
                    found[path.stem] = document
        return found

    def write_account(self, node: str, document: Document) -> None:
        self.ensure()
        self._write(self.accounts_dir / f"{node}.json", document)

    def control_password(self) -> str:
        """The control account's broker password: made once from the OS CSPRNG, kept 0600.
        Two processes making it at once (`mesh control` starting beside `mesh enrol`) both get
        the one that was created first: a second, different password set on the broker by the
        loser would lock the winner out."""
        value = self._read_control_secret()
        if value:
            return value
        self.ensure()
        made = secrets.token_urlsafe(32)
        try:
            write_exclusive(self.control_secret, made + "\n", mode=0o600)
            return made
        except FileExistsError:  # made meanwhile by another process, or unreadable/empty
            value = self._read_control_secret()
            if value:
                return value
        write_atomic(self.control_secret, made + "\n", mode=0o600)  # a broken file: replaced
        return made

    def _read_control_secret(self) -> Optional[str]:
        try:
            return self.control_secret.read_text(encoding="ascii").strip() or None
        except (OSError, UnicodeDecodeError):
            return None
