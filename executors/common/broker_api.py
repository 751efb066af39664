"""The AMQP broker's management HTTP API (RabbitMQ; LavinMQ serves the same), and the marks by
which the mesh knows the objects it manages there: shared by the grant provisioner
(node/provision_amqp.py) and the mesh's own delivery objects (control/fleet_broker.py).

Invariants:
- What the mesh manages is marked by a global parameter `mesh-mark:<user|vhost>:<name>` whose
  value names the owner (`mesh:<mesh>:<owner>`), put before the object is made. Global
  parameters take any name and JSON value on RabbitMQ and LavinMQ alike. An object marked by
  another owner is never touched; the admin account and the `/` vhost are never managed.
- A password is compared against the broker's salted hash (sha256/sha512/md5 of salt+password,
  the broker's own scheme), never by logging in, and is only ever a request body: never in an
  error message or a log line.
- One HTTP session per Api; a non-2xx answer is an ApiError carrying the status and the
  broker's reason.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Mapping, Optional
from urllib.parse import quote

import attrs
import requests

from resolver import MeshError

HTTP_TIMEOUT = 10
DEFAULT_VHOST = "/"
MARK_PREFIX = "mesh-mark:"
USER, VHOST = "user", "vhost"
HASHES = {"rabbit_password_hashing_sha256": hashlib.sha256,
          "rabbit_password_hashing_sha512": hashlib.sha512,
          "rabbit_password_hashing_md5": hashlib.md5,
          "SHA256": hashlib.sha256, "SHA512": hashlib.sha512, "MD5": hashlib.md5}


@attrs.frozen
class Call:
    op: str
    subject: str
    cause: str
    method: str
    path: str
    body: Mapping = attrs.field(factory=dict, repr=False, eq=False)


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


def tags_of(value) -> tuple[str, ...]:
    if isinstance(value, str):  # older brokers answer a comma-separated string
        value = value.split(",")
    return tuple(sorted(t for t in (value or []) if t))


class ApiError(MeshError):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class Api:
    """The management API as one account (one HTTP session; never logs a body)."""

    def __init__(self, base: str, user: str, password: str, timeout: float = HTTP_TIMEOUT):
        self.timeout = timeout
        self.base = base.rstrip("/")
        self.user = user
        self.session = requests.Session()
        self.session.auth = (user, password)
        self.session.headers["content-type"] = "application/json"

    def get(self, api_path: str) -> Optional[dict]:
        response = self.session.get(self.base + api_path, timeout=self.timeout)
        if response.status_code == 404:
            return None
        _raise_for(response, "GET", api_path)
        return response.json()

    def send(self, method: str, api_path: str, body: Mapping) -> None:
        payload = dict(body) if method != "DELETE" else None
        response = self.session.request(method, self.base + api_path, json=payload,
                                        timeout=self.timeout)
        _raise_for(response, method, api_path)

    def close(self) -> None:
        self.session.close()


def _raise_for(response: requests.Response, method: str, api_path: str) -> None:
    if response.status_code < 300:
        return
    try:
        reason = response.json().get("reason", "")
    except ValueError:
        reason = response.text[:200]
    raise ApiError(response.status_code,
                   f"{method} {api_path} answered {response.status_code}: {reason}".strip())


def read_marks(api: Api) -> dict[tuple[str, str], str]:
    """(user|vhost, name) → the mark it carries, for every mesh mark on the broker."""
    marks: dict[tuple[str, str], str] = {}
    for parameter in api.get("/api/global-parameters") or []:
        name, value = parameter.get("name", ""), parameter.get("value")
        kind, _, subject = name[len(MARK_PREFIX):].partition(":")
        if name.startswith(MARK_PREFIX) and kind in (USER, VHOST) and subject:
            marks[(kind, subject)] = value if isinstance(value, str) else json.dumps(value)
    return marks
