"""`mesh verify` on a `metrics` binding: each entry's url must answer Prometheus exposition.

Real HTTP servers on this machine's loopback stand in for the exporters: one answering
exposition, one answering HTML, one answering 404, and a port nothing listens on. Each entry
of a monitor's binding gets its own result, naming the provider and what it answered.
(tests/test_metrics_netns.py runs the same check from inside Prometheus's container against a
real node-exporter, firewall on.)
"""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Iterator

import pytest
from pyrsistent import pmap, pvector

from resolver import BindingDecl, Declaration

from executors.node.provisioners.metrics_probe import exposition_families
from executors.node.provisioners.registry import probe_for
from executors.node.verify.check import verify_declaration

EXPOSITION = (b"# HELP node_load1 1m load average.\n# TYPE node_load1 gauge\nnode_load1 0.25\n"
              b'node_cpu_seconds_total{cpu="0",mode="idle"} 1234.5 1700000000000\n')
PAGES = {"/metrics": (200, "text/plain; version=0.0.4", EXPOSITION),
         "/html/metrics": (200, "text/html", b"<html><body>Hello</body></html>\n"),
         "/samples-only/metrics": (200, "text/plain", b"up 1\n")}


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the standard library's name
        status, kind, body = PAGES.get(self.path, (404, "text/plain", b"404 page not found\n"))
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def exporter() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _entry(provider: str, port: int, path: str) -> BindingDecl:
    """One entry of a monitor's `each: true` binding, as verify checks it (each_binding)."""
    return BindingDecl(consumer="prometheus@a", requirement="targets", provider=provider,
                       provision="metrics", values=pmap({
                           "host": "127.0.0.1", "port": str(port),
                           "url": f"http://127.0.0.1:{port}{path}"}))


def test_each_metrics_entry_is_checked_for_exposition_and_a_wrong_one_is_named(exporter):
    closed = _free_port()
    entries = [_entry("exporter@a", exporter, "/metrics"),
               _entry("html@a", exporter, "/html/metrics"),
               _entry("lost@a", exporter, "/nowhere/metrics"),
               _entry("off@a", closed, "/metrics"),
               _entry("terse@a", exporter, "/samples-only/metrics")]
    declaration = Declaration(mesh="m", node="a", address="127.0.0.1",
                              bindings=pvector(entries), instances=pvector(["prometheus@a"]))
    results = {r.provider: r for r in verify_declaration(declaration, None, timeout=3)}
    assert set(results) == {e.provider for e in entries}
    ok = results["exporter@a"]
    assert ok.status == "ok" and "Prometheus exposition" in ok.message, ok
    assert "2 metric families" in ok.message and "node_load1" in ok.message, ok
    assert results["terse@a"].status == "ok", results["terse@a"]
    html = results["html@a"]
    assert html.status == "missing-resource" and "not in Prometheus exposition" in html.message
    assert "html@a" in html.message and "text/html" in html.message, html
    lost = results["lost@a"]
    assert lost.status == "missing-resource" and "HTTP 404" in lost.message, lost
    off = results["off@a"]
    assert off.status == "unreachable" and "off@a" in off.message, off
    assert not any(r.ok for r in (html, lost, off))


def test_a_provision_without_a_probe_is_checked_as_reachable_only(exporter):
    assert probe_for("metrics") is not None
    assert probe_for("mesh-ca") is None and probe_for(None) is None
    binding = BindingDecl(consumer="app@a", requirement="ca", provider="control@a",
                          provision="mesh-ca", values=pmap({
                              "host": "127.0.0.1", "port": str(exporter),
                              "url": f"http://127.0.0.1:{exporter}/html/metrics"}))
    declaration = Declaration(mesh="m", node="a", address="127.0.0.1",
                              bindings=pvector([binding]), instances=pvector(["app@a"]))
    (result,) = verify_declaration(declaration, None, timeout=3)
    assert result.status == "ok" and result.message.startswith("reachable at"), result


@pytest.mark.parametrize("text, names", [
    (EXPOSITION.decode(), ("node_load1", "node_cpu_seconds_total")),
    ("# TYPE x counter\n", ("x",)),
    ('x_total{a="b"} +Inf\n', ("x_total",)),
    ("", ()),
    ("<html>\n<body>404</body>\n", ()),
    ("# just a comment\nnot a sample line at all\n", ()),
    ('{"status": "ok"}\n', ()),
])
def test_exposition_families(text, names):
    assert exposition_families(text) == names
