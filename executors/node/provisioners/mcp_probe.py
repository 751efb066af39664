"""An MCP client just large enough to verify a tool server binding: initialise, list tools.

Invariants:
- Speaks MCP over streamable HTTP with the standard library only (http.client), so a node
  verifies tool servers without the `mcp` SDK: a JSON-RPC `initialize`, the
  `notifications/initialized` notification and `tools/list`, each a POST to the binding's url
  with `Authorization: Bearer <token>`, accepting either answer form the transport allows (one
  JSON body, or an SSE stream whose `data:` lines carry it) and carrying the session id the
  server gave (`Mcp-Session-Id`), if any.
- Read-only towards the server: nothing is called but the handshake and the listing.
- A Probe says what happened as data (`status`: ok | refused | unreachable | not-mcp) with the
  tool names or why not; the token is sent in the header and appears nowhere else.
"""

from __future__ import annotations

import http.client
import json
from typing import Any, Optional
from urllib.parse import urlsplit

import attrs

from resolver import MeshError

PROTOCOL_VERSION = "2025-06-18"
OK, REFUSED, UNREACHABLE, NOT_MCP = "ok", "refused", "unreachable", "not-mcp"


@attrs.frozen
class Probe:
    status: str
    detail: str = ""
    tools: tuple[str, ...] = ()
    server: str = ""  # the server's name and version, as it says in `initialize`


class _Refused(MeshError):
    """The server refused the token (HTTP 401/403): a Probe of status refused."""


class _NotMcp(MeshError):
    """An answer that is not MCP over streamable HTTP: a Probe of status not-mcp."""


def _message(content_type: str, body: bytes) -> Any:
    """The JSON-RPC message of one answer: a JSON body, or the first `data:` event of SSE."""
    text = body.decode("utf-8", "replace")
    if content_type.startswith("text/event-stream"):
        data = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
        text = next((d for d in data if d), "")
    try:
        return json.loads(text)
    except ValueError as error:
        raise _NotMcp(f"an answer that is not JSON-RPC ({content_type or 'no content type'})"
                      ) from error


class _Session:
    def __init__(self, url: str, token: str, timeout: float):
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise _NotMcp(f"the url {url!r} is not an http(s) url")
        connection = http.client.HTTPSConnection if parts.scheme == "https" else \
            http.client.HTTPConnection
        self.connection = connection(parts.hostname, parts.port, timeout=timeout)
        self.path = parts.path or "/"
        self.token = token
        self.session_id: Optional[str] = None
        self.ids = 0

    def post(self, method: str, params: dict[str, Any], notification: bool = False) -> Any:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
        if not notification:
            self.ids += 1
            message["id"] = self.ids
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json",
                   "Accept": "application/json, text/event-stream",
                   "MCP-Protocol-Version": PROTOCOL_VERSION}
        if self.session_id:
            headers["Mcp-Session-Id"] = self.session_id
        self.connection.request("POST", self.path, json.dumps(message).encode(), headers)
        answer = self.connection.getresponse()
        body = answer.read()
        if answer.status in (401, 403):
            raise _Refused(f"HTTP {answer.status}")
        self.session_id = answer.getheader("Mcp-Session-Id") or self.session_id
        if notification:
            return None
        if answer.status != 200:
            raise _NotMcp(f"HTTP {answer.status} to {method}")
        reply = _message(answer.getheader("Content-Type") or "", body)
        if not isinstance(reply, dict) or reply.get("id") != message["id"]:
            raise _NotMcp(f"no JSON-RPC answer to {method}")
        if "error" in reply:
            error = reply["error"] if isinstance(reply["error"], dict) else {}
            raise _NotMcp(f"{method} answered error {error.get('code')}: "
                          f"{str(error.get('message', ''))[:200]}")
        return reply.get("result")


def list_tools(url: str, token: str, timeout: float = 5.0) -> Probe:
    """Initialise an MCP session at `url` with `token` and list its tools."""
    try:
        session = _Session(url, token, timeout)
    except _NotMcp as error:
        return Probe(NOT_MCP, str(error))
    try:
        started = session.post("initialize", {
            "protocolVersion": PROTOCOL_VERSION, "capabilities": {},
            "clientInfo": {"name": "mesh-verify", "version": "1"}})
        info = started.get("serverInfo", {}) if isinstance(started, dict) else {}
        server = f"{info.get('name', '?')} {info.get('version', '')}".strip()
        session.post("notifications/initialized", {}, notification=True)
        listed = session.post("tools/list", {})
        tools = listed.get("tools") if isinstance(listed, dict) else None
        if not isinstance(tools, list):
            raise _NotMcp("tools/list answered no list of tools")
        return Probe(OK, tools=tuple(sorted(str(t.get("name")) for t in tools
                                            if isinstance(t, dict))), server=server)
    except _Refused as refused:
        return Probe(REFUSED, str(refused))
    except _NotMcp as error:
        return Probe(NOT_MCP, str(error))
    except (OSError, http.client.HTTPException) as error:
        return Probe(UNREACHABLE, getattr(error, "strerror", None)
                     or f"{type(error).__name__}: {error}".splitlines()[0])
    finally:
        session.connection.close()
