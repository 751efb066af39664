"""Enrolment on the control node: one-time tokens, the requests they bring, accept and reject.

Invariants:
- A token is made for one node and one use: its secret is the password of a broker account
  that may only publish to `enrolment` and read its own answer queue; the control node keeps
  only the secret's SHA-256. A request counts only while its token is open (issued, not
  expired); once requested, the token takes no other request.
- Accepting writes the node's public key and address into mesh.yaml by a ruamel round trip
  (comments, order and layout kept; the result must load, or nothing is written), makes the
  node's broker account (permissions: common/amqp.FleetNames) with a password from the OS
  CSPRNG that exists only in memory until it is sealed to the node's key, makes its queue, and
  answers over the broker with a message signed by the delivery key: the CA certificate (its
  fingerprint is the one the node pinned from the token), the account and the sealed password.
  Rejecting answers `rejected` with the reason. Both close the token to further requests.
- Accepting with the fingerprint the node printed (common/keys.key_fingerprint) checks it
  before anything: another key is FingerprintMismatch, and nothing is written or made.
- A token made with `auto_accept` is accepted by the control loop as soon as its request is
  taken (`accept_automatic`): holding the token is then the whole proof, as with `docker swarm
  join`; a token that pinned an address writes that one, and admits it when it is made.
- A node may be admitted before it dials (`admit`: its address only, for a node with an open
  token), because the broker node's firewall admits only mesh.yaml's nodes to the broker.
- The enrolment account lives until the node has taken its answer (the answer queue is empty
  and unconsumed), then it and the answer queue are removed (`close_answered`).
- A token's or an accepted node's record is written before its broker account is made: the
  accounts wanted are read from these records after each look at the broker
  (control/fleet_broker.ensure), so an ensure of another process never deletes a new account.
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import io
import re
import secrets
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

from cryptography.hazmat.primitives.serialization import Encoding
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap

from resolver import MeshError, documents
from resolver.documents import MESH_FILE

from executors.common import amqp, enrol_token, messages
from executors.common.atomic import write_atomic
from executors.common.keys import key_fingerprint, parse_fingerprint, seal
from executors.common.message_formats import ENROLMENT_ANSWER
from executors.control.control_state import ControlState, Document
from executors.control.delivery_key import DeliveryKey
from executors.control.fleet import ANSWERED, Fleet, token_open
from executors.control.fleet_broker import WantedAccount
from executors.control.loading import PathLike, mesh_lock

if TYPE_CHECKING:  # pika ships no types: its channel is named for the reader
    from pika.adapters.blocking_connection import BlockingChannel

Say = Callable[[str], None]

NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")


class EnrolmentError(MeshError):
    """An enrolment step that cannot be taken (unknown node, no request, bad mesh.yaml…)."""


class FingerprintMismatch(EnrolmentError):
    """The key in the request is not the key the operator read on the node: nothing done."""


def _iso(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def make_token(mesh_dir: PathLike, fleet: Fleet, channel: BlockingChannel, key: DeliveryKey, node: str, *,
               minutes: int = 60, now: Optional[datetime.datetime] = None,
               auto_accept: bool = False, address: Optional[str] = None,
               say: Say = lambda line: None) -> str:
    """A new one-time token for `node`: recorded, its broker account and answer queue made.
    With `auto_accept`, the control loop accepts the request it brings by itself (at
    `address`, when given, whatever the request says); with `address`, the node is admitted
    at it now, so the next publish opens the broker's floor to it before it dials."""
    if not NODE_NAME.match(node):
        raise EnrolmentError(f"{node!r} is not a node name (letters, digits, . _ -)")
    if address is not None:
        try:
            ipaddress.ip_address(address)
        except ValueError:
            raise EnrolmentError(f"--address {address!r} is not an IP address") from None
    now = now or datetime.datetime.now(datetime.timezone.utc)
    token_id = secrets.token_hex(4)
    secret = secrets.token_urlsafe(24)
    expires = _iso(now + datetime.timedelta(minutes=minutes))
    record: Document = {"id": token_id, "node": node, "mesh": fleet.names.mesh, "state": "issued",
              "created": _iso(now), "expires": expires,
              "secret_sha256": hashlib.sha256(secret.encode("ascii")).hexdigest()}
    if auto_accept:
        record["auto_accept"] = True
    if address is not None:
        record["address"] = address
    with mesh_lock(mesh_dir):  # the control state is written under the ledger's lock
        fleet.state.write_token(record)
    if address is not None:
        admit(mesh_dir, fleet.state, node, address, say)
    fleet.ensure_accounts(extra=[WantedAccount(fleet.names.enrol_user(token_id),
                                               fleet.names.enrol_permissions(token_id),
                                               secret)])
    amqp.declare_fleet(channel, [], [token_id])
    return enrol_token.encode(enrol_token.EnrolToken(
        mesh=fleet.names.mesh, node=node, broker=str(fleet.settings.for_nodes),
        vhost=fleet.names.vhost, token_id=token_id, secret=secret,
        ca_fingerprint=messages.certificate_fingerprint(key.ca_certificate), expires=expires,
        ca_certificate=key.ca_certificate.public_bytes(Encoding.PEM).decode("ascii"),
        transport=fleet.settings.tls.scheme))


