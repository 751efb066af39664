"""Validation of structured documents: what the types alone cannot say.

Invariants:
- Pure: a model and its DocumentPositions in, a list of Fault out (empty when valid); nothing
  is raised here, so the caller can report every fault of every document at once.
- A reference fault points at the referencing key (`state:` of a mount, the env key holding a
  bad placeholder), never at the thing that is missing.
- Only references inside one document are faults here, plus catalogue-wide ones (a placeholder
  key the provision does not offer, a build base naming a missing artifact). References from
  the mesh to the catalogue (unknown module, node, instance) are resolver problems, not faults.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
import string
from typing import AbstractSet, Collection, Iterable, Mapping, Optional, Sequence, Union

from ._binding_files import BINDING_FORMATS
from ._certs import epoch_seconds
from ._errors import Fault, MeshError
from ._firewall import canonical_source
from ._ledger import LEDGER_VERSION, Ledger
from ._load import DocumentPositions
from ._inputs import Sources
from ._model import (GRANT_KINDS, ROTATION_WAYS, Exposure, Health, Listen, Mesh, Module, Mount,
                     Provision, Provisions, Require)
from ._tls import serving_container
from ._names import acme_refusal, fqdn, in_domain, is_dns_name, is_email, route_listen_faults
from ._errors import PlaceholderSyntaxError
from ._placeholders import placeholders
from ._select import WITHIN
from ._secret_files import secret_file_faults

PROTOCOLS = ("tcp", "udp")
ACCESS_MODES = ("ro", "rw")
SCOPES = ("node", "mesh")
FLOOR_SOURCES = ("any", "mesh")
LOGIN_SLOTS = ("a", "b")
BINDING_KEYS = ("host", "port", "user", "password", "database", "vhost", "bucket", "client", "url",
                "token", "transport", "fqdn")
#: The keys a provision tells as written (its `values`), since the mesh derives no value for them.
CONSTANT_KEYS = ("transport",)
MODULE_REQUIREMENT_KEYS = ("host", "port")  # what a `module:` requirement is told
EACH_REQUIREMENT_KEYS = ("count",)  # what a requirement taking every provider is told in env
SELF_PLACEHOLDERS = ("address", "instance", "node", "url", "hostname", "domain", "acme-email")  # ${self.address}…
HOST_PORT_FLOOR = 1024
TLS_CA_FIELD = "ca"  # a provision's tls templates' field: the CA certificate's path
#: What a consumer of a TLS binding may be told besides BINDING_KEYS (a provision's tls values).
TLS_KEYS = ("sslmode", "sslrootcert", "channel_binding", "cacertfile", "ca")
LOG_DRIVERS = ("json-file", "local")  # the Engine's drivers that rotate and that it reads back

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")  # no dots: placeholders split on them
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
OWNER = re.compile(r"^[0-9]+:[0-9]+$")
OCTAL_MODE = re.compile(r"^[0-7]{3,4}$")
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
LOG_SIZE = re.compile(r"^[1-9][0-9]*[kmg]$")  # Docker's size syntax, one spelling per size
BACKUP_EVERY = re.compile(r"^[1-9][0-9]*[smhdw]$")  # resolver/_backups.duration_seconds reads these

#: A key path into a document: mapping keys and list indexes.
_Path = tuple[Union[str, int], ...]


class _Faults:
    """Collects faults against one document."""

    def __init__(self, where: DocumentPositions) -> None:
        self.where = where
        self.items: list[Fault] = []

    def at(self, path: _Path, message: str, expected: str = "", *, key: bool = False) -> None:
        self.items.append(self.where.fault(path, message, expected, at_key=key))

    def port(self, path: _Path, value: Optional[int], low: int = 1) -> None:
        if value is not None and not low <= value <= 65535:
            self.at(path, f"port {value} is out of range", f"a port from {low} to 65535")

    def choice(self, path: _Path, value: str, allowed: Iterable[str]) -> None:
        allowed = tuple(allowed)
        if value not in allowed:
            self.at(path, f"{value!r} is not allowed", "one of " + ", ".join(allowed))

    def name(self, path: _Path, value: str, what: str, *, key: bool = False) -> None:
        if not NAME.match(value):
            self.at(path, f"{what} {value!r} is not a plain name",
                    "letters, digits, '-' and '_' (starting with a letter or digit)", key=key)


def _one_of(obj: object, names: tuple[str, ...]) -> list[str]:
    return [n for n in names if getattr(obj, n) is not None]


# --------------------------------------------------------------------------- module.yaml


def validate_module(module: Module, where: DocumentPositions) -> list[Fault]:
    f = _Faults(where)
    f.name(("name",), module.name, "module name")
    _artifacts(module, f)
    _listens(module, f)
    _provides(module, f)
    requirement_names = _requires(module, f)
    for i, secret in enumerate(module.secrets):
        f.name(("secrets", i), secret, "secret name")
        if secret in module.secrets[:i]:
            f.at(("secrets", i), f"secret {secret!r} is declared twice", "each secret once")
    for name, state in module.state.items():
        if not OWNER.match(state.owner):
            f.at(("state", name, "owner"), f"owner {state.owner!r} is not uid:gid",
                 'numeric "uid:gid", e.g. "999:999"')
        if not OCTAL_MODE.match(state.mode):
            f.at(("state", name, "mode"), f"mode {state.mode!r} is not an octal mode",
                 'an octal string such as "0750"')
        if not state.path.strip("/") or ".." in state.path.split("/"):
            f.at(("state", name, "path"), f"state path {state.path!r} is not a directory of its own",
                 "a path below the instance's directory, without '..'")
    for name, access in module.accesses.items():
        f.choice(("accesses", name, "mode"), access.mode, ACCESS_MODES)
        if not access.path.startswith("/"):
            f.at(("accesses", name, "path"), f"access path {access.path!r} is not absolute",
                 "an absolute host path")
    _containers(module, requirement_names, f)
    _binding_file_owners(module, f)
    _rotation(module, f)
    if module.backup is not None:
        if module.backup.container not in {c.name for c in module.containers}:
            f.at(("backup", "container"), f"backup container {module.backup.container!r} "
                 "is not one of the module's containers", "the name of one of `containers`")
        for key, command in (("dump", module.backup.dump), ("restore", module.backup.restore)):
            if not command:
                f.at(("backup", key), f"an empty backup {key} command", "a command to run")
    _upgrades(module, f)
    return f.items


def _upgrades(module: Module, f: _Faults) -> None:
    """module.yaml `upgrades:` (resolver/_upgrades.py): a regular expression that compiles,
    an artifact of the module, migrations that are its run-once containers."""
    rule = module.upgrades
    if rule is None:
        return
    try:
        re.compile(rule.version)
    except re.error as exc:
        f.at(("upgrades", "version"), f"upgrades.version {rule.version!r} is not a regular "
             f"expression ({exc})", "a regular expression over the tag, e.g. '^([0-9]+)\\.'")
    if rule.artifact is not None and rule.artifact not in module.artifacts:
        f.at(("upgrades", "artifact"), f"upgrades.artifact {rule.artifact!r} is not one of the "
             "module's artifacts", "the name of one of `artifacts`")
    run_once = {c.name for c in module.containers if c.run_once}
    for i, step in enumerate(rule.migrations):
        if step not in run_once or step == "fresh":
            f.at(("upgrades", "migrations", i), f"migration {step!r} is not a run-once "
                 "container of the module", "the name of a container with `run-once: true`")


def _rotation(module: Module, f: _Faults) -> None:
    """Each `rotation:` entry names a secret of the module, one way, and what that way needs:
    an instruction for by-hand, a run-once container of the module that reads the secret for
    a step; nothing a way does not use."""
    run_once = {c.name: c for c in module.containers if c.run_once}
    for secret, way in module.rotation.items():
        path = ("rotation", secret)
        if secret not in module.secrets:
            f.at(path, f"no secret named {secret!r}", "one of " + _listing(module.secrets),
                 key=True)
        f.choice(path + ("how",), way.how, ROTATION_WAYS)
        if way.how == "by-hand" and not way.instruction.strip():
            f.at(path, f"rotation of {secret!r} by hand says nothing to do",
                 "an instruction: the one line the operator runs to put it in force", key=True)
        if way.how != "by-hand" and way.instruction:
            f.at(path + ("instruction",), f"an instruction for a rotation that is {way.how}",
                 "an instruction only with how: by-hand", key=True)
        if way.how == "step":
            step = run_once.get(way.step or "")
            token = "${self." + secret + ".password}"
            if step is None:
                f.at(path + (("step",) if way.step else ()),
                     f"rotation of {secret!r} by a step names "
                     + (f"{way.step!r}, which is not a run-once container" if way.step
                        else "no step"),
                     "one of the module's run-once containers: " + _listing(run_once),
                     key=not way.step)
            elif not any(token in value for value in step.env.values()) and not any(
                    token in secret_file.content for secret_file in step.secret_files):
                f.at(path + ("step",), f"step {way.step!r} does not read {token}",
                     f"a run-once container whose env holds {token}, so it reruns when the "
                     "secret changes")
        elif way.step is not None:
            f.at(path + ("step",), f"a step for a rotation that is {way.how}",
                 "a step only with how: step", key=True)


def _artifacts(module: Module, f: _Faults) -> None:
    for name, artifact in module.artifacts.items():
        path = ("artifacts", name)
        upstream = artifact.repository is not None or artifact.tag is not None
        if upstream and artifact.build is not None:
            f.at(path, f"artifact {name!r} names both an upstream image and a build",
                 "either repository and tag, or build")
        elif upstream and (artifact.repository is None or artifact.tag is None):
            missing = "tag" if artifact.tag is None else "repository"
            f.at(path, f"artifact {name!r} has no {missing}", "both repository and tag")
        elif not upstream and artifact.build is None:
            f.at(path, f"artifact {name!r} names no image", "repository and tag, or build")
        if artifact.base and artifact.build is None:
            f.at(path + ("base",), f"artifact {name!r} has a base but is not built", "base only with build",
                 key=True)
        for i, base in enumerate(artifact.base):
            if "/" not in base and base not in module.artifacts:
                f.at(path + ("base", i), f"base {base!r} is not an artifact of this module",
                     "one of " + _listing(module.artifacts) + " or module/artifact")
            elif base == name:
                f.at(path + ("base", i), f"artifact {name!r} is built from itself", "another artifact")


def _listens(module: Module, f: _Faults) -> None:
    containers = [c.name for c in module.containers]
    for name, listen in module.listens.items():
        path = ("listens", name)
        f.name(path, name, "listen name", key=True)
        f.port(path + ("port",), listen.port)
        f.port(path + ("fixed",), listen.fixed)
        f.choice(path + ("protocol",), listen.protocol, PROTOCOLS)
        if listen.container is not None and listen.container not in containers:
            f.at(path + ("container",), f"no container named {listen.container!r}",
                 "one of " + _listing(containers), key=True)
        if listen.plain_same_node and not listen.tls:
            f.at(path + ("plain-same-node",), f"listen {name!r} says plain-same-node but "
                 "does not serve TLS", "plain-same-node only with tls: true", key=True)
        if listen.tls:
            _tls_listen(module, name, listen, path, f)


def _tls_listen(module: Module, name: str, listen: Listen, path: _Path, f: _Faults) -> None:
    """A TLS listen is served by a container whose artifact says its image serves TLS."""
    serving = serving_container(module, listen)
    container = next((c for c in module.containers if c.name == serving), None)
    if container is None:
        return  # a listen without a serving container is refused elsewhere
    artifact = module.artifacts.get(container.artifact)
    if artifact is not None and not artifact.tls:
        f.at(path + ("tls",), f"listen {name!r} asks for TLS, but container {container.name!r} "
             f"serving it runs artifact {container.artifact!r}, whose image does not serve TLS",
             f"tls: true on artifact {container.artifact!r} (its image serves TLS with "
             "/etc/mesh/tls/server.crt and server.key), or no tls on the listen", key=True)
    if artifact is not None and not OWNER.match(artifact.tls_key_owner):
        f.at(("artifacts", container.artifact, "tls-key-owner"),
             f"tls-key-owner {artifact.tls_key_owner!r}", "uid:gid, such as 999:999")


def _provides(module: Module, f: _Faults) -> None:
    for i, provide in enumerate(module.provides):
        if provide.listen not in module.listens:
            f.at(("provides", i, "listen"), f"no listen named {provide.listen!r}",
                 "one of " + _listing(module.listens), key=True)
        if provide.admin is not None and provide.admin not in module.secrets:
            f.at(("provides", i, "admin"), f"no secret named {provide.admin!r}",
                 "one of " + _listing(module.secrets), key=True)
    for i, listen_name, message in route_listen_faults(module):
        line, _ = f.where.position(("listens", listen_name), at_key=True)
        f.at(("provides", i, "listen"), f"{message} (line {line})",
             "a listen with http: true (plain HTTP over TCP) for the route", key=True)


def _requires(module: Module, f: _Faults) -> set[str]:
    names: set[str] = set()
    for i, req in enumerate(module.requires):
        path = ("requires", i)
        f.name(path + ("as",), req.as_, "requirement name")
        if req.as_ == "self":
            f.at(path + ("as",), "'self' is reserved for the instance's own values",
                 "another name", key=True)
        if req.as_ in names:
            f.at(path + ("as",), f"requirement {req.as_!r} is named twice", "a unique `as`", key=True)
        names.add(req.as_)
        named = _one_of(req, ("provision", "module"))
        if len(named) != 1:
            f.at(path, f"requirement {req.as_!r} names "
                 + (" and ".join(named) if named else "neither a provision nor a module"),
                 "exactly one of provision, module")
        if req.listen is not None and req.module is None:
            f.at(path + ("listen",), "listen is given without module", "listen only with module",
                 key=True)
        if req.part is not None and req.part not in module.parts:
            f.at(path + ("part",), f"no part named {req.part!r}", "one of " + _listing(module.parts),
                 key=True)
        _every(req, path, f)
    return names


def _every(req: Require, path: _Path, f: _Faults) -> None:
    """The keys of a requirement that takes every provider (`each`), and those only it has."""
    if not req.each:
        for name, named in (("within", req.within is not None), ("at-least", req.at_least != 0)):
            if named:
                f.at(path + (name,), f"{name} is given without each: true",
                     f"{name} only with each: true", key=True)
        return
    if req.provision is None:
        f.at(path + ("each",), f"requirement {req.as_!r} takes every provider of a module",
             "each: true only with provision", key=True)
    for name, named in (("provider", req.provider is not None), ("optional", req.optional)):
        if named:
            f.at(path + (name,), f"{name} is given with each: true, which binds every provider"
                 + (" (an empty list is already allowed)" if name == "optional" else ""),
                 "each: true without provider or optional (at-least: N to require some)",
                 key=True)
    if req.within is not None and req.within not in WITHIN:
        f.at(path + ("within",), f"within {req.within!r} is not a scope", "one of mesh, node")
    if req.at_least < 0:
        f.at(path + ("at-least",), f"at-least {req.at_least} is negative", "0 or more")


def _containers(module: Module, requirement_names: set[str], f: _Faults) -> None:
    seen: set[str] = set()
    for i, container in enumerate(module.containers):
        path = ("containers", i)
        f.name(path + ("name",), container.name, "container name")
        if container.name in seen:
            f.at(path + ("name",), f"container {container.name!r} is declared twice",
                 "unique container names")
        seen.add(container.name)
        if container.artifact not in module.artifacts:
            f.at(path + ("artifact",), f"no artifact named {container.artifact!r}",
                 "one of " + _listing(module.artifacts), key=True)
        if container.part is not None and container.part not in module.parts:
            f.at(path + ("part",), f"no part named {container.part!r}",
                 "one of " + _listing(module.parts), key=True)
        for j, mount in enumerate(container.mounts):
            _mount(module, mount, path + ("mounts", j), f)
        _file_mount_targets(container.mounts, path + ("mounts",), f)
        if container.health is not None:
            _health(module, container.health, path + ("health",), f)
        for key, value in container.env.items():
            if not ENV_NAME.match(key):
                f.at(path + ("env", key), f"{key!r} is not an environment variable name",
                     "letters, digits and '_', not starting with a digit", key=True)
            for fault in _placeholder_faults(module, requirement_names, value):
                f.at(path + ("env", key), f"env {key}: {fault}",
                     "${<as>.<key>}, ${self.<secret>.password}, ${self.<listen>.port}, "
                     "${self.address}, ${self.instance}, ${self.node}, or $$ for a literal $",
                     key=True)
        for at, message, expected, on_key in secret_file_faults(
                module, container,
                lambda value: _placeholder_faults(module, requirement_names, value)):
            f.at(path + at, message, expected, key=on_key)


def _mount(module: Module, mount: Mount, path: _Path, f: _Faults) -> None:
    kinds = _one_of(mount, ("state", "access", "facility", "binding"))
    if mount.ca:
        kinds.append("ca")
    if len(kinds) != 1:
        f.at(path, f"mount of {mount.target!r} names "
             + (" and ".join(kinds) if kinds else "no source"),
             "exactly one of state, access, facility, binding, ca: true")
    if not mount.target.startswith("/"):
        f.at(path + ("target",), f"mount target {mount.target!r} is not absolute",
             "an absolute path inside the container")
    if mount.format is not None:
        if mount.binding is None:
            f.at(path + ("format",), "format is given without binding",
                 "format only with binding", key=True)
        else:
            f.choice(path + ("format",), mount.format, BINDING_FORMATS)
    if mount.owner is not None:
        if mount.binding is None:
            f.at(path + ("owner",), "owner is given without binding",
                 "owner only with binding", key=True)
        elif not OWNER.match(mount.owner):
            f.at(path + ("owner",), f"owner {mount.owner!r} is not uid:gid",
                 "numbers, such as \"999:999\"")
    requirements = {req.as_: req for req in module.requires}
    # a requirement taking every provider (`each`) is mounted as its list (_binding_files.py)
    declared: dict[str, Collection[str]] = {"state": module.state, "access": module.accesses,
                                            "facility": module.facilities,
                                            "binding": requirements, "ca": ("ca",)}
    section = {"state": "state", "access": "accesses", "facility": "facilities",
               "binding": "requirements (`as`)", "ca": ""}
    for kind in kinds:
        if kind == "ca":
            continue
        name = getattr(mount, kind)
        if name not in declared[kind]:
            f.at(path + (kind,), f"undeclared {kind} {name!r}",
                 f"one of the module's {section[kind]}: " + _listing(declared[kind]), key=True)


def _binding_file_owners(module: Module, f: _Faults) -> None:
    """One binding in one format is one file of the instance: every mount of it names the
    same owner."""
    first: dict[tuple[str, str], tuple[Optional[str], int, int]] = {}
    for i, container in enumerate(module.containers):
        for j, mount in enumerate(container.mounts):
            if mount.binding is None:
                continue
            key = (mount.binding, mount.format or "env")
            owner, ci, mj = first.setdefault(key, (mount.owner, i, j))
            if owner != mount.owner:
                f.at(("containers", i, "mounts", j), f"binding {mount.binding!r} as {key[1]} is "
                     f"mounted with owner {mount.owner or 'none'} here and "
                     f"{owner or 'none'} at containers[{ci}].mounts[{mj}]: it is one file",
                     "the same owner for every mount of it")


def _file_mount_targets(mounts: Sequence[Mount], path: _Path, f: _Faults) -> None:
    """A file the mesh writes (a binding file, the CA) is mounted at a target of its own: not
    at, inside or over another mount's target (over a state directory Docker would create its
    mount point in that directory on the node)."""
    def inside(a: str, b: str) -> bool:
        return a == b or a.startswith(b.rstrip("/") + "/")

    for j, mount in enumerate(mounts):
        if mount.binding is None and not mount.ca:
            continue
        what = "the mesh CA" if mount.binding is None else f"binding {mount.binding!r}"
        for k, other in enumerate(mounts):
            if k == j or not (inside(mount.target, other.target)
                              or inside(other.target, mount.target)):
                continue
            kind = next((n for n in ("state", "access", "facility", "binding")
                         if getattr(other, n) is not None), "ca")
            relation = ("at the same target as" if mount.target.rstrip("/")
                        == other.target.rstrip("/") else "inside" if inside(mount.target,
                                                                        other.target)
                        else "over")
            f.at(path + (j, "target"), f"the file of {what} is mounted {relation} the {kind} "
                 f"mount at {other.target!r} (mounts[{k}])",
                 "a target outside every other mount's target")
            break


def _health(module: Module, health: Health, path: _Path, f: _Faults) -> None:
    kinds = _one_of(health, ("command", "tcp", "http"))
    if len(kinds) != 1:
        f.at(path, "health check names " + (" and ".join(kinds) if kinds else "no check"),
             "exactly one of command, tcp, http")
    if health.tcp is not None and health.tcp not in module.listens:
        f.at(path + ("tcp",), f"no listen named {health.tcp!r}", "one of " + _listing(module.listens),
             key=True)
    if health.http is not None:
        if health.http.listen not in module.listens:
            f.at(path + ("http", "listen"), f"no listen named {health.http.listen!r}",
                 "one of " + _listing(module.listens), key=True)
        if not health.http.path.startswith("/"):
            f.at(path + ("http", "path"), f"http path {health.http.path!r} does not start with /",
                 "a path such as /healthz")
    if health.command is not None and not health.command:
        f.at(path + ("command",), "the health command is empty", "a command and its arguments")
    if health.timeout < 1:
        f.at(path + ("timeout",), f"timeout {health.timeout} is too short", "at least 1 second")


def _placeholder_faults(module: Module, requirement_names: set[str], value: str) -> list[str]:
    try:
        bodies = placeholders(value)
    except PlaceholderSyntaxError as exc:
        return [str(exc)]
    return [fault for body in bodies if (fault := _placeholder_fault(module, requirement_names, body))]


def _placeholder_fault(module: Module, requirement_names: set[str], body: str) -> Optional[str]:
    parts = body.split(".")
    if parts[0] == "self":
        if len(parts) == 2 and parts[1] in SELF_PLACEHOLDERS:
            return None
        if len(parts) == 3 and parts[2] == "password":
            return None if parts[1] in module.secrets else f"${{{body}}}: no secret named {parts[1]!r}"
        if len(parts) == 3 and parts[2] == "port":
            return None if parts[1] in module.listens else f"${{{body}}}: no listen named {parts[1]!r}"
        return f"${{{body}}} is not a placeholder"
    if len(parts) == 2:
        if parts[0] not in requirement_names:
            return f"${{{body}}}: no requirement named {parts[0]!r}"
        if parts[1] not in BINDING_KEYS + EACH_REQUIREMENT_KEYS + TLS_KEYS:
            return f"${{{body}}}: {parts[1]!r} is not a binding value"
        return None
    return f"${{{body}}} is not a placeholder"


def module_placeholder_keys(module: Module) -> list[tuple[_Path, str, str]]:
    """(path, requirement `as`, key) for every `${<as>.<key>}` in the module's env values and
    secret files' contents."""
    found: list[tuple[_Path, str, str]] = []
    for i, container in enumerate(module.containers):
        for key, value in container.env.items():
            try:
                bodies = placeholders(value)
            except PlaceholderSyntaxError:
                continue
            for body in bodies:
                parts = body.split(".")
                if len(parts) == 2 and parts[0] != "self":
                    found.append((("containers", i, "env", key), parts[0], parts[1]))
        for j, secret_file in enumerate(container.secret_files):
            try:
                bodies = placeholders(secret_file.content)
            except PlaceholderSyntaxError:
                continue
            for body in bodies:
                parts = body.split(".")
                if len(parts) == 2 and parts[0] != "self":
                    found.append((("containers", i, "secret-files", j, "content"), parts[0],
                                  parts[1]))
    return found


