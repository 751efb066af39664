"""Verify: is each binding of a node's declaration true, seen from where its consumer runs?

Invariants:
- A grant is a claim about the world: for every binding this connects to the announced host
  and port, authenticates with the consumer's current credential and checks its resource.
- From where the consumer runs: given a way to find containers (`locate`), each binding is
  checked from inside the network namespace of every long-running container the declaration
  declares for its consumer (a thread enters it with setns(2); the check's sockets are that
  container's), so a binding the container cannot use (a firewall that refuses it, a route
  it lacks) is never reported ok. A consumer container that is not running fails the
  binding. Only a consumer the declaration runs no container for is checked from here, and
  the message says so.
- One result per binding, exactly one of: ok, unreachable, auth-failed, missing-resource,
  not-yet-provisioned, not-provisioned; each message says what to do next and names the
  credential and its generation. An instance with no binding says "requires nothing", never
  "not provisioned". `not-provisioned` is a binding of a grant kind the mesh has no
  provisioner for (bucket+key, client+secret): reachable, but its credential is the operator's
  to create; it is a warning, not a failure (as it is for `mesh apply`).
- Which grant kinds are checked, and how, is the provisioner registry's to say
  (provisioners/registry.py): each kind's provisioner checks its own bindings
  (`check_binding`; a file-backed one too when it is a BindingChecker: a tool server's token
  is checked with MCP `initialize` and `tools/list`, and a stranger's token must be refused)
  and its providers' admins (`login`), the same registry `mesh apply` uses. A binding of a
  provision that grants nothing is checked by the registry's probe of its protocol when it has
  one (`probe_for`: a `metrics` entry must answer Prometheus exposition), else as reachable.
- One result per provider on this node holding an admin credential: its running server is
  logged into as the admin with the generation in force, then a rotation's pending one; ok
  names the generation accepted, auth-failed names the credential and every generation tried.
- Read-only towards providers: nothing is created but an exclusive, server-named reply queue
  that the broker removes with the connection.
- Secret values are used to log in and nowhere else: not in a result, message or exception.
- A TLS binding is checked the way its consumer connects: its values name the mesh CA's
  certificate at the path its container sees (CA_CONTAINER_FILE, mounted from the node's
  CA_HOST_FILE), so the check is given the node's file instead (`on_this_node`) and verifies
  the provider's certificate and name against it (postgres verify-full, amqps verify_peer); a
  server whose certificate is not the mesh CA's fails the binding, saying so.
"""

from __future__ import annotations

import ctypes
import functools
import os
import socket
import threading
from pathlib import Path
from typing import Callable, Optional

import attrs
import docker

from resolver import BindingDecl, Declaration
from resolver.certificates import CA_CONTAINER_FILE, CA_HOST_FILE

from executors.node import docker_engine
from executors.node.extensions import SecretSource
from executors.node.node_paths import default_file_root
from executors.node.provisioners.admin_login import read_admin, refused_message
from executors.node.provisioners.base import (
    AUTH_FAILED,
    OK,
    UNREACHABLE,
    Admin,
    _one_line,
    binding_address as _where,
    credential_name as _credential_name,
    derive_endpoint,
)
from executors.node.provisioners.registry import (binding_checker_for, no_provisioner,
                                                  probe_for, provisioner_for)
from executors.node.verify.result import (  # noqa: F401  (part of this module's API)
    NO_PROVISIONER,
    NOT_PROVISIONED,
    REQUIRES_NOTHING,
    STATUSES,
    Result,
)
from executors.node.verify.registry import verify_registry_logins

# container name → (pid of its first process, state); pid None unless it runs
Locate = Callable[[str], tuple[Optional[int], str]]
# the node's Docker Engine client, connected when first called
EngineClient = Callable[[], docker.APIClient]
CLONE_NEWNET = 0x40000000


