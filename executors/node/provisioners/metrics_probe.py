"""Verify a `metrics` binding: does the provider's url answer Prometheus exposition?

Invariants:
- A metrics binding carries no credential (the provision grants nothing), so its check is the
  protocol's: one `GET` of the entry's url (http.client, the standard library) from the
  calling thread's network namespace (verify runs it inside the consumer's container), the
  text exposition format accepted (`Accept: text/plain;version=0.0.4`).
- An answer is exposition when it is HTTP 200 and its first lines (at most READ_LIMIT bytes
  are read) hold a `# HELP` or `# TYPE` line or a sample line (`name{labels} value`); the
  decision is `exposition_families` (pure: tested on its own).
- One BindingCheck per entry: ok names the url and how many metric families it saw;
  unreachable says why the connection failed; missing-resource names the url and what it
  answered instead (an HTTP status, or text that is not exposition).
- Read-only towards the provider: nothing is sent but the one GET.
"""

from __future__ import annotations

import http.client
import re
from urllib.parse import urlsplit

from resolver import BindingDecl

from executors.node.provisioners.base import MISSING, OK, UNREACHABLE, BindingCheck

PROVISION = "metrics"
READ_LIMIT = 256 * 1024
ACCEPT = "text/plain;version=0.0.4;q=1,*/*;q=0.1"

_COMMENT = re.compile(r"#\s*(HELP|TYPE)\s+([a-zA-Z_:][a-zA-Z0-9_:]*)(\s|$)")
_SAMPLE = re.compile(r'([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[^"}]|"(?:[^"\\]|\\.)*")*\})?\s+'
                     r"([-+]?(\d+\.?\d*([eE][-+]?\d+)?|\.\d+|NaN|[-+]?Inf))(\s+-?\d+)?\s*$")


def exposition_families(text: str) -> tuple[str, ...]:
    """The metric names `text` speaks of in Prometheus's text format (a `# HELP`/`# TYPE`
    line or a sample line each), in order of first mention; () when it is not exposition."""
    names: dict[str, None] = {}
    for line in text.split("\n"):  # the format's only line break (not str.splitlines's)
        line = line.strip()
        found = _COMMENT.match(line) if line.startswith("#") else _SAMPLE.match(line)
        if found is not None:
            names.setdefault(found.group(2) if line.startswith("#") else found.group(1))
    return tuple(names)


def check_binding(binding: BindingDecl, timeout: float) -> BindingCheck:
    """GET the binding's url and check it answers Prometheus exposition."""
    url = binding.values.get("url", "")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return BindingCheck(MISSING, f"{binding.provider}'s url {url!r} is not an http(s) url")
    connection = (http.client.HTTPSConnection if parts.scheme == "https"
                  else http.client.HTTPConnection)(parts.hostname, parts.port, timeout=timeout)
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    try:
        connection.request("GET", path, headers={"Accept": ACCEPT})
        answer = connection.getresponse()
        body = answer.read(READ_LIMIT)
    except (OSError, http.client.HTTPException) as error:
        return BindingCheck(UNREACHABLE, getattr(error, "strerror", None)
                            or f"{type(error).__name__}: {error}".splitlines()[0])
    finally:
        connection.close()
    if answer.status != 200:
        return BindingCheck(MISSING, f"{url} answers HTTP {answer.status}, not Prometheus "
                            f"exposition: is {binding.provider} a metrics exporter, and is "
                            f"its path right?")
    names = exposition_families(body.decode("utf-8", "replace"))
    if not names:
        kind = answer.getheader("Content-Type") or "no content type"
        return BindingCheck(MISSING, f"{url} answers, but not in Prometheus exposition format "
                            f"({kind}, no `# HELP`, `# TYPE` or sample line): is "
                            f"{binding.provider} a metrics exporter?")
    return BindingCheck(OK, f"{url} answers Prometheus exposition ({len(names)} metric "
                        f"famil{'y' if len(names) == 1 else 'ies'} seen, e.g. {names[0]})")


# This module is the probe of `metrics` bindings (extensions.ProtocolProbe): the registry
# hands out the module itself; its function above is the protocol's method.
provision = PROVISION
