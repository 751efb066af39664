"""The no-op check of `mesh apply`: say "nothing to change" without the resolver or the SDK.

Invariants:
- Standard library only (json, os, fcntl, _socket; not even http.client, which pulls in ssl
  and email): importing the resolver (cattrs, ruamel), attrs, pyrsistent or the docker SDK
  costs far more than the whole check. Its imports stay at the top of this module, and every
  module it imports (options, compare, reads, sha, outcome, node_paths, marks,
  applied_record) is standard-library-only too. What a no-op `mesh apply` pays for is mostly
  importing, so the check imports the cheapest module that does the job: `_socket` (the C
  module socket.py wraps; socket.py adds selectors, array and enums it does not use) and
  SHA-256 through sha.py (not hashlib, which loads OpenSSL first).
- It answers only for byte-identical inputs (declaration file, sealed secrets and key) to the
  last successful full apply, whose record (`<state root>/.mesh/noop.json`) holds what that
  apply rendered (the desired state, reduced to what `diff` compares: config summaries are
  left out, they only explain a changed digest; never written for a declaration that needs
  its provisioners or checks).
- What differs is decided by the full path's own comparison: the node is observed by
  reads.py, as the full path observes it (the containers from one list call over the unix
  socket instead of the SDK), and compare.diff of the recorded desired state against it must
  have nothing to do, refuse or report. No rule of its own.
- A firewall intent in force is checked as the firewall executor checks it: the recorded
  `<state root>/.mesh/firewall.digest` and one `list chains` of table inet mesh (the nftables
  binding, imported only then).
- Where files are, the labels and the names of the firewall's marks are read from node_paths
  and marks (standard library only too), never restated here.
- Any doubt declines (returns None) and the full path runs unchanged: an unusual argument, a
  grant, an unreadable file, an engine not on a unix socket, an answer not understood, another
  apply holding the lock. It never writes anything.
- A no-op it reports is the full path's no-op outcome (outcome.py), printed by the same
  functions: same text and same --json document.
"""

from __future__ import annotations

import _socket
import errno
import fcntl
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Optional, TextIO, TypedDict
from urllib.parse import quote

from executors.common.marks import (
    ENGINE_API_VERSION,
    ENGINE_SOCKET,
    FIREWALL_FAMILY,
    FIREWALL_TABLE,
    LABEL_MESH,
    digest_from_chain_name,
)
from executors.node.apply.compare import (
    Desired,
    DesiredAccess,
    DesiredContainer,
    DesiredDir,
    DesiredFile,
    Observed,
    diff,
)
from executors.node.apply.options import ApplyOptions
from executors.node.apply.outcome import (
    ApplyOutcome,
    ApplyResult,
    Held,
    held_of,
    write_outcome,
)
from executors.node.apply.reads import container_facts, observe_files, read_answered
from executors.node.apply.sha import sha256_file, sha256_hex
from executors.node.node_paths import NodePaths

if TYPE_CHECKING:  # the full path's types, named only: never imported by the check
    from resolver import Declaration

RECORD_VERSION = 4  # noop.json; 2: the executor's files under <state root>/.mesh;
# 3: containers say whether they have a health check (answered.json must vouch for those);
# 4: the desired state as compare.diff reads it (every declared file, with its mode)
ENGINE_TIMEOUT = 10


class _Decline(Exception):
    """The check cannot vouch for a no-op; the full path decides."""


class NoopInputs(TypedDict):
    """What a no-op depends on besides the node (one-way digests, never a value)."""

    declaration_sha256: str
    secrets_sha256: Optional[str]


# --------------------------------------------------------------------------- inputs


def noop_inputs(options: ApplyOptions) -> Optional[NoopInputs]:
    """The fingerprint of what a no-op depends on besides the node: the one declaration file's
    bytes and the sealed secrets' and key's bytes (a one-way digest; never a value). None when
    the invocation is not one the check handles (several files, a spool directory, YAML)."""
    if len(options.declarations) != 1:
        return None
    declaration = Path(options.declarations[0])
    if declaration.suffix != ".json" or not declaration.is_file():
        return None
    secrets = None
    if (options.secrets is None) != (options.key is None):
        return None  # the full path explains that they go together
    if options.secrets is not None and options.key is not None:
        framed = []
        for part in (options.secrets, options.key):
            with open(part, "rb") as handle:
                data = handle.read()
            framed.append(len(data).to_bytes(8, "big") + data)
        secrets = sha256_hex(b"".join(framed))
    return {"declaration_sha256": sha256_file(str(declaration)), "secrets_sha256": secrets}


def fast_path_disabled(options: ApplyOptions) -> bool:
    return options.no_fast or \
        os.environ.get("MESH_APPLY_NO_FAST", "") not in ("", "0")