def request_for(state: ControlState, node: str) -> Document:
    """The open token of `node` carrying a request (the newest), or EnrolmentError."""
    candidates = [t for t in state.tokens().values()
                  if t.get("node") == node and t.get("state") == "requested" and token_open(t)]
    if not candidates:
        known = sorted({t["node"] for t in state.tokens().values()
                        if t.get("state") == "requested" and token_open(t)})
        raise EnrolmentError(f"no enrolment request from {node} waiting"
                             + (f" (requests waiting from: {', '.join(known)})" if known else
                                " (`mesh enrol list DIR` shows what is waiting; on the node: "
                                "`mesh agent enrol TOKEN …`)"))
    return max(candidates, key=lambda t: t.get("request", {}).get("received", ""))


def write_node_into_mesh(mesh_dir: PathLike, node: str, public_key: Optional[str],
                         address: str) -> list[str]:
    """Put the node's key and address into mesh.yaml, keeping comments and layout; the lines
    said about it (an address or key it replaced). Without a key (a node admitted before its
    request), only its address: a node with no key is not sealed to, but its address is a mesh
    node's, which the broker's floor admits. Nothing is written when nothing changes."""
    path = Path(mesh_dir) / MESH_FILE
    text = path.read_text(encoding="utf-8")
    yaml = round_trip_yaml()
    document = yaml.load(text)
    said = put_node(document, node, public_key, address, str(path))
    buffer = io.StringIO()
    yaml.dump(document, buffer)
    new_text = buffer.getvalue()
    if new_text == text:
        return said
    documents.load_mesh(new_text, str(path))  # InputError (located) rather than a bad write
    write_atomic(path, new_text, mode=path.stat().st_mode & 0o777)
    return said


def round_trip_yaml() -> YAML:
    """The ruamel round trip every edit of mesh.yaml goes through (quotes kept, no folding)."""
    yaml = YAML()
    yaml.preserve_quotes = True
    yaml.width = 4096  # a key is one token: never folded onto a line of its own
    return yaml


def put_node(document: object, node: str, public_key: Optional[str], address: Optional[str],
             where: str) -> list[str]:
    """The one place a node's entry is added to (or its address and key written into) a
    round-trip-loaded mesh.yaml `document`, in place; the lines said about it. A new entry
    takes its siblings' flow style. `address` None keeps the node's address (a new node
    needs one)."""
    said = []
    nodes = document.get("nodes") if isinstance(document, dict) else None
    if not isinstance(nodes, dict):
        raise EnrolmentError(f"{where}: has no `nodes:` mapping to add {node} to")
    entry = nodes.get(node)
    if entry is None:
        if address is None:
            raise EnrolmentError(f"{where}: no node {node} to add without its address")
        entry = CommentedMap()
        siblings = [v for v in nodes.values() if isinstance(v, CommentedMap)]
        if siblings and siblings[-1].fa.flow_style():
            entry.fa.set_flow_style()
        entry["address"] = address
        if public_key is not None:
            entry["public-key"] = public_key
        nodes[node] = entry
        said.append(f"added node {node} ({address}) to {where}")
    else:
        if not isinstance(entry, dict):
            raise EnrolmentError(f"{where}: nodes.{node} is not a mapping")
        if address is not None and entry.get("address") != address:
            if entry.get("address"):
                said.append(f"{node}'s address {entry.get('address')} → {address} (what the "
                            f"node said)")
            entry["address"] = address
        old = entry.get("public-key")
        if public_key is not None:
            if old and old != public_key:
                said.append(f"{node}'s public key is replaced: values sealed to its old key "
                            f"cannot be opened by it; rotate them (`mesh rotate DIR "
                            f"--consumer …`)")
            entry["public-key"] = public_key
            said.append(f"wrote {node}'s public key into {where}")
    return said


