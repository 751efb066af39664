"""`mesh agent --config FILE` (the node agent, long-running) and `mesh agent enrol TOKEN …`.

The agent runs in the foreground (systemd: Type=simple), one line per event on stderr, and
stops on SIGTERM or SIGINT once the apply under way is done. `enrol` creates the node's key (as
`mesh node-key` does), writes the configuration and sends the enrolment request with the
one-time token; it then waits for the control node's answer (--wait SECONDS bounds the wait;
the agent takes the answer when it starts, if it comes later). executors/node/agent/loop.py and
executors/node/agent/enrol.py are the work.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import Callable, Optional, TextIO

from resolver import MeshError

from executors.cli._verb import Subparsers
from executors.common.enrol_token import decode
from executors.node.agent.config import load_config
from executors.node.agent.enrol import start, wait_for_answer
from executors.node.agent.loop import Agent
from executors.node.node_paths import DEFAULT_STATE_ROOT, STATE_ROOT_ENV, default_state_root


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "agent", help="the node agent: apply this node's declarations from the broker, report",
        description="Run the node agent until stopped (SIGTERM/SIGINT): take this node's "
        "declarations from its queue, verify each against the pinned mesh CA, apply the newest "
        "exactly as `mesh apply` does, report each (applied, failed, superseded naming the "
        "winner, or rejected with the reason) and acknowledge a message only once its report "
        "is confirmed; re-apply the declaration in force every drift-minutes and report "
        "drift repaired. `mesh agent enrol TOKEN …` enrols a new node.")
    parser.add_argument("--config", metavar="FILE",
                        help="the agent's configuration (written by `mesh agent enrol`)")
    sub = parser.add_subparsers(dest="agent_command", metavar="ACTION")
    enrol = sub.add_parser(
        "enrol", help="enrol this node with a one-time token from `mesh enrol token`",
        description="Create this node's key (0600, kept if it exists) and print its public key "
        "and fingerprint (SHA256:…, the form `mesh enrol list` shows on the control node: "
        "compare them there, then `mesh enrol accept DIR NODE --fingerprint FP`), write the "
        "agent configuration and send the enrolment request (public key, address) over the "
        "broker with the token, over TLS once the broker's certificate proved to be the mesh "
        "CA's (the CA the token carries and pins; refused before the token's secret is sent "
        "otherwise); then wait for the control node's answer.")
    enrol.add_argument("token", metavar="TOKEN", help="the token `mesh enrol token` printed")
    enrol.add_argument("--config", dest="enrol_config", required=True, metavar="FILE",
                       help="where to write the agent configuration, e.g. /etc/mesh/agent.yaml")
    enrol.add_argument("--key", required=True, metavar="FILE",
                       help="this node's private key (created if absent), e.g. "
                       "/etc/mesh/node.key")
    enrol.add_argument("--address", metavar="IP",
                       help="this node's address in the mesh (default: its address on the way "
                       "to the broker)")
    enrol.add_argument("--state-root", default=default_state_root(),
                       help="node-side state root for the agent's applies (default "
                       f"${STATE_ROOT_ENV} or {DEFAULT_STATE_ROOT})")
    enrol.add_argument("--docker-host", default=os.environ.get("DOCKER_HOST"),
                       help="the Docker Engine the agent applies to (default: $DOCKER_HOST or "
                       "the local socket)")
    enrol.add_argument("--no-firewall", action="store_true",
                       help="leave this node's firewall alone (written as `firewall: false`)")
    enrol.add_argument("--drift-minutes", type=float, default=30.0, metavar="MINUTES",
                       help="re-apply the declaration in force this often (default 30; 0: "
                       "never)")
    wait = enrol.add_mutually_exclusive_group()
    wait.add_argument("--wait", type=float, metavar="SECONDS",
                      help="wait at most this long for the answer (default: until it comes)")
    wait.add_argument("--no-wait", action="store_true",
                      help="send the request and return; the agent takes the answer")
    parser.set_defaults(func=run)


def _say(node: str) -> Callable[[str], None]:
    def say(line: str) -> None:
        print(f"agent {node}: {line}", file=sys.stderr, flush=True)
    return say


def run(args: argparse.Namespace, out: Optional[TextIO] = None) -> int:
    if args.agent_command == "enrol":
        return run_enrol(args, out or sys.stdout)
    if not args.config:
        raise MeshError("mesh agent needs --config FILE (or `mesh agent enrol TOKEN …` first)")
    config = load_config(args.config)
    say = _say(config.node)
    if not config.enrolled:
        say("not enrolled yet: waiting for the control node's answer")
        config = wait_for_answer(config, say=say)
    agent = Agent(config, say=say)
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, agent.stop)
    agent.run()
    return 0


def run_enrol(args: argparse.Namespace, out: TextIO) -> int:
    say = _say(decode(args.token).node)
    config = start(args.token, config_path=args.enrol_config, key_path=args.key,
                   address=args.address, state_root=args.state_root,
                   docker_host=args.docker_host, firewall=not args.no_firewall,
                   drift_minutes=args.drift_minutes, say=say)
    if args.no_wait:
        say(f"not waiting: `mesh agent --config {args.enrol_config}` takes the answer")
        return 0
    wait_for_answer(config, say=say, timeout=args.wait)
    print(f"enrolled {config.node} in mesh {config.mesh}", file=out)
    return 0
