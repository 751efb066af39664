"""Applying declarations on this node exactly as `mesh apply` does, for every caller.

The `mesh apply` verb and the node agent call `apply_files`: the declarations are read, the
sealed values opened with the node key, and the newest declaration applied through the same
hooks (firewall, admin checks, provisioners) and the same record. Nothing here prints a
summary; the Report says what happened step by step as it happens, through its printer.

Invariants:
- One code path: whoever applies on a node goes through `apply_files` (or `apply_fast`'s
  no-op check first, which declines to it on any doubt).
- Heavy imports (the resolver, the docker SDK, the provisioners' clients) happen when needed.
- An unreachable engine or an unreadable state root is a failed report, never a traceback.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
from pathlib import Path
from typing import TYPE_CHECKING

from executors.node.apply.options import ApplyOptions

if TYPE_CHECKING:  # imported where used: a no-op answered by apply_fast never loads them
    from resolver import Declaration

    from executors.common.report import Report

SPOOL_SUFFIXES = (".json", ".yaml", ".yml")


# --------------------------------------------------------------------------- inputs


def _files(arguments) -> list[Path]:
    files: list[Path] = []
    for argument in arguments:
        path = Path(argument)
        if path.is_dir():
            files.extend(sorted(p for p in path.iterdir()
                                if p.suffix in SPOOL_SUFFIXES and not p.name.startswith(".")))
        else:
            files.append(path)
    return files


def load_declarations(arguments) -> list[tuple[str, Declaration]]:
    """Every declaration named, or InputError with every fault of every file."""
    from resolver import Declaration, Fault, InputError, load_document

    faults: list[Fault] = []
    loaded: list[tuple[str, Declaration]] = []
    files = _files(arguments)
    if not files:
        raise InputError([Fault(str(a), 0, 0, "holds no declaration files",
                                "a declaration file or a directory of them") for a in arguments])
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            faults.append(Fault(str(path), 0, 0, f"cannot be read: {exc}", "a declaration file"))
            continue
        try:
            declaration = _fast_json(text) if path.suffix == ".json" else None
            if declaration is None:  # YAML, or JSON with a fault: located faults from the loader
                declaration, _ = load_document(text, str(path), Declaration)
        except InputError as error:
            faults.extend(error.faults)
            continue
        loaded.append((str(path), declaration))
    if faults:
        raise InputError(faults)
    first_label, first = loaded[0]
    for label, declaration in loaded[1:]:
        if (declaration.mesh, declaration.node) != (first.mesh, first.node):
            faults.append(Fault(label, 0, 0, f"is for node {declaration.node} of mesh "
                                f"{declaration.mesh}, but {first_label} is for node {first.node} "
                                f"of mesh {first.mesh}", "declarations of one node"))
    if faults:
        raise InputError(faults)
    return loaded


def load_declaration(path: str) -> Declaration:
    """The declaration in a file, or the newest by serial of a spool directory (the one an
    apply would take); InputError naming every fault (file:line:col)."""
    return max((d for _, d in load_declarations([path])), key=lambda d: d.serial)


def _fast_json(text: str):
    """A well-formed JSON declaration without the YAML loader's position bookkeeping (the
    common case, and most of a no-op apply's time); None sends anything else to the loader."""
    import resolver

    try:
        return resolver.structure(json.loads(text), resolver.Declaration)
    except Exception:  # malformed: load_document reports it, located
        return None