# --------------------------------------------------------------------------- the engine


def _socket_path(docker_host: Optional[str]) -> str:
    docker_host = docker_host or ENGINE_SOCKET
    if docker_host.startswith("unix:///"):
        return docker_host[len("unix://"):]
    raise _Decline(f"engine {docker_host} is not a unix socket")


def _get(path: str, target: str) -> tuple[int, bytes]:
    """One HTTP/1.0 GET over a unix socket: (status, body). HTTP/1.0 keeps the answer plain (no
    chunks, the engine closes when done); http.client would import ssl and email, which cost
    more than the rest of the check. `_socket`'s socket has no `with`: closed in `finally`."""
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.settimeout(ENGINE_TIMEOUT)
        sock.connect(path)
        sock.sendall(f"GET {target} HTTP/1.0\r\nHost: docker\r\n\r\n".encode("ascii"))
        chunks = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        sock.close()
    head, separator, body = b"".join(chunks).partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    if not separator or not version.startswith("HTTP/1."):
        raise _Decline("engine answer not understood")
    for line in lines[1:]:
        name, _, value = line.partition(":")
        name, value = name.strip().lower(), value.strip()
        if name == "transfer-encoding" and value.lower() != "identity":
            raise _Decline(f"engine answer is {value}")
        if name == "content-length" and int(value) != len(body):
            raise _Decline("engine answer cut short")
    return int(rest.split(" ", 1)[0]), body


def managed_rows(docker_host: Optional[str], mesh: str) -> list[Mapping[str, object]]:
    """GET /containers/json?all=1 with the full path's label filter, over the unix socket: the
    rows docker_engine.managed_rows gets through the SDK."""
    filters = quote(json.dumps({"label": [f"{LABEL_MESH}={mesh}"]}))
    status, body = _get(_socket_path(docker_host),
                        f"/v{ENGINE_API_VERSION}/containers/json?all=1&filters={filters}")
    if status != 200:
        raise _Decline(f"engine answered {status}")
    rows = json.loads(body)
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        raise _Decline("engine answer is not a list")
    return rows


# --------------------------------------------------------------------------- the record


def _read_json(path: Path) -> object:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def noop_record(declaration: Declaration, desired: Desired, inputs: NoopInputs,
                firewall_digest: Optional[str]) -> dict[str, object]:
    """What the check needs, from the full path's rendered desired state (called by pipeline.py
    after a successful apply; `firewall_digest` when the firewall executor applied the intent)."""
    return {
        "version": RECORD_VERSION, "inputs": inputs,
        "held": [h.to_json() for h in held_of(declaration.held)],
        "firewall_intent": declaration.firewall is not None, "firewall_digest": firewall_digest,
        "desired": {
            "mesh": desired.mesh, "node": desired.node, "serial": desired.serial,
            "digest": desired.digest, "generations": dict(desired.generations),
            "dirs": [{"path": d.path, "uid": d.uid, "gid": d.gid, "mode": d.mode}
                     for d in desired.dirs],
            "accesses": [{"path": a.path, "mode": a.mode} for a in desired.accesses],
            "files": [{"path": f.path, "sha256": f.sha256, "mode": f.mode,
                       **({"owner": list(f.owner)} if f.owner is not None else {})}
                      for f in desired.files],
            "containers": [{"name": c.name, "run_once": c.run_once, "digest": c.digest,
                            "health": c.health} for c in desired.containers]},
    }


def _desired(record: Mapping[str, object]) -> Desired:
    """The recorded desired state (any fault in it raises: the check declines)."""
    d = record["desired"]
    if not isinstance(d, dict):
        raise _Decline("the record holds no desired state")
    return Desired(
        mesh=str(d["mesh"]), node=str(d["node"]), serial=int(d["serial"]),
        digest=str(d["digest"]),
        dirs=tuple(DesiredDir(str(x["path"]), int(x["uid"]), int(x["gid"]), int(x["mode"]))
                   for x in d["dirs"]),
        accesses=tuple(DesiredAccess(str(x["path"]), str(x["mode"])) for x in d["accesses"]),
        files=tuple(DesiredFile(str(x["path"]), str(x["sha256"]), int(x["mode"]),
                                (int(x["owner"][0]), int(x["owner"][1])) if "owner" in x
                                else None)
                    for x in d["files"]),
        containers=tuple(DesiredContainer(str(x["name"]), bool(x["run_once"]),
                                          str(x["digest"]), {}, bool(x["health"]))
                         for x in d["containers"]),
        generations={str(k): int(v) for k, v in d["generations"].items()})