# --------------------------------------------------------------------------- provisions.yaml


def validate_provisions(provisions: Provisions, where: DocumentPositions) -> list[Fault]:
    f = _Faults(where)
    for name, provision in provisions.provisions.items():
        path = ("provisions", name)
        f.name(path, name, "provision name", key=True)
        f.choice(path + ("scope",), provision.scope, SCOPES)
        f.choice(path + ("grant",), provision.grant, GRANT_KINDS)
        for i, key in enumerate(provision.keys):
            f.choice(path + ("keys", i), key, BINDING_KEYS)
            if key in provision.keys[:i]:
                f.at(path + ("keys", i), f"key {key!r} is listed twice", "each key once")
        if provision.url is not None:
            _url_template(provision.url, provision.keys, path + ("url",), f)
        for key in provision.values:
            if key not in CONSTANT_KEYS:
                f.at(path + ("values", key), f"value {key!r} is one the mesh derives, not a "
                     "constant", "one of " + _listing(CONSTANT_KEYS), key=True)
            elif key not in provision.keys:
                f.at(path + ("values", key), f"value {key!r} is not one of the provision's "
                     "keys", "a key listed in `keys`", key=True)
        if provision.tls is not None:
            fields = (*provision.keys, TLS_CA_FIELD)
            if provision.tls.url is not None:
                _url_template(provision.tls.url, fields, path + ("tls", "url"), f)
            for key, template in provision.tls.values.items():
                if key not in TLS_KEYS:
                    f.at(path + ("tls", "values", key), f"TLS value {key!r} is not one a "
                         "consumer can be told", "one of " + _listing(TLS_KEYS), key=True)
                _url_template(template, fields, path + ("tls", "values", key), f)
    return f.items


