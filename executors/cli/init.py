"""`mesh init DIR --node NAME --address ADDR`: the first machine of a new mesh, from nothing.

The documented steps of a genesis, run in order by one command (each the verb an operator
would type, run as a child `mesh` process so its lines are the verb's own):

1. refuse, before anything is written, a DIR with something in it, a machine without the
   `node` extra (the `control` extra is this module's own import), a catalogue without the
   template's modules, a control module whose build context holds no wheel of this project
   when this project is no checkout to stage one from, a Docker Engine that does not answer;
2. this node's key (created once, 0600, its fingerprint printed), DIR/catalogue copied from
   --catalogue (default: the project's catalogue) with this project's wheel staged into the
   control module's build context (scripts/stage-control-image.sh), DIR/mesh.yaml from the
   template below, and the --broker options given kept for the control loop in
   DIR/.control/settings.json (control/control_settings.py; the admin's password sealed);
3. `mesh ca init`, `mesh pin`, `mesh build DIR --local` (the control image, into this
   Engine, recorded in the ledger by image ID as `mesh build` records it), `mesh plan --issue
   --out DIR/.init`, `mesh apply` of this node's declaration: the substrate runs (store,
   broker, registry) and so does control@NODE, the mesh's one control loop: its container
   runs `mesh control` on DIR, offered to it as the node's `mesh-dir` facility with this
   node's key as `control-key` and its Engine as `docker-socket` (what was built locally is
   pushed from it once the mesh's registry runs), and the Engine's restart policy
   (unless-stopped) brings it back after a crash or a reboot. The container runs as root, as
   the operator's `mesh` commands on DIR do (catalogue/control/image/Dockerfile);
4. this node's own agent joined with an --auto-accept token as `mesh join` does
   (cli/join.py), the agent a host service (executors/common/service.py: a systemd unit, else
   `mesh supervise`);
5. `mesh status` polled until the node applied what was published (--timeout), then a
   `mesh join TOKEN` line printed for each --join NAME[=IP].

A failure after step 2 says the step and what to do (DIR is left for a look; remove it to
start again).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Optional, TextIO

from resolver import MeshError

from executors.cli import _fleet_control, _fleet_options
from executors.cli._verb import Subparsers
from executors.cli.extras import EXTRAS, PROVIDED_BY, install_command
from executors.cli.join import CONFIG, KEY, join
from executors.cli.supervise import MESH
from executors.common.atomic import write_atomic
from executors.common.keys import create_node_key, key_fingerprint, public_key_of_file
from executors.common.service import RUN_DIR, UNIT_DIR
from executors.control import enrolment
from executors.control.control_settings import (KeptBroker, kept_from_options, settings_path,
                                                write_kept)
from executors.control.control_state import ControlState
from executors.control.delivery_key import ensure_delivery_key
from executors.control.loading import load_mesh_dir
from executors.node import docker_engine
from executors.node.node_paths import DEFAULT_STATE_ROOT, STATE_ROOT_ENV, default_state_root

PROJECT_CATALOGUE = Path(__file__).resolve().parents[2] / "catalogue"
SUBSTRATE = ("postgres", "lavinmq", "registry", "control")  # the modules the template assigns
STAGE_SCRIPT = PROJECT_CATALOGUE.parent / "scripts" / "stage-control-image.sh"
CONTROL_CONTEXT = Path("control") / "image"  # the control module's build context
MESH_NAME = re.compile(r"^[a-z][a-z0-9-]{0,30}$")

TEMPLATE = """\
# Made by `mesh init`: the first node of mesh {mesh}, running the substrate (the store, the
# broker nodes enrol through, the mesh's registry) and the control plane (control@{node}: the
# mesh's control loop, on this mesh directory, this node's key and its Docker Engine,
# offered to it as facilities). Assign your modules under `instances:`; add nodes with
# `mesh enrol token DIR NAME --auto-accept` and `mesh join TOKEN` on them.
mesh: {mesh}
catalogue: catalogue

nodes:
  {node}:
    address: {address}
    control: true
    public-key: "{public}"
    facilities: ["mesh-dir={directory}", "control-key={key}", "{socket}"]

instances:
  postgres@{node}:
    module: postgres
    node: {node}
  lavinmq@{node}:
    module: lavinmq
    node: {node}
  registry@{node}:
    module: registry
    node: {node}
  control@{node}:
    module: control
    node: {node}

substrate:
  store: postgres@{node}
  broker: lavinmq@{node}
