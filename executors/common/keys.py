"""Node keys and sealed values (libsodium sealed boxes through PyNaCl).

Invariants:
- A node's private key file holds the X25519 key base64-encoded, is created with mode 0600,
  whole or not at all, and is never overwritten (common/atomic.write_exclusive): a lost key is
  replaced by an operator's act.
- A value is sealed to one node's public key; only that node's private key opens it. Opening
  with any other key fails with UnsealError, never with a wrong value.
- Plaintext exists only in memory: nothing here writes, prints or logs a secret value.
- A public key's fingerprint has one form, computed here only (`key_fingerprint`):
  `SHA256:` and the base64 (no padding) of the SHA-256 of the raw 32-byte public key, as
  `ssh-keygen -l` prints it. Both sides of an enrolment print it; the operator compares them.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from pathlib import Path
from typing import Mapping

from nacl.exceptions import CryptoError
from nacl.public import PrivateKey, PublicKey, SealedBox

from resolver import Ledger, MeshError

from executors.common.atomic import PathLike, write_exclusive


class KeyError_(MeshError):
    """A node key that cannot be created, read or used."""


class UnsealError(MeshError):
    """A sealed value this key cannot open (sealed to another node, or damaged)."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def public_key_b64(private_key: PrivateKey) -> str:
    return _b64(bytes(private_key.public_key))


FINGERPRINT_PREFIX = "SHA256:"


def key_fingerprint(public_key_b64_text: str, node: str = "") -> str:
    """`SHA256:<base64, no padding, of the SHA-256 of the raw 32-byte public key>`."""
    raw = bytes(parse_public_key(public_key_b64_text, node))
    digest = hashlib.sha256(raw).digest()
    return FINGERPRINT_PREFIX + _b64(digest).rstrip("=")


def parse_fingerprint(text: str) -> str:
    """A fingerprint as an operator typed it, in the one form `key_fingerprint` gives: the
    `SHA256:` prefix may be spelled in any case or left out; anything else is refused."""
    given = text.strip()
    if given[:len(FINGERPRINT_PREFIX)].upper() == FINGERPRINT_PREFIX:
        given = given[len(FINGERPRINT_PREFIX):]
    try:
        digest = base64.b64decode(given + "=", validate=True)
    except (binascii.Error, ValueError):
        digest = b""
    if len(digest) != 32 or len(given) != 43:
        raise KeyError_(f"{text!r} is not a key fingerprint: expected SHA256: and 43 base64 "
                        f"characters, as `mesh node-key --show` and `mesh enrol list` print")
    return FINGERPRINT_PREFIX + given


def public_key_of_file(path: PathLike) -> str:
    """The public key (base64) of the node key file at `path`."""
    return public_key_b64(load_private_key(path))


def create_node_key(path: PathLike) -> str:
    """Create a node's private key file (0600, refusing to overwrite); return its public key."""
    path = Path(path)
    private_key = PrivateKey.generate()
    if path.exists() or path.is_symlink():  # said before anything is made beside it
        raise _exists(path)
    try:  # 0600 whatever the umask; whole or not at all; never over another file
        write_exclusive(path, _b64(bytes(private_key)) + "\n", 0o600)
    except FileExistsError:
        raise _exists(path) from None
    except OSError as exc:
        raise KeyError_(f"{path}: cannot create the key file: {exc.strerror}") from None
    return public_key_b64(private_key)


def _exists(path: Path) -> KeyError_:
    return KeyError_(f"{path}: a key file exists already; not overwritten "
                     f"(`mesh node-key --show --path {path}` prints its public key and "
                     f"fingerprint; remove it first if you mean to replace the node's key)")


def load_private_key(path: PathLike) -> PrivateKey:
    path = Path(path)
    try:
        text = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        raise KeyError_(f"{path}: no such key file (`mesh node-key NODE --path {path}` "
                        f"creates one)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise KeyError_(f"{path}: cannot read the key file: {exc}") from None
    return private_key_from_b64(text, str(path))


def private_key_from_b64(text: str, where: str = "private key") -> PrivateKey:
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise KeyError_(f"{where}: not a base64 X25519 private key") from None
    if len(raw) != 32:
        raise KeyError_(f"{where}: expected 32 bytes of X25519 key, found {len(raw)}")
    return PrivateKey(raw)


def parse_public_key(text: str, node: str = "") -> PublicKey:
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != 32:
        raise KeyError_(f"node {node}: public-key is not a base64 X25519 public key (32 bytes); "
                        f"`mesh node-key {node or 'NODE'} --path FILE` prints one")
    return PublicKey(raw)


def seal(public_key_b64_text: str, plaintext: str, node: str = "") -> str:
    """Seal `plaintext` to one node's public key; base64 of the sealed box."""
    box = SealedBox(parse_public_key(public_key_b64_text, node))
    return _b64(box.encrypt(plaintext.encode("utf-8")))


def unseal(private_key: PrivateKey, sealed_b64: str) -> str:
    """Open a value sealed to this key; UnsealError for any other key or a damaged value."""
    try:
        sealed = base64.b64decode(sealed_b64, validate=True)
        return SealedBox(private_key).decrypt(sealed).decode("utf-8")
    except (binascii.Error, ValueError, CryptoError, UnicodeDecodeError):
        raise UnsealError("this value was not sealed to this node's key (or is damaged)") from None


def unseal_for_node(ledger: Ledger, node: str, private_key: PrivateKey) -> dict[str, dict[int, str]]:
    """Every value sealed to `node` in the ledger: {credential id: {generation: value}}.

    Generations sealed to other nodes are not there to open; a value sealed to `node` that this
    key cannot open raises UnsealError (the key is not that node's)."""
    values: dict[str, dict[int, str]] = {}
    for credential_id, credential in sorted(ledger.credentials.items()):
        for generation in (credential.active, credential.pending, credential.retiring):
            if generation is None or node not in generation.sealed:
                continue
            try:
                value = unseal(private_key, generation.sealed[node])
            except UnsealError:
                raise UnsealError(f"credential {credential_id} generation "
                                  f"{generation.generation} is sealed to {node}, but this key "
                                  f"does not open it: it is not {node}'s key") from None
            values.setdefault(credential_id, {})[generation.generation] = value
    return values


def sealed_to_each(public_keys: Mapping[str, str], plaintext: str) -> dict[str, str]:
    """`plaintext` sealed separately to every node in {node: public key}."""
    return {node: seal(key, plaintext, node) for node, key in sorted(public_keys.items())}
