"""Files a module mounts instead of reading env: a requirement's binding values as one file
(`binding: <as>`, as env, json, yaml or prometheus-file-sd) and the mesh CA's certificate
(`ca: true`).

Invariants:
- A binding file is a FileDecl of its consumer instance (InstanceRendering.files, so a held
  instance keeps it byte for byte) at `/etc/mesh/bindings/<instance>/<as>.<format>`: the values
  its binding tells it, keys as the provision names them, each value a string; the password is
  its `${secret:…}` token and the binding's SecretRef, filled by the node at apply, never a value
  here. In json and yaml every value is a JSON string (a JSON string is a YAML double-quoted
  scalar), escaped here; the token is filled in as the raw value, which needs no escaping
  because the issuer's passwords are URL-safe (secrets.token_urlsafe).
- The file is 0444, so that whatever user the app runs as can read it inside the container,
  or 0400 owned by the mount's `owner` (uid:gid) when the module names the user its app reads
  it as; on the node the executor keeps the bindings' directories (BINDING_FILES_DIR) 0700
  root, so no other user of the node can reach it either way.
  An optional requirement left unbound gets the file with no values (the app is told nothing,
  as an env value would be ""). A requirement taking every provider (`each`) gets its list,
  one item per entry with `name`, each entry's token and SecretRef (`secret`, `more_secrets`).
- `prometheus-file-sd` is the list as Prometheus's file_sd reads it (one target group per
  provider: `host:port`, the provider instance, the url's scheme and path as labels), with
  no secret and no SecretRef: the format has no place for one.
- A container mounting binding files carries the binding's SecretRef in `secrets` (the plan
  shows a rotation recreating it; the node reports holding it) and the label `FILES_LABEL`, a
  digest of every such file's target, content and secret generation: the container's
  declaration changes exactly when what a mounted file says changes (a host after a provider
  moved, a credential's generation after a rotation), so the node recreates it. A single-file
  bind mount keeps the inode it was created with: recreating is the only honest way a new file
  reaches the app, so no signal is offered.
- `ca: true` mounts the node's one copy of the mesh CA certificate (resolver/_tls.py's
  CA_HOST_FILE and ca_file, the same file consumers of TLS bindings mount) at the target the
  module names, and labels the container with the certificate's fingerprint (CA_LABEL), so a
  new CA recreates it. The instance holds the CA file among its files. With no CA in the ledger
  yet (before `mesh ca init` and the first issue) the mount is declared without the file and
  the resolution states `no-mesh-ca` at the mount (check_ca_mounts: an error that blocks
  nothing, so the instance's credentials are still requested in the same `plan --issue`, whose
  second pass has the CA); a node refuses a container mounting a file its declaration does not
  hold, so it never starts with a mount of a file that is not there.
"""

from __future__ import annotations

import hashlib
import json
from typing import Iterable, Mapping, Optional, Sequence, Union

import attrs
from pyrsistent import pvector

from . import _codes as codes
from ._context import Blocked, Context, Findings
from ._declaration import BindingDecl, BindingEntry, ContainerDecl, FileDecl, MountDecl, SecretRef
from ._model import Container
from ._tls import CA_HOST_FILE, ca_file

#: The formats a binding file is written in (`format:` of a mount).
BINDING_FORMATS = ("env", "json", "yaml", "prometheus-file-sd")
#: Prometheus's file-based service discovery (file_sd_configs): a JSON list of target groups.
FILE_SD_FORMAT = "prometheus-file-sd"
#: The label of a file_sd target group naming the provider instance it scrapes.
FILE_SD_INSTANCE_LABEL = "mesh_instance"
DEFAULT_FORMAT = "env"
#: Where a node keeps its instances' binding files: `<dir>/<instance>/<as>.<format>`.
BINDING_FILES_DIR = "/etc/mesh/bindings"
#: The MountDecl kind of a mounted binding file.
BINDING_MOUNT_KIND = "binding"
#: The label carrying the digest of what a container's mounted binding files say.
FILES_LABEL = "mesh.binding-files"
#: Readable by the app's user inside the container; its directory on the node is 0700 root.
BINDING_FILE_MODE = "0444"
#: The mode of a binding file whose mount names the `owner` the app reads it as.
OWNED_BINDING_FILE_MODE = "0400"
#: The MountDecl kind of a mount of the mesh CA certificate (the same as TLS consumers').
CA_MOUNT_KIND = "ca"
#: The label carrying the fingerprint of the CA certificate a container mounts.
CA_LABEL = "mesh.ca"