def _result(binding: BindingDecl, status: str, message: str) -> Result:
    host, port = _where(binding)
    secret = binding.secret
    return Result(consumer=binding.consumer, requirement=binding.requirement,
                  provider=binding.provider, kind=binding.kind, status=status, message=message,
                  credential=secret.credential if secret else None,
                  generation=secret.generation if secret else None, address=f"{host}:{port}")


def _tcp(host: str, port: int, timeout: float) -> Optional[str]:
    """None when a TCP connection opens, else why not."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except OSError as error:
        return error.strerror or _one_line(error)


def _unreachable(binding: BindingDecl, why: str, where: str = "") -> Result:
    host, port = _where(binding)
    where = where or f"this node (consumer {binding.consumer})"
    return _result(binding, UNREACHABLE,
                   f"cannot reach {binding.provider} at {host}:{port} from {where} ({why}): "
                   f"check that {binding.provider} is running (mesh apply on its node) and that "
                   f"its node's firewall lets {binding.consumer} in")


# --------------------------------------------------------------------------- the whole


def node_ca_file(file_root: Optional[str] = None) -> str:
    """Where this node holds the mesh CA's certificate (under `file_root`, default
    $MESH_FILE_ROOT or /, as `mesh apply` wrote it)."""
    return str(Path(file_root or default_file_root()) / CA_HOST_FILE.lstrip("/"))


def on_this_node(binding: BindingDecl, ca_file: str) -> BindingDecl:
    """The binding's values as a check on this node uses them: the mesh CA's certificate at
    `ca_file`, the node's copy of what the consumer's container mounts at CA_CONTAINER_FILE."""
    if not any(CA_CONTAINER_FILE in value for value in binding.values.values()):
        return binding
    values = binding.values
    for key, value in binding.values.items():
        if CA_CONTAINER_FILE in value:
            values = values.set(key, value.replace(CA_CONTAINER_FILE, ca_file))
    return attrs.evolve(binding, values=values)


def verify_binding(binding: BindingDecl, secret_source: Optional[SecretSource],
                   timeout: float = 5.0, where: str = "",
                   ca_file: Optional[str] = None) -> Result:
    """Check one binding from the calling thread's network namespace (`where` names it); a
    TLS binding against the mesh CA at `ca_file` (default: node_ca_file())."""
    secret = binding.secret
    if secret is not None and secret.generation is None:
        return _result(binding, NOT_PROVISIONED,
                       f"credential {secret.credential} is not issued yet: run `mesh plan "
                       f"--issue`, then `mesh apply` on {binding.provider}'s node and on this one")
    host, port = _where(binding)
    why = _tcp(host, port, timeout)
    if why is not None:
        return _unreachable(binding, why, where)
    provisioner = binding_checker_for(binding.kind) if binding.kind != "none" else None
    if provisioner is None and binding.kind != "none":
        resource = next((binding.values[k] for k in ("client", "bucket", "resource")
                         if k in binding.values), "its resource")
        name = _credential_name(secret) if secret is not None else "its credential"
        return _result(binding, NO_PROVISIONER,
                       f"reachable at {host}:{port}, but grant kind {binding.kind} is not "
                       f"provisioned by the mesh ({no_provisioner(binding.kind)}): create "
                       f"{resource} on "
                       f"{binding.provider} by hand with {name}; not checked")
    probe = probe_for(binding.provision) if binding.kind == "none" else None
    if probe is not None:  # nothing granted: the protocol itself is what is checked
        probed = probe.check_binding(binding, timeout)
        if probed.status == UNREACHABLE:
            return _unreachable(binding, probed.message, where)
        return _result(binding, probed.status, probed.message)
    if provisioner is None or secret is None:
        return _result(binding, OK, f"reachable at {host}:{port}")
    if secret_source is None:
        return _result(binding, NOT_PROVISIONED,
                       f"{_credential_name(secret)} is not available here: pass --secrets and "
                       f"--key to check it")
    try:
        password = secret_source(secret)
    except Exception:  # noqa: BLE001 - any failure to open it means this node does not hold it
        return _result(binding, NOT_PROVISIONED,
                       f"{_credential_name(secret)} is not sealed to this node in the secrets "
                       f"given: run `mesh plan --issue` so the issuer seals it here")
    checked = provisioner.check_binding(on_this_node(binding, ca_file or node_ca_file()),
                                        password, timeout)
    if checked.status == UNREACHABLE and checked.untrusted:
        return _result(binding, UNREACHABLE,
                       f"{checked.message} (from {where or 'this node'})")
    if checked.status == UNREACHABLE:
        return _unreachable(binding, checked.message, where)
    return _result(binding, checked.status, checked.message)


# --------------------------------------------------------------------------- where it runs

_libc = ctypes.CDLL(None, use_errno=True)


def in_network_namespace(pid: int, work: Callable[[], Result]) -> Result:
    """`work()` run on a thread of its own that first enters the network namespace of
    process `pid` (setns(2) moves only the calling thread); the thread ends with it."""
    results: list[Result] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
            try:
                if _libc.setns(fd, CLONE_NEWNET) != 0:
                    errno = ctypes.get_errno()
                    raise OSError(errno, os.strerror(errno))
            finally:
                os.close(fd)
            results.append(work())
        except BaseException as error:  # noqa: BLE001 - handed to the caller's thread
            errors.append(error)

    thread = threading.Thread(target=run, name=f"verify-in-netns-of-{pid}", daemon=True)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return results[0]


def engine_client(docker_host: Optional[str]) -> EngineClient:
    """The node's Docker Engine client, connected when first needed, then the same one."""
    api: list[docker.APIClient] = []

    def engine() -> docker.APIClient:
        if not api:
            api.append(docker_engine.connect(docker_host, timeout=30))
        return api[0]

    return engine


