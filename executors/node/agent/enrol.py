"""Enrolment on a new node (`mesh agent enrol TOKEN`): its key, its request, its answer.

Invariants:
- The node's X25519 key is created as `mesh node-key` creates it (0600, never overwritten); an
  existing key file is used as it is. Either way its public key and fingerprint are said
  (common/keys.key_fingerprint), for the operator to compare with `mesh enrol list`.
- The request (node, mesh, token id, public key, address) is sent with the token's one-time
  account; the broker authenticates it with the token's secret and validates its `user_id`.
- Before the secret leaves, the broker proves itself: the connection is TLS verified against
  the CA certificate the token carries (whose key has the fingerprint the token pins), and
  the broker's certificate must name the token's broker address. Another broker's is refused
  in one line and nothing is sent (common/amqp). Plain only when the token says so.
- The answer is believed only if the CA certificate it carries has the fingerprint the token
  pinned, is a self-signed CA, and certified the key that signed the answer
  (common/messages.open_signed). Then the configuration gets the CA certificate and the
  node's broker account, whose password stays sealed to the node's key.
- A rejection is said with its reason; the configuration keeps no broker account then.
- The configuration file is written before the request leaves, so `mesh agent --config FILE`
  can collect the answer later if this command is interrupted.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

import attrs

from resolver import MeshError

from executors.common import amqp, enrol_token, messages
from executors.common.keys import (create_node_key, key_fingerprint, load_private_key,
                                   public_key_b64, seal, unseal)
from executors.node.agent.config import (AgentConfig, BrokerLogin, PendingEnrolment,
                                         load_config, write_config)

if TYPE_CHECKING:  # pika has no type information: the name is for the reader
    import pika


class EnrolmentRefused(MeshError):
    """The control node rejected this node, or its answer could not be believed."""


def source_address(host: str, port: int) -> str:
    """This node's address on the way to the broker (no packet is sent)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        probe.connect((host, port))
        return str(probe.getsockname()[0])


def start(token_text: str, *, config_path: str, key_path: str, address: Optional[str],
          state_root: str, docker_host: Optional[str], say: Callable[[str], None],
          firewall: bool = True, drift_minutes: float = 30.0) -> AgentConfig:
    """Key, configuration, request: the enrolment asked for, the answer still to come."""
    token = enrol_token.decode(token_text)
    if os.path.exists(config_path):
        existing = load_config(config_path)
        if existing.enrolled:
            raise MeshError(f"{config_path}: this node is enrolled already (mesh "
                            f"{existing.mesh}, node {existing.node}); remove the file to enrol "
                            f"it again")
    if Path(key_path).exists():
        public = public_key_b64(load_private_key(key_path))
        say(f"using the existing key {key_path}")
    else:
        public = create_node_key(key_path)
        say(f"created the node key {key_path} (mode 0600): it never leaves this node")
    fingerprint = key_fingerprint(public)
    say(f"public key: {public}")
    say(f"key fingerprint: {fingerprint} (compare it with `mesh enrol list` on the control "
        f"node)")
    broker = amqp.BrokerAddress.parse(token.broker)
    address = address or source_address(broker.host, broker.port)
    names = amqp.FleetNames(token.mesh)
    pending = PendingEnrolment(token.token_id, names.enrol_user(token.token_id),
                               seal(public, token.secret, token.node))
    config = AgentConfig(
        path=config_path, mesh=token.mesh, node=token.node, key=key_path,
        ca_fingerprint=token.ca_fingerprint, broker_host=broker.host, broker_port=broker.port,
        vhost=token.vhost, state_root=state_root, docker_host=docker_host, firewall=firewall,
        drift_minutes=drift_minutes, enrolment=pending, ca_certificate=token.ca_certificate,
        broker_tls=token.tls)
    write_config(config)
    say(f"wrote {config_path} (mode 0600)")
    request = {"format": messages.ENROLMENT_REQUEST_FORMAT, "mesh": token.mesh,
               "node": token.node, "token": token.token_id, "public_key": public,
               "address": address, "hostname": socket.gethostname()}
    connection = amqp.connect(_parameters(config, token.secret))
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        amqp.publish(channel, amqp.ENROLMENT, amqp.ENROLMENT, messages.plain(request),
                     amqp.properties(message_id=f"enrol/{token.token_id}", kind="enrolment",
                                     user_id=pending.user))
    finally:
        connection.close()
    say(f"enrolment of {token.node} ({address}) asked of mesh {token.mesh} at "
        f"{token.transport}://{broker}; on the "
        f"control node: `mesh enrol accept DIR {token.node} --fingerprint {fingerprint}`")
    return config


