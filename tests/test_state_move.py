"""The state a move carries, on one machine: a real server (mutual TLS on the two nodes'
transfer certificates from the mesh CA) and the arriving side's fetch, in two directories
standing for two nodes.

What the two-namespace test (test_state_move_netns.py) shows end to end with PostgreSQL, this
shows at the edges: the copy is byte for byte (sizes, modes, owners, links; sockets left out);
a stranger's certificate (another CA, or the mesh CA's but another node's) gets nothing and
a server that is not the source (the same two ways) is refused, each before anything is
written; a transfer waiting for its certificates never connects; a copy broken off mid-way
leaves no arrival record and the next attempt starts from the beginning; a tampered stream is
refused by the manifest; a directory already at the target is moved aside, never deleted.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from pyrsistent import pmap, pvector

from resolver import (Declaration, FileDecl, Mesh, Node, SecretRef, StateDirDecl,
                      StateTransfer)
from resolver.certificates import TRANSFER_DIR

from executors.common.report import Report
from executors.control.ca import MeshCa, ca_pem, init_ca, sign_server
from executors.node.node_paths import NodePaths
from executors.node.state_move import arrive as arriving
from executors.node.state_move import payload
from executors.node.state_move.background import Departures
from executors.node.state_move.channel import TransferError
from executors.node.state_move.serve import Server

CERT, KEY, CA = f"{TRANSFER_DIR}/server.crt", f"{TRANSFER_DIR}/server.key", "/etc/mesh/ca/ca.crt"
MESH = Mesh(mesh="m", nodes=pmap({n: Node("127.0.0.1") for n in ("n1", "n2", "n3")}))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tree(root: Path) -> dict:
    """Every entry below root: kind, size, mode, owner, content's SHA-256 or link target."""
    seen = {}
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(top, name)
            facts = path.lstat()
            rel = str(path.relative_to(root))
            if path.is_symlink():
                seen[rel] = ("link", os.readlink(path))
            elif path.is_dir():
                seen[rel] = ("dir", facts.st_mode & 0o7777, facts.st_uid, facts.st_gid)
            elif path.is_file():
                seen[rel] = ("file", facts.st_size, facts.st_mode & 0o7777, facts.st_uid,
                             facts.st_gid, hashlib.sha256(path.read_bytes()).hexdigest(),
                             int(facts.st_mtime))
    return seen


class Identity:
    """A node's transfer certificate and key, as `mesh plan --issue` signs them (CN
    `transfer:<name>`, SAN 127.0.0.1), by `ca`."""

    def __init__(self, ca: MeshCa, name: str):
        certificate, self.key = sign_server(ca, MESH, f"transfer:{name}", name, client=True)
        self.certificate, self.ca = certificate.pem, ca_pem(ca)


