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
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
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
    def __init__(self, listen: Sequence[str] = ("127.0.0.1",), management: str = "127.0.0.1"):
        self.dir = Path(tempfile.mkdtemp(prefix="mesh-test-rabbit-"))
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
        return f"http://{self.management}:{self.api_port}"

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
        listeners = "\n".join(f"listeners.tcp.{i} = {address}:{self.port}"
                              for i, address in enumerate(("127.0.0.1",) + tuple(
                                  a for a in self.listen if a != "127.0.0.1"), start=1))
        (self.dir / "rabbitmq.conf").write_text(
            f"{listeners}\nmanagement.tcp.ip = {self.management}\n"
            f"management.tcp.port = {self.api_port}\nloopback_users = none\n"
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

    def start(self, timeout: float = 90) -> "PrivateRabbit":
        if (self.dir / "rabbitmq.conf").exists():  # a restart: the ports it listened on
            return self._start(timeout)
        # Another worker's broker may draw the same free ports between this draw and its
        # listening: one worker at a time draws and starts (tests/_locks.py)
        with built("private-rabbit-ports"):
            self.port = free_ports(3)
            self.api_port, self.dist_port = self.port + 1, self.port + 2
            self._write_config()
            return self._start(timeout)

    def _start(self, timeout: float) -> "PrivateRabbit":
        log = open(self.dir / "server.out", "a")
        self.process = subprocess.Popen(
            ["runuser", "-u", "rabbitmq", "--", str(RABBIT_BIN / "rabbitmq-server")],
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
        try:
            return requests.get(f"{self.api}/api/overview", auth=("admin", self.password),
                                timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def listens(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=2):
                return True
        except OSError:
            return False

    def stop(self) -> None:
        if self.process is None:
            return
        subprocess.run(["runuser", "-u", "rabbitmq", "--", str(RABBIT_BIN / "rabbitmqctl"),
                        "-n", self.name, "stop"], env=self._env(), capture_output=True,
                       timeout=60)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self.process = None

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