def _url_template(url: str, keys: Collection[str], path: _Path, f: _Faults) -> None:
    """A url template is text with `{key}` fields only (`{{` and `}}` for braces): no format
    spec, conversion, attribute or index (the resolver fills it with str.format_map)."""
    fields = "fields from keys: " + _listing(k for k in keys if k != "url")
    try:
        parts = list(string.Formatter().parse(url))
    except ValueError as exc:
        f.at(path, f"the url template cannot be read ({exc})", "{key} fields and {{ }} for braces")
        return
    for _, field, spec, conversion in parts:
        if field is None:
            continue
        if spec or conversion:
            f.at(path, f"url template field {{{field}}} has a format spec or conversion",
                 "plain {key} fields")
        elif field not in keys or field == "url":
            f.at(path, f"url template names {{{field}}}, not one of its keys", fields)


# --------------------------------------------------------------------------- mesh.yaml


_PLAIN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]*$")
"""An instance's name (compiled once: it is matched for every instance)."""


def validate_mesh(mesh: Mesh, where: DocumentPositions) -> list[Fault]:
    f = _Faults(where)
    controls = []
    for name, node in mesh.nodes.items():
        path = ("nodes", name)
        f.name(path, name, "node name", key=True)
        try:
            ipaddress.ip_address(node.address)
        except ValueError:
            f.at(path + ("address",), f"{node.address!r} is not an IP address",
                 "an IPv4 or IPv6 literal such as 10.0.0.2")
        f.port(path + ("ssh-port",), node.ssh_port)
        if node.public_key is not None and not _is_x25519_key(node.public_key):
            f.at(path + ("public-key",), "public-key is not a base64 X25519 key",
                 "32 bytes, base64-encoded")
        for i, facility in enumerate(node.facilities):
            if facility in node.facilities[:i]:
                f.at(path + ("facilities", i), f"facility {facility!r} is listed twice", "each once")
        if node.control:
            controls.append(name)
    controls.sort()  # a PMap has no document order; name order is stable
    for name in controls[1:]:
        f.at(("nodes", name, "control"), f"node {name!r} is a second control node",
             f"one control node ({controls[0]} is already)", key=True)
    for name, instance in mesh.instances.items():
        if not _PLAIN_NAME.match(name):
            f.at(("instances", name), f"instance name {name!r} is not a plain name",
                 "letters, digits, '-', '_', '.', '@'", key=True)
        if instance.expose:  # (most have none: no iterator made for them)
            for listen, exposure in instance.expose.items():
                _exposure(("instances", name, "expose", listen), listen, exposure, f)
        if instance.state_from is not None and instance.fresh:
            f.at(("instances", name, "fresh"), "state-from and fresh: true both say what "
                 "happens to the state of a move", "one of them", key=True)
    _names(mesh, f)
    ports = mesh.host_ports
    for key, value in (("first", ports.first), ("last", ports.last)):
        f.port(("host-ports", key), value, HOST_PORT_FLOOR)
    if ports.first > ports.last:
        f.at(("host-ports",), f"host-ports run from {ports.first} down to {ports.last}",
             "first <= last")
    for i, floor in enumerate(mesh.floors):
        f.port(("floors", i, "port"), floor.port)
        f.choice(("floors", i, "protocol"), floor.protocol, PROTOCOLS)
        f.choice(("floors", i, "sources"), floor.sources, FLOOR_SOURCES)
    if mesh.ca.validity_days < 1:
        f.at(("ca", "validity-days"), f"validity of {mesh.ca.validity_days} days", "at least 1 day")
    if not 0 <= mesh.ca.renew_before_days < max(mesh.ca.validity_days, 1):
        f.at(("ca", "renew-before-days"), f"renew-before-days {mesh.ca.renew_before_days}",
             "0 or more, and less than validity-days")
    f.choice(("logs", "driver"), mesh.logs.driver, LOG_DRIVERS)
    if not LOG_SIZE.match(mesh.logs.max_size):
        f.at(("logs", "max-size"), f"log size {mesh.logs.max_size!r} is not a size",
             "a whole number with k, m or g, such as 10m")
    if mesh.logs.max_files < 1:
        f.at(("logs", "max-files"), f"{mesh.logs.max_files} log files", "at least 1")
    _backups(mesh, f)
    return f.items


