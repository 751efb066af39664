"""The catalogue's MCP programs, on the `mcp` Python SDK: two tool servers and an assistant.

    python3 mesh_mcp.py serve files --root DIR [--port 8000]   # list and read the files of DIR
    python3 mesh_mcp.py serve notes --root DIR [--port 8000]   # a note store kept in DIR
    python3 mesh_mcp.py list --bindings FILE                   # each server's tools, as JSON
    python3 mesh_mcp.py assistant --bindings FILE --out FILE   # `list` every --every seconds

A server speaks MCP over streamable HTTP at /mcp and answers only a request carrying
`Authorization: Bearer <token>` whose SHA-256 (hex) is in its tokens file (MCP_TOKENS_FILE,
default /etc/mesh/auth/tokens: `user:sha256:<hex>` lines, `#` comments, kept by the mesh's
tokens provisioner). The file is read again whenever it changes (its size, mtime or inode), so
a token the mesh adds works and one it removes stops working without a restart; a missing file
accepts no token. Tokens are compared as hashes, in constant time; no token is ever logged.

The assistant side reads the binding file the mesh mounts for a requirement taking every
`tools` provider (a JSON list of `{name, url, token, transport, …}`) and, for each entry,
initialises an MCP session with its own token and lists the server's tools.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import hmac
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

TOKENS_FILE = os.environ.get("MCP_TOKENS_FILE", "/etc/mesh/auth/tokens")


# --------------------------------------------------------------------------- the token check


class Tokens:
    """The accepted token hashes, read from `path` again whenever the file changes."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._seen: Any = None
        self._hashes: frozenset[str] = frozenset()

    def _current(self) -> frozenset[str]:
        try:
            facts = os.stat(self.path)
        except FileNotFoundError:
            self._seen, self._hashes = None, frozenset()
            return self._hashes
        seen = (facts.st_ino, facts.st_size, facts.st_mtime_ns)
        if seen != self._seen:
            hashes = set()
            for line in Path(self.path).read_text().splitlines():
                line = line.strip()
                if not line or line.startswith("#") or ":" not in line:
                    continue
                _, _, hashed = line.partition(":")
                if hashed.startswith("sha256:"):
                    hashes.add(hashed[len("sha256:"):])
            self._seen, self._hashes = seen, frozenset(hashes)
        return self._hashes

    def accepts(self, token: str) -> bool:
        presented = hashlib.sha256(token.encode()).hexdigest()
        found = False
        for known in self._current():  # every entry compared, each in constant time
            found |= hmac.compare_digest(presented, known)
        return found


class BearerOnly:
    """ASGI middleware: HTTP requests without an accepted bearer token get 401."""

    def __init__(self, app: Any, tokens: Tokens) -> None:
        self.app, self.tokens = app, tokens

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope.get("path") != "/healthz":
            headers = dict(scope.get("headers") or ())
            given = headers.get(b"authorization", b"").decode("latin-1")
            scheme, _, token = given.partition(" ")
            if scheme.lower() != "bearer" or not token or not self.tokens.accepts(token.strip()):
                body = b'{"error": "invalid_token"}'
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"www-authenticate", b'Bearer realm="mesh"'),
                                        (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        if scope["type"] == "http" and scope.get("path") == "/healthz":
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"ok\n"})
            return
        await self.app(scope, receive, send)


# --------------------------------------------------------------------------- the servers


def files_server(root: Path) -> Any:
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("mesh-tools-files", instructions=f"Files under {root}, read-only.")

    def inside(relative: str) -> Path:
        path = (root / relative).resolve()
        if path != root.resolve() and root.resolve() not in path.parents:
            raise ValueError(f"{relative!r} is outside the shared directory")
        return path

    @server.tool()
    def list_files(directory: str = ".") -> list[str]:
        """The files and directories in `directory` (relative to the shared directory)."""
        return sorted(p.name + ("/" if p.is_dir() else "") for p in inside(directory).iterdir())

    @server.tool()
    def read_file(path: str) -> str:
        """The text of the file `path` (relative to the shared directory)."""
        return inside(path).read_text()

    return server


