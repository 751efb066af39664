"""The marks and names by which the mesh knows its objects on an AMQP broker (pure).

Shared by the grant provisioner (node/provisioners/amqp_plan.py) and the mesh's own delivery
objects (control/fleet_broker.py, through common/broker_api.py, the HTTP client).

Invariants:
- What the mesh manages is marked by a global parameter `mesh-mark:<user|vhost>:<name>` whose
  value names the owner (`mesh:<mesh>:<owner>`), put before the object is made. Global
  parameters take any name and JSON value on RabbitMQ and LavinMQ alike.
- A password is compared against the broker's salted hash (sha256/sha512/md5 of salt+password,
  the broker's own scheme), never by logging in, and is only ever a request body.
- No I/O: what the broker answered comes in as data, the requests to send go out as Calls.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Iterable, Mapping, Optional
from urllib.parse import quote

import attrs

DEFAULT_VHOST = "/"
MARK_PREFIX = "mesh-mark:"
USER, VHOST = "user", "vhost"
HASHES = {"rabbit_password_hashing_sha256": hashlib.sha256,
          "rabbit_password_hashing_sha512": hashlib.sha512,
          "rabbit_password_hashing_md5": hashlib.md5,
          "SHA256": hashlib.sha256, "SHA512": hashlib.sha512, "MD5": hashlib.md5}


@attrs.frozen
class Call:
    """One management API request, and why it is made."""

    op: str
    subject: str
    cause: str
    method: str
    path: str
    body: Mapping[str, str] = attrs.field(factory=dict, repr=False, eq=False)  # JSON, all text


def path(*parts: str) -> str:
    return "/api/" + "/".join(quote(p, safe="") for p in parts)


def marker(mesh: str, owner: str) -> str:
    return f"mesh:{mesh}:{owner}"


def mark_name(kind: str, name: str) -> str:
    return f"{MARK_PREFIX}{kind}:{name}"


def mark_call(kind: str, name: str, mark: str, cause: str) -> Call:
    return Call("mark", f"{kind} {name}", cause, "PUT",
                path("global-parameters", mark_name(kind, name)), {"value": mark})


def unmark_call(kind: str, name: str, cause: str) -> Call:
    return Call("unmark", f"{kind} {name}", cause, "DELETE",
                path("global-parameters", mark_name(kind, name)))


def parse_marks(parameters: Iterable[Mapping[str, object]]) -> dict[tuple[str, str], str]:
    """(user|vhost, name) → the mark it carries, from the broker's global parameters."""
    marks: dict[tuple[str, str], str] = {}
    for parameter in parameters:
        name, value = parameter.get("name", ""), parameter.get("value")
        if not isinstance(name, str):  # no parameter of ours
            continue
        kind, _, subject = name[len(MARK_PREFIX):].partition(":")
        if name.startswith(MARK_PREFIX) and kind in (USER, VHOST) and subject:
            marks[(kind, subject)] = value if isinstance(value, str) else json.dumps(value)
    return marks


def hash_matches(password_hash: Optional[str], hashing: str, password: str) -> bool:
    """Whether the broker's stored hash base64(salt[4] + H(salt + password)) is `password`'s."""
    algorithm = HASHES.get(hashing)
    if not password_hash or algorithm is None:
        return False
    try:
        raw = base64.b64decode(password_hash, validate=True)
    except ValueError:
        return False
    salt, digest = raw[:4], raw[4:]
    return hmac.compare_digest(algorithm(salt + password.encode("utf-8")).digest(), digest)


def tags_of(value: object) -> tuple[str, ...]:
    """A user's tags as the broker answered them (a list, or a comma-separated string)."""
    if isinstance(value, str):  # older brokers answer a comma-separated string
        value = value.split(",")
    tags: Iterable[object] = value if isinstance(value, (list, tuple)) else ()
    return tuple(sorted(t for t in tags if isinstance(t, str) and t))
