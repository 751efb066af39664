"""The control loop's kept broker settings: `<control state>/settings.json` (default
DIR/.control/settings.json), written by `mesh init` from the --broker options it was given and
read by every broker verb (`mesh control`, enrol, publish, collect) as its defaults.

Invariants:
- The file is what makes the control loop the same wherever it runs: the control instance's
  container (which sees the mesh directory as a facility), a host service, a control node
  restored from a backup (the file is part of the control state the backup carries).
- An option or MESH_BROKER_* variable given wins over the file; what neither gives is derived
  from the mesh as before (control/broker_settings.py). A missing file is no settings.
- The broker admin's password is never in the clear in it: it is sealed to the control node's
  public key (`broker_admin_password_sealed`) and opened in memory with the control node's key
  only when no password file is given. The file is written atomically, mode 0600.
- A file that is not such a document is one MeshError naming it and what was expected.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import attrs

from resolver import MeshError

from executors.common.atomic import write_atomic
from executors.common.keys import UnsealError, load_private_key, seal, unseal

SETTINGS_FILE = "settings.json"
FORMAT = 1
KEYS = ("broker", "broker_api", "broker_admin", "broker_admin_password_sealed",
        "broker_for_nodes")  # strings
FLAGS = ("broker_plain",)  # booleans


@attrs.frozen
class KeptBroker:
    """The broker settings kept for the control loop (None: not kept, derive it)."""

    broker: Optional[str] = None  # HOST:PORT of AMQP
    broker_api: Optional[str] = None  # the management API's URL
    broker_admin: Optional[str] = None
    broker_admin_password_sealed: Optional[str] = attrs.field(default=None, repr=False)
    broker_for_nodes: Optional[str] = None
    broker_plain: bool = False  # the broker speaks plain AMQP (--broker-plain)


def settings_path(state_root: Path) -> Path:
    return state_root / SETTINGS_FILE


def write_kept(path: Path, kept: KeptBroker) -> None:
    document: dict[str, object] = {"format": FORMAT}
    document.update({key: getattr(kept, key) for key in KEYS + FLAGS if getattr(kept, key)})
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(document, indent=2, sort_keys=True) + "\n", mode=0o600)


def kept_from_options(*, broker: Optional[str], api: Optional[str], admin: Optional[str],
                      admin_password_file: Optional[str], for_nodes: Optional[str],
                      plain: bool, control_public_key: str) -> KeptBroker:
    """What the options given say, the admin's password (read from its file) sealed to the
    control node's public key."""
    sealed = None
    if admin_password_file:
        try:
            password = Path(admin_password_file).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise MeshError(f"{admin_password_file}: cannot read the broker admin's password: "
                            f"{exc}") from None
        sealed = seal(control_public_key, password)
    return KeptBroker(broker or None, api or None, admin or None, sealed, for_nodes or None,
                      plain)


def read_kept(path: Path) -> KeptBroker:
    """The settings kept at `path` (all None when there is no file)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return KeptBroker()
    except (OSError, UnicodeDecodeError) as exc:
        raise MeshError(f"{path}: cannot read the control loop's broker settings: {exc}"
                        ) from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MeshError(f"{path}:{exc.lineno}: not JSON ({exc.msg}); expected the broker "
                        f"settings `mesh init` writes (docs/schema.md)") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise MeshError(f"{path}:1: expected an object with \"format\": {FORMAT} (the broker "
                        f"settings `mesh init` writes, docs/schema.md)")
    unknown = sorted(set(document) - {"format", *KEYS, *FLAGS})
    wrong = [key for key in KEYS if key in document and not isinstance(document[key], str)]
    wrong += [key for key in FLAGS if key in document and not isinstance(document[key], bool)]
    if unknown or wrong:
        raise MeshError(f"{path}:1: " + (f"unknown keys {', '.join(unknown)}" if unknown else
                                         f"{', '.join(wrong)}: wrong type")
                        + f"; expected strings {', '.join(KEYS)} and booleans "
                        f"{', '.join(FLAGS)} (docs/schema.md)")
    return KeptBroker(**{key: document.get(key) for key in KEYS},
                      broker_plain=bool(document.get("broker_plain", False)))


def kept_admin_password(kept: KeptBroker, key_file: Optional[str], path: Path) -> Optional[str]:
    """The kept admin's password opened with the control node's key, or None if none kept."""
    if kept.broker_admin_password_sealed is None:
        return None
    if not key_file:
        raise MeshError(f"{path} keeps the broker admin's password sealed to the control "
                        f"node's key: give --key FILE (or --broker-admin-password-file)")
    try:
        return unseal(load_private_key(key_file), kept.broker_admin_password_sealed)
    except UnsealError:
        raise MeshError(f"{key_file} does not open the broker admin's password kept in {path}: "
                        f"it is not the control node's key") from None