def secret_source_from(secrets_file, key_file, node: str):
    """SecretRef → value, from the values sealed to `node` in a ledger file; None if no file."""
    if secrets_file is None and key_file is None:
        return None
    import resolver
    from resolver import Fault, InputError, MeshError

    if secrets_file is None or key_file is None:
        raise MeshError("--secrets and --key go together: the sealed values and the key that "
                        "opens them")
    from executors.common import keys

    try:
        text = Path(secrets_file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError([Fault(str(secrets_file), 0, 0, f"cannot be read: {exc}",
                                "a ledger file")]) from None
    ledger, _ = resolver.load_ledger(text, str(secrets_file))
    values = keys.unseal_for_node(ledger, node, keys.load_private_key(key_file))

    def source(ref) -> str:
        try:
            return values[ref.credential][ref.generation]
        except KeyError:
            raise MeshError(f"{secrets_file} holds no value of it sealed to {node}") from None

    return source


# --------------------------------------------------------------------------- hooks


def runtime_bridges(api, intent, say) -> tuple:
    """The bridges same-node consumers arrive on: the Engine's default network's interface
    (where `mesh apply` creates containers); Docker's default name when it cannot say."""
    from executors.node.firewall.render import DEFAULT_BRIDGES

    if not intent.local or api is None:
        return DEFAULT_BRIDGES
    from requests.exceptions import RequestException

    from executors.node import docker_engine

    try:
        return (docker_engine.default_bridge(api),)
    except (docker_engine.EngineError, docker_engine.docker.errors.DockerException,
            RequestException, OSError) as exc:
        say(f"firewall: cannot ask the Engine for its bridge ({exc}); assuming "
            f"{', '.join(DEFAULT_BRIDGES)}")
        return DEFAULT_BRIDGES


def firewall_bridges(intent, *, given=None, docker_host=None, say=lambda line: None) -> tuple:
    """The bridges `mesh firewall` renders same-node openings for: those `given` (--bridge);
    else, when same-node consumers are let in, the Engine's default bridge (as `mesh apply`
    asks it), or Docker's default name when no Engine answers."""
    from executors.node.firewall.render import DEFAULT_BRIDGES

    if given:
        return tuple(given)
    if not intent.local:
        return DEFAULT_BRIDGES
    from executors.node import docker_engine

    return runtime_bridges(docker_engine.connect(docker_host, timeout=10), intent, say)


def firewall_hook(state_root: str, api=None):
    """The firewall executor as an apply hook, or None when it is not installed. Its digest
    file lives with the executor's own files (`<state root>/.mesh/firewall.digest`)."""
    if importlib.util.find_spec("executors.node.firewall.executor") is None:
        return None
    from executors.node.node_paths import NodePaths

    state_dir = str(NodePaths(state_root).root)

    def apply_intent(intent, report: Report, dry_run: bool) -> None:
        from resolver import MeshError

        from executors.node.firewall.executor import apply_firewall  # imported only for a declared intent

        try:
            bridges = runtime_bridges(api, intent, report.say)
            result = apply_firewall(intent, state_dir, dry_run=dry_run, emit=report.say,
                                    bridges=bridges)
        except MeshError as exc:
            report.end(report.begin("firewall", "table inet mesh", "declared firewall intent"),
                       f"failed: {exc}", ok=False)
            return
        if result.refusal:
            report.record("firewall", "table inet mesh", "declared firewall intent",
                          f"refused: {result.refusal}", ok=False)
        for step in result.steps:
            report.record(f"firewall-{step.op.kind}", "table inet mesh", step.op.cause,
                          step.result + (f": {step.detail}" if step.detail else ""),
                          ok=step.result != "failed")

    return apply_intent


def provisioning_hooks(declaration: Declaration) -> tuple[list, list]:
    """(checks, provisioners) for an apply of `declaration`: the admin check before anything
    changes and the provisioning of every grant of every kind (executors/node/provisioners/,
    whose registry names each kind's provisioner and reports kinds it has none for). None for a
    declaration with no grant and no provider holding an admin credential: nothing to do, and
    its kinds' modules (psycopg, requests) are not even imported."""
    from executors.node import provisioners

    if not provisioners.needs_provisioning(declaration):
        return [], []
    from executors.node.provisioners.registry import FILE_KINDS

    if declaration.grants and all(g.kind in FILE_KINDS for g in declaration.grants) and \
            not any(p.admin is not None for p in declaration.providers):
        return [], []  # only the registry's accounts: the file hook (file_hooks) keeps them
    return [provisioners.check_admins], [provisioners.provision]


def file_hooks(declaration: Declaration, paths, api) -> list:
    """The provisioners that keep a file on this node (the mesh registry's htpasswd), bound to
    its file root and Docker Engine; empty when the declaration grants none of their kinds."""
    from executors.node.provisioners.registry import FILE_KINDS

    if not any(g.kind in FILE_KINDS for g in declaration.grants):
        return []
    from executors.node.provisioners.htpasswd import provision_accounts

    def hook(declaration, secret_source, report, dry_run=False):
        return provision_accounts(declaration, secret_source, report, paths=paths, api=api,
                                  dry_run=dry_run)

    return [hook]


# --------------------------------------------------------------------------- apply


def apply_files(options: ApplyOptions, report: "Report") -> "Report":
    """Apply the newest of `options.declarations` on this node; the report says how it went
    (`facts["result"]`: applied, dry-run, superseded, refused or failed)."""
    from requests.exceptions import RequestException

    from executors.node.apply import fast as apply_fast

    noop_inputs = None if options.dry_run else _noop_inputs(apply_fast, options)
    declarations = load_declarations(options.declarations)
    node = declarations[0][1].node
    secret_source = secret_source_from(options.secrets, options.key, node)
    from executors.node.apply import pipeline as apply_module
    from executors.node import docker_engine
    from executors.node.node_paths import NodePaths, default_file_root

    api = docker_engine.connect(options.docker_host)
    newest = max(declarations, key=lambda d: d[1].serial)[1]
    checks, provisioners = provisioning_hooks(newest)
    file_root = options.file_root or default_file_root()
    provisioners = provisioners + file_hooks(newest, NodePaths(options.state_root, file_root),
                                             api)
    try:
        report = apply_module.apply_latest(
            declarations, api=api, state_root=options.state_root, secret_source=secret_source,
            dry_run=options.dry_run, report=report,
            firewall=None if options.no_firewall else firewall_hook(options.state_root, api),
            checks=checks, provisioners=provisioners,
            stop_timeout=options.stop_timeout,
            file_root=file_root,
            noop_inputs=noop_inputs if noop_inputs == _noop_inputs(apply_fast, options) else None)
    except (docker_engine.docker.errors.DockerException, RequestException) as exc:
        # the engine is unreachable or broke off mid-way: nothing is recorded as applied
        report.say(f"mesh: the Docker Engine at {options.docker_host or 'the local socket'} did "
                   f"not answer as expected: {exc}")
        report.facts["result"] = "failed"
        report.facts["error"] = str(exc)
    except OSError as exc:
        report.say(f"mesh: {exc.filename or options.state_root}: {exc.strerror or exc}")
        report.facts["result"] = "failed"
        report.facts["error"] = str(exc)
    return report


def succeeded(report: "Report") -> bool:
    """Whether an apply's report counts as success (exit 0 of `mesh apply`)."""
    return report.facts.get("result") in ("applied", "dry-run", "superseded")


def _noop_inputs(apply_fast, args):
    """The inputs' fingerprint, taken before and after loading: equal both times, the
    declaration applied is the one fingerprinted."""
    try:
        return apply_fast.noop_inputs(args)
    except OSError:  # unreadable: the full path reports it
        return None