def notes_server(root: Path) -> Any:
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("mesh-tools-notes", instructions="A note store: add, list and read notes.")
    store = root / "notes.json"

    def load() -> dict[str, str]:
        return json.loads(store.read_text()) if store.exists() else {}

    @server.tool()
    def add_note(title: str, text: str) -> str:
        """Keep a note under `title` (replacing one of that title)."""
        notes = load()
        notes[title] = text
        temporary = store.with_suffix(".tmp")
        temporary.write_text(json.dumps(notes, indent=2, sort_keys=True))
        os.replace(temporary, store)
        return f"kept {title!r}"

    @server.tool()
    def list_notes() -> list[str]:
        """The titles of every note."""
        return sorted(load())

    @server.tool()
    def read_note(title: str) -> str:
        """The text of the note `title`."""
        notes = load()
        if title not in notes:
            raise ValueError(f"no note titled {title!r}")
        return notes[title]

    return server


def serve(kind: str, root: Path, port: int) -> None:
    import uvicorn
    from mcp.server.transport_security import TransportSecuritySettings

    root.mkdir(parents=True, exist_ok=True)
    server = files_server(root) if kind == "files" else notes_server(root)
    # every request is authenticated by its bearer token; the Host header is the mesh
    # address consumers dial, which no fixed list can name ahead of time
    app = server.streamable_http_app(
        json_response=True, stateless_http=True,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False))
    print(f"mesh-tools-{kind}: serving MCP at :{port}/mcp, tokens from {TOKENS_FILE}",
          flush=True)
    uvicorn.run(BearerOnly(app, Tokens(TOKENS_FILE)), host="0.0.0.0", port=port,
                log_level="warning")


# --------------------------------------------------------------------------- the assistant


async def tools_of(url: str, token: str, timeout: float = 10.0) -> list[str]:
    """The names of the tools the server at `url` lists for `token` (an initialised session)."""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with http:
        async with streamable_http_client(url, http_client=http) as streams:
            read, write = streams[0], streams[1]
            async with ClientSession(read, write) as session:
                await asyncio.wait_for(session.initialize(), timeout)
                listed = await asyncio.wait_for(session.list_tools(), timeout)
                return sorted(tool.name for tool in listed.tools)


async def list_all(bindings: Path) -> list[dict[str, Any]]:
    """One row per entry of the binding file: its name and url, and its tools or the error."""
    rows = []
    for entry in json.loads(bindings.read_text()):
        row: dict[str, Any] = {"name": entry["name"], "url": entry["url"]}
        try:
            row["tools"] = await tools_of(entry["url"], entry["token"])
        except BaseException as error:  # noqa: BLE001 - said in the row, never the token
            row["error"] = _one_line(error)
        rows.append(row)
    return rows


def _one_line(error: BaseException) -> str:
    inner = getattr(error, "exceptions", None)
    if inner:
        return _one_line(inner[0])
    return f"{type(error).__name__}: {error}".splitlines()[0][:300]


def assistant(bindings: Path, out: Path, every: float) -> None:
    while True:
        rows = asyncio.run(list_all(bindings))
        temporary = out.with_suffix(".tmp")
        out.parent.mkdir(parents=True, exist_ok=True)
        temporary.write_text(json.dumps(rows, indent=2, sort_keys=True) + "\n")
        os.replace(temporary, out)
        print(f"assistant: {len(rows)} tool server(s): "
              + ", ".join(f"{r['name']} ({len(r.get('tools', []))} tools)" if "tools" in r
                          else f"{r['name']} (error)" for r in rows), flush=True)
        time.sleep(every)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="mesh_mcp.py")
    verbs = parser.add_subparsers(dest="verb", required=True)
    s = verbs.add_parser("serve")
    s.add_argument("kind", choices=["files", "notes"])
    s.add_argument("--root", type=Path, required=True)
    s.add_argument("--port", type=int, default=8000)
    listing = verbs.add_parser("list")
    listing.add_argument("--bindings", type=Path, required=True)
    a = verbs.add_parser("assistant")
    a.add_argument("--bindings", type=Path, required=True)
    a.add_argument("--out", type=Path, required=True)
    a.add_argument("--every", type=float, default=30.0)
    call = verbs.add_parser("tools", help="the tools of one server, with a token read from stdin")
    call.add_argument("url")
    args = parser.parse_args(argv)
    if args.verb == "serve":
        serve(args.kind, args.root, args.port)
    elif args.verb == "list":
        print(json.dumps(asyncio.run(list_all(args.bindings)), indent=2, sort_keys=True))
    elif args.verb == "tools":
        try:
            print(json.dumps(asyncio.run(tools_of(args.url, sys.stdin.read().strip()))))
        except BaseException as error:  # noqa: BLE001
            print(_one_line(error), file=sys.stderr)
            return 1
    else:
        assistant(args.bindings, args.out, args.every)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