@attrs.frozen
class FileMount:
    """A file mount of a module's container as compiled once per module: a requirement's
    binding in a format, or the CA certificate (`requirement` None)."""

    target: str
    requirement: Optional[str] = None
    format: str = DEFAULT_FORMAT
    owner: Optional[str] = None  # uid:gid of a binding file (0400), else 0444 root's


def compile_file_mounts(container: Container) -> tuple[FileMount, ...]:
    """The binding and CA mounts of `container`, in its order (validated: each names one
    source, a binding a requirement of the module)."""
    found = []
    for m in container.mounts:
        if m.binding is not None:
            found.append(FileMount(m.target, m.binding, m.format or DEFAULT_FORMAT, m.owner))
        elif m.ca:
            found.append(FileMount(m.target))
    return tuple(found)


def is_file_mount(kind: str) -> bool:
    """Whether a MountDecl kind mounts a file the mesh writes (a binding file or the CA)."""
    return kind in (BINDING_MOUNT_KIND, CA_MOUNT_KIND)


def ca_fingerprint(ca_pem: str) -> str:
    """A short one-way fingerprint of the CA certificate (what CA_LABEL carries); `none`
    while the mesh has none."""
    if not ca_pem:
        return "none"
    return "sha256:" + hashlib.sha256(ca_pem.encode()).hexdigest()[:16]


def with_ca_at(container: ContainerDecl, target: str, ca_pem: str) -> ContainerDecl:
    """`container` with the node's mesh CA certificate mounted read-only at `target` and its
    fingerprint labelled."""
    mount = MountDecl(CA_MOUNT_KIND, CA_HOST_FILE, target, True)
    mounts = container.mounts if mount in container.mounts else container.mounts.append(mount)
    return attrs.evolve(container, mounts=mounts,
                        labels=container.labels.set(CA_LABEL, ca_fingerprint(ca_pem)))


def binding_file_path(instance: str, requirement: str, fmt: str) -> str:
    """Where instance `instance`'s binding `requirement` is kept on its node in format `fmt`."""
    return f"{BINDING_FILES_DIR}/{instance}/{requirement}.{fmt}"


JsonValue = Union[str, Sequence["JsonValue"], Mapping[str, "JsonValue"]]


def _indented(value: JsonValue, depth: int = 0) -> str:
    """`value` as `json.dumps(value, indent=2, sort_keys=True)` writes it, byte for byte, but
    without json's indenting encoder: that one is pure Python, and its nested functions refer
    to each other, so every call would leave a reference cycle behind, which a resolution
    must never make (resolver/_collector.py). Only strings reach json.dumps here."""
    if isinstance(value, str):
        return json.dumps(value)
    inner, outer = "\n" + "  " * (depth + 1), "\n" + "  " * depth
    if isinstance(value, Mapping):
        if not value:
            return "{}"
        return "{" + ",".join(f"{inner}{json.dumps(key)}: {_indented(value[key], depth + 1)}"
                              for key in sorted(value)) + outer + "}"
    if not value:
        return "[]"
    return "[" + ",".join(inner + _indented(item, depth + 1) for item in value) + outer + "]"


def binding_file_content(values: Mapping[str, str], fmt: str) -> str:
    """Binding values as a file in `fmt`: env (`key=value` lines), json (one object), yaml
    (one mapping), keys sorted, values strings; or prometheus-file-sd (a list of one target
    group, none when there are no values)."""
    if fmt == FILE_SD_FORMAT:
        return file_sd_content([(None, values)] if values else [])
    pairs = sorted(values.items())
    if fmt == "env":
        return "".join(f"{key}={value}\n" for key, value in pairs)
    if fmt == "json":
        return _indented(dict(pairs)) + "\n"
    assert fmt == "yaml", fmt  # validated: one of BINDING_FORMATS
    if not pairs:
        return "{}\n"
    return "".join(f"{json.dumps(key)}: {json.dumps(value)}\n" for key, value in pairs)


