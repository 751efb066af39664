"""The node agent's configuration file (`mesh agent --config FILE`), written by
`mesh agent enrol` and editable by the operator.

Invariants:
- Read strictly: every fault (unknown key, wrong type, missing key) is reported at once as
  file:line:col with what was expected, never a traceback; an agent never starts on a guess.
- The broker password and the enrolment secret are kept only sealed to the node's own key
  (`password-sealed`); the file is written whole (temp, fsync, rename) with mode 0600.
- The mesh CA is pinned by `ca-fingerprint` (from the enrolment token); `ca-certificate` is
  the CA's certificate the token carried (the answer's must be the same CA), accepted only
  when its key has that fingerprint. Every connection to the broker is TLS verified against
  it (`broker.tls`, default true); `false` only when the token said the broker is plain.
"""

from __future__ import annotations

import io
import os
from typing import Any, Mapping, Optional, Union

import attrs
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap
from ruamel.yaml.scalarstring import LiteralScalarString

from resolver import Fault, InputError

from executors.common.amqp import BrokerError, BrokerTls
from executors.common.atomic import write_atomic

from executors.node.node_paths import DEFAULT_STATE_ROOT


@attrs.frozen
class BrokerLogin:
    host: str
    port: int
    vhost: str
    user: str
    password_sealed: str = attrs.field(repr=False)


@attrs.frozen
class PendingEnrolment:
    token: str
    user: str
    secret_sealed: str = attrs.field(repr=False)


@attrs.frozen
class AgentConfig:
    path: str
    mesh: str
    node: str
    key: str
    ca_fingerprint: str
    broker_host: str
    broker_port: int
    vhost: str
    state_root: str = DEFAULT_STATE_ROOT
    docker_host: Optional[str] = None
    firewall: bool = True
    verify: bool = True
    verify_timeout: float = 5.0
    drift_minutes: float = 30.0
    stop_timeout: int = 10
    backoff_cap: float = 30.0
    ca_certificate: Optional[str] = None
    login: Optional[BrokerLogin] = None
    enrolment: Optional[PendingEnrolment] = None
    broker_tls: bool = True

    def tls(self) -> BrokerTls:
        """How this node secures its broker connections: TLS against the pinned CA unless the
        configuration says plain. BrokerError when TLS is asked for and no CA is kept."""
        if not self.broker_tls:
            return BrokerTls.plain()
        if not self.ca_certificate:
            raise BrokerError(f"{self.path}: broker.tls is true but no ca-certificate is kept "
                              f"to verify the broker with: enrol again with a new token")
        return BrokerTls(self.ca_certificate)

    @property
    def enrolled(self) -> bool:
        return self.login is not None and self.ca_certificate is not None


_Kind = Union[type, tuple[type, ...]]  # what a value may be

# key in the file → (attribute, type(s), required)
_TOP: Mapping[str, tuple[str, _Kind, bool]] = {
    "mesh": ("mesh", str, True), "node": ("node", str, True), "key": ("key", str, True),
    "ca-fingerprint": ("ca_fingerprint", str, True), "broker": ("broker", dict, True),
    "state-root": ("state_root", str, False), "docker-host": ("docker_host", (str, type(None)),
                                                               False),
    "firewall": ("firewall", bool, False), "verify": ("verify", bool, False),
    "verify-timeout": ("verify_timeout", (int, float), False),
    "drift-minutes": ("drift_minutes", (int, float), False),
    "stop-timeout": ("stop_timeout", int, False), "backoff-cap": ("backoff_cap", (int, float),
                                                                  False),
    "ca-certificate": ("ca_certificate", (str, type(None)), False),
    "enrolment": ("enrolment", (dict, type(None)), False),
}
_BROKER: Mapping[str, tuple[_Kind, bool]] = {"host": (str, True), "port": (int, True), "vhost": (str, True), "user": (str, False),
           "password-sealed": (str, False), "tls": (bool, False)}
_ENROLMENT: Mapping[str, tuple[_Kind, bool]] = {"token": (str, True), "user": (str, True), "secret-sealed": (str, True)}


def _type_name(kind: _Kind) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    words = {str: "a string", int: "an integer", float: "a number", bool: "true or false",
             dict: "a mapping", type(None): "null"}
    return " or ".join(dict.fromkeys(words[k] for k in kinds))


