"""How the mesh's long-running host processes (the node agent; a control loop run on a host,
such as a restored control node without Docker) are installed as services that come back
after a crash or a reboot: the one place `mesh join` (and `mesh init`, for its own agent;
`mesh control restore --node`, for the control loop) asks. The control loop `mesh init` starts is not one of them: it is the control instance's
container, which the Docker Engine's restart policy brings back.

Invariants:
- Where systemd runs (`/run/systemd/system` exists), a unit `mesh-<name>.service` is written
  (atomically, 0644) with `Restart=always` and `WantedBy=multi-user.target`, then
  `systemctl daemon-reload` and `systemctl enable --now`: systemd restarts it after a crash and
  starts it at boot.
- Elsewhere (a container, a test namespace, a machine with another init), the fallback is
  `mesh supervise`: a small detached supervisor (its own session) that runs the command,
  restarts it whenever it exits (1 s, doubling to 30 s while it keeps failing; back to 1 s
  after 60 s up), forwards SIGTERM/SIGINT to it and stops. Its pid and its child's pid are
  files under the run directory (`<name>.pid`, `<name>.child.pid`), its log `<name>.log`; a
  second supervisor of one name is refused while the first lives. It does not start at boot by
  itself: what to add to the machine's boot is said (one line).
- The command is the same either way: the `mesh` command line as the caller runs it (cli/
  passes its own launcher: this interpreter and its module), so a service runs the same code
  as the command that installed it.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

import attrs

from resolver import MeshError

from executors.common.atomic import write_atomic

SYSTEMD_RUNNING = Path("/run/systemd/system")
UNIT_DIR = Path("/etc/systemd/system")
RUN_DIR = Path("/run/mesh")
Say = Callable[[str], None]

FIRST_DELAY, MAX_DELAY, HEALTHY_SECONDS = 1.0, 30.0, 60.0


class ServiceError(MeshError):
    """A service that could not be installed or supervised."""


@attrs.frozen
class Service:
    name: str  # "agent" → mesh-agent.service, or /run/mesh/agent.pid
    description: str
    args: tuple[str, ...]  # the `mesh` arguments, e.g. ("agent", "--config", "/etc/mesh/…")
    launcher: tuple[str, ...]  # how `mesh` is run here, e.g. (python, "-m", <the cli module>)
    working_directory: Optional[str] = None
    environment: Mapping[str, str] = attrs.field(factory=dict)

    @property
    def unit(self) -> str:
        return f"mesh-{self.name}.service"

    def argv(self) -> list[str]:
        return [*self.launcher, *self.args]


def systemd_running() -> bool:
    return SYSTEMD_RUNNING.is_dir()


def passed_environment() -> dict[str, str]:
    """What of this process's environment a service needs to run the same code and Engine."""
    return {name: os.environ[name] for name in ("PYTHONPATH", "DOCKER_HOST")
            if os.environ.get(name)}


def unit_text(service: Service) -> str:
    lines = ["[Unit]", f"Description={service.description}",
             "After=network-online.target docker.service", "Wants=network-online.target", "",
             "[Service]", "Type=simple", f"ExecStart={shlex.join(service.argv())}",
             "Restart=always", "RestartSec=2"]
    if service.working_directory:
        lines.append(f"WorkingDirectory={service.working_directory}")
    lines += [f"Environment={shlex.quote(f'{k}={v}')}"
              for k, v in sorted(service.environment.items())]
    lines += ["", "[Install]", "WantedBy=multi-user.target", ""]
    return "\n".join(lines)


def supervise_args(service: Service, run_dir: Path) -> list[str]:
    return ["supervise", "--name", service.name, "--run-dir", str(run_dir), "--",
            *service.args]


