"""Applying declarations on this node exactly as `mesh apply` does, for every caller.

The `mesh apply` verb and the node agent call `apply_files`: the declarations are read, the
sealed values opened with the node key, and the newest declaration applied through the same
hooks (firewall, admin checks, provisioners) and the same record; a state arrival
(node/state_move) and a guarded upgrade's snapshot (node/upgrade.py) come before it, a
rollback's restore after it. Nothing here prints a
summary; the Report says what happened step by step as it happens, through its printer.

Invariants:
- One code path: whoever applies on a node goes through `apply_files` (or `apply_fast`'s
  no-op check first, which declines to it on any doubt); both take one `ApplyOptions` and
  return one `ApplyOutcome` (outcome.py).
- Imported only once the full path runs (`mesh apply` imports it after the no-op check
  declined), so everything it needs is imported at the top here: the resolver, the docker
  SDK, the provisioners, the node key's cryptography, the firewall executor (which imports
  the nftables binding, a system package, only when a firewall is applied).
- An unreachable engine or an unreadable state root is a failed outcome, never a traceback:
  it is said once here, naming the Engine or the file.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence

import docker
from requests.exceptions import RequestException

from resolver import Declaration, Fault, FirewallIntent, InputError, MeshError, SecretRef
from resolver.documents import load_document, load_ledger, structure

from executors.common import keys
from executors.common.report import Report
from executors.node import docker_engine
from executors.node.apply import fast as apply_fast
from executors.node.apply import pipeline
from executors.node.apply.options import ApplyOptions
from executors.node.apply.outcome import ApplyOutcome, ApplyResult
from executors.node.extensions import Check, Firewall, ProvisionHook, SecretSource
from executors.node import provisioners
from executors.node.firewall.executor import apply_firewall
from executors.node.firewall.render import DEFAULT_BRIDGES
from executors.node.node_paths import NodePaths, default_file_root
from executors.node.provisioners.base import ProvisionResult
from executors.node.provisioners.grants import provision_files
from executors.node.provisioners.registry import FILE_KINDS
from executors.node.state_move.arrive import arrive_pending
from executors.node.upgrade import after_rollbacks, before_upgrades


SPOOL_SUFFIXES = (".json", ".yaml", ".yml")


# --------------------------------------------------------------------------- inputs


def _files(arguments: Iterable[str]) -> list[Path]:
    files: list[Path] = []
    for argument in arguments:
        path = Path(argument)
        if path.is_dir():
            files.extend(sorted(p for p in path.iterdir()
                                if p.suffix in SPOOL_SUFFIXES and not p.name.startswith(".")))
        else:
            files.append(path)
    return files


def load_declarations(arguments: Sequence[str]) -> list[tuple[str, Declaration]]:
    """Every declaration named, or InputError with every fault of every file."""
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
            fast = _fast_json(text) if path.suffix == ".json" else None
            # YAML, or JSON with a fault: located faults from the loader
            declaration = fast if fast is not None else \
                load_document(text, str(path), Declaration)[0]
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


def _fast_json(text: str) -> Optional[Declaration]:
    """A well-formed JSON declaration without the YAML loader's position bookkeeping (the
    common case, and most of a no-op apply's time); None sends anything else to the loader."""
    try:
        return structure(json.loads(text), Declaration)
    except Exception:  # malformed: load_document reports it, located
        return None