def _backups(mesh: Mesh, f: _Faults) -> None:
    """mesh.yaml `backups:`: a target on a node of the mesh, schedules of instances on other
    nodes than the target's, durations that read (resolver/_backups)."""
    target = mesh.backups.target
    target_node = target.node if target is not None else None
    if target is not None and target.instance is not None:
        store = mesh.instances.get(target.instance)
        target_node = store.node if store is not None else None
        if store is None:
            f.at(("backups", "target"), f"backup target {target.instance!r} is not an instance",
                 "an instance of `instances` providing backup-target")
        if target.node or target.repository:
            f.at(("backups", "target"), "a backup target names an instance or a node and "
                 "repository, not both", "`target: INSTANCE` or `target: {node, repository}`")
    elif target is not None and not (target.node and target.repository):
        f.at(("backups", "target"), "an outside backup target needs both `node` and "
             "`repository`", "`target: INSTANCE` or `target: {node, repository}`")
    elif target is not None and target.node not in mesh.nodes:
        f.at(("backups", "target", "node"), f"backup target node {target.node!r} is not a "
             "node of the mesh", "one of " + _listing(mesh.nodes))
    for name, every in mesh.backups.every.items():
        path = ("backups", "every", name)
        instance = mesh.instances.get(name)
        if instance is None:
            f.at(path, f"backups.every names {name!r}, which is not an instance",
                 "an instance of `instances`", key=True)
        elif target_node is not None and instance.node == target_node:
            f.at(path, f"{name} runs on {target_node}, the backup target's own node",
                 "a backup target on another node than the instances it backs up", key=True)
        if not BACKUP_EVERY.match(every):
            f.at(path, f"{every!r} is not a duration", "a whole number with s, m, h, d or w, "
                 "such as 6h or 1d")


