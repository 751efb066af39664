"""The source side of a move that carries its data: serve the state of instances that left.

Invariants:
- Serves only what this node's declaration says leaves it (StateTransfer role `leave`), only
  to the node it leaves for (mutual TLS: the client's certificate from the mesh CA must be
  the target node's transfer certificate, channel.py), never a departure that waits for its
  certificates, and only
  while no container of the instance runs here: a running instance is refused ("apply this
  node's declaration first"), so what is copied is never a live server's files.
- Never changes the state it serves: it reads and streams. The state stays here until
  `mesh forget-state`. The only thing it removes is this node's own record that the instance
  once arrived here (it is leaving: a later arrival must copy again).
- Listens on the declared transfer port of this node's address (the firewall opens it to the
  target's address only, as declared). Without `forever`, it returns once every departure was
  copied and the target said it verified it; a client that breaks off is reported and the
  next attempt starts from the beginning.
"""

from __future__ import annotations

import socket
import ssl
import time
from typing import BinaryIO, Callable, Optional, cast

import docker

from resolver import Declaration, StateTransfer

from executors.common.marks import LABEL_INSTANCE, LABEL_MESH
from executors.node.node_paths import NodePaths
from executors.node.state_move import payload
from executors.node.state_move.arrive import IO_TIMEOUT, marker
from executors.node.state_move.channel import (
    PROTOCOL,
    TransferError,
    check_peer,
    read_line,
    send_line,
    server_context,
)

Say = Callable[[str], None]
ACCEPT_TICK = 0.5  # seconds between looks at whether the server was closed


def departures(declaration: Declaration) -> list[StateTransfer]:
    return [t for t in declaration.transfers
            if t.role == "leave" and t.source == declaration.node]


def _running(api: Optional[docker.APIClient], mesh: str, instance: str) -> bool:
    if api is None:
        return False
    rows = api.containers(filters={"label": [f"{LABEL_MESH}={mesh}",
                                             f"{LABEL_INSTANCE}={instance}"]})
    return bool(rows)


class Server:
    """One node's transfer server for the departures of one declaration."""

    def __init__(self, declaration: Declaration, paths: NodePaths,
                 api: Optional[docker.APIClient], say: Say, bind: Optional[str] = None):
        """Serves the departures of `declaration` whose certificates are issued, with the
        transfer certificate and key its apply wrote (under `paths.file_root`); TransferError
        when every departure waits or they cannot be loaded."""
        self.declaration, self.paths, self.api, self.say = declaration, paths, api, say
        leaving = departures(declaration)
        for waiting in (t for t in leaving if t.waits):
            say(f"{waiting.instance}: not served: the transfer waits: {waiting.waits}")
        self.leaving = {t.instance: t for t in leaving if not t.waits}
        if not self.leaving:
            raise TransferError("every departure waits for its transfer certificates: "
                                "nothing served")
        # one certificate per node: every departure names the same files
        self.context = server_context(declaration, next(iter(self.leaving.values())),
                                      paths.on_node)
        ports = {t.port for t in self.leaving.values()}
        self.port = ports.pop() if ports else 0
        self.listener = socket.create_server((bind or declaration.address, self.port))
        self.done: set[str] = set()
        self.closed = False

    def close(self) -> None:
        self.closed = True
        self.listener.close()

    def serve(self, forever: bool = False) -> None:
        """Answer connections until each departure was copied and verified (or forever)."""
        names = ", ".join(sorted(self.leaving))
        self.say(f"serving the state of {names} on {self.declaration.address}:{self.port}")
        self.listener.settimeout(ACCEPT_TICK)  # a close from another thread is seen
        while forever or set(self.leaving) - self.done:
            if self.closed:
                return
            try:
                connection, peer = self.listener.accept()
            except socket.timeout:
                continue
            except OSError:
                if self.closed:  # closed from another thread: serving ends
                    return
                raise
            with connection:
                connection.settimeout(IO_TIMEOUT)
                try:
                    self._answer(connection)
                except ssl.SSLCertVerificationError as exc:
                    self.say(f"refused a client at {peer[0]}: its certificate does not verify "
                             f"against the mesh CA ({exc.verify_message}); nothing was sent")
                except (TransferError, OSError, ssl.SSLError, ValueError) as exc:
                    self.say(f"a transfer to {peer[0]} broke off: {exc}; the next attempt "
                             f"starts from the beginning")

    def _answer(self, raw: socket.socket) -> None:
        with self.context.wrap_socket(raw, server_side=True) as tls:
            # a BufferedRWPair over the TLS socket (typeshed says IOBase)
            stream = cast(BinaryIO, tls.makefile("rwb", buffering=payload.CHUNK))
            asked = read_line(stream, "the request")
            transfer = self.leaving.get(str(asked.get("instance")))
            if transfer is None or asked.get("target") != transfer.target \
                    or asked.get("protocol") != PROTOCOL:
                send_line(stream, {"error": f"{self.declaration.node} serves no state of "
                                            f"{asked.get('instance')!r} to "
                                            f"{asked.get('target')!r}"})
                return
            try:
                check_peer(tls, transfer.target, "client")
            except TransferError as exc:
                send_line(stream, {"error": f"{self.declaration.node} refused: {exc}"})
                raise TransferError(f"{exc}: nothing was sent") from None
            try:
                if _running(self.api, self.declaration.mesh, transfer.instance):
                    raise TransferError(
                        f"{transfer.instance} still runs on {transfer.source}: apply "
                        f"{transfer.source}'s declaration there first (it stops it)")
                total, count = payload.totals(transfer)
            except TransferError as exc:
                send_line(stream, {"error": str(exc)})
                raise
            marker(self.paths, transfer.instance).unlink(missing_ok=True)
            self.say(f"{transfer.instance}: sending {payload.human(total)} in {count} "
                     f"file(s) to {transfer.target}")
            send_line(stream, {"bytes": total, "files": count})
            started = time.monotonic()

            def progress(done: int, whole: int) -> None:
                self.say(payload.progress_line(transfer.instance, "sent", done, whole,
                                               time.monotonic() - started))

            manifest = payload.send(stream, transfer, progress, total)
            send_line(stream, {"manifest": manifest})
            verdict = read_line(stream, f"{transfer.target}'s verdict")
            if verdict.get("verified") is not True:
                raise TransferError(f"{transfer.target} did not verify the copy")
            self.done.add(transfer.instance)
            self.say(f"{transfer.instance}: {transfer.target} verified the copy "
                     f"({verdict.get('files')} file(s)); the state stays here until `mesh "
                     f"forget-state {transfer.instance}@{transfer.source}`")