def _answer(channel: BlockingChannel, key: DeliveryKey, token: Document,
            body: Document) -> None:
    data = messages.sign(ENROLMENT_ANSWER, body, key.key, key.certificate_pem)
    amqp.declare_answer_queue(channel, token["id"])
    amqp.publish(channel, amqp.ANSWERS, token["id"], data,
                 amqp.properties(message_id=f"answer/{token['id']}",
                                 kind=ENROLMENT_ANSWER))


def check_fingerprint(node: str, public_key: str, expected: str) -> str:
    """The request's key fingerprint, when it is `expected` (as the operator typed it);
    FingerprintMismatch naming both otherwise."""
    wanted = parse_fingerprint(expected)
    found = key_fingerprint(public_key, node)
    if found != wanted:
        raise FingerprintMismatch(
            f"{node}'s request carries the key {found}, not {wanted} (the fingerprint given): "
            f"nothing was accepted or written; if the node printed {wanted}, this request is "
            f"not its own: `mesh enrol reject DIR {node}` and make a new token")
    return found


def open_token_of(state: ControlState, node: str) -> Optional[Document]:
    """The newest open token made for `node` (issued or requested), or None."""
    tokens = [t for t in state.tokens().values() if t.get("node") == node
              and t.get("state") in ("issued", "requested") and token_open(t)]
    return max(tokens, key=lambda t: t.get("created", ""), default=None)


def admit(mesh_dir: PathLike, state: ControlState, node: str, address: str,
          say: Say = lambda line: None) -> None:
    """Before `node` dials: its address into mesh.yaml (no key yet), so the next publish
    opens the broker node's floor to it. Only for a node with an open token."""
    if open_token_of(state, node) is None:
        raise EnrolmentError(f"no open enrolment token for {node}: `mesh enrol token DIR "
                             f"{node}` first, then admit its address")
    with mesh_lock(mesh_dir):
        said = write_node_into_mesh(mesh_dir, node, None, address)
    for line in said:
        say(line)
    if not said:
        say(f"{node} is in mesh.yaml at {address} already")
    say(f"{node} admitted at {address}, no request from it yet: the next publish opens the "
        f"broker's floor to {address} (`mesh control` publishes by itself; `mesh status DIR` "
        f"shows the broker's node applied). Then on {node}: `mesh agent enrol TOKEN …`, and "
        f"here `mesh enrol accept DIR {node} --fingerprint FP` with the fingerprint it prints")


def accept(mesh_dir: PathLike, fleet: Fleet, channel: BlockingChannel, key: DeliveryKey,
           node: str, say: Say = lambda line: None, *, fingerprint: Optional[str] = None,
           address: Optional[str] = None) -> Optional[Document]:
    """Accept `node`'s waiting request: mesh.yaml, its account and queue, the signed answer.
    With `fingerprint`, only a request carrying that key (FingerprintMismatch, nothing done,
    otherwise); with `address`, that address rather than the one the request says. With
    `address` and no request waiting yet: `admit` (its address only; None returned)."""
    if fingerprint is not None:
        parse_fingerprint(fingerprint)  # a mistyped fingerprint is said before anything
    try:
        token = request_for(fleet.state, node)
    except EnrolmentError:
        if address is None:
            raise
        admit(mesh_dir, fleet.state, node, address, say)
        return None
    request = token["request"]
    if fingerprint is not None:
        found = check_fingerprint(node, request["public_key"], fingerprint)
        say(f"{node}'s key fingerprint {found} is the one given")
    else:
        say(f"{node}'s key fingerprint {key_fingerprint(request['public_key'], node)} was not "
            f"checked (no --fingerprint): compare it with what the node printed")
    with mesh_lock(mesh_dir):
        for line in write_node_into_mesh(mesh_dir, node, request["public_key"],
                                         address or request["address"]):
            say(line)
    user, sealed = make_node_account(mesh_dir, fleet, node, request["public_key"], token["id"])
    amqp.declare_node_queue(channel, node)
    _answer(channel, key, token, {
        "mesh": fleet.names.mesh, "node": node, "token": token["id"], "result": "accepted",
        "ca_certificate": key.ca_pem,
        "broker": {"vhost": fleet.names.vhost, "user": user, "password_sealed": sealed,
                   "queue": fleet.names.node_queue(node), "reports": amqp.REPORTS}})
    with mesh_lock(mesh_dir):
        fleet.state.write_token(dict(token, state="accepted", answered=_iso(
            datetime.datetime.now(datetime.timezone.utc))))
    say(f"{node} accepted: account {user} made, its password sealed to its key and sent; "
        f"its queue {fleet.names.node_queue(node)} holds its declarations")
    return token


