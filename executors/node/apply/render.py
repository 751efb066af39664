"""Rendering a declaration into what one node must hold: desired state, file contents, specs.

Invariants:
- Rendering is the only place secret values exist: they are substituted into env and binding
  file contents, containers' secret files (apply/secret_files.py) and the containers'
  environments, never into an Op, a cause, a label or the report; labels carry one-way
  fingerprints so a cause can name the env key or secret file that changed.
- An env value or secret file holding a provider's admin secret in that provider's server
  container is fingerprinted as written (its token), not by value: the provisioner changes it
  on the running server, the container reads it only to initialise, so a new generation
  rewrites the env file (or the secret file) and never recreates the server (resolver.rotation.server_held_secrets decides which).
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
from typing import Iterable, Optional

import attrs
from pyrsistent import pmap

from resolver import ContainerDecl, Declaration, FileDecl, HealthDecl, MeshError, SecretRef
from resolver.rendering import declaration_digest, fill_secret_tokens, secret_token, secret_tokens
from resolver.rendering import TOKEN_KIND, TOKENS_FILE, is_file_mount
from resolver.rotation import server_held_secrets

from executors.node import docker_engine as engine
from executors.node.extensions import SecretSource
from executors.node.node_paths import NodePaths
from executors.common.marks import (
    LABEL_CONTAINER,
    LABEL_DIGEST,
    LABEL_INSTANCE,
    LABEL_MESH,
    LABEL_RUN_ONCE,
    LABEL_SUMMARY,
)
from executors.node.apply.compare import (
    Desired,
    DesiredAccess,
    DesiredContainer,
    DesiredDir,
    DesiredFile,
    Refusal,
)
from executors.node.apply.diff import config_digest, fingerprint
from executors.node.apply.secret_files import SecretFiles, secret_files

UNBOUND_ADDRESSES = {"", "0.0.0.0", "::", "[::]", "*"}


@attrs.frozen
class Rendered:
    desired: Desired
    contents: dict[str, bytes] = attrs.field(repr=False, eq=False)  # path → (may hold secrets)
    specs: dict[str, engine.ContainerSpec] = attrs.field(repr=False, eq=False)  # by name
    # name → (its health check, the host address it is published on)
    health: dict[str, tuple[HealthDecl, str]] = attrs.field(repr=False, eq=False)


# --------------------------------------------------------------------------- render


class _Substituter:
    def __init__(self, secret_source: Optional[SecretSource], refusals: list[Refusal]):
        self.secret_source = secret_source
        self.refusals = refusals

    def __call__(self, value: str, refs: dict[str, SecretRef], subject: str,
                 key: str, *, multiline: bool = False) -> Optional[str]:
        def replace(credential: str) -> str:
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
            text = fill_secret_tokens(value, replace)
        except _Refused as refused:
            self.refusals.append(Refusal(subject, str(refused)))
            return None
        if not multiline and ("\n" in text or "\r" in text):
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
               substitute: _Substituter, refusals: list[Refusal],
               secret: SecretFiles = SecretFiles()
               ) -> tuple[DesiredContainer, engine.ContainerSpec, DesiredFile, str]:
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
    # TLS and registry-auth directories, the mesh CA, binding files: files the mesh writes,
    # under the file root
    binds = tuple((paths.on_node(m.source) if m.kind in ("tls", "auth", "ca", "binding")
                   else m.source,
                   m.target, "ro" if m.read_only else "rw") for m in c.mounts)
    binds += secret.binds  # its secret files' directory, read-only (apply/secret_files.py)
    for m in c.mounts:  # a missing source would be made a directory by the runtime
        if is_file_mount(m.kind) and not any(f.path == m.source for f in declaration.files):
            refusals.append(Refusal(c.name, f"mounts {m.source} at {m.target}, a file its "
                                    "declaration does not hold (the mesh CA before `mesh ca "
                                    "init` and `mesh plan --issue`?)"))
    # the accounts file its provisioner keeps there: a tool server's tokens, else htpasswd
    accounts = TOKENS_FILE if any(p.instance == c.instance and p.kind == TOKEN_KIND
                                  for p in declaration.providers) else "htpasswd"
    placeholders = tuple(os.path.join(paths.on_node(m.source), accounts)
                         for m in c.mounts if m.kind == "auth")
    pull_auth = None
    for login in declaration.registry_logins:
        if c.image.startswith(login.registry + "/"):
            password = substitute(secret_token(login.secret.credential),
                                  {login.secret.credential: login.secret}, c.name,
                                  f"pull account {login.user} on {login.registry}")
            pull_auth = (login.user, password) if password is not None else None
    restart = "no" if c.run_once else "unless-stopped"
    summary = {"image": c.image, "run-once": str(c.run_once).lower(), "restart": restart,
               "command": json.dumps(list(c.command)) if c.command is not None else "-"}
    summary.update({f"env {key}": fingerprint(c.name, key, stable.get(key, value))
                    for key, value in env})
    summary.update({f"port {port}": f"{ip}:{host_port}" for port, ip, host_port in ports})
    summary.update({f"mount {target}": f"{source}:{mode}" for source, target, mode in binds})
    summary.update(secret.summary)  # a new generation in a secret file recreates it too
    summary.update({f"label {key}": value for key, value in c.labels.items()})
    if c.mac is not None:  # only then: containers without one keep their digest
        summary["mac"] = c.mac
    # the runtime fixes a container's log options at creation: a changed limit recreates it
    summary["logs"] = (f"{c.logs.driver} max-size={c.logs.max_size} "
                       f"max-file={c.logs.max_files}")
    digest = config_digest(summary)
    labels = dict(c.labels)
    labels.update({LABEL_MESH: declaration.mesh, LABEL_INSTANCE: c.instance,
                   LABEL_CONTAINER: c.container, LABEL_DIGEST: digest,
                   LABEL_SUMMARY: json.dumps(summary, sort_keys=True,
                                                    separators=(",", ":"))})
    if c.run_once:
        labels[LABEL_RUN_ONCE] = "true"
    spec = engine.ContainerSpec(
        name=c.name, image=c.image, command=tuple(c.command) if c.command is not None else None,
        environment=tuple(f"{k}={v}" for k, v in env), labels=tuple(sorted(labels.items())),
        ports=tuple(ports), binds=binds, restart=restart, mac=c.mac, pull_auth=pull_auth,
        placeholders=placeholders,
        log_config=(c.logs.driver, (("max-file", str(c.logs.max_files)),
                                    ("max-size", c.logs.max_size))))
    env_file = DesiredFile(str(paths.env_dir / f"{_safe_name(c.name)}.env"),
                           hashlib.sha256(env_text.encode()).hexdigest())
    desired = DesiredContainer(c.name, c.run_once, digest, pmap(summary),
                               health=c.health is not None and not c.run_once)
    return desired, spec, env_file, env_text


def _declared_file(f: FileDecl, paths: NodePaths, secret_source: Optional[SecretSource],
                   refusals: list[Refusal]) -> Optional[tuple[DesiredFile, bytes]]:
    """(DesiredFile, bytes) of a declared file under the file root, or None (refused)."""
    if not os.path.isabs(f.path):
        refusals.append(Refusal(f.path, "a declared file must be an absolute path"))
        return None
    try:
        mode = int(f.mode, 8)
    except ValueError:
        refusals.append(Refusal(f.path, f"mode {f.mode!r} is not octal (e.g. \"0644\")"))
        return None
    target = paths.on_node(f.path)
    if paths.owns(target):
        refusals.append(Refusal(f.path, f"a declared file inside the executor's own directory "
                                f"{paths.root}"))
        return None
    text = f.content
    for ref in f.refs():  # its secret, and a list binding's other entries' credentials
        if ref.generation is None:
            refusals.append(Refusal(f.path, f"credential {ref.credential} has not been issued "
                                    "yet (`mesh plan --issue`)"))
            return None
        if secret_source is None:
            refusals.append(Refusal(f.path, f"needs credential {ref.credential}, but no sealed "
                                    "secrets were given (--secrets FILE --key FILE)"))
            return None
        try:
            value = secret_source(ref)
        except Exception as exc:  # the unsealer's error, named (never the value)
            refusals.append(Refusal(f.path, f"credential {ref.credential} generation "
                                    f"{ref.generation} cannot be unsealed: {exc}"))
            return None
        text = text.replace(secret_token(ref.credential), value)
    if secret_tokens(text):  # a token left: a credential the file does not declare
        refusals.append(Refusal(f.path, "refers to a credential it does not declare"))
        return None
    data = text.encode()
    owner: Optional[tuple[int, int]] = None
    if f.owner is not None:  # uid:gid (validated where the resolver took it from)
        uid, _, gid = f.owner.partition(":")
        owner = (int(uid), int(gid or uid))
    return DesiredFile(target, hashlib.sha256(data).hexdigest(), mode, owner), data


def render(declaration: Declaration, paths: NodePaths,
           secret_source: Optional[SecretSource] = None) -> Rendered:
    """The desired node state, the files' contents and the containers' specs."""
    refusals: list[Refusal] = []
    substitute = _Substituter(secret_source, refusals)
    contents: dict[str, bytes] = {}
    specs: dict[str, engine.ContainerSpec] = {}
    health: dict[str, tuple[HealthDecl, str]] = {}
    containers: list[DesiredContainer] = []
    files: list[DesiredFile] = []
    generations: dict[str, int] = {}
    seen: set[str] = set()
    for c in declaration.containers:
        if c.name in seen:
            refusals.append(Refusal(c.name, "two containers of this declaration share the name"))
            continue
        seen.add(c.name)
        secret = secret_files(c, paths, substitute, server_held_secrets(declaration, c),
                              refusals)
        container, spec, env_file, env_text = _container(c, declaration, paths, substitute,
                                                         refusals, secret)
        files.extend(secret.files)
        contents.update(secret.contents)
        containers.append(container)
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
    for f in declaration.files:
        rendered_file = _declared_file(f, paths, secret_source, refusals)
        if rendered_file is not None:
            files.append(rendered_file[0])
            contents[rendered_file[0].path] = rendered_file[1]
            for ref in f.refs():
                if ref.generation is not None:
                    generations[ref.credential] = max(ref.generation,
                                                      generations.get(ref.credential, 0))
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
