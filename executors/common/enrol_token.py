"""The one-time enrolment token: made on the control node (`mesh enrol token DIR NODE`), typed
(pasted) on the new node (`mesh agent enrol TOKEN`).

Invariants:
- One string, `mesh-enrol:` + base64url of a JSON object: the mesh, the node it enrols, the
  broker address as nodes reach it and the mesh's vhost, the token's id, its secret (the
  password of a broker account that may only send one enrolment request and read its answer),
  the SHA-256 fingerprint of the mesh CA's key (what the node pins: it accepts the answer, and
  every declaration after it, only when signed by a key that CA certified), and its expiry.
- The secret is never printed by anything but `mesh enrol token`, which exists to print it;
  the control node keeps only its SHA-256; the node keeps it only sealed to its own key.
- A malformed token is one clear MeshError, never a traceback.
"""

from __future__ import annotations

import base64
import binascii
import json
import re

import attrs

from resolver import MeshError

PREFIX = "mesh-enrol:"
FINGERPRINT = re.compile(r"^sha256:[0-9a-f]{64}$")


class TokenError(MeshError):
    """Not an enrolment token this version understands."""


@attrs.frozen
class EnrolToken:
    mesh: str
    node: str
    broker: str  # host:port as nodes reach it
    vhost: str
    token_id: str
    secret: str = attrs.field(repr=False)
    ca_fingerprint: str = ""
    expires: str = ""  # ISO 8601, UTC


_FIELDS = {"m": "mesh", "n": "node", "b": "broker", "v": "vhost", "i": "token_id", "s": "secret",
           "k": "ca_fingerprint", "e": "expires"}


def encode(token: EnrolToken) -> str:
    document = {short: getattr(token, name) for short, name in _FIELDS.items()}
    raw = json.dumps(document, sort_keys=True, separators=(",", ":")).encode("utf-8")
    return PREFIX + base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode(text: str) -> EnrolToken:
    text = text.strip()
    if not text.startswith(PREFIX):
        raise TokenError(f"not an enrolment token (it starts with {PREFIX!r}; `mesh enrol "
                         f"token DIR NODE` on the control node prints one)")
    body = text[len(PREFIX):]
    try:
        raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        document = json.loads(raw.decode("utf-8"))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise TokenError("the enrolment token is damaged (copy it whole, on one line)") from None
    if not isinstance(document, dict) or set(document) != set(_FIELDS) or \
            not all(isinstance(v, str) and v for v in document.values()):
        raise TokenError("the enrolment token is damaged or from another version")
    token = EnrolToken(**{name: document[short] for short, name in _FIELDS.items()})
    if not FINGERPRINT.match(token.ca_fingerprint):
        raise TokenError("the enrolment token's CA fingerprint is not sha256:<64 hex digits>")
    return token
