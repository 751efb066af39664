"""The no-op check of `mesh apply`: say "nothing to change" without the resolver or the SDK.

Invariants:
- Standard library only (json, os, hashlib, socket, fcntl; not even http.client, which pulls in
  ssl and email): importing the resolver (cattrs, ruamel), attrs or the docker SDK costs far
  more than the whole check.
- It answers only for byte-identical inputs (declaration file, sealed secrets and key) to the
  last successful full apply, whose record (`<state root>/.mesh/noop.json`) says what that
  apply left (never written for a declaration that needs its provisioners or checks);
  it then observes the same facts the full path observes (one container list call, the state
  directories, accessed paths, the files the mesh writes, run-once markers, applied.json, and
  answered.json for the containers with a health check).
- A firewall intent in force is checked as the firewall executor checks it: the recorded
  `<state root>/.mesh/firewall.digest` and one `list chains` of table inet mesh (the nftables
  binding, imported only then).
- Where files are, the labels and the names of the firewall's marks are read from node_paths
  and marks (standard library only too), never restated here.
- Any doubt declines (returns None) and the full path runs unchanged: an unusual argument, a
  grant, an unreadable file, an engine not on a unix socket, an answer not understood, another
  apply holding the lock. It never writes anything.
- A no-op it reports is the full path's no-op report, same text and same --json document.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import socket
import stat
import sys
import time
from pathlib import Path
from typing import Optional

from executors.common.marks import (
    APPLIED_RECORD_VERSION,
    ENGINE_API_VERSION,
    ENGINE_SOCKET,
    FIREWALL_FAMILY,
    FIREWALL_TABLE,
    LABEL_DIGEST,
    LABEL_MESH,
    digest_from_chain_name,
)
from executors.node.node_paths import NodePaths

from executors.node.apply.options import ApplyOptions

RECORD_VERSION = 3  # noop.json; 2: the executor's files under <state root>/.mesh;
# 3: containers say whether they have a health check (answered.json must vouch for those)
ENGINE_TIMEOUT = 10


class _Decline(Exception):
    """The check cannot vouch for a no-op; the full path decides."""


# --------------------------------------------------------------------------- inputs


def _sha256_file(path) -> str:
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def noop_inputs(args) -> Optional[dict]:
    """The fingerprint of what a no-op depends on besides the node: the one declaration file's
    bytes and the sealed secrets' and key's bytes (a one-way digest; never a value). None when
    the invocation is not one the check handles (several files, a spool directory, YAML)."""
    if len(args.declarations) != 1:
        return None
    declaration = Path(args.declarations[0])
    if declaration.suffix != ".json" or not declaration.is_file():
        return None
    secrets = None
    if (args.secrets is None) != (args.key is None):
        return None  # the full path explains that they go together
    if args.secrets is not None:
        digest = hashlib.sha256()
        for part in (args.secrets, args.key):
            with open(part, "rb") as handle:
                data = handle.read()
            digest.update(len(data).to_bytes(8, "big") + data)
        secrets = digest.hexdigest()
    return {"declaration_sha256": _sha256_file(declaration), "secrets_sha256": secrets}


def fast_path_disabled(args: ApplyOptions) -> bool:
    return args.no_fast or \
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
    more than the rest of the check."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(ENGINE_TIMEOUT)
        sock.connect(path)
        sock.sendall(f"GET {target} HTTP/1.0\r\nHost: docker\r\n\r\n".encode("ascii"))
        chunks = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
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


def list_managed(docker_host: Optional[str], mesh: str) -> list[dict]:
    """GET /containers/json?all=1 with the full path's label filter, over the unix socket."""
    from urllib.parse import quote

    filters = quote(json.dumps({"label": [f"{LABEL_MESH}={mesh}"]}))
    status, body = _get(_socket_path(docker_host),
                        f"/v{ENGINE_API_VERSION}/containers/json?all=1&filters={filters}")
    if status != 200:
        raise _Decline(f"engine answered {status}")
    rows = json.loads(body)
    if not isinstance(rows, list):
        raise _Decline("engine answer is not a list")
    return rows


# --------------------------------------------------------------------------- the checks


def _read_json(path):
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def _check_applied(paths: NodePaths, record: dict) -> None:
    applied = _read_json(paths.applied)
    if not isinstance(applied, dict) or applied.get("version") != APPLIED_RECORD_VERSION \
            or applied.get("result") != "applied":
        raise _Decline("applied.json does not record a successful apply")
    if (applied.get("serial"), applied.get("digest", ""), applied.get("generations", {})) != \
            (record["serial"], record["digest"], record["generations"]):
        raise _Decline("applied.json differs from the no-op record")