def engine_locator(docker_host: Optional[str], engine: Optional[EngineClient] = None) -> Locate:
    """container name → (pid, state), asked of the Docker Engine when first needed."""
    client = engine or engine_client(docker_host)

    def locate(name: str) -> tuple[Optional[int], str]:
        return docker_engine.container_pid(client(), name)

    return locate


def _consumer_containers(declaration: Declaration, consumer: str) -> list[str]:
    return [c.name for c in declaration.containers if c.instance == consumer and not c.run_once]


def verify_from_containers(binding: BindingDecl, containers: list[str], locate: Locate,
                           secret_source: Optional[SecretSource], timeout: float,
                           ca_file: Optional[str] = None) -> Result:
    """The binding checked from inside each of the consumer's containers; the first that
    cannot use it is the result (naming the container and the consumer)."""
    checked: list[str] = []
    result: Optional[Result] = None
    for name in containers:
        where = f"container {name} (consumer {binding.consumer})"
        try:
            pid, state = locate(name)
        except Exception as error:  # noqa: BLE001 - the engine's error, named
            return _unreachable(binding, f"cannot ask the container runtime about it: "
                                f"{_one_line(error)}", where)
        if pid is None:
            return _result(binding, UNREACHABLE,
                           f"{where} is {state}, so it cannot use its binding to "
                           f"{binding.provider}: run `mesh apply` on this node")
        try:
            result = in_network_namespace(
                pid, lambda: verify_binding(binding, secret_source, timeout, where, ca_file))
        except OSError as error:
            return _unreachable(binding, f"cannot enter its network namespace: "
                                f"{error.strerror or _one_line(error)} (mesh verify needs root "
                                f"for that)", where)
        if result.status != OK:
            return result
        checked.append(name)
    if result is None:
        raise ValueError(f"no container of {binding.consumer} to check its binding from")
    return attrs.evolve(result, message=f"{result.message}, from inside {', '.join(checked)}")