def _held(record: Mapping[str, object]) -> tuple[Held, ...]:
    """The held instances the record names (HeldJson entries; a fault raises: declined)."""
    entries = record.get("held") or []
    if not isinstance(entries, list):
        raise _Decline("the record's held instances are not a list")
    return tuple(Held(str(h["instance"]), str(h["code"]), str(h["message"]), str(h["where"]))
                 for h in entries)


# --------------------------------------------------------------------------- the checks


def _check_firewall(paths: NodePaths, digest: str) -> None:
    """No-op exactly when the firewall executor's diff is empty: our table runs, carrying one
    digest chain, the desired digest, and the node's record says the same."""
    with open(paths.firewall_digest, encoding="ascii") as handle:
        if handle.read().strip() != digest:
            raise _Decline("firewall.digest differs")
    import nftables  # the binding (an optional extra), only for a firewall intent in force

    rc, output, _ = nftables.Nftables().json_cmd({"nftables": [{"list": {"chains": {}}}]})
    if rc != 0:
        raise _Decline("cannot list nftables chains")
    ours = [o["chain"] for o in output.get("nftables", [])
            if o.get("chain", {}).get("family") == FIREWALL_FAMILY
            and o["chain"].get("table") == FIREWALL_TABLE]
    running = [d for d in (digest_from_chain_name(c.get("name", "")) for c in ours) if d]
    if running != [digest]:
        raise _Decline("the running table is not the recorded one")


def _observe(paths: NodePaths, desired: Desired, docker_host: Optional[str]) -> Observed:
    """The node as the full path observes it (execute.observe): reads.py, and the rows of the
    Engine's list call fetched here (config summaries left unread: diff needs them only to
    explain a changed digest, and a changed digest declines anyway)."""
    files = observe_files(paths, desired)
    containers = container_facts(managed_rows(docker_host, desired.mesh), read_answered(paths),
                                 summaries=False)
    return Observed(files.dirs, files.accesses, files.files, containers, files.markers,
                    files.applied)


def _say(began: float, message: str) -> None:
    print(f"[{time.monotonic() - began:6.1f}s] · {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- the call


def check(options: ApplyOptions) -> ApplyOutcome:
    """The outcome of a no-op, or _Decline."""
    inputs = noop_inputs(options)
    if inputs is None:
        raise _Decline("not one JSON declaration file")
    paths = NodePaths(options.state_root)
    try:
        lock = os.open(paths.lock, os.O_RDWR)
    except FileNotFoundError:
        raise _Decline("no apply has run with this state root") from None
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                raise _Decline("another apply is running") from None
            raise
        try:
            record = _read_json(paths.noop_record)
        except FileNotFoundError:
            raise _Decline("no record of a successful apply") from None
        if not isinstance(record, dict) or record.get("version") != RECORD_VERSION \
                or record.get("inputs") != inputs:
            raise _Decline("the declaration or sealed secrets differ from the last successful "
                           "apply's")
        desired = _desired(record)
        firewall_digest = None
        if record["firewall_intent"] and not options.no_firewall:
            firewall_digest = record.get("firewall_digest")
            if not isinstance(firewall_digest, str) or not firewall_digest:
                raise _Decline("the firewall intent was not applied by the last apply")
        if firewall_digest:
            _check_firewall(paths, firewall_digest)
        plan = diff(desired, _observe(paths, desired, options.docker_host))
        if not plan.nothing:
            first = (plan.refusals or plan.notices or plan.ops)[0]
            raise _Decline(f"{len(plan.ops)} operation(s) to apply ({first})")
    finally:
        os.close(lock)
    return ApplyOutcome(
        ApplyResult.DRY_RUN if options.dry_run else ApplyResult.APPLIED,
        mesh=desired.mesh, node=desired.node, serial=desired.serial,
        file=str(Path(options.declarations[0])), superseded=(), held=_held(record),
        digest=desired.digest, in_force_read=True, serial_applied=desired.serial,
        generations=dict(desired.generations), health=None if options.dry_run else {})


def try_noop(options: ApplyOptions, out: TextIO) -> Optional[int]:
    """Print the no-op outcome and return 0, or None: the full path must run."""
    began = time.monotonic()
    try:
        outcome = check(options)
    except Exception as exc:  # any doubt, whatever it is: the full path decides and reports
        _say(began, f"no-op check declined ({exc or type(exc).__name__}); applying in full")
        return None
    _say(began, f"no-op check: declaration serial {outcome.serial} for node {outcome.node} "
         "unchanged since its last successful apply; files, directories, run-once markers and "
         "containers observed as recorded")
    _say(began, f"serial {outcome.serial_applied} in force; 0 operation(s); "
         f"result: {outcome.result.value}")
    write_outcome(outcome, options.json, out)
    return 0