def _check_dirs(paths: NodePaths, record: dict) -> None:
    recorded = set(_read_json(paths.dirs_record)) if record["dirs"] else set()
    for want in record["dirs"]:
        if want["path"] not in recorded:
            raise _Decline(f"{want['path']} is not in the mesh's record of directories")
        st = os.lstat(want["path"])
        if not stat.S_ISDIR(st.st_mode) or (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) \
                != (want["uid"], want["gid"], want["mode"]):
            raise _Decline(f"{want['path']} differs")
    for want in record["accesses"]:
        path = want["path"]
        if not (os.path.exists(path) and os.access(path, os.R_OK)
                and (want["mode"] != "rw" or os.access(path, os.W_OK))):
            raise _Decline(f"{path} is not usable {want['mode']}")


def _check_files(paths: NodePaths, record: dict) -> None:
    if set(record["files"]) != {"env", "bindings"}:
        raise _Decline("files outside env/ and bindings/")
    for kind, directory in (("env", paths.env_dir), ("bindings", paths.bindings_dir)):
        want = record["files"][kind]
        found = {}
        try:
            entries = list(os.scandir(directory))
        except FileNotFoundError:
            entries = []
        for entry in entries:  # the same selection as the full path's observation
            if entry.name.startswith(".") or not entry.name.endswith(".env") \
                    or not entry.is_file():
                continue
            if stat.S_IMODE(entry.stat().st_mode) != 0o600:
                raise _Decline(f"{entry.path} mode changed")
            found[entry.name] = _sha256_file(entry.path)
        if found != want:
            raise _Decline(f"files in {directory} differ")


def _check_markers(paths: NodePaths, record: dict) -> None:
    want = {c["name"]: c["digest"] for c in record["containers"] if c["run_once"]}
    found = {}
    steps = paths.steps_dir
    if steps.is_dir():
        for entry in os.scandir(steps):
            if entry.name.endswith(".digest") and not entry.name.startswith("."):
                with open(entry.path, encoding="utf-8") as handle:
                    found[entry.name[: -len(".digest")]] = handle.read().strip()
    if found != want:
        raise _Decline("run-once markers differ")


def _answered(paths: NodePaths) -> dict:
    try:
        answered = _read_json(paths.answered_record)
    except FileNotFoundError:
        return {}
    except ValueError:
        raise _Decline("answered.json is unreadable") from None
    return answered if isinstance(answered, dict) else {}


def _check_containers(rows: list[dict], record: dict, answered: dict) -> None:
    want = {c["name"]: c["digest"] for c in record["containers"] if not c["run_once"]}
    checked = {c["name"] for c in record["containers"] if c["health"]}
    seen = set()
    for row in rows:
        names = [n.lstrip("/") for n in row.get("Names") or []]
        name = names[0] if names else row["Id"][:12]
        labels = row.get("Labels") or {}
        if name not in want or name in seen:  # not declared, or a run-once step's leftover
            raise _Decline(f"container {name} is not a declared service")
        if labels.get(LABEL_DIGEST, "") != want[name] or row.get("State", "") != "running":
            raise _Decline(f"container {name} differs or is not running")
        if name in checked and answered.get(name) != row.get("Id"):
            raise _Decline(f"no apply saw container {name} answer its health check")
        seen.add(name)
    if seen != set(want):
        raise _Decline("a declared container is missing")


def _check_firewall(paths: NodePaths, digest: str) -> None:
    """No-op exactly when the firewall executor's diff is empty: our table runs, carrying one
    digest chain, the desired digest, and the node's record says the same."""
    with open(paths.firewall_digest, encoding="ascii") as handle:
        if handle.read().strip() != digest:
            raise _Decline("firewall.digest differs")
    import nftables

    rc, output, _ = nftables.Nftables().json_cmd({"nftables": [{"list": {"chains": {}}}]})
    if rc != 0:
        raise _Decline("cannot list nftables chains")
    ours = [o["chain"] for o in output.get("nftables", [])
            if o.get("chain", {}).get("family") == FIREWALL_FAMILY
            and o["chain"].get("table") == FIREWALL_TABLE]
    running = [d for d in (digest_from_chain_name(c.get("name", "")) for c in ours) if d]
    if running != [digest]:
        raise _Decline("the running table is not the recorded one")


# --------------------------------------------------------------------------- the report


