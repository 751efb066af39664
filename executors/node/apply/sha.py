"""SHA-256 for the no-op check's path (fast.py, reads.py) without loading OpenSSL.

Invariants:
- The same digest as hashlib.sha256 (tests/test_apply_fast.py holds the two equal): only the
  implementation differs. CPython's own SHA-256 (`_sha256`; `_sha2` from 3.12) is used when
  the build has it, because `import hashlib` loads OpenSSL's libcrypto first, which costs a
  no-op `mesh apply` more (~1.5 ms) than hashing every file it compares; a build without it
  falls back to hashlib.
- Standard library only.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # named for the checker only (a Protocol class costs its creation at import)
    from typing import Callable, Protocol

    class _Hash(Protocol):
        def hexdigest(self) -> str: ...

    _Constructor = Callable[[bytes], _Hash]

try:  # by name: the module's name differs by version, and it ships no type stub
    _sha256: _Constructor = importlib.import_module(
        "_sha2" if sys.version_info >= (3, 12) else "_sha256").sha256
except ImportError:  # a CPython built without its own hashes: OpenSSL's (loaded only then)
    import hashlib

    _sha256 = hashlib.sha256

_CHUNK = 1 << 20


def sha256_hex(data: bytes) -> str:
    """hashlib.sha256(data).hexdigest()."""
    return _sha256(data).hexdigest()


def sha256_file(path: str) -> str:
    """The hex SHA-256 of a file's bytes (read through the descriptor: no buffered file object
    to build and tear down, about half the cost for the small files the check hashes)."""
    descriptor = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        while chunk := os.read(descriptor, _CHUNK):
            chunks.append(chunk)
    finally:
        os.close(descriptor)
    return _sha256(b"".join(chunks)).hexdigest()
