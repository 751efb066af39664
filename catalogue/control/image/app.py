"""Placeholder control-plane process: answers /healthz and serves the mesh CA certificate.

The real control plane replaces this file; the module's contract (port 8080, /healthz, /ca,
configuration through MESH_* variables, state in MESH_DATA_DIR) stays the same.
"""

import os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DATA_DIR = os.environ.get("MESH_DATA_DIR", "/var/lib/mesh-control")
PORT = int(os.environ.get("MESH_API_PORT", "8080"))


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/healthz":
            self._send(200, b"ok\n", "text/plain")
        elif self.path == "/ca":
            try:
                with open(os.path.join(DATA_DIR, "mesh-ca.crt"), "rb") as cert:
                    self._send(200, cert.read(), "application/x-pem-file")
            except FileNotFoundError:
                self._send(503, b"the mesh CA is not issued yet\n", "text/plain")
        else:
            self._send(404, b"not found\n", "text/plain")

    def _send(self, status, body, content_type):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, fmt, *args):  # one line per request on stderr, no query strings
        print(f"{self.command} {self.path.split('?')[0]} -> {args[1] if len(args) > 1 else ''}",
              flush=True)


if __name__ == "__main__":
    ThreadingHTTPServer(("0.0.0.0", PORT), Handler).serve_forever()
