"""The arriving side of a move that carries its data: fetch, verify, put in place, record.

Invariants:
- `mesh apply` (runner.apply_files, the path the agent takes too) receives every declared
  arrival not yet in place before it changes anything else: the instance's containers are
  created only after its state is verified and in place. An arrival that fails stops the
  apply (nothing on the node changes; the report says why), so the instance never starts on
  a half copy; the next apply starts the copy again from the beginning.
- The copy is written to staging directories beside the targets (`<dir>.mesh-arriving`,
  removed first if an interrupted attempt left one), verified against the source's manifest
  (every file's size and SHA-256, the count, the directories and links), and only then
  renamed into place; a directory already at a target is moved aside
  (`<dir>.before-arrival[.<n>]`), never deleted. The arrival is recorded last
  (`<state root>/.mesh/arrived/<instance>.json`, written atomically): without that record the
  arrival is not in place, whatever directories exist.
- The source is authenticated before anything is written (channel.py: mutual TLS on the two
  nodes' transfer certificates); a transfer that waits for its certificates fails the apply
  saying so, and the instance does not start.
- Progress is reported as bytes, percent and rate, at most once a second.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import ssl
import time
from pathlib import Path
from typing import BinaryIO, Callable, Optional, cast

from resolver import Declaration, MeshError, SecretRef, StateTransfer

from executors.common.atomic import write_atomic
from executors.common.report import Report
from executors.node.node_paths import NodePaths
from executors.node.state_move import payload
from executors.node.state_move.channel import (
    PROTOCOL,
    TransferError,
    check_peer,
    client_context,
    read_line,
    ready,
    send_line,
)

CONNECT_WAIT = 30.0  # seconds the source may take to start serving
IO_TIMEOUT = 120.0  # a connection silent this long is broken off


def marker(paths: NodePaths, instance: str) -> Path:
    return paths.root / "arrived" / f"{instance}.json"


def in_place(paths: NodePaths, transfer: StateTransfer) -> bool:
    """Whether this transfer's arrival is recorded on this node."""
    try:
        record = json.loads(marker(paths, transfer.instance).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(record, dict) and record.get("source") == transfer.source \
        and record.get("target") == transfer.target


def pending(declaration: Declaration, paths: NodePaths) -> list[StateTransfer]:
    return [t for t in declaration.transfers
            if t.role == "arrive" and t.target == declaration.node and not in_place(paths, t)]


def _connect(transfer: StateTransfer, wait: float) -> socket.socket:
    deadline = time.monotonic() + wait
    while True:
        try:
            return socket.create_connection((transfer.source_address, transfer.port),
                                            timeout=IO_TIMEOUT)
        except OSError as exc:
            if time.monotonic() >= deadline:
                raise TransferError(
                    f"{transfer.source} does not serve {transfer.instance}'s state at "
                    f"{transfer.source_address}:{transfer.port} ({exc.strerror or exc}); "
                    f"apply {transfer.source}'s declaration there first (its agent serves "
                    f"it, or `mesh serve-state`)") from None
            time.sleep(0.5)


def _aside(path: str) -> str:
    candidate, n = f"{path}.before-arrival", 1
    while os.path.lexists(candidate):
        n += 1
        candidate = f"{path}.before-arrival.{n}"
    return candidate


def _handshake(raw: socket.socket, context: ssl.SSLContext,
               transfer: StateTransfer) -> ssl.SSLSocket:
    """The TLS connection to `transfer`'s source, its certificate checked to be the source
    node's; TransferError (nothing fetched) otherwise."""
    where = f"the server at {transfer.source_address}:{transfer.port}"
    try:
        tls = context.wrap_socket(raw, server_hostname=transfer.source_address)
    except ssl.SSLCertVerificationError as exc:
        raise TransferError(f"{where} is not {transfer.source}'s transfer server (its "
                            f"certificate does not verify against the mesh CA: "
                            f"{exc.verify_message}): nothing was fetched") from None
    except ssl.SSLError as exc:
        raise TransferError(f"{where}: TLS failed ({exc.reason or exc}): nothing was "
                            f"fetched") from None
    try:
        check_peer(tls, transfer.source, "server")
    except TransferError as exc:
        tls.close()
        raise TransferError(f"{where} is not {transfer.source}'s transfer server: {exc}: "
                            f"nothing was fetched") from None
    return tls


def fetch(declaration: Declaration, transfer: StateTransfer,
          unseal: Callable[[SecretRef], str], paths: NodePaths, say: Callable[[str], None],
          wait: Optional[float] = None) -> dict[str, object]:
    """Copy, verify and put in place one arrival of `declaration` (this node's), its
    transfer key unsealed by `unseal`; what it carried (bytes, files, seconds)."""
    ready(transfer)
    context = client_context(declaration, transfer, unseal)
    staging = {d.name: f"{d.path}.mesh-arriving" for d in transfer.dirs}
    for path in staging.values():
        if os.path.lexists(path):
            shutil.rmtree(path)
            say(f"{transfer.instance}: removed {path}, left by an interrupted copy; "
                f"starting again")
    started = time.monotonic()
    with _connect(transfer, CONNECT_WAIT if wait is None else wait) as raw, \
            _handshake(raw, context, transfer) as tls:
        # a BufferedRWPair over the TLS socket (typeshed says IOBase)
        stream = cast(BinaryIO, tls.makefile("rwb", buffering=payload.CHUNK))
        try:
            send_line(stream, {"protocol": PROTOCOL, "instance": transfer.instance,
                               "source": transfer.source, "target": transfer.target})
            header = read_line(stream, f"{transfer.source}'s answer")
        except (ssl.SSLError, ConnectionError) as exc:  # TLS 1.3: ours is judged after
            why = exc.reason if isinstance(exc, ssl.SSLError) and exc.reason else exc
            raise TransferError(f"{transfer.source} refused this node's transfer certificate "
                                f"({why}): nothing was fetched") from None
        total = header.get("bytes")
        total = total if isinstance(total, int) else 0
        say(f"{transfer.instance}: copying {payload.human(total)} in {header.get('files')} "
            f"file(s) from {transfer.source} (mutual TLS, both nodes' certificates from the mesh CA)")
        for d in transfer.dirs:
            os.makedirs(os.path.dirname(d.path), mode=0o755, exist_ok=True)

        def progress(done: int, whole: int) -> None:
            say(payload.progress_line(transfer.instance, "received", done, whole,
                                      time.monotonic() - started))

        received = payload.receive(stream, staging, progress, total)
        trailer = read_line(stream, f"{transfer.source}'s manifest")
        sent = trailer.get("manifest")
        if not isinstance(sent, dict):
            raise TransferError(f"{transfer.source} sent no manifest")
        wrong = payload.differences(sent, received)
        if wrong:
            raise TransferError(f"{transfer.instance}: the copy does not match "
                                f"{transfer.source}'s manifest: " + "; ".join(wrong))
        files = sent.get("files")
        count = len(files) if isinstance(files, dict) else 0
        for d in transfer.dirs:
            if os.path.lexists(d.path):
                moved = _aside(d.path)
                os.rename(d.path, moved)
                say(f"{transfer.instance}: {d.path} was here already: moved aside to {moved}")
            os.rename(staging[d.name], d.path)
        seconds = time.monotonic() - started
        record = {"instance": transfer.instance, "source": transfer.source,
                  "target": transfer.target, "bytes": total, "files": count,
                  "seconds": round(seconds, 3)}
        marker(paths, transfer.instance).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_atomic(marker(paths, transfer.instance), json.dumps(record, indent=1) + "\n",
                     mode=0o600)
        send_line(stream, {"verified": True, "files": count})
    return record


def arrive_pending(declaration: Declaration, paths: NodePaths,
                   unseal: Optional[Callable[[SecretRef], str]], report: Report,
                   dry_run: bool = False) -> bool:
    """Receive every pending arrival of `declaration` (mesh apply's first step), the
    transfer key unsealed by `unseal` (the apply's secret source); False when one failed (the
    report says why, and the apply must not go on)."""
    waiting = pending(declaration, paths)
    for transfer in waiting:
        cause = (f"state from {transfer.source} ({', '.join(d.path for d in transfer.dirs)}), "
                 f"verified before {transfer.instance} starts")
        if dry_run:
            report.record("arrive", transfer.instance, cause, "planned")
            continue
        op = report.begin("arrive", transfer.instance, cause)
        try:
            ready(transfer)
            if unseal is None:
                raise TransferError(f"the arrival of {transfer.instance} needs this node's "
                                    f"sealed transfer key (--secrets and --key)")
            record = fetch(declaration, transfer, unseal, paths,
                           lambda line: report.progress(op, line))
        except (MeshError, OSError, ValueError) as exc:  # TransferError, an unsealing
            report.end(op, f"failed: {exc}; {transfer.instance} does not start here, the "
                           f"next apply copies again from the beginning", ok=False)
            return False
        seconds = float(str(record["seconds"])) or 1e-9
        total = int(str(record["bytes"]))
        report.end(op, f"{payload.human(total)} in {record['files']} file(s) verified and in "
                       f"place ({payload.human(total / seconds)}/s); the copy on "
                       f"{transfer.source} stays until `mesh forget-state "
                       f"{transfer.instance}@{transfer.source}`")
    return True
