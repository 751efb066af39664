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
from typing import AbstractSet, Collection, Iterable, Mapping, Optional, Union

from ._certs import epoch_seconds
from ._errors import Fault, MeshError
from ._firewall import canonical_source
from ._ledger import LEDGER_VERSION, Ledger
from ._load import DocumentPositions
from ._inputs import Sources
from ._model import (GRANT_KINDS, ROTATION_WAYS, Exposure, Health, Mesh, Module, Mount, Provision,
                     Provisions)
from ._errors import PlaceholderSyntaxError
from ._placeholders import placeholders

PROTOCOLS = ("tcp", "udp")
ACCESS_MODES = ("ro", "rw")
SCOPES = ("node", "mesh")
FLOOR_SOURCES = ("any", "mesh")
LOGIN_SLOTS = ("a", "b")
BINDING_KEYS = ("host", "port", "user", "password", "database", "vhost", "bucket", "client", "url")
MODULE_REQUIREMENT_KEYS = ("host", "port")  # what a `module:` requirement is told
SELF_PLACEHOLDERS = ("address", "instance", "node")  # ${self.address} and friends
HOST_PORT_FLOOR = 1024

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")  # no dots: placeholders split on them
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
OWNER = re.compile(r"^[0-9]+:[0-9]+$")
OCTAL_MODE = re.compile(r"^[0-7]{3,4}$")
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")

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
    _rotation(module, f)
    return f.items


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
            elif not any(token in value for value in step.env.values()):
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


def _provides(module: Module, f: _Faults) -> None:
    for i, provide in enumerate(module.provides):
        if provide.listen not in module.listens:
            f.at(("provides", i, "listen"), f"no listen named {provide.listen!r}",
                 "one of " + _listing(module.listens), key=True)
        if provide.admin is not None and provide.admin not in module.secrets:
            f.at(("provides", i, "admin"), f"no secret named {provide.admin!r}",
                 "one of " + _listing(module.secrets), key=True)


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
    return names


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


def _mount(module: Module, mount: Mount, path: _Path, f: _Faults) -> None:
    kinds = _one_of(mount, ("state", "access", "facility"))
    if len(kinds) != 1:
        f.at(path, f"mount of {mount.target!r} names "
             + (" and ".join(kinds) if kinds else "no source"),
             "exactly one of state, access, facility")
    if not mount.target.startswith("/"):
        f.at(path + ("target",), f"mount target {mount.target!r} is not absolute",
             "an absolute path inside the container")
    declared: dict[str, Collection[str]] = {"state": module.state, "access": module.accesses,
                                            "facility": module.facilities}
    section = {"state": "state", "access": "accesses", "facility": "facilities"}
    for kind in kinds:
        name = getattr(mount, kind)
        if name not in declared[kind]:
            f.at(path + (kind,), f"undeclared {kind} {name!r}",
                 f"one of the module's {section[kind]}: " + _listing(declared[kind]), key=True)


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
        if parts[1] not in BINDING_KEYS:
            return f"${{{body}}}: {parts[1]!r} is not a binding value"
        return None
    return f"${{{body}}} is not a placeholder"


def module_placeholder_keys(module: Module) -> list[tuple[_Path, str, str]]:
    """(env path, requirement `as`, key) for every `${<as>.<key>}` in the module's env."""
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
        if not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.@-]*$", name):
            f.at(("instances", name), f"instance name {name!r} is not a plain name",
                 "letters, digits, '-', '_', '.', '@'", key=True)
        for listen, exposure in instance.expose.items():
            _exposure(("instances", name, "expose", listen), listen, exposure, f)
        if instance.state_from is not None and instance.fresh:
            f.at(("instances", name, "fresh"), "state-from and fresh: true both say what "
                 "happens to the state of a move", "one of them", key=True)
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
    return f.items


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
            if req.module is not None:
                offered = MODULE_REQUIREMENT_KEYS
            elif req.provision is not None and req.provision in provisions:
                provision = provisions[req.provision]
                offered = tuple(provision.keys) + (("url",) if provision.url else ())
            else:
                continue  # an unknown provision is the resolver's problem
            if key not in offered:
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
