"""The control module's process: `mesh control` on the mesh directory (the control node's,
mounted as a facility), and the module's HTTP contract on MESH_API_PORT (8080): `/healthz`
and `/ca`.

Invariants:
- The control plane is the real one: `python3 -m executors.cli control MESH_DIR` (this
  project, installed from its wheel), run as a child process whose stderr lines are this
  container's log: the mesh's one control loop. MESH_DIR is the control node's mesh directory
  as the module mounts it (the node's `mesh-dir` facility: mesh.yaml, catalogue, ledger, the
  CA under its `ca.path`, the control state in `.control/`); unset, `$MESH_DATA_DIR/mesh` in
  the module's state volume.
- The broker settings `mesh init` kept in the control state (`.control/settings.json`,
  read by `mesh control` itself) come first; without them the broker's AMQP address is the one
  the module's binding gives (MESH_BROKER_URL: only its host and port; the control plane
  speaks as its own account `mesh.<mesh>.control`, which it keeps with the broker's
  administrator). The management API and the administrator come from the mesh (its substrate
  broker, the admin's password opened from the escrow with the control node's key,
  MESH_CONTROL_KEY: the `control-key` facility, else `$MESH_DATA_DIR/node.key`) unless
  MESH_BROKER_API, MESH_BROKER_ADMIN and MESH_BROKER_ADMIN_PASSWORD_FILE name them.
- `/healthz` answers 200 only while `mesh control` runs; otherwise 503 with why (its exit code
  and last lines). A control plane that exits is started again with capped backoff, never
  silently; SIGTERM stops it (it finishes its cycle) and then this process.
- `/ca` serves the mesh CA's certificate (`ca.path` of mesh.yaml, `.crt`), 503 until
  `mesh ca init` made it. Nothing else is served; no secret is ever printed.
- MESH_STORE_URL (the module's store binding) is not used yet: the ledger is a file in the mesh
  directory.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

DATA_DIR = Path(os.environ.get("MESH_DATA_DIR", "/var/lib/mesh-control"))
MESH_DIR = Path(os.environ.get("MESH_DIR") or DATA_DIR / "mesh")
PORT = int(os.environ.get("MESH_API_PORT", "8080"))
BACKOFF_CAP = 60.0


def say(line: str) -> None:
    print(f"control-module: {line}", file=sys.stderr, flush=True)


def broker_address(url: str) -> str:
    """host:port of an amqp:// URL (its credentials are never kept or printed)."""
    parts = urlsplit(url)
    if parts.scheme not in ("amqp", "amqps") or not parts.hostname:
        raise ValueError("MESH_BROKER_URL is not amqp://USER:PASSWORD@HOST:PORT/VHOST")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{host}:{parts.port or 5672}"


def kept_broker() -> bool:
    """Whether the control state keeps a broker address (`mesh init` was given one)."""
    try:
        kept = json.loads((MESH_DIR / ".control" / "settings.json").read_text())
    except (OSError, ValueError):
        return False  # none kept (or unreadable: `mesh control` itself says so)
    return isinstance(kept, dict) and bool(kept.get("broker"))


def control_environment() -> dict:
    env = dict(os.environ)
    url = env.pop("MESH_BROKER_URL", "")
    env.pop("MESH_STORE_URL", None)  # the child needs neither binding's password
    if url and not env.get("MESH_BROKER") and not kept_broker():
        env["MESH_BROKER"] = broker_address(url)
    key = DATA_DIR / "node.key"
    if not env.get("MESH_CONTROL_KEY") and key.exists():
        env["MESH_CONTROL_KEY"] = str(key)
    return env


class Supervisor:
    """Runs `mesh control MESH_DIR` and keeps it running."""

    def __init__(self):
        self.process = None
        self.lines = collections.deque(maxlen=5)
        self.last_exit = None
        self.stopping = threading.Event()

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def _pump(self, stream) -> None:
        for raw in stream:
            line = raw.rstrip("\n")
            self.lines.append(line)
            print(line, file=sys.stderr, flush=True)

    def run(self) -> int:
        delay = 1.0
        while not self.stopping.is_set():
            command = [sys.executable, "-m", "executors.cli", "control", str(MESH_DIR)]
            try:
                env = control_environment()
            except ValueError as error:
                say(str(error))
                self.last_exit = f"not started: {error}"
                self.stopping.wait(delay)
                delay = min(delay * 2, BACKOFF_CAP)
                continue
            say(f"starting: mesh control {MESH_DIR}")
            started = time.monotonic()
            self.process = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL,
                                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                            text=True, errors="replace")
            self._pump(self.process.stdout)
            code = self.process.wait()
            if self.stopping.is_set():
                return code
            self.last_exit = f"mesh control exited {code}: " + " | ".join(self.lines)
            if time.monotonic() - started > 60:
                delay = 1.0
            say(f"mesh control exited {code}; starting it again in {delay:.0f}s")
            self.stopping.wait(delay)
            delay = min(delay * 2, BACKOFF_CAP)
        return 0

    def stop(self, *_) -> None:
        self.stopping.set()
        if self.running:
            self.process.send_signal(signal.SIGTERM)


SUPERVISOR = Supervisor()


def ca_certificate() -> bytes:
    from resolver.documents import load_mesh

    from executors.control.ca import ca_cert_path

    mesh, _ = load_mesh((MESH_DIR / "mesh.yaml").read_text(encoding="utf-8"),
                        str(MESH_DIR / "mesh.yaml"))
    return ca_cert_path(MESH_DIR, mesh).read_bytes()


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        path = self.path.split("?")[0]
        if path == "/healthz":
            if SUPERVISOR.running:
                self._send(200, b"ok\n", "text/plain")
            else:
                why = SUPERVISOR.last_exit or "mesh control is not running"
                self._send(503, (why + "\n").encode("utf-8", "replace"), "text/plain")
        elif path == "/ca":
            try:
                self._send(200, ca_certificate(), "application/x-pem-file")
            except FileNotFoundError:
                self._send(503, b"the mesh CA is not issued yet (mesh ca init)\n", "text/plain")
            except Exception as error:  # noqa: BLE001 - a mesh.yaml that does not load
                self._send(503, f"the mesh does not load: {error}\n".encode("utf-8", "replace"),
                           "text/plain")
        else:
            self._send(404, b"not found\n", "text/plain")

    def _send(self, status, body, content_type):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, fmt, *args):  # one line per request, no query strings
        if self.path.split("?")[0] != "/healthz":
            say(f"{self.command} {self.path.split('?')[0]} -> {args[1] if len(args) > 1 else ''}")


def main() -> int:
    server = ThreadingHTTPServer(("0.0.0.0", PORT), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    say(f"serving /healthz and /ca on port {PORT}")
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, SUPERVISOR.stop)
    code = SUPERVISOR.run()
    server.shutdown()
    return code


if __name__ == "__main__":
    sys.exit(main())