class Pair:
    """Two 'nodes' on 127.0.0.1: n1's directories hold the state, n2 receives it."""

    def __init__(self, tmp: Path, port: int):
        self.tmp, self.port = tmp, port
        self.ca = init_ca(tmp / "mesh", MESH)
        self.stranger_ca = init_ca(tmp / "elsewhere", MESH)
        self.n1, self.n2 = Identity(self.ca, "n1"), Identity(self.ca, "n2")
        self.src, self.dst = tmp / "n1" / "db", tmp / "n2" / "db"
        self.paths1 = NodePaths(tmp / "n1-root", tmp / "n1-files")
        self.paths2 = NodePaths(tmp / "n2-root", tmp / "n2-files")

    def transfer(self, role: str, waits: str = "") -> StateTransfer:
        path = self.src if role == "leave" else self.dst
        dirs = pvector([StateDirDecl(str(path / "data"), 0, 0, "0700", "db@main", "data"),
                        StateDirDecl(str(path / "run"), 0, 0, "0755", "db@main", "run")])
        ready = {} if waits else {"certificate": CERT, "key": KEY, "ca": CA}
        return StateTransfer("db@main", role, "n1", "127.0.0.1", "n2", "127.0.0.1", self.port,
                             dirs, waits=waits, **ready)

    def declaration(self, node: str, transfer: StateTransfer,
                    identity: Identity | None = None, mesh_ca: str | None = None) -> Declaration:
        """`node`'s declaration of `transfer`, holding `identity`'s files (its own, by
        default) as `mesh plan` declares them; `mesh_ca`: the CA it verifies its peer with."""
        identity = identity or (self.n1 if node == "n1" else self.n2)
        credential = f"tls/transfer:{node}"
        files = pvector(sorted([
            FileDecl(CERT, identity.certificate, "0644"),
            FileDecl(KEY, "${secret:" + credential + "}", "0600", SecretRef(credential, 1)),
            FileDecl(CA, mesh_ca or self.n1.ca, "0644")]))
        return Declaration(mesh="m", node=node, address="127.0.0.1", serial=3,
                           transfers=pvector([transfer]), files=files)

    def written(self, paths: NodePaths, identity: Identity) -> None:
        """What `mesh apply` of the source's declaration writes: its certificate and key."""
        for path, text in ((CERT, identity.certificate), (KEY, identity.key)):
            target = Path(paths.on_node(path))
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
            target.chmod(0o600)

    def server(self, identity: Identity | None = None,
               waits: str = "") -> tuple[Server, threading.Thread, list]:
        said: list[str] = []
        identity = identity or self.n1
        self.written(self.paths1, identity)
        server = Server(self.declaration("n1", self.transfer("leave", waits), identity),
                        self.paths1, None, said.append)
        thread = threading.Thread(target=server.serve, daemon=True)
        thread.start()
        return server, thread, said

    def fetch(self, identity: Identity | None = None, wait: float = 5,
              transfer: StateTransfer | None = None) -> dict:
        identity = identity or self.n2
        transfer = transfer or self.transfer("arrive")
        return arriving.fetch(self.declaration("n2", transfer, identity), transfer,
                              lambda ref: identity.key, self.paths2, lambda line: None,
                              wait=wait)


def fill(src: Path) -> None:
    data = src / "data"
    (data / "base" / "1").mkdir(parents=True)
    (data / "base" / "1" / "16384").write_bytes(os.urandom(3 * 1024 * 1024 + 17))
    (data / "PG_VERSION").write_text("15\n")
    (data / "empty").write_bytes(b"")
    os.chmod(data / "PG_VERSION", 0o600)
    os.chown(data / "PG_VERSION", 999, 999)
    os.chmod(data, 0o700)
    os.chown(data, 999, 999)
    (data / "current").symlink_to("base/1")
    run = src / "run"
    run.mkdir()
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(run / ".s.PGSQL.5432"))  # a server's socket: not carried
    listener.close()