def accept_automatic(mesh_dir: PathLike, fleet: Fleet, channel: BlockingChannel,
                     key: DeliveryKey, say: Say = lambda line: None) -> list[str]:
    """Accept every waiting request whose token was made with --auto-accept (the control loop
    calls this after taking requests); the nodes accepted. A token that pinned an address
    writes that address, whatever the request says."""
    accepted = []
    for token in sorted(fleet.state.tokens().values(), key=lambda t: t.get("created", "")):
        if not (token.get("auto_accept") and token.get("state") == "requested"
                and token_open(token)):
            continue
        node, pinned = token["node"], token.get("address")
        said = token.get("request", {}).get("address")
        if pinned is not None and said != pinned:
            say(f"{node}'s request says address {said}; its token pinned {pinned}, which is "
                f"written")
        accept(mesh_dir, fleet, channel, key, node, say, address=pinned)
        accepted.append(node)
    return accepted


def make_node_account(mesh_dir: PathLike, fleet: Fleet, node: str, public_key: str,
                      token_id: str) -> tuple[str, str]:
    """`node`'s broker account with a new password: (its user, the password sealed to its key).
    Recorded before it is made, as a token is: an ensure running meanwhile in another process
    (the control loop) reads the record after it looks at the broker, so it never takes the
    new account for one no longer wanted and deletes it. A failure to make it leaves the record
    (its account refused as gone until `mesh enrol accept` is run again, which replaces it)."""
    password = secrets.token_urlsafe(32)
    user = fleet.names.node_user(node)
    sealed = seal(public_key, password, node)
    with mesh_lock(mesh_dir):
        fleet.state.write_account(node, {"user": user, "password_sealed": sealed,
                                         "public_key": public_key,
                                         "accepted": _iso(datetime.datetime.now(
                                             datetime.timezone.utc)), "token": token_id})
    fleet.ensure_accounts(extra=[WantedAccount(user, fleet.names.node_permissions(node),
                                               password)])
    return user, sealed


def reject(mesh_dir: PathLike, fleet: Fleet, channel: BlockingChannel, key: DeliveryKey,
           node: str, reason: str, say: Say = lambda line: None) -> Document:
    token = request_for(fleet.state, node)
    # the CA certificate too: the node believes a signed answer, a rejection included, only
    # through the CA its token pinned (node/agent/enrol.believe)
    _answer(channel, key, token, {"mesh": fleet.names.mesh, "node": node, "token": token["id"],
                                  "result": "rejected", "reason": reason,
                                  "ca_certificate": key.ca_pem})
    with mesh_lock(mesh_dir):
        fleet.state.write_token(dict(token, state="rejected", reason=reason, answered=_iso(
            datetime.datetime.now(datetime.timezone.utc))))
    say(f"{node}'s enrolment request rejected ({reason}); nothing was written")
    return token


def close_answered(mesh_dir: PathLike, fleet: Fleet, channel: BlockingChannel,
                   say: Say = lambda line: None) -> list[str]:
    """Tokens whose answer the node took (queue empty, nobody consuming) and tokens that
    expired unused: closed, their accounts and answer queues removed."""
    closed = []
    now = datetime.datetime.now(datetime.timezone.utc)
    for token_id, token in fleet.state.tokens().items():
        state = token.get("state")
        if state in ANSWERED:
            ok = channel.queue_declare(fleet.names.answer_queue(token_id), durable=True)
            if ok.method.message_count or ok.method.consumer_count:
                continue
        elif state in ("issued", "requested") and not token_open(token, now):
            pass
        else:
            continue
        with mesh_lock(mesh_dir):
            fleet.state.write_token(dict(token, state="closed" if state in ANSWERED
                                         else "expired"))
        closed.append(token_id)
    if closed:
        fleet.ensure_accounts()
        for token_id in closed:
            channel.queue_delete(fleet.names.answer_queue(token_id))
            say(f"enrolment token {token_id} closed: its account and answer queue removed")
    return closed


def listing(state: ControlState) -> list[Document]:
    rows = []
    for token_id, token in sorted(state.tokens().items(),
                                  key=lambda item: item[1].get("created", "")):
        request = token.get("request") or {}
        key = request.get("public_key")
        rows.append({"token": token_id, "node": token.get("node"), "state": token.get("state")
                     if token.get("state") not in ("issued", "requested") or token_open(token)
                     else "expired", "expires": token.get("expires"),
                     "address": request.get("address"), "hostname": request.get("hostname"),
                     "key_fingerprint": key_fingerprint(key) if key else None,
                     "received": request.get("received")})
    return rows