def _facts(record: dict, label: str, dry_run: bool) -> dict:
    facts = {"superseded": [], "file": label, "mesh": record["mesh"], "node": record["node"],
             "serial": record["serial"], "digest": record["digest"],
             "serial_applied": record["serial"], "generations": dict(record["generations"]),
             "held": list(record.get("held", [])),
             "result": "dry-run" if dry_run else "applied"}
    if not dry_run:
        facts["health"] = {}
    return facts


def _print(facts: dict, as_json: bool, out) -> None:
    if as_json:  # the full path's Report.to_json() with no operation, check or notice
        json.dump({**facts, "ops": [], "checks": [], "notices": []}, out, indent=2,
                  sort_keys=True)
        out.write("\n")
        return
    print(f"node {facts['node']} (mesh {facts['mesh']}): {facts['result']}; "
          f"serial in force {facts['serial_applied']}", file=out)
    print_held(facts, out)
    if facts["generations"]:
        print("  credential generations in force: "
              + ", ".join(f"{c} {g}" for c, g in sorted(facts["generations"].items())), file=out)
    if facts["result"] == "applied":
        print("  nothing to change", file=out)


def print_held(facts: dict, out) -> None:
    """The instances the declaration holds (refused in mesh.yaml, kept as last declared)."""
    for held in facts.get("held") or ():
        print(f"  held: {held['instance']} keeps its last good declaration: "
              f"[{held['code']}] {held['where']}: {held['message']}", file=out)


def _say(began: float, message: str) -> None:
    print(f"[{time.monotonic() - began:6.1f}s] · {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- the call


def check(args) -> dict:
    """The facts of a no-op report, or _Decline."""
    inputs = noop_inputs(args)
    if inputs is None:
        raise _Decline("not one JSON declaration file")
    paths = NodePaths(args.state_root)
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
        firewall_digest = None
        if record["firewall_intent"] and not args.no_firewall:
            firewall_digest = record.get("firewall_digest")
            if not firewall_digest:
                raise _Decline("the firewall intent was not applied by the last apply")
        _check_applied(paths, record)
        _check_dirs(paths, record)
        _check_files(paths, record)
        _check_markers(paths, record)
        if firewall_digest:
            _check_firewall(paths, firewall_digest)
        _check_containers(list_managed(args.docker_host, record["mesh"]), record,
                          _answered(paths))
    finally:
        os.close(lock)
    return _facts(record, str(Path(args.declarations[0])), args.dry_run)


def try_noop(args, out) -> Optional[int]:
    """Print the no-op report and return 0, or None: the full path must run."""
    began = time.monotonic()
    try:
        facts = check(args)
    except Exception as exc:  # any doubt, whatever it is: the full path decides and reports
        _say(began, f"no-op check declined ({exc or type(exc).__name__}); applying in full")
        return None
    _say(began, f"no-op check: declaration serial {facts['serial']} for node {facts['node']} "
         "unchanged since its last successful apply; files, directories, run-once markers and "
         "containers observed as recorded")
    _say(began, f"serial {facts['serial_applied']} in force; 0 operation(s); "
         f"result: {facts['result']}")
    _print(facts, args.json, out)
    return 0


def held_facts(declaration) -> list[dict]:
    """The report's `held`: each instance the declaration holds, with its refusal."""
    return [{"instance": h.instance, "code": h.code, "message": h.message,
             "where": f"{h.file}:{h.line}:{h.col}" if h.line else h.file}
            for h in getattr(declaration, "held", ())]


def noop_record(declaration, desired, inputs: dict, firewall_digest: Optional[str]) -> dict:
    """What the check needs, from the full path's rendered desired state (called by pipeline.py
    after a successful apply; `firewall_digest` when the firewall executor applied the intent)."""
    files: dict = {"env": {}, "bindings": {}}
    for f in desired.files:
        directory, name = os.path.split(f.path)
        files.setdefault(os.path.basename(directory), {})[name] = f.sha256
    return {
        "version": RECORD_VERSION, "inputs": inputs,
        "mesh": desired.mesh, "node": desired.node, "serial": desired.serial,
        "digest": desired.digest, "generations": dict(desired.generations),
        "held": held_facts(declaration),
        "firewall_intent": declaration.firewall is not None, "firewall_digest": firewall_digest,
        "containers": [{"name": c.name, "digest": c.digest, "run_once": c.run_once,
                        "health": c.health} for c in desired.containers],
        "dirs": [{"path": d.path, "uid": d.uid, "gid": d.gid, "mode": d.mode}
                 for d in desired.dirs],
        "accesses": [{"path": a.path, "mode": a.mode} for a in desired.accesses],
        "files": files,
    }