def list_file_content(entries: Iterable[BindingEntry], fmt: str) -> str:
    """A requirement taking every provider (`each`) as a file in `fmt`, one item per entry in
    the binding's order, each its values plus `name` (the provider instance): json, a list of
    objects; yaml, a sequence of mappings; env, `count=N` then `<key>_<i>=value` lines (i from
    0). Keys sorted, values strings."""
    if fmt == FILE_SD_FORMAT:
        return file_sd_content([(e.provider, e.values) for e in entries])
    items = [sorted({**e.values, "name": e.provider}.items()) for e in entries]
    if fmt == "json":
        return _indented([dict(pairs) for pairs in items]) + "\n"
    if fmt == "yaml":
        if not items:
            return "[]\n"
        return "".join("- " + json.dumps(dict(pairs), sort_keys=True) + "\n" for pairs in items)
    assert fmt == "env", fmt  # validated: one of BINDING_FORMATS
    return f"count={len(items)}\n" + "".join(
        f"{key}_{i}={value}\n" for i, pairs in enumerate(items) for key, value in pairs)


def file_sd_content(entries: Iterable[tuple[Optional[str], Mapping[str, str]]]) -> str:
    """Bindings as Prometheus reads a file_sd file: a JSON list with one target group per
    (provider instance or None, values), in the order given: `targets` its `host:port`,
    `labels` the provider instance (FILE_SD_INSTANCE_LABEL) and, from its `url`, the scheme
    (`__scheme__`) and the path scraped (`__metrics_path__`). No secret is written: a
    file_sd file has no place for one (a provision needing a credential per target does not
    fit this format)."""
    groups: list[JsonValue] = []
    for provider, values in entries:
        labels: dict[str, str] = {}
        if provider is not None:
            labels[FILE_SD_INSTANCE_LABEL] = provider
        url = values.get("url", "")
        scheme, _, rest = url.partition("://")
        if rest:
            labels["__scheme__"] = scheme
            _, slash, path = rest.partition("/")
            labels["__metrics_path__"] = slash + path.split("?", 1)[0] if slash else "/"
        group: dict[str, JsonValue] = {
            "labels": labels, "targets": [f"{values.get('host', '')}:{values.get('port', '')}"]}
        groups.append(group)
    return _indented(groups) + "\n"


def binding_file(instance: str, requirement: str, fmt: str,
                 told: Optional[BindingDecl], owner: Optional[str] = None) -> FileDecl:
    """The file of `instance`'s binding `requirement` in `fmt` (`told`: what the binding tells
    it; None, an optional requirement left unbound: no values), 0400 owned by `owner` when
    given, else 0444. A binding that takes every provider is its list (list_file_content),
    holding each entry's credential."""
    if told is not None and told.each:
        refs = told.held_secrets() if fmt != FILE_SD_FORMAT else ()  # file_sd holds none
        return FileDecl(binding_file_path(instance, requirement, fmt),
                        list_file_content(told.entries, fmt),
                        OWNED_BINDING_FILE_MODE if owner is not None else BINDING_FILE_MODE,
                        refs[0] if refs else None,
                        reason=f"binding {requirement} of {instance} ({fmt}), mounted",
                        owner=owner, more_secrets=pvector(refs[1:]))
    values: Mapping[str, str] = told.values if told is not None else {}
    return FileDecl(binding_file_path(instance, requirement, fmt),
                    binding_file_content(values, fmt),
                    OWNED_BINDING_FILE_MODE if owner is not None else BINDING_FILE_MODE,
                    told.secret if told is not None and fmt != FILE_SD_FORMAT else None,
                    reason=f"binding {requirement} of {instance} ({fmt}), mounted", owner=owner)