"""


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "init", help="make this machine the first node and control node of a new mesh",
        description="Make a new mesh in DIR with this machine as its first node and its "
        "control node: the node key, the mesh CA, DIR/mesh.yaml from the documented template "
        "(store, broker, registry and the control plane control@NODE on NODE) with the "
        "catalogue copied in and this project's wheel staged into the control image's "
        "context; pins, `mesh build DIR --local` (the control image, into this Engine, no "
        "registry), issue, apply: the control instance's container is the mesh's control "
        "loop (on DIR and --key, offered as NODE's facilities; the Engine restarts it); then "
        "this node's agent as a service (systemd, else `mesh supervise`); wait until `mesh "
        "status` shows NODE converged and print `mesh join TOKEN` for each --join. The "
        "--broker options given are kept in DIR/.control/settings.json for the control loop. "
        "Refused with nothing written: a DIR with something in it, no `node` or `control` "
        "extra, no Docker Engine, no wheel to put in the control image.")
    parser.add_argument("directory", metavar="DIR", help="the new mesh directory (absent or "
                        "empty)")
    parser.add_argument("--node", required=True, metavar="NAME", help="this node's name")
    parser.add_argument("--address", required=True, metavar="IP",
                        help="this node's address on the mesh's network")
    parser.add_argument("--mesh", metavar="NAME",
                        help="the mesh's name (default: DIR's name; lower-case letters, digits, "
                        "-)")
    parser.add_argument("--catalogue", metavar="DIR", default=str(PROJECT_CATALOGUE),
                        help="the catalogue copied into DIR/catalogue (default: this project's, "
                        f"{PROJECT_CATALOGUE}); it must hold {', '.join(SUBSTRATE)}")
    parser.add_argument("--join", action="append", default=[], metavar="NAME[=IP]",
                        help="print a `mesh join` token (auto-accepted) for node NAME; with IP, "
                        "admitted at that address now (repeatable)")
    parser.add_argument("--expires", type=int, default=60, metavar="MINUTES",
                        help="how long the --join tokens may be used (default 60)")
    parser.add_argument("--config", default=CONFIG, metavar="FILE",
                        help=f"this node's agent configuration (default {CONFIG})")
    parser.add_argument("--state-root", default=default_state_root(),
                        help=f"node-side state root (default ${STATE_ROOT_ENV} or "
                        f"{DEFAULT_STATE_ROOT})")
    parser.add_argument("--docker-host", default=os.environ.get("DOCKER_HOST"),
                        help="the Docker Engine (default: $DOCKER_HOST or the local socket)")
    parser.add_argument("--no-firewall", action="store_true",
                        help="leave this node's firewall alone")
    parser.add_argument("--drift-minutes", type=float, default=30.0, metavar="MINUTES",
                        help="the agent re-applies the declaration in force this often")
    parser.add_argument("--timeout", type=float, default=900.0, metavar="SECONDS",
                        help="how long to wait for the node to converge (default 900)")
    parser.add_argument("--run-dir", default=str(RUN_DIR), metavar="DIR",
                        help=f"without systemd: the supervisors' pid files and logs (default "
                        f"{RUN_DIR})")
    parser.add_argument("--unit-dir", default=str(UNIT_DIR), metavar="DIR",
                        help=f"with systemd: where the units are written (default {UNIT_DIR})")
    _fleet_options.add_broker(parser)  # its --key: this node's key (default /etc/mesh/node.key)
    parser.set_defaults(func=run)


def _missing_node_extra() -> Optional[str]:
    """The node extra's distributions whose modules cannot be found, as one line, or None."""
    modules: dict[str, str] = {}
    for module, distribution in PROVIDED_BY.items():
        modules.setdefault(distribution, module)  # its import name (psycopg, not its binary)
    missing = [d for d in EXTRAS["node"] if d in modules
               and importlib.util.find_spec(modules[d]) is None]
    if not missing:
        return None
    return (f"mesh init needs the node extra too ({', '.join(missing)} missing): "
            f"{install_command('node')}; nothing was written")


def preflight(args: argparse.Namespace) -> tuple[Path, str, Path]:
    """(DIR, the mesh's name, the catalogue source), or MeshError before anything is written."""
    directory = Path(args.directory).absolute()
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise MeshError(f"{directory} is not empty (a mesh is initialised there, or something "
                        f"else is): mesh init makes a new mesh in an absent or empty directory; "
                        f"nothing was written")
    mesh = args.mesh or directory.name
    if not MESH_NAME.match(mesh):
        raise MeshError(f"{mesh!r} is not a mesh name (lower-case letters, digits, -; up to 31): "
                        f"give --mesh NAME; nothing was written")
    missing = _missing_node_extra()
    if missing:
        raise MeshError(missing)
    catalogue = Path(args.catalogue)
    absent = [m for m in SUBSTRATE if not (catalogue / m / "module.yaml").is_file()]
    if not (catalogue / "provisions.yaml").is_file() or absent:
        raise MeshError(f"{catalogue} is not a catalogue with the template's modules (missing: "
                        f"{', '.join(absent) or 'provisions.yaml'}): give --catalogue DIR; "
                        f"nothing was written")
    try:
        docker_engine.connect(args.docker_host, timeout=10).ping()
    except Exception as error:  # noqa: BLE001 - any failure to answer is the same refusal
        where = args.docker_host or "the local socket"
        raise MeshError(f"no Docker Engine answers at {where} ({type(error).__name__}): install "
                        f"and start one (Debian: docker.io), or give --docker-host; nothing "
                        f"was written") from None
    if Path(args.config).exists():
        raise MeshError(f"{args.config} exists: this machine is a node of a mesh already "
                        f"(remove it to make a new one); nothing was written")
    if not _checkout() and not _staged_wheels(catalogue / CONTROL_CONTEXT):
        raise MeshError(f"{catalogue / CONTROL_CONTEXT}/dist holds no wheel of this project "
                        f"and this installation is no checkout to make one from: run `sh "
                        f"scripts/stage-control-image.sh {catalogue / CONTROL_CONTEXT}` in the "
                        f"project's checkout, or give --catalogue DIR with a staged control "
                        f"module; nothing was written")
    return directory, mesh, catalogue