def _names(mesh: Mesh, f: _Faults) -> None:
    """The mesh `domain` and instances' `name`s (resolver/_names): DNS names, inside the
    domain, one instance per name (the later one in the document is refused, naming the
    first)."""
    domain = mesh.domain
    if domain is not None and not is_dns_name(domain):
        f.at(("domain",), f"domain {domain!r} is not a DNS name",
             "lower-case labels of letters, digits and '-', joined by '.', such as home.arpa")
        domain = None
    if mesh.acme is not None:
        _acme(mesh, domain, f)
    claimed: dict[str, str] = {}
    named = {n: i for n, i in mesh.instances.items() if i.name is not None}
    if not named:
        return  # (no instance has a name: nothing below reads one)
    order = f.where.key_order(("instances",)) or tuple(sorted(mesh.instances))
    for name in order:
        instance = named.get(name)
        if instance is None or instance.name is None:
            continue
        path = ("instances", name, "name")
        if not is_dns_name(instance.name):
            f.at(path, f"name {instance.name!r} is not a DNS name",
                 "a lower-case label such as app1, or a name inside the mesh domain")
            continue
        if mesh.domain is None:
            f.at(path, f"instance {name} has a name and mesh.yaml names no domain",
                 "a top-level domain: such as home.arpa", key=True)
            continue
        if domain is None:
            continue
        if "." in instance.name and not in_domain(instance.name, domain):
            line, _ = f.where.position(("domain",))
            f.at(path, f"name {instance.name!r} is outside the mesh domain {domain} "
                 f"(line {line})", f"a label (app1, becoming app1.{domain}) or a name "
                 f"ending in .{domain}")
            continue
        full = fqdn(instance.name, domain)
        assert full is not None
        if full in claimed:
            line, _ = f.where.position(("instances", claimed[full], "name"))
            f.at(path, f"instance {name} claims the name {full}, which instance "
                 f"{claimed[full]} claims already (line {line})", "one instance per name")
            continue
        claimed[full] = name