@pytest.fixture
def pair(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("owners are carried by number: needs root")
    p = Pair(tmp_path, free_port())
    fill(p.src)
    return p


def test_the_copy_is_byte_for_byte_verified_and_recorded(pair):
    server, thread, said = pair.server()
    record = pair.fetch()
    thread.join(10)
    server.close()
    assert not thread.is_alive(), "the server returns once its one departure is verified"
    expected = {k: v for k, v in tree(pair.src).items() if not k.endswith(".s.PGSQL.5432")}
    assert tree(pair.dst) == expected
    assert record["files"] == 3 and record["bytes"] == 3 * 1024 * 1024 + 17 + 3
    assert arriving.in_place(pair.paths2, pair.transfer("arrive"))
    assert any("verified the copy" in line for line in said), said
    assert tree(pair.src)  # the old copy stays


@pytest.mark.parametrize("who", ["another CA", "the mesh CA, another node"])
def test_a_stranger_client_is_refused_before_anything_is_sent_or_written(pair, who):
    stranger = Identity(pair.stranger_ca, "n2") if who == "another CA" \
        else Identity(pair.ca, "n3")
    server, thread, said = pair.server()
    with pytest.raises(TransferError, match="nothing was fetched|refused"):
        pair.fetch(identity=stranger)
    assert not (pair.dst / "data").exists() and not (pair.dst / "data.mesh-arriving").exists()
    assert thread.is_alive(), "a failed attempt leaves the server serving"
    pair.fetch()  # the right node still gets it
    thread.join(10)
    server.close()
    assert not thread.is_alive()
    refused = [line for line in said if "broke off" in line or "refused" in line]
    assert len(refused) == 1, said
    if who == "another CA":  # the handshake fails: the chain is not the mesh CA's
        assert "does not verify against the mesh CA" in refused[0], refused
    else:  # a valid certificate of the mesh CA, but not n2's
        assert "'transfer:n3', not 'transfer:n2'" in refused[0] \
            and "nothing was sent" in refused[0], refused


@pytest.mark.parametrize("who", ["another CA", "the mesh CA, another node"])
def test_a_server_that_is_not_the_source_is_refused_before_anything_is_written(pair, who):
    impostor = Identity(pair.stranger_ca, "n1") if who == "another CA" \
        else Identity(pair.ca, "n3")
    server, thread, said = pair.server(identity=impostor)
    expected = "does not verify against the mesh CA" if who == "another CA" \
        else "'transfer:n3', not 'transfer:n1'"
    with pytest.raises(TransferError, match="is not n1's transfer server") as refused:
        pair.fetch()
    assert expected in str(refused.value)
    server.close()
    assert not (pair.dst / "data.mesh-arriving").exists() and not (pair.dst / "data").exists()
    assert not any("sending" in line for line in said), said


def test_a_transfer_waiting_for_its_certificates_never_connects(pair):
    waits = "the transfer certificate of n2 is not issued (no server certificate yet)"
    with pytest.raises(TransferError, match="every departure waits"):
        pair.server(waits=waits)
    listener = socket.create_server(("127.0.0.1", pair.port))  # would see any connection
    listener.settimeout(0.5)
    try:
        with pytest.raises(TransferError, match="the transfer waits: the transfer certificate"):
            pair.fetch(transfer=pair.transfer("arrive", waits))
        with pytest.raises(socket.timeout):
            listener.accept()
    finally:
        listener.close()
    report = Report()
    waiting = pair.transfer("arrive", waits)
    assert not arriving.arrive_pending(pair.declaration("n2", waiting), pair.paths2,
                                       lambda ref: pair.n2.key, report)
    (op,) = report.ops
    assert not op.ok and "waits" in op.result and "does not start here" in op.result


def test_a_copy_broken_off_midway_leaves_no_arrival_and_the_next_starts_again(pair, monkeypatch):
    server, thread, _ = pair.server()
    real = payload.read_record
    state = {"n": 0}

    def breaking(stream):
        state["n"] += 1
        if state["n"] == 3:
            raise TransferError("the connection broke off in the middle of the copy")
        return real(stream)

    monkeypatch.setattr(payload, "read_record", breaking)
    with pytest.raises(TransferError, match="broke off"):
        pair.fetch()
    assert (pair.dst / "data.mesh-arriving").exists(), "the half copy stays in staging"
    assert not (pair.dst / "data").exists()
    assert not arriving.in_place(pair.paths2, pair.transfer("arrive"))
    monkeypatch.setattr(payload, "read_record", real)
    pair.fetch()
    thread.join(10)
    server.close()
    assert not (pair.dst / "data.mesh-arriving").exists()
    assert (pair.dst / "data" / "base" / "1" / "16384").stat().st_size == 3 * 1024 * 1024 + 17


def test_a_tampered_stream_is_refused_by_the_manifest(pair, monkeypatch):
    server, thread, _ = pair.server()
    real = payload.receive

    def tampering(reader, staging, progress, total):
        manifest = real(reader, staging, progress, total)
        manifest["files"]["data/PG_VERSION"][1] = "0" * 64
        return manifest

    monkeypatch.setattr(payload, "receive", tampering)
    with pytest.raises(TransferError, match="does not match n1's manifest: data/PG_VERSION"):
        pair.fetch()
    assert not (pair.dst / "data").exists()
    server.close()


def test_a_directory_already_there_is_moved_aside(pair):
    (pair.dst / "data").mkdir(parents=True)
    (pair.dst / "data" / "old").write_text("kept")
    server, thread, _ = pair.server()
    pair.fetch()
    thread.join(10)
    server.close()
    assert (pair.dst / "data.before-arrival" / "old").read_text() == "kept"
    assert (pair.dst / "data" / "PG_VERSION").read_text() == "15\n"


def test_apply_stops_before_changing_anything_when_the_arrival_fails(pair, monkeypatch):
    """No server: the arrival fails, the report says so and that the next apply copies
    again; nothing is recorded as arrived."""
    transfer = pair.transfer("arrive")
    report = Report()
    monkeypatch.setattr(arriving, "CONNECT_WAIT", 1.0)
    ok = arriving.arrive_pending(pair.declaration("n2", transfer), pair.paths2,
                                 lambda ref: pair.n2.key, report)
    assert not ok
    (op,) = report.ops
    assert not op.ok and "does not serve db@main's state" in op.result
    assert "the next apply copies again from the beginning" in op.result
    assert not arriving.in_place(pair.paths2, transfer)


@pytest.mark.integration  # the agent's server asks the real Docker Engine what runs
def test_the_agent_serves_what_its_declaration_says_leaves_and_stops_when_it_does_not(pair):
    pair.written(pair.paths1, pair.n1)
    said: list[str] = []
    departures = Departures(str(pair.tmp / "n1-root"), None, said.append,
                            file_root=str(pair.tmp / "n1-files"))
    leaving = pair.declaration("n1", pair.transfer("leave"))
    try:
        departures.follow(leaving)
        thread = departures.thread
        pair.fetch()
        departures.follow(leaving)  # the same move: the same server, still serving
        assert departures.thread is thread and thread.is_alive()
        deadline = time.monotonic() + 10  # the server says so once the client has gone
        while not any("verified the copy" in line for line in said):
            assert time.monotonic() < deadline, said
            time.sleep(0.05)
        departures.follow(Declaration(mesh="m", node="n1", address="127.0.0.1", serial=4))
        assert departures.thread is None and not thread.is_alive()
        shutil.rmtree(pair.dst)
        (pair.paths2.root / "arrived" / "db@main.json").unlink()
        with pytest.raises(TransferError, match="does not serve db@main's state"):
            pair.fetch(wait=0.5)
    finally:
        departures.close()


def test_a_source_that_never_ran_the_instance_refuses_and_nothing_is_written(pair):
    shutil.rmtree(pair.src)  # `state-from:` named a node that never held this state
    server, thread, said = pair.server()
    with pytest.raises(TransferError, match="db@main never ran on n1: its state directory"):
        pair.fetch()
    server.close()
    assert not (pair.dst / "data").exists() and not arriving.in_place(
        pair.paths2, pair.transfer("arrive"))


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "executors.cli", *args], capture_output=True,
                          text=True, cwd=str(Path(__file__).resolve().parent.parent))


def test_forget_state_refuses_bad_input_and_state_in_use_and_removes_nothing(pair, tmp_path):
    from resolver.documents import unstructure

    leaving = pair.declaration("n1", pair.transfer("leave"))
    path = tmp_path / "n1.declaration.json"
    path.write_text(json.dumps(unstructure(leaving)))
    said = cli("forget-state", "db-main", str(path))
    assert said.returncode == 2 and "expected INSTANCE@NODE" in said.stderr, said.stderr
    said = cli("forget-state", "db@main@n2", str(path))
    assert said.returncode == 2 and "the declaration given is n1's, not n2's" in said.stderr
    said = cli("forget-state", "db@main@n1", str(path), "--state-root", str(tmp_path / "root"))
    assert said.returncode == 2 and "still carried from n1 to n2" in said.stderr, said.stderr
    assert "Traceback" not in said.stderr
    assert tree(pair.src), "nothing removed"
