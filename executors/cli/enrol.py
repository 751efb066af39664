"""`mesh enrol token|list|accept|reject DIR …`: enrolling nodes, on the control node.

`token DIR NODE` makes a one-time token for NODE and prints it with the command to type on the
node; `list DIR` takes the requests waiting on the broker and shows every token and request;
`accept DIR NODE` writes the node's key and address into mesh.yaml (comments and layout kept),
makes its broker account and answers it; `reject DIR NODE` answers no. The steps themselves are
executors/control/enrolment.py.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, Optional, TextIO

from executors.cli import _fleet_control, _fleet_options
from executors.cli._verb import Subparsers
from executors.common.keys import parse_fingerprint
from executors.control import enrolment
from executors.control.control_loop import Control
from executors.control.control_state import ControlState
from executors.control.delivery_key import ensure_delivery_key
from executors.control.loading import load_mesh_dir


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "enrol", help="enrol nodes: one-time tokens, then accept or reject their requests",
        description="Enrol a node: `mesh enrol token DIR NODE` prints a one-time token to type "
        "on the node (`mesh agent enrol TOKEN …`), which sends its public key and address over "
        "the broker; `mesh enrol list DIR` shows the requests; `accept` writes the key into "
        "mesh.yaml and gives the node its broker account, `reject` refuses it.")
    sub = parser.add_subparsers(dest="enrol_command", metavar="ACTION")
    sub.required = True
    token = sub.add_parser(
        "token", help="make a one-time enrolment token for NODE",
        description="Make a one-time token for NODE and print it on stdout (the command to type "
        "on the node goes to stderr). It carries the broker's address as nodes reach it "
        "(--broker-for-nodes), the mesh CA's fingerprint the node pins, its expiry, and the "
        "password of a broker account that may only send one enrolment request and read its "
        "answer; the control node keeps only that password's SHA-256.")
    _fleet_options.add_directory(token)
    token.add_argument("node", metavar="NODE", help="the node to enrol (new, or in mesh.yaml)")
    token.add_argument("--expires", type=int, default=60, metavar="MINUTES",
                       help="how long the token may be used (default 60)")
    token.add_argument("--auto-accept", action="store_true",
                       help="the control loop (`mesh control`) accepts the request this token "
                       "brings by itself: whoever holds the token joins, so hand it over as "
                       "you would a password")
    token.add_argument("--address", metavar="IP",
                       help="NODE's address in the mesh: admitted into mesh.yaml now, so the "
                       "next publish opens the broker's floor to it before it dials; with "
                       "--auto-accept, the address written whatever the request says")
    _fleet_options.add_broker(token)
    token.set_defaults(func=run_token)
    listing = sub.add_parser(
        "list", help="take waiting requests and list tokens and requests",
        description="Take the enrolment requests waiting on the broker, close the tokens whose "
        "answer the node took, and list every token with its state and each request's address, "
        "hostname and key fingerprint (SHA256:<base64 of the SHA-256 of the raw 32-byte public "
        "key>, as `mesh agent enrol` and `mesh node-key --show` print it on the node: compare "
        "the two before accepting).")
    _fleet_options.add_directory(listing)
    listing.add_argument("--json", action="store_true", help="print the list as JSON")
    listing.add_argument("--offline", action="store_true",
                         help="do not ask the broker; list what is kept")
    _fleet_options.add_broker(listing)
    listing.set_defaults(func=run_list)
    for name, what, description in (
            ("accept", "accept NODE's waiting request: mesh.yaml, its account, its answer",
             "Accept NODE's waiting enrolment request: write its public key and address into "
             "mesh.yaml (comments and layout kept; nothing is written unless the result "
             "loads), make its broker account (it reads only its own queue and publishes only "
             "reports) and its queue, and answer it, signed: the CA certificate, the account "
             "and its password sealed to the node's key. With --fingerprint, only if the "
             "request's key has the fingerprint the node printed (a mismatch: exit 1, nothing "
             "done). With --address and no request yet, admit NODE: write its address into "
             "mesh.yaml so the next publish opens the broker's floor to it before it dials."),
            ("reject", "reject NODE's waiting request",
             "Reject NODE's waiting enrolment request: answer it, signed, with the reason; "
             "nothing is written into mesh.yaml and no account is made.")):
        action = sub.add_parser(name, help=what, description=description)
        _fleet_options.add_directory(action)
        action.add_argument("node", metavar="NODE", help="the node whose request is answered")
        if name == "reject":
            action.add_argument("--reason", default="rejected by the operator",
                                help="said to the node")
        else:
            action.add_argument("--fingerprint", metavar="FP",
                                help="the key fingerprint the node printed (SHA256:…); a "
                                "request with another key is refused and nothing is done")
            action.add_argument("--address", metavar="IP",
                                help="the node's address in mesh.yaml (default: the one its "
                                "request says); with no request yet, admit NODE at IP so the "
                                "broker's floor opens to it")
        _fleet_options.add_broker(action)
        action.set_defaults(func=run_accept if name == "accept" else run_reject)


def _connected(args: argparse.Namespace) -> tuple[Control, Any, Any]:
    """The Control (issuing nothing), its broker connection and channel (pika's, untyped)."""
    control = _fleet_control.control(args, issue=False)
    connection, channel = control.connect(deadline=time.monotonic() + 30)
    return control, connection, channel


def run_token(args: argparse.Namespace, out: Optional[TextIO] = None) -> int:
    out = out or sys.stdout
    node: str = args.node
    expires: int = args.expires
    control, connection, channel = _connected(args)
    try:
        key = ensure_delivery_key(control.mesh_dir, load_mesh_dir(control.mesh_dir).mesh)
        auto_accept: bool = args.auto_accept
        address: Optional[str] = args.address
        lines: list[str] = []
        token = enrolment.make_token(control.mesh_dir, control.fleet, channel, key, node,
                                     minutes=expires, auto_accept=auto_accept, address=address,
                                     say=lines.append)
    finally:
        connection.close()
    for line in lines:
        print(line, file=sys.stderr)
    print(f"one-time enrolment token for {node} (valid {expires} minutes"
          + (", accepted by the control loop when it is used" if auto_accept else "")
          + f"); on {node}, as root:", file=sys.stderr)
    print(f"  mesh join {token}", file=sys.stderr)
    if not auto_accept:
        print(f"then here: mesh enrol accept DIR {node} --fingerprint FP (the fingerprint "
              f"{node} prints)", file=sys.stderr)
    print(token, file=out)
    return 0


def run_list(args: argparse.Namespace, out: Optional[TextIO] = None) -> int:
    out = out or sys.stdout
    offline: bool = args.offline
    as_json: bool = args.json
    if offline:
        directory: str = args.directory
        state_dir: Optional[str] = args.state_dir
        state = ControlState(load_mesh_dir(directory).mesh_dir, state_dir)
    else:
        control, connection, channel = _connected(args)
        try:
            control.drain(channel, queues=("enrolment",))
            enrolment.close_answered(control.mesh_dir, control.fleet, channel, say=control.say)
        finally:
            connection.close()
        state = control.state
    rows = enrolment.listing(state)
    if as_json:
        json.dump(rows, out, indent=2, sort_keys=True)
        out.write("\n")
        return 0
    if not rows:
        print("no enrolment tokens", file=out)
    for row in rows:
        request = (f"  request from {row['address']} ({row['hostname'] or '?'}), key fingerprint "
                   f"{row['key_fingerprint']}, received {row['received']}"
                   if row["address"] else "")
        print(f"{row['node']}: token {row['token']} {row['state']} (expires {row['expires']})"
              + request, file=out)
    return 0


def _answer(args: argparse.Namespace, accept: bool, out: TextIO) -> int:
    node: str = args.node
    if accept and args.fingerprint is not None:
        parse_fingerprint(args.fingerprint)  # mistyped: said before the broker is asked
    control, connection, channel = _connected(args)
    try:
        control.drain(channel, queues=("enrolment",))
        key = ensure_delivery_key(control.mesh_dir, load_mesh_dir(control.mesh_dir).mesh)
        lines: list[str] = []
        if accept:
            fingerprint: Optional[str] = args.fingerprint
            address: Optional[str] = args.address
            try:
                enrolment.accept(control.mesh_dir, control.fleet, channel, key, node,
                                 say=lines.append, fingerprint=fingerprint, address=address)
            except enrolment.FingerprintMismatch as mismatch:
                print(f"mesh: {mismatch}", file=sys.stderr)
                return 1
        else:
            reason: str = args.reason
            enrolment.reject(control.mesh_dir, control.fleet, channel, key, node, reason,
                             say=lines.append)
    finally:
        connection.close()
    for line in lines:
        print(line, file=out)
    return 0


def run_accept(args: argparse.Namespace, out: Optional[TextIO] = None) -> int:
    return _answer(args, True, out or sys.stdout)


def run_reject(args: argparse.Namespace, out: Optional[TextIO] = None) -> int:
    return _answer(args, False, out or sys.stdout)