def _acme(mesh: Mesh, domain: Optional[str], f: _Faults) -> None:
    """mesh.yaml's `acme`: an email, and a public `domain` an ACME CA can validate."""
    assert mesh.acme is not None
    if not is_email(mesh.acme.email):
        f.at(("acme", "email"), f"{mesh.acme.email!r} is not an email address",
             "the ACME account's email, such as ops@example.org")
    if mesh.domain is None:
        f.at(("acme",), "acme and mesh.yaml names no domain",
             "a top-level domain: a public one, such as example.org", key=True)
    elif domain is not None and (why := acme_refusal(domain)) is not None:
        line, _ = f.where.position(("domain",))
        f.at(("acme",), f"acme for the domain {domain} (line {line}): {why}, no public CA "
             "can validate them", "a public domain the operator holds, or no acme (the "
             "mesh CA)", key=True)


def _exposure(path: _Path, listen: str, exposure: Exposure, f: _Faults) -> None:
    f.name(path, listen, "exposed listen", key=True)
    if not exposure.to:
        f.at(path + ("to",), "an exposure to nobody", "at least one source: any, an address "
             "or a network such as 192.168.1.0/24 or fd00::/64")
    seen: dict[str, int] = {}
    for i, source in enumerate(exposure.to):
        canonical = canonical_source(source)
        if canonical is None:
            f.at(path + ("to", i), _bad_source(source),
                 "any, an IPv4 or IPv6 address, or a network such as 192.168.1.0/24 or fd00::/64")
        elif canonical in seen:
            f.at(path + ("to", i), f"source {source!r} is listed twice "
                 f"(as entry {seen[canonical] + 1} too)", "each source once")
        else:
            seen[canonical] = i
    if "any" in seen and len(seen) > 1:
        f.at(path + ("to", seen["any"]), "`any` already opens the listen to every source, so "
             "the other sources say nothing", "either any alone, or named sources")