def _check(mapping: CommentedMap, spec: Mapping[str, tuple[_Kind, bool]], where: str,
           faults: list[Fault], file: str) -> dict[str, Any]:
    """The values of `mapping` that `spec` knows and that have its type (read from YAML: each
    checked here); a fault for each unknown, missing or mistyped key."""
    found: dict[str, Any] = {}
    for key in mapping:
        if key not in spec:
            line, col = mapping.lc.key(key)
            faults.append(Fault(file, line + 1, col + 1, f"unknown key {where}{key}",
                                "one of " + ", ".join(spec)))
    for key, entry in spec.items():
        kind, required = entry
        if key not in mapping:
            if required:
                line, col = (mapping.lc.line, mapping.lc.col) if mapping.lc.line is not None \
                    else (0, 0)
                faults.append(Fault(file, line + 1, col + 1, f"{where}{key} is missing",
                                    _type_name(kind)))
            continue
        value = mapping[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        wrong = not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds)
        if wrong:
            line, col = mapping.lc.value(key)
            faults.append(Fault(file, line + 1, col + 1,
                                f"{where}{key} is {value!r}", _type_name(kind)))
            continue
        found[key] = value
    return found


def load_config(path: Union[str, os.PathLike[str]]) -> AgentConfig:
    path = str(path)
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        raise InputError([Fault(path, 0, 0, "no such agent configuration", "the file "
                                "`mesh agent enrol … --config FILE` writes")]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError([Fault(path, 0, 0, f"cannot be read: {exc}", "a YAML file")]) from None
    try:
        document = YAML().load(text)
    except Exception as exc:  # noqa: BLE001 - ruamel's parse errors carry their mark
        mark = getattr(exc, "problem_mark", None)
        raise InputError([Fault(path, (mark.line + 1) if mark else 0,
                                (mark.column + 1) if mark else 0,
                                f"not YAML: {getattr(exc, 'problem', exc)}",
                                "a YAML mapping")]) from None
    if not isinstance(document, CommentedMap):  # what the round-trip loader makes of a mapping
        raise InputError([Fault(path, 1, 1, "is not a mapping", "mesh:, node:, key:, broker: …")])
    faults: list[Fault] = []
    top = _check(document, {k: (kind, required) for k, (_, kind, required) in _TOP.items()},
                 "", faults, path)
    broker = _check(document["broker"], _BROKER, "broker.", faults, path) \
        if isinstance(top.get("broker"), dict) else {}
    enrolment = _check(document["enrolment"], _ENROLMENT, "enrolment.", faults, path) \
        if isinstance(top.get("enrolment"), dict) else {}
    if faults:
        raise InputError(faults)
    values = {_TOP[k][0]: v for k, v in top.items() if k not in ("broker", "enrolment")}
    login = None
    if broker.get("user") and broker.get("password-sealed"):
        login = BrokerLogin(broker["host"], broker["port"], broker["vhost"], broker["user"],
                            broker["password-sealed"])
    pending = None
    if enrolment:
        pending = PendingEnrolment(enrolment["token"], enrolment["user"],
                                   enrolment["secret-sealed"])
    return AgentConfig(path=path, broker_host=broker["host"], broker_port=broker["port"],
                       vhost=broker["vhost"], login=login, enrolment=pending,
                       broker_tls=broker.get("tls", True), **values)


def dump_config(config: AgentConfig) -> str:
    broker: dict[str, object] = {"host": config.broker_host, "port": config.broker_port,
                                 "vhost": config.vhost, "tls": config.broker_tls}
    if config.login is not None:
        broker.update({"user": config.login.user,
                       "password-sealed": config.login.password_sealed})
    document = {"mesh": config.mesh, "node": config.node, "key": config.key,
                "state-root": config.state_root, "docker-host": config.docker_host,
                "firewall": config.firewall, "verify": config.verify,
                "verify-timeout": config.verify_timeout, "drift-minutes": config.drift_minutes,
                "stop-timeout": config.stop_timeout, "backoff-cap": config.backoff_cap,
                "broker": broker, "ca-fingerprint": config.ca_fingerprint}
    if config.ca_certificate:
        document["ca-certificate"] = LiteralScalarString(config.ca_certificate)
    if config.enrolment is not None:
        document["enrolment"] = {"token": config.enrolment.token, "user": config.enrolment.user,
                                 "secret-sealed": config.enrolment.secret_sealed}
    buffer = io.StringIO()
    buffer.write("# The mesh node agent (`mesh agent --config THIS FILE`). Written by `mesh agent "
                 "enrol`;\n# drift-minutes, verify, firewall, docker-host and state-root are "
                 "yours to change.\n# Values are sealed to this node's key: nothing here is a "
                 "plaintext secret.\n")
    yaml = YAML()
    yaml.default_flow_style = False
    yaml.dump(document, buffer)
    return buffer.getvalue()


def write_config(config: AgentConfig) -> None:
    write_atomic(config.path, dump_config(config), mode=0o600)