def secret_source_from(secrets_file: Optional[str], key_file: Optional[str],
                       node: str) -> Optional[SecretSource]:
    """SecretRef → value, from the values sealed to `node` in a ledger file; None if no file."""
    if secrets_file is None and key_file is None:
        return None
    if secrets_file is None or key_file is None:
        raise MeshError("--secrets and --key go together: the sealed values and the key that "
                        "opens them")
    try:
        text = Path(secrets_file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError([Fault(str(secrets_file), 0, 0, f"cannot be read: {exc}",
                                "a ledger file")]) from None
    ledger, _ = load_ledger(text, str(secrets_file))
    values = keys.unseal_for_node(ledger, node, keys.load_private_key(key_file))

    def source(ref: SecretRef) -> str:
        generations = values.get(ref.credential, {})
        if ref.generation is None or ref.generation not in generations:
            raise MeshError(f"{secrets_file} holds no value of it sealed to {node}")
        return generations[ref.generation]

    return source


# --------------------------------------------------------------------------- hooks


def runtime_bridges(api: Optional[docker.APIClient], intent: FirewallIntent,
                    say: Callable[[str], None]) -> tuple[str, ...]:
    """The bridges same-node consumers arrive on: the Engine's default network's interface
    (where `mesh apply` creates containers); Docker's default name when it cannot say."""
    if not intent.local or api is None:
        return tuple(DEFAULT_BRIDGES)
    try:
        return (docker_engine.default_bridge(api),)
    except (docker_engine.EngineError, docker.errors.DockerException,
            RequestException, OSError) as exc:
        say(f"firewall: cannot ask the Engine for its bridge ({exc}); assuming "
            f"{', '.join(DEFAULT_BRIDGES)}")
        return tuple(DEFAULT_BRIDGES)


def firewall_bridges(intent: FirewallIntent, *, given: Optional[Sequence[str]] = None,
                     docker_host: Optional[str] = None,
                     say: Callable[[str], None] = lambda line: None) -> tuple[str, ...]:
    """The bridges `mesh firewall` renders same-node openings for: those `given` (--bridge);
    else, when same-node consumers are let in, the Engine's default bridge (as `mesh apply`
    asks it), or Docker's default name when no Engine answers."""
    if given:
        return tuple(given)
    if not intent.local:
        return tuple(DEFAULT_BRIDGES)
    return runtime_bridges(docker_engine.connect(docker_host, timeout=10), intent, say)


def firewall_hook(state_root: str, api: Optional[docker.APIClient] = None) -> Optional[Firewall]:
    """The firewall executor as an apply hook, or None when it is not installed. Its digest
    file lives with the executor's own files (`<state root>/.mesh/firewall.digest`)."""
    if importlib.util.find_spec("executors.node.firewall.executor") is None:
        return None
    state_dir = str(NodePaths(state_root).root)

    def apply_intent(intent: FirewallIntent, report: Report, dry_run: bool, /) -> None:
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


def provisioning_hooks(declaration: Declaration) -> tuple[list[Check], list[ProvisionHook]]:
    """(checks, provisioners) for an apply of `declaration`: the admin check before anything
    changes and the provisioning of every grant of every kind (executors/node/provisioners/,
    whose registry names each kind's provisioner and reports kinds it has none for). None for a
    declaration with no grant and no provider holding an admin credential: nothing to do, and
    its kinds' modules (psycopg, requests) are not even imported."""
    if not provisioners.needs_provisioning(declaration):
        return [], []
    if declaration.grants and all(g.kind in FILE_KINDS for g in declaration.grants) and \
            not any(p.admin is not None for p in declaration.providers):
        return [], []  # only the registry's accounts: the file hook (file_hooks) keeps them
    return [provisioners.check_admins], [provisioners.provision]


def file_hooks(declaration: Declaration, paths: NodePaths,
               api: Optional[docker.APIClient]) -> list[ProvisionHook]:
    """The provisioners that keep a file on this node (the mesh registry's htpasswd), bound to
    its file root and Docker Engine; empty when the declaration grants none of their kinds."""
    if not any(g.kind in FILE_KINDS for g in declaration.grants) and \
            not any(p.kind in FILE_KINDS for p in declaration.providers):  # tool servers
        return []

    def hook(declaration: Declaration, secret_source: Optional[SecretSource], report: Report,
             dry_run: bool = False, /) -> ProvisionResult:
        return provision_files(declaration, secret_source, report, paths=paths, api=api,
                               dry_run=dry_run)

    return [hook]


# --------------------------------------------------------------------------- apply


def apply_files(options: ApplyOptions, report: Report) -> ApplyOutcome:
    """Apply the newest of `options.declarations` on this node; how it ended (`result`:
    applied, dry-run, superseded, refused or failed). The steps are said through `report`."""
    noop_inputs = None if options.dry_run else _noop_inputs(options)
    declarations = load_declarations(options.declarations)
    node = declarations[0][1].node
    secret_source = secret_source_from(options.secrets, options.key, node)
    api = docker_engine.connect(options.docker_host)
    newest = max(declarations, key=lambda d: d[1].serial)[1]
    checks, provisioners = provisioning_hooks(newest)
    file_root = options.file_root or default_file_root()
    provisioners = provisioners + file_hooks(newest, NodePaths(options.state_root, file_root),
                                             api)
    # a move's state arrives, verified, before anything here changes (node/state_move)
    if not arrive_pending(newest, NodePaths(options.state_root, file_root), secret_source,
                          report, options.dry_run):
        report.say("stopped before changing anything: a state arrival failed; result: failed")
        # the file and the event log: the agent keeps the file to try again (agent/arrivals)
        # and reports why the arrival failed
        return ApplyOutcome(ApplyResult.FAILED, mesh=newest.mesh, node=newest.node,
                            serial=newest.serial, failed_phase="arrival",
                            file=str(max(declarations, key=lambda d: d[1].serial)[0]),
                            ops=tuple(report.ops))
    # a stateful instance about to run another image is snapshotted first (node/upgrade.py)
    if newest.upgrades and not before_upgrades(
            newest, NodePaths(options.state_root, file_root), api,
            options.backup_password_file, report, options.dry_run, secrets=secret_source):
        return ApplyOutcome(ApplyResult.FAILED, mesh=newest.mesh, node=newest.node,
                            serial=newest.serial, failed_phase="snapshot")
    outcome = pipeline.apply_latest(
        declarations, api=api, state_root=options.state_root, secret_source=secret_source,
        dry_run=options.dry_run, report=report,
        firewall=None if options.no_firewall else firewall_hook(options.state_root, api),
        checks=checks, provisioners=provisioners, stop_timeout=options.stop_timeout,
        file_root=file_root,
        noop_inputs=noop_inputs if noop_inputs == _noop_inputs(options) else None)
    if newest.upgrades and outcome.result == ApplyResult.APPLIED and not options.dry_run \
            and not after_rollbacks(newest, NodePaths(options.state_root, file_root), api,
                                    options.backup_password_file, report,
                                    secrets=secret_source):
        outcome = outcome._replace(result=ApplyResult.FAILED, failed_phase="rollback")
    error = outcome.error
    if error is not None and error.engine:
        report.say(f"mesh: the Docker Engine at {options.docker_host or 'the local socket'} did "
                   f"not answer as expected: {error.message}")
    elif error is not None:
        report.say(f"mesh: {error.filename or options.state_root}: {error.reason}")
    return outcome


def _noop_inputs(options: ApplyOptions) -> Optional[apply_fast.NoopInputs]:
    """The inputs' fingerprint, taken before and after loading: equal both times, the
    declaration applied is the one fingerprinted."""
    try:
        return apply_fast.noop_inputs(options)
    except OSError:  # unreadable: the full path reports it
        return None