def _bad_source(source: str) -> str:
    try:
        network = ipaddress.ip_network(source, strict=False)
    except ValueError:
        return f"{source!r} is not an address or a network"
    return f"{source!r} has host bits set (the network is {network})"


def _is_x25519_key(text: str) -> bool:
    try:
        return len(base64.b64decode(text, validate=True)) == 32
    except (binascii.Error, ValueError):
        return False


# --------------------------------------------------------------------------- ledger


def ledger_version_fault(data: object, where: DocumentPositions) -> Optional[Fault]:
    """A ledger is read only at a version this code knows; checked before its shape."""
    if not isinstance(data, dict):
        return None  # the structure check reports it
    if "version" not in data:
        return where.fault((), "the ledger has no version", f"version: {LEDGER_VERSION}")
    version = data["version"]
    if version != LEDGER_VERSION or type(version) is not int:
        return where.fault(("version",), f"unsupported ledger version {version!r}",
                           str(LEDGER_VERSION))
    return None


def logins_may_fault(logins: Mapping[str, str]) -> bool:
    """Whether validate_ledger can find a fault in `logins` (its one rule for them: no login
    recorded for two credentials); False lets a caller skip the map (resolver/_check.py)."""
    return len(set(logins.values())) != len(logins)


def validate_ledger(ledger: Ledger, where: DocumentPositions) -> list[Fault]:
    f = _Faults(where)
    for instance, listens in ledger.ports.items():
        for listen, assignment in listens.items():
            f.port(("ports", instance, listen, "port"), assignment.port)
    for cred_id, credential in ledger.credentials.items():
        path = ("credentials", cred_id)
        for slot_name in ("active", "retiring", "pending"):
            generation = getattr(credential, slot_name)
            if generation is None:
                continue
            if generation.generation < 1:
                f.at(path + (slot_name, "generation"), f"generation {generation.generation}",
                     "a generation from 1")
            if generation.slot is not None:
                f.choice(path + (slot_name, "slot"), generation.slot, LOGIN_SLOTS)
    for node, certificate in ledger.certificates.items():
        for key, value in (("not-before", certificate.not_before),
                           ("not-after", certificate.not_after)):
            try:
                epoch_seconds(value)
            except MeshError:
                f.at(("certificates", node, key), f"{key} {value!r} is not a valid time",
                     "ISO 8601 with an offset, e.g. 2026-01-31T12:00:00Z")
    for pin, digest in ledger.pins.items():
        if not DIGEST.match(digest):
            f.at(("pins", pin), f"pin {pin!r} is not a digest", "sha256: and 64 hex digits")
    if not logins_may_fault(ledger.logins):
        return f.items
    holders: dict[str, list[str]] = {}
    for cred_id, login in ledger.logins.items():
        holders.setdefault(login, []).append(cred_id)
    for login, creds in holders.items():
        if len(creds) > 1:  # only a hand edit or a bad merge writes it: resolve() never does
            for cred_id in creds:
                f.at(("logins", cred_id), f"login {login!r} is recorded for "
                     f"{len(creds)} credentials: {', '.join(sorted(creds))}",
                     "one login per credential (two consumers never share a login)")
    return f.items


