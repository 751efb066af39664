"""What rendering reads of a module once, for every instance of it: its shape.

Invariants:
- A module's state directories, merged access modes, claims, and by the parts an instance
  switches on, the containers it installs with the listens each publishes, are read once per
  module (ModuleShape); each container once, the first time an instance installs it
  (ContainerShape).
- Each env value, and each secret file's content (resolver/_secret_files.py), is compiled
  once (compile_env): every placeholder's meaning is decided by
  _placeholders.meaning, literal text joined, so filling it per instance (ContainerShape.env_for)
  only looks up what varies by instance: its binding values, its node, its own secrets and
  ports. Nothing here decides what a placeholder means.
"""

from __future__ import annotations

from typing import Callable, Collection, Iterable, Mapping, Optional

from pyrsistent import pvector
from pyrsistent.typing import PVector

from ._binding_files import compile_file_mounts
from ._declaration import BindingDecl, FileDecl, HealthDecl, MountDecl, SecretRef
from ._frozen import EMPTY_FROZEN
from ._model import EMPTY_VEC, Container, Health, Module
from ._names import route_listen
from ._placeholders import (
    ADDRESS,
    BINDING,
    INSTANCE,
    LITERAL,
    NODE,
    OWN_PORT,
    OWN_SECRET,
    Meaning,
    meaning,
    secret_token,
    template,
)
from ._secret_files import declared_files, file_variables


class ModuleShape:
    """What rendering reads of a module that is the same for each of its instances: its state
    directories (owner read), accessed paths (modes merged), claims, and by the parts an
    instance switches on, the containers it installs with the listens each publishes. A
    container is read (ContainerShape) the first time an instance installs it."""

    def __init__(self, module: Module, image_of: Callable[[Module, str], str]) -> None:
        self.module = module
        self.image_of = image_of
        self.state: list[tuple[str, str, int, int, str]] = []  # (name, path, uid, gid, mode)
        for dir_name, state in sorted(module.state.items()):
            uid, _, gid = state.owner.partition(":")
            self.state.append((dir_name, state.path, int(uid), int(gid or uid), state.mode))
        modes: dict[str, str] = {}  # path → mode (rw if any access of it is)
        for access in module.accesses.values():
            if modes.get(access.path) != "rw":
                modes[access.path] = access.mode
        self.accesses = sorted(modes.items())
        self.listens = sorted(module.listens.items())
        self.web_listen = route_listen(module)  # the listen its http-route is on, if any
        self.claims: PVector[str] = pvector(sorted(set(module.claims)))
        self._containers: dict[int, ContainerShape] = {}
        self._layouts: dict[frozenset[str], list[tuple[ContainerShape, list[Publish]]]] = {}

    def layout(self, parts: Iterable[str]) -> list[tuple["ContainerShape", list["Publish"]]]:
        """The containers an instance with `parts` switched on installs, in the module's order,
        each with the listens it publishes (listen, container port, protocol), in name order:
        a listen is published by its own `container`, else by the first long-running one."""
        key = frozenset(parts)
        found = self._layouts.get(key)
        if found is None:
            installed = [(i, c) for i, c in enumerate(self.module.containers)
                         if c.part is None or c.part in key]
            long_running = [c.name for _, c in installed if not c.run_once]
            serving = {name: listen.container or (long_running[0] if long_running else None)
                       for name, listen in self.listens}
            found = self._layouts[key] = [
                (self._container(i, c), [(name, listen.port, listen.protocol)
                                         for name, listen in self.listens
                                         if serving[name] == c.name])
                for i, c in installed]
        return found

    def _container(self, index: int, container: Container) -> "ContainerShape":
        found = self._containers.get(index)
        if found is None:
            found = self._containers[index] = ContainerShape(
                self.module, container, self.image_of(self.module, container.artifact))
        return found


