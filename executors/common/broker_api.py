"""The AMQP broker's management HTTP API (RabbitMQ; LavinMQ serves the same): shared by the
grant provisioner (node/provisioners/amqp.py) and the mesh's own delivery objects
(control/fleet_broker.py); the marks it reads and writes are common/broker_marks.py's rules.

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
- An https API is verified against the CA given (`ca_pem`, the mesh CA's certificate) alone,
  its name checked (`server_name` when the address dialled is not the one the certificate
  names, e.g. loopback on the broker's own node), or against the server's own certificate as
  its declaration gives it (`pinned`); the system's public CAs are never trusted for it. An https API with no CA given is refused before the admin's password is sent.
- `lost_race` is the one place that says a refused request lost to another writer since the
  broker was observed (the object it makes was made meanwhile, the object it deletes is gone).
"""

from __future__ import annotations

import ssl
from typing import Any, Mapping, Optional

import requests
from requests.adapters import HTTPAdapter

from resolver import MeshError

from executors.common.broker_marks import (  # the rules, re-exported with the client (__all__)
    DEFAULT_VHOST,
    HASHES,
    MARK_PREFIX,
    USER,
    VHOST,
    Call,
    hash_matches,
    mark_call,
    mark_name,
    marker,
    parse_marks,
    path,
    tags_of,
    unmark_call,
)

__all__ = [
    "DEFAULT_VHOST", "HASHES", "MARK_PREFIX", "USER", "VHOST", "Call", "hash_matches", "mark_call",
    "mark_name", "marker", "parse_marks", "path", "tags_of", "unmark_call",
    "HTTP_TIMEOUT", "Answer", "ApiError", "Api", "ca_context", "lost_race", "read_marks",
]

HTTP_TIMEOUT = 10

# An answer of the management API, parsed: a list or an object as the path gives, or None for
# 404. Untrusted JSON: its reader checks the shape it needs (broker_marks.parse_marks, tags_of).
Answer = Any


class ApiError(MeshError):
    def __init__(self, status: int, message: str, reason: str = ""):
        super().__init__(message)
        self.status = status
        self.reason = reason


class _MeshCaAdapter(HTTPAdapter):
    """HTTPS verified against one CA's certificate (an SSLContext of its own), never the
    bundle `requests` would add to it; `server_name`: the name checked instead of the host."""

    def __init__(self, context: ssl.SSLContext, server_name: Optional[str]):
        self._context, self._server_name = context, server_name
        super().__init__()

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        kwargs["ssl_context"] = self._context
        if self._server_name:
            kwargs["server_hostname"] = self._server_name
            kwargs["assert_hostname"] = self._server_name
        super().init_poolmanager(*args, **kwargs)

    def build_connection_pool_key_attributes(self, request: requests.PreparedRequest,
                                             verify: Any, cert: Any = None) -> Any:
        # `verify` may name a bundle from the environment (REQUESTS_CA_BUNDLE): never loaded
        return super().build_connection_pool_key_attributes(request, True, cert)

    def cert_verify(self, conn: Any, url: str, verify: Any, cert: Any) -> None:
        conn.cert_reqs = "CERT_REQUIRED"  # against the context's CA alone: no bundle added
        conn.ca_certs = conn.ca_cert_dir = None


def ca_context(ca_pem: str, pinned: bool = False) -> ssl.SSLContext:
    """A client context that trusts `ca_pem` alone and checks the server's name; `pinned`:
    `ca_pem` is the server's own certificate (trusted as it is, no chain above it)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verify + check_hostname on
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if pinned:
        context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
    try:
        context.load_verify_locations(cadata=ca_pem)
    except (ssl.SSLError, ValueError) as exc:
        raise MeshError(f"the mesh CA certificate cannot be used for TLS: {exc}") from None
    return context


class Api:
    """The management API as one account (one HTTP session; never logs a body). An https
    `base` is verified against `ca_pem` (the mesh CA's certificate) and nothing else."""

    def __init__(self, base: str, user: str, password: str, timeout: float = HTTP_TIMEOUT,
                 ca_pem: Optional[str] = None, server_name: Optional[str] = None,
                 pinned: bool = False):
        self.timeout = timeout
        self.base = base.rstrip("/")
        self.user = user
        self.session = requests.Session()
        if self.base.lower().startswith("https://"):
            if ca_pem is None:
                raise MeshError(f"{self.base}: an https management API is verified against "
                                f"the mesh CA, and none was given; nothing was sent")
            self.session.mount("https://", _MeshCaAdapter(ca_context(ca_pem, pinned),
                                                          server_name))
        self.session.auth = (user, password)
        self.session.headers["content-type"] = "application/json"

    def get(self, api_path: str) -> Answer:
        response = self.session.get(self.base + api_path, timeout=self.timeout)
        if response.status_code == 404:
            return None
        _raise_for(response, "GET", api_path)
        return response.json()

    def send(self, method: str, api_path: str, body: Mapping[str, str]) -> None:
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
    except (ValueError, AttributeError):
        reason = response.text[:200]
    if isinstance(reason, list):  # RabbitMQ: ["user_already_exists", "<name>"]
        reason = " ".join(str(part) for part in reason)
    reason = str(reason)
    raise ApiError(response.status_code,
                   f"{method} {api_path} answered {response.status_code}: {reason}".strip(),
                   reason)


def lost_race(method: str, error: Exception) -> bool:
    """Whether `error`, the answer to a `method` request planned from an observation, means
    another writer changed that object since: the object the request makes was made meanwhile
    (RabbitMQ answers two PUTs of the same new user at once with `400 user_already_exists` for
    the later one; 409 is HTTP's own word for it), or the object it deletes is gone already (a
    DELETE answered 404). Anything else is a plain failure."""
    if not isinstance(error, ApiError):
        return False
    return (error.status == 409
            or (error.status == 400 and "already_exists" in error.reason)
            or (error.status == 404 and method == "DELETE"))


def read_marks(api: Api) -> dict[tuple[str, str], str]:
    """(user|vhost, name) → the mark it carries, for every mesh mark on the broker."""
    return parse_marks(api.get("/api/global-parameters") or [])