def verify_admins(declaration: Declaration, secret_source: Optional[SecretSource],
                  timeout: float = 5.0) -> list[Result]:
    """A result per provider on this node holding an admin credential: does its running
    server accept it (the generation in force, or a rotation's pending one)?"""
    results: list[Result] = []
    for p in declaration.providers:
        current = p.admin
        provisioner = provisioner_for(p.kind) if current is not None else None
        if current is None or provisioner is None:
            continue
        admin = Admin(current, p.admin_pending)
        endpoint = derive_endpoint(declaration, p.instance, p.kind)
        said = functools.partial(Result, consumer=p.instance, requirement="admin",
                                 provider=p.instance, kind=p.kind, credential=admin.credential)
        if current.generation is None:
            results.append(said(status=NOT_PROVISIONED, generation=None,
                                message=f"credential {admin.credential} is not issued yet: "
                                f"run `mesh plan --issue`"))
            continue
        if endpoint is None or secret_source is None:
            results.append(said(status=NOT_PROVISIONED, generation=current.generation,
                                message=f"{admin.credential} not checked: "
                                + ("pass --secrets and --key" if secret_source is None
                                   else f"no published port of {p.instance}")))
            continue
        address = f"{endpoint.host}:{endpoint.port}"
        reading = read_admin(provisioner, endpoint, admin, secret_source, timeout)
        if reading.status == "accepted":
            results.append(said(status=OK, generation=reading.generation, address=address,
                                message=f"{p.instance}'s server accepts its admin "
                                f"{endpoint.user} with {admin.credential} generation "
                                f"{reading.generation} ({reading.detail})"))
        elif reading.status == "refused":
            results.append(said(status=AUTH_FAILED, generation=current.generation,
                                address=address,
                                message=refused_message(p.instance, endpoint, admin,
                                                        reading.tried)))
        elif reading.status == "unsealed":
            results.append(said(status=NOT_PROVISIONED, generation=current.generation,
                                address=address, message=reading.detail))
        else:
            results.append(said(status=UNREACHABLE, generation=current.generation,
                                address=address,
                                message=f"{p.instance}'s server at {address} does not answer "
                                f"({reading.detail}): run `mesh apply` on this node"))
    return results


def verify_declaration(declaration: Declaration, secret_source: Optional[SecretSource],
                       timeout: float = 5.0, locate: Optional[Locate] = None,
                       engine: Optional[EngineClient] = None,
                       file_root: Optional[str] = None) -> list[Result]:
    """A result per binding, per provider admin on this node, per registry account of this
    node (with `engine`: the node's Docker Engine logs in, registry.py), then a
    `requires-nothing` result per instance with none of either.

    With `locate`, each binding is checked from inside its consumer's containers; without
    it, from the calling thread's network namespace."""
    results = []
    for listed in declaration.bindings:
        if listed.each and not listed.entries:  # an empty list is a state, not a fault
            results.append(Result(consumer=listed.consumer, requirement=listed.requirement,
                                  kind=listed.kind, status=OK,
                                  message=f"takes every {listed.provision} provider in its "
                                  "scope: none there now (an empty list)"))
        for binding in listed.each_binding():  # a list: each provider checked on its own
            results.append(_verify_one(declaration, binding, secret_source, timeout, locate,
                                       node_ca_file(file_root)))
    results += verify_admins(declaration, secret_source, timeout)
    if engine is not None:
        results += verify_registry_logins(declaration, secret_source, engine)
    bound = {r.consumer for r in results}
    for instance in sorted(set(declaration.instances) - bound):
        results.append(Result(consumer=instance, status=REQUIRES_NOTHING,
                              message="requires nothing: no binding to check"))
    return results


def _verify_one(declaration: Declaration, binding: BindingDecl,
                secret_source: Optional[SecretSource], timeout: float,
                locate: Optional[Locate], ca_file: str) -> Result:
    """One binding (one provider) checked from inside its consumer's containers, or from here
    when there is no `locate` or the declaration runs none for it."""
    containers = _consumer_containers(declaration, binding.consumer)
    if locate is not None and containers:
        return verify_from_containers(binding, containers, locate, secret_source, timeout,
                                      ca_file)
    result = verify_binding(binding, secret_source, timeout, ca_file=ca_file)
    if locate is not None and result.status == OK:  # nothing else to check it from
        result = attrs.evolve(result, message=f"{result.message}, from this node: the "
                              f"declaration runs no container for {binding.consumer}")
    return result