def files_digest(mounted: Iterable[tuple[str, FileDecl]]) -> str:
    """The digest FILES_LABEL carries: over each mounted (target, file)'s content and the
    generation of the secret it is filled with."""
    rows = [[target, f.path, f.content,
             None if f.secret is None else [f.secret.credential, f.secret.generation]]
            + [[r.credential, r.generation] for r in f.more_secrets]  # a list's other entries
            for target, f in mounted]
    data = json.dumps(rows, separators=(",", ":"), sort_keys=True).encode()
    return "sha256:" + hashlib.sha256(data).hexdigest()[:16]


def with_file_mounts(container: ContainerDecl, mounts: Iterable[FileMount], instance: str,
                     told: Mapping[str, BindingDecl], ca_pem: str
                     ) -> tuple[ContainerDecl, list[FileDecl]]:
    """`container` of `instance` with its file mounts added (binding files from what it is
    `told`, the CA from `ca_pem`), and the files they mount (its binding files, the CA's)."""
    files: list[FileDecl] = []
    mounted: list[tuple[str, FileDecl]] = []
    decls: list[MountDecl] = []
    refs: set[SecretRef] = set(container.secrets)
    for m in mounts:
        if m.requirement is None:
            container = with_ca_at(container, m.target, ca_pem)
            if ca_pem and ca_file(ca_pem) not in files:
                files.append(ca_file(ca_pem))
            continue
        f = binding_file(instance, m.requirement, m.format, told.get(m.requirement), m.owner)
        if f not in files:
            files.append(f)
        mounted.append((m.target, f))
        decls.append(MountDecl(BINDING_MOUNT_KIND, f.path, m.target, True))
        refs.update(f.refs())  # a list binding's file holds each entry's credential
    if mounted:
        container = attrs.evolve(
            container, mounts=container.mounts.extend(decls),
            secrets=pvector(sorted(refs)),
            labels=container.labels.set(FILES_LABEL, files_digest(mounted)))
    return container, files


def check_ca_mounts(r: Context, blocked: Blocked) -> Findings:
    """With no mesh CA in the ledger yet, the mount of it (`ca: true`) of each placed instance
    whose installed containers have one, stated as an error that blocks nothing (the node
    refuses the container until its declaration holds the CA file)."""
    if r.ledger.ca:
        return ()
    found = []
    mounting: dict[str, bool] = {}  # module name → whether any container of it mounts the CA
    for name in r.placed(blocked):
        module = r.placed_module(name)
        mounts_ca = mounting.get(module.name)
        if mounts_ca is None:
            mounts_ca = mounting[module.name] = any(
                m.ca for container in module.containers for m in container.mounts)
        if not mounts_ca:
            continue  # (most modules: no container of theirs mounts it)
        parts = r.instances[name].parts
        for i, container in enumerate(module.containers):
            if container.part is not None and container.part not in parts:
                continue
            j = next((j for j, m in enumerate(container.mounts) if m.ca), None)
            if j is not None:
                found.append(r.problem(
                    codes.NO_MESH_CA,
                    f"container {container.name} of {name} mounts the mesh CA certificate, "
                    "but the mesh has no CA yet; run `mesh ca init DIR` and "
                    "`mesh plan DIR --issue`",
                    doc=f"module:{module.name}", path=("containers", i, "mounts", j, "ca"),
                    instance=name))
                break
    return tuple(found)


def mount_files(containers: Iterable[ContainerDecl],
                file_mounts: Iterable[tuple[FileMount, ...]], instance: str,
                told: Mapping[str, BindingDecl], ca_pem: str
                ) -> tuple[list[ContainerDecl], list[FileDecl]]:
    """An instance's containers (each with its compiled file mounts, in the same order) with
    their binding files and CA mounted, and the files they mount, each once."""
    out: list[ContainerDecl] = []
    files: list[FileDecl] = []
    for container, mounts in zip(containers, file_mounts):
        if mounts:
            container, mine = with_file_mounts(container, mounts, instance, told, ca_pem)
            files.extend(f for f in mine if f not in files)
        out.append(container)
    return out, files
