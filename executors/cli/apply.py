"""`mesh apply DECLARATION... [--dry-run] [--json]`: make this node match its newest declaration.

Exit codes: 0 applied (or nothing newer to apply, or a dry run); 1 refused, a check or an
operation failed (the report says which and why); 2 bad input (every fault as file:line:col).
A grant of a kind the mesh has no provisioner for (bucket+key, client+secret) is a warning:
reported on every apply with its kind, never counted as in force, and the exit code stays 0.
The record `<state root>/.mesh/applied.json` names the new serial only when every phase
succeeded; otherwise it keeps the last good serial and states what failed.
Every step is printed to stderr as it happens; `--json` prints the final report to stdout.
A DECLARATION may be a file (JSON or YAML of resolver.unstructure(declaration)) or a spool
directory of them; of all given, only the newest by serial is applied, the rest are reported
as superseded. Sealed secrets come from `--secrets FILE` (a ledger holding the values sealed
to this node) opened with `--key FILE` (the node's private key).
A no-op is answered first by apply_fast's check (standard library only), which declines to this
full path on any doubt; `--no-fast` or MESH_APPLY_NO_FAST=1 skips it. Heavy imports (the
resolver, the docker SDK) happen only on the full path.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
from pathlib import Path

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where used: a no-op answered by apply_fast never loads them
    from resolver import Declaration

    from executors.common.report import Report

SPOOL_SUFFIXES = (".json", ".yaml", ".yml")


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "apply",
        help="make this node match the newest of its declarations (containers, files, dirs)",
        description="Observe the node, diff against the newest declaration by serial, apply "
        "the operations and report each with its cause. Older declarations are reported as "
        "superseded, never applied. Phases: checks (each provider's running server accepts "
        "its admin credential), firewall, containers, provisioning; the record "
        "<state-root>/.mesh/applied.json names the new serial only when every phase succeeded. "
        "Readiness and admin checks are observations, listed under checks, not operations. A "
        "grant of a kind with no provisioner is a warning (exit 0), reported on every apply. "
        "Instances the declaration holds (refused in mesh.yaml, kept at their last good "
        "declaration) are reported as held and left as they run.",
    )
    parser.add_argument("declarations", nargs="+", metavar="DECLARATION",
                        help="declaration files, or spool directories of them")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the plan of operations and change nothing")
    parser.add_argument("--json", action="store_true", help="print the final report as JSON")
    parser.add_argument("--state-root", default=os.environ.get("MESH_STATE_ROOT", "/var/lib/mesh"),
                        help="node-side state root (default: /var/lib/mesh): instances' state "
                        "directories under <root>/<instance>/, the executor's own files (env "
                        "files, step markers, applied record) under <root>/.mesh/")
    parser.add_argument("--secrets", metavar="FILE",
                        help="the ledger (or an extract of it) holding values sealed to this node")
    parser.add_argument("--key", metavar="FILE", help="this node's private key file")
    parser.add_argument("--docker-host", default=os.environ.get("DOCKER_HOST"),
                        help="Docker Engine address (default: $DOCKER_HOST or the local socket)")
    parser.add_argument("--stop-timeout", type=int, default=10, metavar="SECONDS",
                        help="grace period when stopping a container to replace it (default 10)")
    parser.add_argument("--no-firewall", action="store_true",
                        help="leave the firewall as it is even if the declaration has an intent")
    parser.add_argument("--no-fast", action="store_true",
                        help="skip the quick no-op check and always observe and diff in full "
                        "(also MESH_APPLY_NO_FAST=1)")
    parser.set_defaults(func=run)


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
    from executors.node.firewall_render import DEFAULT_BRIDGES

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


def firewall_hook(state_root: str, api=None):
    """The firewall executor as an apply hook, or None when it is not installed. Its digest
    file lives with the executor's own files (`<state root>/.mesh/firewall.digest`)."""
    if importlib.util.find_spec("executors.node.firewall") is None:
        return None
    from executors.node.node_paths import NodePaths

    state_dir = str(NodePaths(state_root).root)

    def apply_intent(intent, report: Report, dry_run: bool) -> None:
        from resolver import MeshError

        from executors.node.firewall import apply_firewall  # imported only for a declared intent

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
    changes and the provisioning of every grant of every kind (executors/node/provisioners.py, which
    finds each kind's executors/node/provision_*.py and reports kinds none provisions). None for a
    declaration with no grant and no provider holding an admin credential: nothing to do, and
    its kinds' modules (psycopg, requests) are not even imported."""
    from executors.node import provisioners

    if not provisioners.needs_provisioning(declaration):
        return [], []
    return [provisioners.check_admins], [provisioners.provision]


# --------------------------------------------------------------------------- run


def run(args, out=None) -> int:
    out = out or sys.stdout
    from executors.node import apply_fast

    if not apply_fast.fast_path_disabled(args):
        code = apply_fast.try_noop(args, out)
        if code is not None:
            return code
    from requests.exceptions import RequestException

    from executors.common.report import LivePrinter, Report

    noop_inputs = None if args.dry_run else _noop_inputs(apply_fast, args)
    declarations = load_declarations(args.declarations)
    node = declarations[0][1].node
    secret_source = secret_source_from(args.secrets, args.key, node)
    from executors.node import apply as apply_module
    from executors.node import docker_engine

    report = Report(printer=LivePrinter())
    api = docker_engine.connect(args.docker_host)
    checks, provisioners = provisioning_hooks(max(declarations, key=lambda d: d[1].serial)[1])
    try:
        report = apply_module.apply_latest(
            declarations, api=api, state_root=args.state_root, secret_source=secret_source,
            dry_run=args.dry_run, report=report,
            firewall=None if args.no_firewall else firewall_hook(args.state_root, api),
            checks=checks, provisioners=provisioners,
            stop_timeout=args.stop_timeout,
            noop_inputs=noop_inputs if noop_inputs == _noop_inputs(apply_fast, args) else None)
    except (docker_engine.docker.errors.DockerException, RequestException) as exc:
        # the engine is unreachable or broke off mid-way: nothing is recorded as applied
        print(f"mesh: the Docker Engine at {args.docker_host or 'the local socket'} did not "
              f"answer as expected: {exc}", file=sys.stderr)
        report.facts["result"] = "failed"
        report.facts["error"] = str(exc)
    except OSError as exc:
        print(f"mesh: {exc.filename or args.state_root}: {exc.strerror or exc}", file=sys.stderr)
        report.facts["result"] = "failed"
        report.facts["error"] = str(exc)
    if args.json:
        json.dump(report.to_json(), out, indent=2, sort_keys=True)
        out.write("\n")
    else:
        print_summary(report, out)
    return 0 if report.facts.get("result") in ("applied", "dry-run", "superseded") else 1


def _noop_inputs(apply_fast, args):
    """The inputs' fingerprint, taken before and after loading: equal both times, the
    declaration applied is the one fingerprinted."""
    try:
        return apply_fast.noop_inputs(args)
    except OSError:  # unreadable: the full path reports it
        return None


def print_summary(report: Report, out) -> None:
    facts = report.facts
    print(f"node {facts.get('node')} (mesh {facts.get('mesh')}): {facts.get('result')}; "
          f"serial in force {facts.get('serial_applied')}", file=out)
    from executors.node.apply_fast import print_held

    print_held(facts, out)
    for entry in facts.get("superseded", []):
        print(f"  superseded: {entry['file']} (serial {entry['serial']}) by serial "
              f"{entry['superseded_by']}", file=out)
    for check in report.checks:  # observations, not operations
        print(f"  checked {check.op} {check.subject}: {check.result}", file=out)
    for op in report.ops:
        print(f"  {op.op} {op.subject}: {op.cause} → {op.result}", file=out)
    for refusal in facts.get("refusals", []):
        print(f"  refused: {refusal['subject']}: {refusal['message']}", file=out)
    for outcome in (facts.get("provisioned") or {}).get("outcomes", []):
        if outcome["status"] == "not-provisioned":
            print(f"  not provisioned (warning): {outcome['kind']} grant of "
                  f"{outcome['consumer']} on {outcome['provider']}, credential "
                  f"{outcome['credential']}: no provisioner for this kind; create it by hand",
                  file=out)
    if facts.get("failed_phase"):
        print(f"  failed in the {facts['failed_phase']} phase: serial "
              f"{facts.get('serial_applied')} stays in force (applied.json says so)", file=out)
    generations = facts.get("generations") or {}
    if generations:
        print("  credential generations in force: "
              + ", ".join(f"{c} {g}" for c, g in sorted(generations.items())), file=out)
    if not report.ops and facts.get("result") == "applied":
        print("  nothing to change", file=out)


def main(argv=None) -> int:
    """`python -m executors.cli.apply …`: the same as `mesh apply …` (which, too, loads no
    other subcommand of the `mesh` CLI)."""
    from .main import main as cli_main

    return cli_main(["apply", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
