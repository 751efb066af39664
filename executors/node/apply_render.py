"""Rendering a declaration into what one node must hold: desired state, file contents, specs.

Invariants:
- Rendering is the only place secret values exist: they are substituted into env and binding
  file contents and the containers' environments, never into an Op, a cause, a label or the
  report; labels carry one-way fingerprints so a cause can name the env key that changed.
- An env value holding a provider's admin secret in that provider's server container is
  fingerprinted as written (its token), not by value: the provisioner changes it on the running
  server, the container reads it only to initialise, so a new generation rewrites the env file
  and never recreates the server (resolver._rotation.server_held_secrets decides which).
- Anything that cannot be rendered honestly (a secret not issued or not unsealable, a port
  published on every address, a relative state path) is a Refusal, never a guess.
- Pure apart from reading nothing: the secret source is the only way in for values.
- A declaration's digest is the resolver's `declaration_digest` of its contents, never the
  `digest` field a file claims: what the node records as applied is what it was given (a
  declaration edited by hand is not the one the mesh declared, and `mesh applied` says so).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from typing import Iterable, Optional

import attrs
from pyrsistent import pmap

from resolver import (ContainerDecl, Declaration, MeshError, SecretRef, declaration_digest,
                      secret_token)
from resolver._rotation import server_held_secrets

from . import docker_engine as engine
from .extensions import SecretSource
from .node_paths import NodePaths
from .apply_diff import (
    Desired,
    DesiredAccess,
    DesiredContainer,
    DesiredDir,
    DesiredFile,
    Refusal,
    config_digest,
    fingerprint,
)

SECRET_PATTERN = re.compile(r"\$\{secret:([^}]*)\}")
UNBOUND_ADDRESSES = {"", "0.0.0.0", "::", "[::]", "*"}


@attrs.frozen
class Rendered:
    desired: Desired
    contents: dict = attrs.field(repr=False, eq=False)  # path → bytes (may hold secrets)
    specs: dict = attrs.field(repr=False, eq=False)  # name → ContainerSpec
    health: dict = attrs.field(repr=False, eq=False)  # name → (HealthDecl, host address)


# --------------------------------------------------------------------------- render


class _Substituter:
    def __init__(self, secret_source: Optional[SecretSource], refusals: list[Refusal]):
        self.secret_source = secret_source
        self.refusals = refusals

    def __call__(self, value: str, refs: dict[str, SecretRef], subject: str, key: str):
        def replace(match: re.Match) -> str:
            credential = match.group(1)
            ref = refs.get(credential)
            if ref is None:
                raise _Refused(f"{key} refers to credential {credential!r}, which is not among "
                               "its declared secrets")
            if ref.generation is None:
                raise _Refused(f"{key}: credential {credential} has not been issued yet")
            if self.secret_source is None:
                raise _Refused(f"{key} needs credential {credential}, but no sealed secrets "
                               "were given (--secrets FILE --key FILE)")
            try:
                return self.secret_source(ref)
            except Exception as exc:  # the unsealer's error, named (never the value)
                raise _Refused(f"{key}: credential {credential} generation {ref.generation} "
                               f"cannot be unsealed: {exc}") from None

        try:
            text = SECRET_PATTERN.sub(replace, value)
        except _Refused as refused:
            self.refusals.append(Refusal(subject, str(refused)))
            return None
        if "\n" in text or "\r" in text:
            self.refusals.append(Refusal(subject, f"{key}: a value with a line break cannot "
                                         "go into an env file"))
            return None
        return text


class _Refused(MeshError):
    """A value that cannot be rendered honestly: becomes a Refusal, never leaves render."""


def _env_text(pairs: Iterable[tuple[str, str]]) -> str:
    return "".join(f"{key}={value}\n" for key, value in pairs)


def _safe_name(name: str) -> str:
    return name.replace("/", "_")


def _container(c: ContainerDecl, declaration: Declaration, paths: NodePaths,
               substitute: _Substituter, refusals: list[Refusal]):
    if len(c.name) < 2 or "/" in c.name:
        refusals.append(Refusal(c.name, "a container name needs two characters or more, no '/'"))
    refs = {ref.credential: ref for ref in c.secrets}
    env = []
    # a provider's admin in its own server's env: put in force on the running server by the
    # provisioner, read by the container only to initialise; its generation never recreates it
    in_place = server_held_secrets(declaration, c)
    stable = {}
    for key in sorted(c.env):
        value = substitute(c.env[key], refs, c.name, f"env {key}")
        env.append((key, value if value is not None else ""))
        if any(secret_token(cred) in c.env[key] for cred in in_place):
            stable[key] = c.env[key]  # fingerprinted as written: the token, not the value
    env_text = _env_text(env)
    ports = []
    for p in c.ports:
        if p.host_ip in UNBOUND_ADDRESSES:
            refusals.append(Refusal(c.name, f"port {p.container_port}/{p.protocol} would be "
                                    f"published on every address ({p.host_ip or 'none given'}); "
                                    "the mesh binds published ports to the node's address only"))
        ports.append((f"{p.container_port}/{p.protocol}", p.host_ip, p.host_port))
    binds = tuple((m.source, m.target, "ro" if m.read_only else "rw") for m in c.mounts)
    restart = "no" if c.run_once else "unless-stopped"
    summary = {"image": c.image, "run-once": str(c.run_once).lower(), "restart": restart,
               "command": json.dumps(list(c.command)) if c.command is not None else "-"}
    summary.update({f"env {key}": fingerprint(c.name, key, stable.get(key, value))
                    for key, value in env})
    summary.update({f"port {port}": f"{ip}:{host_port}" for port, ip, host_port in ports})
    summary.update({f"mount {target}": f"{source}:{mode}" for source, target, mode in binds})
    summary.update({f"label {key}": value for key, value in c.labels.items()})
    if c.mac is not None:  # only then: containers without one keep their digest
        summary["mac"] = c.mac
    digest = config_digest(summary)
    labels = dict(c.labels)
    labels.update({engine.LABEL_MESH: declaration.mesh, engine.LABEL_INSTANCE: c.instance,
                   engine.LABEL_CONTAINER: c.container, engine.LABEL_DIGEST: digest,
                   engine.LABEL_SUMMARY: json.dumps(summary, sort_keys=True,
                                                    separators=(",", ":"))})
    if c.run_once:
        labels[engine.LABEL_RUN_ONCE] = "true"
    spec = engine.ContainerSpec(
        name=c.name, image=c.image, command=tuple(c.command) if c.command is not None else None,
        environment=tuple(f"{k}={v}" for k, v in env), labels=tuple(sorted(labels.items())),
        ports=tuple(ports), binds=binds, restart=restart, mac=c.mac)
    env_file = DesiredFile(str(paths.env_dir / f"{_safe_name(c.name)}.env"),
                           hashlib.sha256(env_text.encode()).hexdigest())
    return DesiredContainer(c.name, c.run_once, digest, pmap(summary)), spec, env_file, env_text


def render(declaration: Declaration, paths: NodePaths,
           secret_source: Optional[SecretSource] = None) -> Rendered:
    """The desired node state, the files' contents and the containers' specs."""
    refusals: list[Refusal] = []
    substitute = _Substituter(secret_source, refusals)
    contents: dict[str, bytes] = {}
    specs: dict = {}
    health: dict = {}
    containers, files = [], []
    generations: dict[str, int] = {}
    seen: set[str] = set()
    for c in declaration.containers:
        if c.name in seen:
            refusals.append(Refusal(c.name, "two containers of this declaration share the name"))
            continue
        seen.add(c.name)
        desired, spec, env_file, env_text = _container(c, declaration, paths, substitute,
                                                       refusals)
        containers.append(desired)
        specs[c.name] = spec
        files.append(env_file)
        contents[env_file.path] = env_text.encode()
        if c.health is not None and not c.run_once:
            health[c.name] = (c.health, declaration.address)
        for ref in c.secrets:
            if ref.generation is not None:
                generations[ref.credential] = max(ref.generation,
                                                  generations.get(ref.credential, 0))
    for b in declaration.bindings:
        refs = {b.secret.credential: b.secret} if b.secret is not None else {}
        subject = f"binding {b.consumer} {b.requirement}"
        pairs = []
        for key in sorted(b.values):
            value = substitute(b.values[key], refs, subject, key)
            pairs.append((key, value if value is not None else ""))
        path = str(paths.bindings_dir / f"{_safe_name(b.consumer)}--{_safe_name(b.requirement)}.env")
        text = _env_text(pairs)
        files.append(DesiredFile(path, hashlib.sha256(text.encode()).hexdigest()))
        contents[path] = text.encode()
        if b.secret is not None and b.secret.generation is not None:
            generations[b.secret.credential] = max(b.secret.generation,
                                                   generations.get(b.secret.credential, 0))
    dirs = []
    for d in declaration.state_dirs:
        try:
            mode = int(d.mode, 8)
        except ValueError:
            refusals.append(Refusal(d.path, f"mode {d.mode!r} is not octal (e.g. \"0750\")"))
            continue
        if not os.path.isabs(d.path):
            refusals.append(Refusal(d.path, "a state directory must be an absolute path"))
            continue
        if paths.owns(d.path):
            refusals.append(Refusal(d.path, f"a state directory inside the executor's own "
                                    f"directory {paths.root} (its env files, records and "
                                    "markers): instance state lives outside it"))
            continue
        dirs.append(DesiredDir(os.path.normpath(d.path), d.uid, d.gid, mode))
    accesses = []
    for a in declaration.accesses:
        if paths.owns(a.path):
            refusals.append(Refusal(a.path, f"an accessed path inside the executor's own "
                                    f"directory {paths.root}, which holds unsealed secrets: "
                                    "never mounted into a container"))
            continue
        accesses.append(DesiredAccess(os.path.normpath(a.path), a.mode))
    desired = Desired(
        mesh=declaration.mesh, node=declaration.node, serial=declaration.serial,
        digest=declaration_digest(declaration), dirs=tuple(sorted(dirs)),
        accesses=tuple(sorted(accesses)), files=tuple(sorted(files)),
        containers=tuple(containers), generations=pmap(generations), refusals=tuple(refusals))
    return Rendered(desired, contents, specs, health)
