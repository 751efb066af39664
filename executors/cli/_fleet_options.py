"""Options the control-node verbs share (control, publish, collect, enrol, status): the mesh
directory, the control state directory, and how to reach the broker; what they print.

Invariants:
- Standard library only: `mesh status` takes these options and runs without the broker's
  client; the Control the broker verbs make from them is cli/_fleet_control.py's.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import Callable

ENV = {"broker": "MESH_BROKER", "broker_api": "MESH_BROKER_API",
       "broker_admin": "MESH_BROKER_ADMIN",
       "broker_admin_password_file": "MESH_BROKER_ADMIN_PASSWORD_FILE",
       "broker_for_nodes": "MESH_BROKER_FOR_NODES", "key": "MESH_CONTROL_KEY",
       "broker_plain": "MESH_BROKER_PLAIN"}


def add_directory(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("directory", metavar="DIR", help="the mesh directory holding mesh.yaml")
    parser.add_argument("--state-dir", metavar="DIR",
                        help="the control plane's own files: what was published, reports, "
                        "enrolment (default: DIR/.control)")


def add_broker(parser: argparse.ArgumentParser, with_key: bool = True) -> None:
    """The broker's options; `with_key` False: the verb has its own --key (this machine's key:
    on the control node the same key), read the same way."""
    group = parser.add_argument_group(
        "broker", "how to reach the mesh's broker; by default the substrate broker instance of "
        "mesh.yaml, its admin's password opened from the escrow with --key")
    group.add_argument("--broker", metavar="HOST:PORT", default=os.environ.get(ENV["broker"]),
                       help=f"the broker's AMQP address (${ENV['broker']})")
    group.add_argument("--broker-api", metavar="URL", default=os.environ.get(ENV["broker_api"]),
                       help=f"its management API, e.g. https://HOST:15671 (verified against "
                       f"the mesh CA; http:// is plain) (${ENV['broker_api']})")
    group.add_argument("--broker-admin", metavar="USER",
                       default=os.environ.get(ENV["broker_admin"]),
                       help=f"its administrator account (${ENV['broker_admin']})")
    group.add_argument("--broker-admin-password-file", metavar="FILE",
                       default=os.environ.get(ENV["broker_admin_password_file"]),
                       help="a file holding the administrator's password "
                       f"(${ENV['broker_admin_password_file']})")
    group.add_argument("--broker-for-nodes", metavar="HOST:PORT",
                       default=os.environ.get(ENV["broker_for_nodes"]),
                       help="the broker's address as the nodes reach it, written into "
                       f"enrolment tokens (default: --broker; ${ENV['broker_for_nodes']})")
    group.add_argument("--broker-plain", action="store_true",
                       default=os.environ.get(ENV["broker_plain"], "") not in ("", "0"),
                       help="the broker speaks plain AMQP (no TLS): every password and "
                       "declaration crosses the network readable, nodes enrolled with this "
                       "mesh's tokens too. Default: TLS (amqps) verified against the mesh CA "
                       f"(${ENV['broker_plain']}=1)")
    if not with_key:
        return
    group.add_argument("--key", metavar="FILE", default=os.environ.get(ENV["key"]),
                       help="the control node's private key: opens the broker admin's password "
                       f"from the escrow, and values a move re-seals (${ENV['key']})")


def say(line: str) -> None:
    print(f"control: {line}", file=sys.stderr, flush=True)


def stop_on_signals(stop: Callable[[], object]) -> None:
    """SIGTERM and SIGINT ask the loop to stop at its next turn (systemd's stop, Ctrl-C)."""
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, lambda *_: stop())