def _socket(docker_host: Optional[str]) -> str:
    """The docker-socket facility this node offers the control instance: its Engine's socket
    (the default path unless --docker-host names another unix socket)."""
    if docker_host and docker_host.startswith("unix://"):
        return f"docker-socket={docker_host[len('unix://'):]}"
    return "docker-socket"


def _checkout() -> bool:
    """Whether this project runs from its checkout (a wheel can be staged from it)."""
    return STAGE_SCRIPT.is_file() and (PROJECT_CATALOGUE.parent / "pyproject.toml").is_file()


def _staged_wheels(context: Path) -> list[Path]:
    return sorted((context / "dist").glob("*.whl"))


def _stage(catalogue: Path, directory: Path, say: Callable[[str], None]) -> None:
    """This project's wheel into DIR's copy of the control module's build context: staged
    from this checkout (scripts/stage-control-image.sh), else the source catalogue's."""
    context = directory / "catalogue" / CONTROL_CONTEXT
    if _checkout():
        say(f"sh {STAGE_SCRIPT} {context}")
        done = subprocess.run(["sh", str(STAGE_SCRIPT), str(context)], capture_output=True,
                              text=True)
        for line in (done.stdout + done.stderr).splitlines():
            if line.strip():
                say(f"  {line}")
        if done.returncode != 0:
            raise MeshError(f"staging this project's wheel failed (exit {done.returncode}; "
                            f"its lines are above)")
        return
    (context / "dist").mkdir(parents=True, exist_ok=True)
    for wheel in _staged_wheels(catalogue / CONTROL_CONTEXT):
        shutil.copy2(wheel, context / "dist" / wheel.name)
        say(f"staged {wheel.name} (from {catalogue / CONTROL_CONTEXT / 'dist'})")


def _keep_broker(args: argparse.Namespace, directory: Path, public: str,
                 say: Callable[[str], None]) -> None:
    """The --broker options given, kept for the control loop wherever it runs."""
    kept = kept_from_options(broker=args.broker, api=args.broker_api, admin=args.broker_admin,
                             admin_password_file=args.broker_admin_password_file,
                             for_nodes=args.broker_for_nodes, plain=args.broker_plain,
                             control_public_key=public)
    if kept == KeptBroker():
        return
    path = settings_path(ControlState(directory).root)
    write_kept(path, kept)
    say(f"kept the broker options for the control loop in {path}"
        + (" (the admin's password sealed to this node's key)"
           if kept.broker_admin_password_sealed else ""))


