"""`mesh join TOKEN`: this machine becomes a node of the mesh the token names.

One command on the new machine: the node key (created once, 0600; its fingerprint printed),
the enrolment request over the broker with the one-time token, the agent's configuration, and
the agent installed as a service (executors/common/service.py: a systemd unit where systemd
runs, `mesh supervise` otherwise), which takes the control node's answer and from then on
applies this node's declarations. It then waits for the answer (--wait). On the control node:
`mesh enrol accept DIR NODE --fingerprint FP`, or nothing for a token made with
`mesh enrol token … --auto-accept` (the control loop accepts it). The steps are
executors/node/agent/enrol.py.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Callable, Optional, TextIO

from resolver import MeshError

from executors.cli._verb import Subparsers
from executors.cli.supervise import MESH
from executors.common.enrol_token import decode
from executors.common.service import (RUN_DIR, UNIT_DIR, Service, install, passed_environment,
                                      stop)
from executors.node.agent.config import load_config
from executors.node.agent.enrol import start
from executors.node.node_paths import DEFAULT_STATE_ROOT, STATE_ROOT_ENV, default_state_root

class NotAccepted(MeshError):
    """The node asked and was rejected, or no answer came within the wait (then the agent
    service takes it when it comes): exit 1."""


CONFIG = "/etc/mesh/agent.yaml"
KEY = "/etc/mesh/node.key"


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "join", help="make this machine a node of the mesh: key, enrolment, agent service",
        description="Join the mesh TOKEN names (`mesh enrol token` on the control node, or the "
        "line `mesh init` printed): create this node's key (0600, kept if it exists) and print "
        "its fingerprint, send the enrolment request over the broker (TLS, the broker's "
        "certificate verified against the mesh CA the token carries before its secret is "
        "sent), write the agent's "
        "configuration, install the agent as a service (a systemd unit where systemd runs, "
        "else `mesh supervise`), and wait until the control node accepted the node (`mesh "
        "enrol accept DIR NODE --fingerprint FP` there, or nothing for an --auto-accept "
        "token).")
    parser.add_argument("token", metavar="TOKEN", help="the one-time enrolment token")
    parser.add_argument("--address", metavar="IP",
                        help="this node's address in the mesh (default: its address on the "
                        "way to the broker; a token made with --address pins it)")
    parser.add_argument("--config", default=CONFIG, metavar="FILE",
                        help=f"the agent's configuration (default {CONFIG})")
    parser.add_argument("--key", default=KEY, metavar="FILE",
                        help=f"this node's private key, created if absent (default {KEY})")
    parser.add_argument("--state-root", default=default_state_root(),
                        help=f"node-side state root (default ${STATE_ROOT_ENV} or "
                        f"{DEFAULT_STATE_ROOT})")
    parser.add_argument("--docker-host", default=os.environ.get("DOCKER_HOST"),
                        help="the Docker Engine the agent applies to (default: $DOCKER_HOST or "
                        "the local socket)")
    parser.add_argument("--no-firewall", action="store_true",
                        help="leave this node's firewall alone")
    parser.add_argument("--drift-minutes", type=float, default=30.0, metavar="MINUTES",
                        help="re-apply the declaration in force this often (default 30)")
    parser.add_argument("--wait", type=float, default=600.0, metavar="SECONDS",
                        help="wait this long for the control node's answer (default 600; the "
                        "agent service takes it whenever it comes)")
    parser.add_argument("--run-dir", default=str(RUN_DIR), metavar="DIR",
                        help=f"without systemd: the supervisor's pid files and log (default "
                        f"{RUN_DIR})")
    parser.add_argument("--unit-dir", default=str(UNIT_DIR), metavar="DIR",
                        help=f"with systemd: where the unit is written (default {UNIT_DIR})")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, out: Optional[TextIO] = None) -> int:
    out = out or sys.stdout
    token = decode(args.token)  # a damaged token is said before anything is made

    def say(line: str) -> None:
        print(f"join {token.node}: {line}", file=sys.stderr, flush=True)

    try:
        node, mesh = join(args.token, args, say)
    except NotAccepted as error:
        print(f"mesh: {error}", file=sys.stderr)
        return 1
    print(f"joined: {node} is a node of mesh {mesh}; its agent runs as a service and applies "
          f"what the control node publishes for it", file=out)
    return 0


def join(token_text: str, args: argparse.Namespace, say: Callable[[str], None]
         ) -> tuple[str, str]:
    """Key, request, configuration, the agent as a service, the acceptance waited for (the
    options of `mesh join` in `args`); (node, mesh). Not accepted within --wait: MeshError."""
    config_path = os.path.abspath(args.config)
    config = start(token_text, config_path=config_path, key_path=os.path.abspath(args.key),
                   address=args.address, state_root=os.path.abspath(args.state_root),
                   docker_host=args.docker_host, firewall=not args.no_firewall,
                   drift_minutes=args.drift_minutes, say=say)
    install(Service("agent", f"mesh agent of node {config.node} (mesh {config.mesh})",
                    ("agent", "--config", config_path), MESH,
                    environment=passed_environment()),
            say=say, run_dir=Path(args.run_dir), unit_dir=Path(args.unit_dir))
    wait: float = args.wait
    began = time.monotonic()
    next_line = began + 15
    while True:
        now_config = load_config(config_path)
        if now_config.enrolled:
            return config.node, config.mesh
        if now_config.enrolment is None:
            stop("agent", say=say, run_dir=Path(args.run_dir))
            raise NotAccepted(f"the control node rejected {config.node} (the agent's log says "
                              f"why); its agent service is stopped: ask for a new token, move "
                              f"{config_path} away and join again")
        now = time.monotonic()
        if now - began >= wait:
            raise NotAccepted(f"{config.node} is not accepted yet after {wait:g}s; the agent "
                              f"service takes the answer when it comes (on the control node: "
                              f"`mesh enrol accept DIR {config.node} --fingerprint FP`)")
        if now >= next_line:
            say(f"waiting for the control node to accept {config.node} ({now - began:.0f}s)")
            next_line = now + 15
        time.sleep(0.5)