Publish = tuple[str, int, str]
"""A listen a container publishes: (listen, container port, protocol)."""
Told = BindingDecl
"""What a consumer is told for one requirement: its binding as its declaration holds it, whose
`values` it is told and whose `secret` its `password` refers to (None: it carries none)."""
TOLD_NOTHING: Mapping[str, Told] = EMPTY_FROZEN
PIECES = "pieces"  # an env value of several pieces, or of one that is not a binding value
EnvEntry = tuple[str, str, str, str, tuple[Meaning, ...]]
"""One env value compiled: (key, kind, name, key of the binding, pieces). kind LITERAL: the
value is `name`; BINDING: the value is binding `name`'s value `key`; PIECES: the value is
`pieces` filled in order (each a Meaning)."""
CompiledMount = tuple[str, str, str, bool, Optional[MountDecl]]
"""A mount compiled: (kind, state path or facility name, target, read-only, the MountDecl
itself when it is the same for every instance: an access)."""


class ContainerShape:
    """One container of a module as every instance renders it: its env compiled (each
    placeholder's meaning decided once, by _placeholders.meaning; literal text joined), its
    mounts and health check read, and its image."""

    __slots__ = ("container", "image", "env", "secret_files", "mounts", "file_mounts",
                 "shared_health", "_health_listen")

    def __init__(self, module: Module, container: Container, image: str) -> None:
        self.container = container
        self.image = image
        # a secret file's variable holds its path (resolver/_secret_files.py), never the value
        self.env = sorted([compile_env(key, raw, module.secrets)
                           for key, raw in container.env.items()]
                          + [(key, LITERAL, path, "", ()) for key, path
                             in file_variables(container)])
        self.secret_files = [compile_env(f.path, f.content, module.secrets)
                             for f in container.secret_files]
        self.mounts: list[CompiledMount] = []
        for m in container.mounts:
            if m.state is not None:
                self.mounts.append(("state", module.state[m.state].path, m.target, m.read_only,
                                    None))
            elif m.access is not None:
                acc = module.accesses[m.access]
                self.mounts.append(("access", acc.path, m.target, m.read_only, MountDecl(
                    "access", acc.path, m.target, m.read_only or acc.mode == "ro")))
            elif m.facility is not None:
                self.mounts.append(("facility", m.facility, m.target, m.read_only, None))
        # binding files and the CA: files the mesh writes (resolver/_binding_files.py)
        self.file_mounts = compile_file_mounts(container)
        self.shared_health, self._health_listen = shared_health(container.health, module)

    def env_for(self, instance: str, node: str, address: str, told: Mapping[str, Told],
                own_secrets: Mapping[tuple[str, str], SecretRef],
                assigned: Mapping[tuple[str, str], int], refs: set[SecretRef]) -> dict[str, str]:
        """The container's env as `instance` (on `node`, at `address`) is told it, every
        credential a value refers to added to `refs`."""
        return {entry[0]: _filled(entry, instance, node, address, told, own_secrets, assigned,
                                  refs) for entry in self.env}

    def files_for(self, instance: str, node: str, address: str, told: Mapping[str, Told],
                  own_secrets: Mapping[tuple[str, str], SecretRef],
                  assigned: Mapping[tuple[str, str], int], refs: set[SecretRef]
                  ) -> PVector[FileDecl]:
        """The container's secret files as `instance` is told them (contents filled as env
        values are: secrets as tokens), every credential they refer to added to `refs`."""
        if not self.secret_files:
            return EMPTY_VEC
        return declared_files(self.container, [
            _filled(entry, instance, node, address, told, own_secrets, assigned, refs)
            for entry in self.secret_files])

    def health(self, instance: str, assigned: Mapping[tuple[str, str], int]
               ) -> Optional[HealthDecl]:
        """The container's health check for `instance` (a tcp or http check is told the host
        port of its listen, when it has one)."""
        decl, listen = self.shared_health, self._health_listen
        if decl is None or listen is None:
            return decl
        return HealthDecl(decl.kind, port=decl.port, host_port=assigned.get((instance, listen)),
                          path=decl.path, timeout=decl.timeout)