def run(args: argparse.Namespace, out: Optional[TextIO] = None) -> int:
    out = out or sys.stdout
    args.key = os.path.abspath(args.key or KEY)
    directory, mesh, catalogue = preflight(args)
    node: str = args.node

    def say(line: str) -> None:
        print(f"init {node}: {line}", file=sys.stderr, flush=True)

    began = time.monotonic()
    # -- the key and the mesh directory
    if Path(args.key).exists():
        public = public_key_of_file(args.key)
        say(f"using the existing key {args.key}")
    else:
        public = create_node_key(args.key)
        say(f"created the node key {args.key} (mode 0600): it never leaves this node")
    say(f"key fingerprint: {key_fingerprint(public)}")
    directory.mkdir(parents=True, exist_ok=True)
    shutil.copytree(catalogue, directory / "catalogue",
                    ignore=shutil.ignore_patterns("dist", "__pycache__"))
    write_atomic(directory / "mesh.yaml", TEMPLATE.format(mesh=mesh, node=node,
                                                          address=args.address,
                                                          public=public, directory=directory,
                                                          key=args.key,
                                                          socket=_socket(args.docker_host)))
    say(f"wrote {directory / 'mesh.yaml'} (the substrate and control@{node} on {node}) and "
        f"copied the catalogue from {catalogue}")
    docker_host = ["--docker-host", args.docker_host] if args.docker_host else []
    out_dir = directory / ".init"
    step = "keeping the broker options"
    try:
        _keep_broker(args, directory, public, say)
        step = "staging this project's wheel into the control image's context"
        _stage(catalogue, directory, say)
        for step, argv in (
                ("mesh ca init", ["ca", "init", str(directory)]),
                ("mesh pin", ["pin", str(directory)]),
                ("mesh build --local", ["build", str(directory), "--local", *docker_host]),
                ("mesh plan --issue", ["plan", str(directory), "--issue", "--key", args.key,
                                       "--out", str(out_dir)]),
                ("mesh apply", ["apply", str(out_dir / f"{node}.declaration.json"),
                                "--secrets", str(directory / "ledger.yaml"), "--key", args.key,
                                "--state-root", os.path.abspath(args.state_root),
                                *docker_host,
                                *(["--no-firewall"] if args.no_firewall else [])])):
            _mesh(argv, say)
        say(f"control@{node} runs the control loop on {directory} (its container; the "
            f"Engine's restart policy brings it back after a crash or a reboot)")
        step = f"{node}'s own agent"
        token = _token(args, directory, node, None)
        join(token, _join_args(args), say)
        step = f"{node} converging"
        _wait_converged(directory, node, args.timeout, say)
    except MeshError as error:
        raise MeshError(f"mesh init stopped at {step}: {error} ({directory} is left as it is "
                        f"for a look; remove it, and the services and key if made, to start "
                        f"again)") from None
    print(f"mesh {mesh} runs on {node} ({time.monotonic() - began:.0f}s): the control loop is "
          f"control@{node}'s container, the agent a service; `mesh status {directory}` shows "
          f"it", file=out)
    for wanted in args.join:
        name, _, address = wanted.partition("=")
        token = _token(args, directory, name, address or None)
        print(f"on {name}, as root: mesh join {token}", file=out)
    if not args.join:
        print(f"to add a node: `mesh enrol token {directory} NAME --auto-accept [--address IP]` "
              f"here, then `mesh join TOKEN` on it", file=out)
    return 0


def _mesh(argv: list[str], say: Callable[[str], None]) -> None:
    say(f"mesh {' '.join(argv)}")
    done = subprocess.run([*MESH, *argv], capture_output=True, text=True)
    for line in (done.stdout + done.stderr).splitlines():
        if line.strip():
            say(f"  {line}")
    if done.returncode != 0:
        raise MeshError(f"`mesh {argv[0]}` exited {done.returncode} (its lines are above)")


def _token(args: argparse.Namespace, directory: Path, node: str,
           address: Optional[str]) -> str:
    """An --auto-accept enrolment token for `node`, made as `mesh enrol token` makes one."""
    args.directory, args.state_dir = str(directory), None
    control = _fleet_control.control(args, issue=False)
    connection, channel = control.connect(deadline=time.monotonic() + 60)
    try:
        key = ensure_delivery_key(control.mesh_dir, load_mesh_dir(control.mesh_dir).mesh)
        return enrolment.make_token(control.mesh_dir, control.fleet, channel, key, node,
                                    minutes=args.expires, auto_accept=True, address=address,
                                    say=lambda line: print(f"init: {line}", file=sys.stderr))
    finally:
        connection.close()


def _join_args(args: argparse.Namespace) -> argparse.Namespace:
    return argparse.Namespace(config=args.config, key=args.key, address=args.address,
                              state_root=args.state_root, docker_host=args.docker_host,
                              no_firewall=args.no_firewall, drift_minutes=args.drift_minutes,
                              wait=args.timeout, run_dir=args.run_dir, unit_dir=args.unit_dir)


def _wait_converged(directory: Path, node: str, timeout: float,
                    say: Callable[[str], None]) -> None:
    deadline = time.monotonic() + timeout
    next_line = time.monotonic() + 15
    while True:
        done = subprocess.run([*MESH, "status", str(directory), "--json"], capture_output=True,
                              text=True)
        nodes = json.loads(done.stdout)["nodes"] if done.returncode == 0 else []
        mine = [n for n in nodes if n.get("node") == node]
        if mine and mine[0].get("serial_published") is not None and not mine[0].get("behind") \
                and mine[0].get("last_result") == "applied":
            say(f"{node} converged: serial {mine[0]['serial_published']} applied")
            return
        if time.monotonic() > deadline:
            why = (f"last result {mine[0].get('last_result')}" if mine else "nothing published "
                   "or reported yet")
            raise MeshError(f"{node} did not converge within {timeout:g}s ({why}; `mesh status "
                            f"{directory}` and the control loop's log say more)")
        if time.monotonic() >= next_line:
            say(f"waiting for {node} to apply what was published")
            next_line = time.monotonic() + 15
        time.sleep(1)