def install(service: Service, *, say: Say, run_dir: Path = RUN_DIR,
            unit_dir: Path = UNIT_DIR, systemd: Optional[bool] = None) -> str:
    """Install and start `service`; how it runs, in one line (also said)."""
    if systemd is None:
        systemd = systemd_running()
    if systemd:
        path = unit_dir / service.unit
        write_atomic(path, unit_text(service), mode=0o644)
        for argv in (["systemctl", "daemon-reload"],
                     ["systemctl", "enable", "--now", service.unit]):
            done = subprocess.run(argv, capture_output=True, text=True)
            if done.returncode != 0:
                raise ServiceError(f"`{shlex.join(argv)}` failed: "
                                   f"{(done.stderr.strip() or done.stdout.strip())[:300]}")
        how = (f"{service.unit} installed ({path}), enabled and started: systemd restarts it "
               f"after a crash and starts it at boot (`journalctl -u {service.unit}`)")
        say(how)
        return how
    run_dir.mkdir(parents=True, exist_ok=True)
    running = supervisor_pid(service.name, run_dir)
    if running is not None:
        raise ServiceError(f"mesh supervise {service.name} runs already (pid {running}, "
                           f"{run_dir / (service.name + '.pid')}); stop it first")
    command = [*service.launcher, *supervise_args(service, run_dir)]
    env = dict(os.environ, **service.environment)
    with open(os.devnull, "rb") as null_in, open(os.devnull, "wb") as null_out:
        subprocess.Popen(command, stdin=null_in, stdout=null_out, stderr=null_out, env=env,
                         cwd=service.working_directory, start_new_session=True)
    deadline = time.monotonic() + 10
    while supervisor_pid(service.name, run_dir) is None:
        if time.monotonic() > deadline:
            raise ServiceError(f"mesh supervise {service.name} did not start (see "
                               f"{run_dir / (service.name + '.log')})")
        time.sleep(0.1)
    boot = shlex.join(command)
    how = (f"no systemd here: `mesh supervise` runs {service.name} and restarts it whenever it "
           f"exits (log {run_dir / (service.name + '.log')}); to start it at boot, add to the "
           f"machine's boot (e.g. an @reboot crontab line): {boot}")
    say(how)
    return how


def stop(name: str, *, say: Say, run_dir: Path = RUN_DIR, systemd: Optional[bool] = None,
         timeout: float = 60.0) -> None:
    """Stop the service `name` and keep it from starting again (systemd: `disable --now`;
    else the supervisor, which stops its child, is sent SIGTERM and waited for)."""
    if systemd is None:
        systemd = systemd_running()
    unit = f"mesh-{name}.service"
    if systemd:
        subprocess.run(["systemctl", "disable", "--now", unit], capture_output=True, text=True)
        say(f"{unit} stopped and disabled")
        return
    pid = supervisor_pid(name, run_dir)
    if pid is None:
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while supervisor_pid(name, run_dir) is not None and time.monotonic() < deadline:
        time.sleep(0.2)
    say(f"mesh supervise {name} (pid {pid}) stopped")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read_pid(path: Path) -> Optional[int]:
    try:
        pid = int(path.read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if _alive(pid) else None


def supervisor_pid(name: str, run_dir: Path = RUN_DIR) -> Optional[int]:
    return _read_pid(run_dir / f"{name}.pid")


def child_pid(name: str, run_dir: Path = RUN_DIR) -> Optional[int]:
    return _read_pid(run_dir / f"{name}.child.pid")


def supervise(name: str, argv: Sequence[str], *, run_dir: Path = RUN_DIR) -> int:
    """Run `argv` until SIGTERM/SIGINT, restarting it whenever it exits."""
    if not argv:
        raise ServiceError("mesh supervise needs the command to run after `--`")
    run_dir.mkdir(parents=True, exist_ok=True)
    pid_path, child_path = run_dir / f"{name}.pid", run_dir / f"{name}.child.pid"
    running = _read_pid(pid_path)
    if running is not None and running != os.getpid():
        raise ServiceError(f"mesh supervise {name} runs already (pid {running})")
    write_atomic(pid_path, f"{os.getpid()}\n", mode=0o644)
    stopping = False
    child: Optional[subprocess.Popen[bytes]] = None

    def stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, stop)
    quick = 0  # exits in a row that came before HEALTHY_SECONDS
    with open(run_dir / f"{name}.log", "ab", buffering=0) as log:
        def note(line: str) -> None:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            log.write(f"{stamp} supervise {name}: {line}\n".encode())

        try:
            while not stopping:
                started = time.monotonic()
                child = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=log)
                write_atomic(child_path, f"{child.pid}\n", mode=0o644)
                note(f"started pid {child.pid}: {shlex.join(argv)}")
                code = child.wait()
                if stopping:
                    note(f"stopped (pid {child.pid} exited {code})")
                    break
                quick = 0 if time.monotonic() - started >= HEALTHY_SECONDS else quick + 1
                delay = min(FIRST_DELAY * 2 ** max(quick - 1, 0), MAX_DELAY)
                note(f"pid {child.pid} exited {code}; restarting in {delay:.0f}s")
                end = time.monotonic() + delay
                while not stopping and time.monotonic() < end:
                    time.sleep(0.2)
        finally:
            for path in (child_path, pid_path):
                try:
                    path.unlink()
                except OSError:
                    pass
    return 0