def _filled(entry: EnvEntry, instance: str, node: str, address: str, told: Mapping[str, Told],
            own_secrets: Mapping[tuple[str, str], SecretRef],
            assigned: Mapping[tuple[str, str], int], refs: set[SecretRef]) -> str:
    """One compiled value (an env value, a secret file's content) filled for `instance`."""
    _, kind, name, binding_key, pieces = entry
    if kind == LITERAL:
        return name
    if kind == BINDING:
        return told_value(told, name, binding_key, refs)
    return fill_env(pieces, instance, node, address, told, own_secrets, assigned, refs)


def compile_env(key: str, raw: str, secrets: Collection[str]) -> EnvEntry:
    """Env value `raw` of a module declaring `secrets`, compiled: each placeholder read for what
    it names (literal text as such, adjacent texts joined), so that filling it per instance
    only looks up what varies."""
    if "$" not in raw:
        return (key, LITERAL, raw, "", ())
    pieces: list[Meaning] = []
    for part in template(raw):
        piece = (LITERAL, part, "") if isinstance(part, str) else meaning(part, secrets)
        if piece[0] == LITERAL:
            if not piece[1]:
                continue
            if pieces and pieces[-1][0] == LITERAL:
                piece = (LITERAL, pieces.pop()[1] + piece[1], "")
        pieces.append(piece)
    if not pieces:
        return (key, LITERAL, "", "", ())
    if len(pieces) == 1 and pieces[0][0] in (LITERAL, BINDING):
        kind, name, binding_key = pieces[0]
        return (key, kind, name, binding_key, ())
    return (key, PIECES, "", "", tuple(pieces))


def told_value(told: Mapping[str, Told], as_: str, key: str, refs: set[SecretRef]) -> str:
    """Value `key` of the binding of requirement `as_` (BINDING); "" when the requirement is
    optional and left unbound, or the binding has no such value. A `password` adds the
    binding's credential to `refs`."""
    found = told.get(as_)
    if found is None:  # an optional requirement left unbound: told nothing
        return ""
    if key == "password" and found.secret is not None:
        refs.add(found.secret)
    return found.values.get(key, "")


def fill_env(pieces: tuple[Meaning, ...], instance: str, node: str, address: str,
          told: Mapping[str, Told], own_secrets: Mapping[tuple[str, str], SecretRef],
          assigned: Mapping[tuple[str, str], int], refs: set[SecretRef]) -> str:
    """A compiled env value filled for `instance` on `node` (at `address`), every credential
    it refers to added to `refs`."""
    out: list[str] = []
    for kind, name, key in pieces:
        if kind == LITERAL:
            out.append(name)
        elif kind == BINDING:
            out.append(told_value(told, name, key, refs))
        elif kind == ADDRESS:
            out.append(address)
        elif kind == INSTANCE:
            out.append(instance)
        elif kind == NODE:
            out.append(node)
        elif kind == OWN_SECRET:
            ref = own_secrets[(instance, name)]
            refs.add(ref)
            out.append(secret_token(ref.credential))
        else:
            assert kind == OWN_PORT, kind
            port = assigned.get((instance, name))
            out.append(key if port is None else str(port))
    return "".join(out)


def shared_health(health: Optional[Health], module: Module
            ) -> tuple[Optional[HealthDecl], Optional[str]]:
    """A container's health check as its instances share it, and the listen whose host port
    each instance's check is told (None: a command, or no check)."""
    if health is None:
        return None, None
    if health.command is not None:
        return HealthDecl("command", command=health.command, timeout=health.timeout), None
    if health.tcp is not None:
        listen_name = health.tcp
    else:
        assert health.http is not None, health  # validated: exactly one check
        listen_name = health.http.listen
    listen = module.listens[listen_name]
    return HealthDecl("tcp" if health.tcp is not None else "http", port=listen.port,
                      path=health.http.path if health.http is not None else "/",
                      timeout=health.timeout), listen_name
