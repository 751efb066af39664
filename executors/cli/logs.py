"""`mesh logs [DIR] INSTANCE [--container NAME] [--follow] [--since WHEN] [--tail N]`: what an
instance's containers wrote, on the node that runs it, or from the control node through its
node's agent.

Read from the node's Docker Engine (`--docker-host`) by the containers' labels: every container
of the instance, running or stopped (a failed run-once step too), its lines merged in the order
the Engine stamped them and prefixed `container |` when there is more than one. What is there
is what the logging driver kept within the declaration's limits (mesh.yaml `logs:`).
With DIR (the mesh directory, on the control node), the same is asked of the agent of the
node mesh.yaml puts INSTANCE on, over the mesh's broker (executors/control/remote_logs.py):
a signed request, an answer on a queue of its own, every secret value the node holds
replaced by its `${secret:…}` token; with `--follow`, the agent streams new lines (scrubbed the
same way) until Ctrl-C, every container stopped, or the lease the control side renews
while it follows runs out.
Exit codes: 0 printed (or followed until every container stopped, or interrupted: 130);
1 no answer from the node's agent in time; 2 bad input (a `--since` that is no time, an
instance with no container on this node, a `--container` the instance does not have, an
Engine that cannot be reached, an instance mesh.yaml does not name).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Optional, TextIO

from executors.cli._fleet_control import settings
from executors.cli._fleet_options import add_broker, say
from executors.cli._verb import Subparsers
from executors.control.control_state import ControlState
from executors.control.delivery_key import ensure_delivery_key
from executors.control.fleet import Fleet
from executors.control.loading import load_mesh_dir
from executors.control.remote_logs import LogsQuery, RemoteLogsError, ask
from executors.control.remote_logs import follow as follow_remote
from executors.node import docker_engine as engine
from executors.node.logs import (LogsError, follow, instance_containers, pick, recent,
                                 since_epoch)


def _since(text: str) -> float:
    try:
        return since_epoch(text, time.time())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _tail(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of lines; expected 0 or more")
    return int(text)


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "logs",
        help="print (or follow) what an instance's containers wrote, on its node",
        description="Print the output the node's Docker Engine kept for every container of "
        "INSTANCE (running or stopped), merged by time and prefixed with the container's name "
        "when there are several. Containers are created with bounded logs (mesh.yaml `logs:`, "
        "by default json-file, 10m per file, 3 files), so this is at most that much per "
        "container. Run on the node that runs the instance; or, on the control node, with "
        "the mesh directory DIR first: the instance's node's agent is asked over the mesh's "
        "broker (a signed request; the answer has every secret value the node holds "
        "replaced by its ${secret:...} token).",
    )
    parser.add_argument("first", metavar="INSTANCE|DIR",
                        help="the instance, as mesh.yaml names it (app@lab); on the control "
                        "node, the mesh directory, followed by the instance")
    parser.add_argument("then", nargs="?", metavar="INSTANCE",
                        help="with DIR first: the instance, asked of its node's agent")
    parser.add_argument("--container", metavar="NAME",
                        help="only this container of the instance (its name in the module)")
    parser.add_argument("-f", "--follow", action="store_true",
                        help="keep printing as the containers write, until they stop (with "
                        "DIR: streamed by the node's agent until Ctrl-C)")
    parser.add_argument("--since", type=_since, metavar="WHEN",
                        help="only lines from WHEN: a duration back from now (90s, 10m, 2h, "
                        "1d) or an ISO 8601 time with an offset (2026-01-31T12:00:00Z)")
    parser.add_argument("--tail", type=_tail, metavar="N",
                        help="only the last N lines of each container")
    parser.add_argument("-t", "--timestamps", action="store_true",
                        help="show the time the Engine stamped each line")
    parser.add_argument("--mesh", metavar="NAME",
                        help="only containers of this mesh (when a node runs several)")
    parser.add_argument("--docker-host", default=os.environ.get("DOCKER_HOST"),
                        help="Docker Engine running the containers (default: $DOCKER_HOST or "
                        "the local socket)")
    parser.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS",
                        help="with DIR: how long to wait for the node's answer (default 30)")
    parser.add_argument("--state-dir", metavar="DIR",
                        help="with DIR: the control plane's own files (default: DIR/.control)")
    add_broker(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, out: Optional[TextIO] = None) -> int:
    stream = out or sys.stdout
    if args.then is not None:
        return _through_the_agent(args, args.first, args.then, stream)
    instance = args.first
    api = engine.connect(args.docker_host, timeout=30)
    containers = pick(instance_containers(api, instance, args.mesh), args.container, instance)
    if args.follow:
        def say(line: str) -> None:
            print(line, file=stream, flush=True)

        # following waits on the Engine for as long as the containers run: no read timeout
        follow(engine.connect(args.docker_host, timeout=None), containers, say,
               since=args.since, tail=args.tail, timestamps=args.timestamps)
        return 0
    for line in recent(api, containers, since=args.since, tail=args.tail,
                       timestamps=args.timestamps):
        print(line, file=stream)
    return 0


def _through_the_agent(args: argparse.Namespace, directory: str, instance: str,
                       stream: TextIO) -> int:
    inputs = load_mesh_dir(directory)
    declared = inputs.mesh.instances.get(instance)
    if declared is None:
        raise LogsError(f"{directory}/mesh.yaml names no instance {instance}; it names "
                        + (", ".join(sorted(inputs.mesh.instances)) or "none"))
    fleet = Fleet(inputs.mesh.mesh, settings(args, inputs),
                  ControlState(inputs.mesh_dir, args.state_dir), say)
    query = LogsQuery(node=declared.node, instance=instance, container=args.container,
                      since=args.since, tail=args.tail, timestamps=args.timestamps)
    if args.follow:
        def printed(text: str) -> None:
            print(text, file=stream, flush=True)

        try:
            ended = follow_remote(fleet, ensure_delivery_key(inputs.mesh_dir, inputs.mesh),
                                  query, timeout=args.timeout, say=say, line=printed)
        except RemoteLogsError as error:
            print(f"mesh: {error}", file=sys.stderr)
            return 1
        say(f"node {declared.node} stopped following: {ended}")
        return 0
    try:
        answer = ask(fleet, ensure_delivery_key(inputs.mesh_dir, inputs.mesh), query,
                     timeout=args.timeout, say=say)
    except RemoteLogsError as error:
        print(f"mesh: {error}", file=sys.stderr)
        return 1
    for line in answer.lines:
        print(line, file=stream)
    if answer.truncated:
        say(f"node {declared.node} sent only the newest {len(answer.lines)} lines (its bound); "
            "narrow with --tail or --since")
    return 0
