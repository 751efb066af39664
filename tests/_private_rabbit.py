"""A RabbitMQ node of the test's own (Debian's rabbitmq-server, the same package
scripts/services.sh runs), for tests that restart the broker or need it on an address other
than loopback. Restarting the shared broker would break other sessions' tests; this one
belongs to the test alone.

Invariants:
- Its own node name, ports (AMQP, management, distribution), data, logs and Erlang cookie,
  all in a directory of its own under /tmp (the rabbitmq user it runs as, like the shared one,
  cannot enter pytest's root-only temporary directories); `remove()` deletes it.
- Its admin (`admin`, a random password in a 0600 file) is created from the configuration
  on the first start of an empty data directory; data survives a restart (durable queues and
  persistent messages are the point).
- `stop()` stops it by its own node name (rabbitmqctl -n) and then by the pid it wrote; never
  by a broad process name.
- With `tls=(certificate, key, ca)` files (e.g. from `mesh ca issue-server`), its AMQP port
  speaks TLS only (`listeners.tcp = none`, `listeners.ssl.*`): how the mesh's broker serves
  its nodes and control plane; copies of the files live in its directory, owned by rabbitmq.
  `plain_too=True` adds a plain AMQP listener on loopback (`plain_port`), for a benchmark that
  measures what TLS costs against the same broker. The management API is then HTTPS only, with
  the same certificate (`management.ssl.*`): the admin's password never crosses in the clear;
  `ca_file` is what a client verifies it against.
- `use_certificate(tls)` swaps the certificate, key and CA of a running TLS broker (RabbitMQ's
  own rotation: files replaced, then `ssl:clear_pem_cache()`), so one broker per test file
  serves each test's mesh with a certificate from that mesh's CA.
- With `netns` (a network namespace's path, tests/_netns.Topology.netns_path), it runs inside
  that namespace (`nsenter --net`: rabbitmq-server, every rabbitmqctl, the readiness probes),
  on a machine of a test's segment; its addresses are that namespace's, and the epmd it starts
  there (on the namespace's own loopback) is stopped with it (`epmd -kill`, in the namespace).
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional, Sequence

import requests

from _locks import built
from _meshop import free_range

RABBIT_BIN = Path("/usr/lib/rabbitmq/bin")


def available() -> Optional[str]:
    """Why a private broker cannot run here, or None."""
    if os.geteuid() != 0:
        return "starting RabbitMQ as the rabbitmq user needs root"
    if not (RABBIT_BIN / "rabbitmq-server").exists():
        return "rabbitmq-server is not installed (scripts/services.sh installs it)"
    try:
        pwd.getpwnam("rabbitmq")
    except KeyError:
        return "no rabbitmq user"
    return None


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_ports(count: int, address: str = "127.0.0.1") -> int:
    """The first of `count` consecutive free ports in 10000–19999 (and below the kernel's ephemeral range): apart from the
    host-port ranges the fleet tests give their meshes (21000–29007, tests/_meshop.py). A port
    the kernel handed out by binding port 0 lies inside the ephemeral range: while the broker
    is stopped, the agent's own reconnect attempts (or any outbound connection on the
    machine) may be given it as their local port, and the broker then cannot listen on it
    again after the restart."""
    return free_range(count, address, within=(10000, min(20000, _ephemeral_low())))


class PrivateRabbit:
    def __init__(self, listen: Sequence[str] = ("127.0.0.1",), management: str = "127.0.0.1",
                 tls: Optional[tuple[Path, Path, Path]] = None, plain_too: bool = False,
                 netns: Optional[str] = None):
        self.dir = Path(tempfile.mkdtemp(prefix="mesh-test-rabbit-"))
        self.netns = netns
        self.tls = tls
        self.plain_too = plain_too and tls is not None
        self.plain_port = 0
        self.listen = tuple(listen)
        self.management = management  # the management API's one address
        # AMQP, management and distribution: three distinct ports the first start() draws
        self.port = self.api_port = self.dist_port = 0
        self.name = f"mesht{os.getpid()}x{secrets.token_hex(3)}@localhost"
        self.password = secrets.token_urlsafe(16)
        self.password_file = self.dir / "admin-password"
        self.process: Optional[subprocess.Popen] = None

    @property
    def amqp(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def api(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.management}:{self.api_port}"

    @property
    def ca_file(self) -> Optional[Path]:
        """The CA certificate its TLS listeners' certificate is verified against."""
        return self.dir / "tls" / "ca.crt" if self.tls else None

    @property
    def verify(self):
        """`requests`' verify for its management API."""
        return str(self.ca_file) if self.tls else True

    def _env(self) -> dict:
        return {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(self.dir),
                "RABBITMQ_NODENAME": self.name,
                "RABBITMQ_CONF_ENV_FILE": str(self.dir / "rabbitmq-env.conf"),
                "RABBITMQ_CONFIG_FILE": str(self.dir / "rabbitmq.conf"),
                "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.dir / "enabled_plugins"),
                "RABBITMQ_MNESIA_BASE": str(self.dir / "mnesia"),
                "RABBITMQ_LOG_BASE": str(self.dir / "log"),
                "RABBITMQ_PID_FILE": str(self.dir / "rabbit.pid"),
                "RABBITMQ_DIST_PORT": str(self.dist_port),
                "ERL_EPMD_ADDRESS": "127.0.0.1"}

    def _write_config(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        kind = "ssl" if self.tls else "tcp"
        listeners = "\n".join(f"listeners.{kind}.{i} = {address}:{self.port}"
                              for i, address in enumerate(("127.0.0.1",) + tuple(
                                  a for a in self.listen if a != "127.0.0.1"), start=1))
        management = (f"management.tcp.ip = {self.management}\n"
                      f"management.tcp.port = {self.api_port}\n")
        if self.tls:
            tls_dir = self.dir / "tls"
            self._copy_tls(self.tls)
            management = (f"management.ssl.ip = {self.management}\n"
                          f"management.ssl.port = {self.api_port}\n"
                          f"management.ssl.cacertfile = {tls_dir / 'ca.crt'}\n"
                          f"management.ssl.certfile = {tls_dir / 'server.crt'}\n"
                          f"management.ssl.keyfile = {tls_dir / 'server.key'}\n")
            plain = (f"listeners.tcp.1 = 127.0.0.1:{self.plain_port}\n" if self.plain_too
                     else "listeners.tcp = none\n")
            listeners = (plain + listeners +
                         f"\nssl_options.cacertfile = {tls_dir / 'ca.crt'}"
                         f"\nssl_options.certfile = {tls_dir / 'server.crt'}"
                         f"\nssl_options.keyfile = {tls_dir / 'server.key'}"
                         "\nssl_options.verify = verify_none"
                         "\nssl_options.fail_if_no_peer_cert = false")
        (self.dir / "rabbitmq.conf").write_text(
            f"{listeners}\n{management}loopback_users = none\n"
            f"default_user = admin\ndefault_pass = {self.password}\n"
            f"default_user_tags.administrator = true\n"
            "default_permissions.configure = .*\ndefault_permissions.read = .*\n"
            "default_permissions.write = .*\n")
        (self.dir / "enabled_plugins").write_text("[rabbitmq_management].\n")
        (self.dir / "rabbitmq-env.conf").write_text(f"NODENAME={self.name}\n")
        self.password_file.write_text(self.password)
        self.password_file.chmod(0o600)
        shutil.chown(self.dir, "rabbitmq")
        for path in self.dir.iterdir():
            if path != self.password_file:
                shutil.chown(path, "rabbitmq")

    def _copy_tls(self, tls: tuple[Path, Path, Path]) -> None:
        tls_dir = self.dir / "tls"
        tls_dir.mkdir(exist_ok=True)
        shutil.chown(tls_dir, "rabbitmq")
        for source, stem in zip(tls, ("server.crt", "server.key", "ca.crt")):
            shutil.copyfile(source, tls_dir / f".{stem}.new")
            (tls_dir / f".{stem}.new").chmod(0o600 if stem.endswith(".key") else 0o644)
            shutil.chown(tls_dir / f".{stem}.new", "rabbitmq")
            os.replace(tls_dir / f".{stem}.new", tls_dir / stem)

    def _argv(self, *argv: str) -> list[str]:
        """`argv`, run inside the broker's network namespace when it has one."""
        return (["nsenter", f"--net={self.netns}"] if self.netns else []) + list(argv)

    def _probe(self, what: str) -> bool:
        """answers()/listens() asked from inside the broker's namespace (a process there)."""
        code = ("import socket, sys, requests\n"
                "what, api, password_file, verify, port = sys.argv[1:6]\n"
                "try:\n"
                "    if what == 'listens':\n"
                "        socket.create_connection(('127.0.0.1', int(port)), timeout=2).close()\n"
                "    elif requests.get(api + '/api/overview', timeout=2,\n"
                "                      auth=('admin', open(password_file).read()),\n"
                "                      verify=verify if verify != '-' else True\n"
                "                      ).status_code != 200:\n"
                "        sys.exit(1)\n"
                "except (OSError, requests.RequestException):\n"
                "    sys.exit(1)\n")
        return subprocess.run(self._argv(sys.executable, "-c", code, what, self.api,
                                         str(self.password_file),
                                         str(self.ca_file) if self.tls else "-", str(self.port)),
                              capture_output=True, timeout=30).returncode == 0

    def use_certificate(self, tls: tuple[Path, Path, Path]) -> None:
        """Serve a new certificate, key and CA from now on (new connections), running."""
        assert self.tls, "use_certificate: a TLS broker only"
        self.tls = tls
        self._copy_tls(tls)
        done = subprocess.run(self._argv("runuser", "-u", "rabbitmq", "--",
                                         str(RABBIT_BIN / "rabbitmqctl"), "-n", self.name,
                                         "eval", "ssl:clear_pem_cache()."),
                              env=self._env(), capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr

    def start(self, timeout: float = 90) -> "PrivateRabbit":
        if (self.dir / "rabbitmq.conf").exists():  # a restart: the ports it listened on
            return self._start(timeout)
        # Another worker's broker may draw the same free ports between this draw and its
        # listening: one worker at a time draws and starts (tests/_locks.py)
        with built("private-rabbit-ports"):
            self.port = free_ports(4 if self.plain_too else 3)
            self.api_port, self.dist_port = self.port + 1, self.port + 2
            self.plain_port = self.port + 3 if self.plain_too else 0
            self._write_config()
            return self._start(timeout)

    def _start(self, timeout: float) -> "PrivateRabbit":
        log = open(self.dir / "server.out", "a")
        self.process = subprocess.Popen(
            self._argv("runuser", "-u", "rabbitmq", "--", str(RABBIT_BIN / "rabbitmq-server")),
            env=self._env(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        # The management API answers before the AMQP listener is up (RabbitMQ starts client
        # listeners last): ready means both, and the server still running.
        while not (self.answers() and self.listens()):
            if self.process.poll() is not None or time.monotonic() > deadline:
                tail = (self.dir / "server.out").read_text()[-3000:]
                self.stop()
                raise RuntimeError(f"private RabbitMQ did not start:\n{tail}")
            time.sleep(0.5)
        return self

    def answers(self) -> bool:
        if self.netns:
            return self._probe("answers")
        try:
            return requests.get(f"{self.api}/api/overview", auth=("admin", self.password),
                                timeout=2, verify=self.verify).status_code == 200
        except requests.RequestException:
            return False

    def listens(self) -> bool:
        if self.netns:
            return self._probe("listens")
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=2):
                return True
        except OSError:
            return False

    def stop(self) -> None:
        if self.process is None:
            return
        subprocess.run(self._argv("runuser", "-u", "rabbitmq", "--",
                                  str(RABBIT_BIN / "rabbitmqctl"), "-n", self.name, "stop"),
                       env=self._env(), capture_output=True, timeout=60)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self.process = None
        if self.netns:  # the namespace's own epmd (its loopback's), started with the node
            subprocess.run(self._argv("epmd", "-kill"), capture_output=True, timeout=30)

    def log_tail(self, size: int = 3000) -> str:
        """The end of the server's output and of its own log, for a failing test to show."""
        parts = []
        for path in [self.dir / "server.out", *sorted((self.dir / "log").glob("*.log"))]:
            try:
                parts.append(f"--- {path.name}\n{path.read_text(errors='replace')[-size:]}")
            except OSError:
                pass
        return "\n".join(parts)

    def restart(self) -> None:
        self.stop()
        self.start()

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