# --------------------------------------------------------------------------- the catalogue


def validate_catalogue(modules: Mapping[str, Module], provisions: Mapping[str, Provision],
                       sources: Sources, unloaded: AbstractSet[str] = frozenset()) -> list[Fault]:
    """Faults between catalogue documents: placeholder keys, build bases, module listens.

    `modules` maps name → Module, `provisions` name → Provision, `sources` is a Sources;
    `unloaded` names the modules whose manifests have faults of their own, whose artifacts are
    therefore not named missing again. Unknown provisions and modules are left to the
    resolver (they block instances)."""
    faults: list[Fault] = []

    def at(name: str, path: _Path, message: str, expected: str, key: bool = True) -> None:
        file, line, col = sources.where(f"module:{name}", *path, at_key=key)
        faults.append(Fault(file, line, col, message, expected))

    for name, module in modules.items():
        requirements = {r.as_: r for r in module.requires}
        for path, as_, key in module_placeholder_keys(module):
            req = requirements.get(as_)
            if req is None:
                continue  # validate_module already said so
            offered: tuple[str, ...]
            if req.each:
                offered = EACH_REQUIREMENT_KEYS
            elif req.module is not None:
                offered = MODULE_REQUIREMENT_KEYS
            elif req.provision is not None and req.provision in provisions:
                provision = provisions[req.provision]
                offered = tuple(provision.keys) + (("url",) if provision.url else ()) \
                    + (tuple(provision.tls.values) if provision.tls is not None else ())
            else:
                continue  # an unknown provision is the resolver's problem
            if key not in offered and req.each:
                at(name, path, f"${{{as_}.{key}}}: {as_} takes every provider of "
                   f"{req.provision}, so its values are a list (mount the binding's file)",
                   "one of " + _listing(offered))
            elif key not in offered:
                at(name, path, f"${{{as_}.{key}}}: {req.provision or req.module} offers no {key!r}",
                   "one of " + _listing(offered))
        for i, req in enumerate(module.requires):
            target = modules.get(req.module) if req.module else None
            if target is not None and req.listen is not None and req.listen not in target.listens:
                at(name, ("requires", i, "listen"), f"module {req.module} has no listen {req.listen!r}",
                   "one of " + _listing(target.listens))
        for artifact_name, artifact in module.artifacts.items():
            for j, base in enumerate(artifact.base):
                if "/" not in base:
                    continue
                owner, _, wanted = base.partition("/")
                if owner in unloaded:
                    continue  # its manifest's own faults are reported; this would follow from them
                if owner not in modules or wanted not in modules[owner].artifacts:
                    at(name, ("artifacts", artifact_name, "base", j), f"no artifact {base!r} in the catalogue",
                       "module/artifact naming an artifact of a catalogue module", key=False)
    return faults


def _listing(names: Iterable[str]) -> str:
    names = sorted(set(names))
    return ", ".join(names) if names else "(none declared)"