def _pending(config: AgentConfig) -> PendingEnrolment:
    if config.enrolment is None:
        raise MeshError(f"{config.path}: no enrolment is waiting for an answer")
    return config.enrolment


def _parameters(config: AgentConfig, secret: str) -> pika.ConnectionParameters:
    return amqp.parameters(amqp.BrokerAddress(config.broker_host, config.broker_port),
                           config.vhost, _pending(config).user, secret, tls=config.tls(),
                           heartbeat=30)


def believe(data: bytes, config: AgentConfig) -> messages.Document:
    """The answer's body, once its CA has the pinned fingerprint and signed its signer."""
    try:
        claimed = json.loads(json.loads(data.decode("utf-8"))["body"]).get("ca_certificate")
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise EnrolmentRefused("the answer is not a mesh enrolment answer") from None
    if not isinstance(claimed, str):
        raise EnrolmentRefused("the answer carries no CA certificate")
    ca = messages.load_certificate(claimed, "CA certificate")
    if messages.certificate_fingerprint(ca) != config.ca_fingerprint:
        raise EnrolmentRefused(f"the answer's CA is {messages.certificate_fingerprint(ca)}, not "
                               f"the CA the token pinned ({config.ca_fingerprint}): not believed")
    try:
        ca.verify_directly_issued_by(ca)
    except Exception:  # noqa: BLE001 - not self-signed
        raise EnrolmentRefused("the answer's CA certificate is not self-signed") from None
    body = messages.open_signed(data, kind=messages.ENROLMENT_ANSWER, ca=ca, mesh=config.mesh)
    if (body.get("mesh"), body.get("node"), body.get("token")) != \
            (config.mesh, config.node, _pending(config).token):
        raise EnrolmentRefused("the answer is for another node or token")
    return body


def wait_for_answer(config: AgentConfig, *, say: Callable[[str], None],
                    timeout: Optional[float] = None, every: float = 15.0) -> AgentConfig:
    """Take the answer (waiting up to `timeout` seconds, None: forever, with a line every
    `every` seconds); the configuration with the node's account, or EnrolmentRefused."""
    pending = _pending(config)
    secret = unseal(load_private_key(config.key), pending.secret_sealed)
    queue = amqp.FleetNames.answer_queue(pending.token)
    start_time = time.monotonic()
    deadline = None if timeout is None else start_time + timeout
    connection = amqp.connect_retrying(_parameters(config, secret), say, deadline=deadline)
    try:
        channel = connection.channel()
        next_line = time.monotonic() + every
        while True:
            method, _props, data = channel.basic_get(queue, auto_ack=False)
            if method is not None:
                break
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                raise MeshError(f"no answer yet after {timeout:g}s; `mesh agent --config "
                                f"{config.path}` takes it when it comes")
            if now >= next_line:
                say(f"waiting for the control node to accept {config.node} "
                    f"({now - start_time:.0f}s): `mesh enrol accept DIR {config.node}`")
                next_line = now + every
            connection.process_data_events(time_limit=1.0)
        try:
            body = believe(data, config)
        except (messages.MessageRefused, EnrolmentRefused) as refusal:
            channel.basic_ack(method.delivery_tag)  # a forged answer is not waited on again
            raise EnrolmentRefused(f"answer refused: {refusal}") from None
        if body.get("result") != "accepted":
            done = attrs.evolve(config, enrolment=None)
            write_config(done)
            channel.basic_ack(method.delivery_tag)
            raise EnrolmentRefused(f"the control node rejected {config.node}: "
                                   f"{body.get('reason') or 'no reason given'}")
        broker = body.get("broker")
        account = broker if isinstance(broker, dict) else {}
        vhost, user = account.get("vhost"), account.get("user")
        sealed, certificate = account.get("password_sealed"), body.get("ca_certificate")
        if not (isinstance(vhost, str) and isinstance(user, str) and isinstance(sealed, str)
                and isinstance(certificate, str)):  # believe() read the certificate already
            raise EnrolmentRefused("the answer accepts the node but carries no broker account")
        login = BrokerLogin(config.broker_host, config.broker_port, vhost, user, sealed)
        unseal(load_private_key(config.key), login.password_sealed)  # proves it opens
        done = attrs.evolve(config, ca_certificate=certificate, login=login,
                            vhost=login.vhost, enrolment=None)
        write_config(done)
        channel.basic_ack(method.delivery_tag)
    finally:
        try:
            connection.close()
        except Exception:  # noqa: BLE001 - already gone
            pass
    say(f"enrolled: {config.node} is account {login.user}; start `mesh agent --config "
        f"{config.path}`")
    return done
