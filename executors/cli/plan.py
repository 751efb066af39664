"""`mesh plan DIR`: resolve a mesh and show what it would make every node be.

Human output first (per node: containers and ports, firewall, grants, held instances; then
bindings with how each was chosen, problems with file:line, what must be issued, notable
changes; then every change against the declarations each node was last given, section by
section, as terraform plan lists it: resolver.declaration_changes); `--json` for programs;
`--detailed-exitcode` exits 2 when something changes. `--out DIR` writes one declaration file
per node (the input of `mesh apply`), compared with those already there; it records what it wrote in the ledger (serials, each declared
instance's rendering: resolver/_records.py), whose serials it takes together with those of
the declarations already in DIR, so a declaration written later always supersedes. The ledger
is written only with `--out`, `--write-ledger` or `--issue`, atomically.
Exit codes: 0 no refusal, 1 refusals, 2 bad input (or, with --detailed-exitcode, changes).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Optional, Protocol, Sequence, TextIO

import resolver
from resolver import BindingDecl, Resolution
from resolver.documents import unstructure_full
from resolver import ContainerChange, DeclarationChange, change_counts

from executors.cli._verb import Subparsers
from executors.common.runtime import now_iso
from executors.control.declarations import DECLARATION_SUFFIX
from executors.control.planning import plan


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "plan",
        help="resolve a mesh and show each node's declaration, bindings and problems",
        description="Resolve the mesh in DIR (mesh.yaml, its catalogue and ledger) and print "
        "per node its containers, ports, firewall and grants; the bindings and how each "
        "provider was chosen; every problem with file:line; then every change against the "
        "declarations each node was last given (--against, --out, or the control plane's "
        "last published), section by section, with its cause. Exit 0 with no refusal, 1 with "
        "refusals, 2 for bad input (with --detailed-exitcode: 2 when something changes).",
    )
    parser.add_argument("directory", metavar="DIR", help="the mesh directory holding mesh.yaml")
    parser.add_argument("--node", action="append", metavar="N",
                        help="show only this node (repeatable)")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON on stdout")
    parser.add_argument("--out", metavar="DIR",
                        help="write one declaration file per node into DIR (NODE"
                        f"{DECLARATION_SUFFIX}), show container changes against the files "
                        "already there, and record what was written in the ledger (serials "
                        "above those in DIR, each instance's rendering: what a refused "
                        "instance is held at)")
    parser.add_argument("--write-ledger", action="store_true",
                        help="write the new ledger (ports, logins, bindings) atomically; "
                        "serials advance only when declarations are written (--out)")
    parser.add_argument("--issue", action="store_true",
                        help="issue every requested credential and certificate (sealed to its "
                        "holders; re-sealed, same generation, when the holders changed), then "
                        "resolve again and write the ledger")
    parser.add_argument("--key", metavar="FILE",
                        help="the control node's private key: with --issue, opens the values "
                        "a move must re-seal to its new holders")
    parser.add_argument("--against", metavar="DIR",
                        help="compare with the declarations in DIR (default: those in --out, "
                        "else the ones the control plane last published, DIR/.control/out)")
    parser.add_argument("--detailed-exitcode", action="store_true",
                        help="exit 0 when nothing changes against the declarations compared "
                        "with, 2 when something does, 1 with refusals (as terraform plan does)")
    parser.add_argument("--now", metavar="ISO8601", help=argparse.SUPPRESS)  # tests pin the clock
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, out: Optional[TextIO] = None) -> int:
    out = out or sys.stdout
    if args.key and not args.issue:
        raise resolver.MeshError("--key opens the values a move re-seals: it goes with --issue")
    control_key = None
    if args.key:
        # the control extra (PyNaCl): `mesh plan` without --issue runs without it
        from executors.common.keys import load_private_key

        control_key = load_private_key(args.key)
    done = plan(args.directory, now=args.now or now_iso(), out=args.out, against=args.against,
                nodes=args.node, write_ledger=args.write_ledger, issue=args.issue,
                control_key=control_key)
    planned = done.result
    for note in planned.notes:  # what the issuer did (names and generations, never a value)
        print(f"issue: {note}", file=sys.stderr)
    if args.json:
        json.dump(plan_document(planned.resolution, planned.nodes, planned.changes,
                                planned.diff, planned.against), out, indent=2, sort_keys=True)
        out.write("\n")
    else:
        print_plan(planned.resolution, planned.nodes, out)
        print_changes(planned.diff, planned.against, planned.compared, out)
    if args.out or args.write_ledger or args.issue:
        print(f"ledger {'written' if done.written else 'unchanged'}: {done.ledger_path}",
              file=sys.stderr)
    if planned.resolution.refused:
        return 1
    return 2 if args.detailed_exitcode and planned.diff else 0


# --------------------------------------------------------------------------- output


class _Write(Protocol):
    def __call__(self, line: str = "") -> None: ...


def _writer(out: TextIO) -> _Write:
    """print(line) onto `out`; a blank line without one."""
    def write(line: str = "") -> None:
        print(line, file=out)
    return write


def change_document(change: DeclarationChange) -> dict[str, object]:
    """One change as data: what the text plan prints, with the element before and after."""
    return {"node": change.node, "section": change.section, "subject": change.subject,
            "action": change.action, "causes": list(change.causes), "verb": change.verb,
            "position": change.position,
            "before": _element(change.before), "after": _element(change.after)}


def _element(value: object) -> object:
    if value is None or isinstance(value, (str, int)):
        return value
    if isinstance(value, tuple):
        return list(value)
    return unstructure_full(value)


def plan_document(resolution: Resolution, nodes: Sequence[str],
                  changes: Optional[Sequence[ContainerChange]],
                  diff: Sequence[DeclarationChange] = (), against: str = "") -> dict[str, object]:
    added, changed, removed = change_counts(diff)
    doc: dict[str, object] = {
        "against": against,
        "declaration_changes": [change_document(c) for c in diff],
        "summary": {"add": added, "change": changed, "remove": removed},
        "artifacts": resolution.artifacts,
        "nodes": {n: unstructure_full(resolution.declarations[n]) for n in nodes},
        "bindings": [unstructure_full(b) for b in resolution.bindings],
        "problems": [unstructure_full(p) for p in resolution.problems],
        "requests": [unstructure_full(r) for r in resolution.requests],
        "changes": [unstructure_full(c) for c in resolution.changes],
    }
    if changes is not None:
        doc["container_changes"] = [unstructure_full(c) for c in changes]
    return doc


def print_plan(resolution: Resolution, nodes: Sequence[str], out: TextIO) -> None:
    w = _writer(out)
    w(f"artifacts: {resolution.artifacts}"
      + (" (images from the mesh's own registry)" if resolution.artifacts == "self-hosting"
         else " (images from their upstream repositories, by digest)"))
    for node in nodes:
        d = resolution.declarations[node]
        w()
        w(f"node {node} ({d.address})  serial {d.serial}  {d.digest}")
        if not d.containers:
            w("  no containers")
        for c in d.containers:
            ports = ", ".join(f"{p.host_ip}:{p.host_port}->{p.container_port}/{p.protocol}"
                              for p in c.ports)
            flags = " run-once" if c.run_once else ""
            pending = [s.credential for s in c.secrets if s.generation is None]
            w(f"  {c.name}{flags}  {c.image}" + (f"  [{ports}]" if ports else ""))
            if pending:
                w(f"    pending credentials (run `mesh plan --issue`): {', '.join(pending)}")
        fw = d.firewall
        if fw is not None:
            for f in fw.floors:
                src = ", ".join(f.sources) if f.sources else "anywhere"
                w(f"  firewall floor {f.port}/{f.protocol} from {src} ({f.reason})")
            for a in fw.allow:
                w(f"  firewall allow {a.port}/{a.protocol} from {', '.join(a.sources)} ({a.reason})")
            macs = {c.mac: c.name for c in d.containers if c.mac}
            for lo in fw.local:
                who = ", ".join(f"{macs.get(m, '?')} {m}" for m in lo.macs)
                w(f"  firewall same-node {lo.port}/{lo.protocol} from containers {who} "
                  f"({lo.reason})")
            for e in fw.expose:
                to = "anywhere" if list(e.sources) == ["any"] else ", ".join(e.sources)
                w(f"  firewall expose {e.port}/{e.protocol} to {to} ({e.reason})")
        for g in d.grants:
            gen = "pending" if g.credential.generation is None else f"gen {g.credential.generation}"
            w(f"  grant {g.kind} {g.resource} login {g.login}"
              + (f"_{g.slot}" if g.slot else "") + f" for {g.consumer} ({gen})"
              + (f", retiring gen {g.retiring.generation}" if g.retiring else ""))
        for file in d.files:  # the content is public, or a sealed token: only the path is shown
            w(f"  file {file.path} {file.mode} ({file.reason})")
        for login in d.registry_logins:
            gen = "pending" if login.secret.generation is None else \
                f"gen {login.secret.generation}"
            w(f"  pulls from {login.registry} as {login.user} ({gen})")
        for duty in d.backups:  # the repository without credentials, the login's name only
            every = f", every {duty.every}s" if duty.every else ""
            w(f"  backs up {duty.instance} into {duty.repository} on {duty.target_node}"
              + (f" as login {duty.login}" if duty.login else " (outside repository)")
              + every)
        for h in d.held:
            where = f"{h.file}:{h.line}:{h.col}" if h.line else h.file
            w(f"  held {h.instance} at its last good declaration: [{h.code}] {where}")
    lists = {(b.consumer, b.requirement): b for d in resolution.declarations.values()
             for b in d.bindings if b.each}  # requirements taking every provider
    if resolution.bindings or lists:
        w()
        w("bindings:")
        shown: set[tuple[str, str]] = set()
        for b in resolution.bindings:
            if not b.each:
                w(f"  {b.consumer} {b.requirement} -> {b.provider} ({b.chosen_by})  "
                  f"{b.host}:{b.port}" + (f"  login {b.login}" if b.login else ""))
                continue
            if (b.consumer, b.requirement) not in shown:  # one requirement, its list below
                shown.add((b.consumer, b.requirement))
                w(_list_line(lists.get((b.consumer, b.requirement)), b.consumer, b.requirement))
            w(f"    - {b.provider}  {b.host}:{b.port}" + (f"  login {b.login}" if b.login else ""))
        for (consumer, requirement), listed in sorted(lists.items()):
            if (consumer, requirement) not in shown:
                w(_list_line(listed, consumer, requirement))
    if resolution.changes:
        w()
        w("changes:")
        for change in resolution.changes:
            w(f"  {change.kind}: {change.message}")
    requests = resolution.requests
    if requests:
        w()
        w(f"to issue ({len(requests)}; `mesh plan --issue` issues them):")
        for r in requests:
            w(f"  {r.kind} {r.id} for {', '.join(r.holders)} ({r.reason})")
    errors = [p for p in resolution.problems if p.severity == "error"]
    notes = [p for p in resolution.problems if p.severity != "error"]
    for title, group in (("problems", errors), ("notes", notes)):
        if group:
            w()
            w(f"{title}:")
            for p in group:
                w(f"  {p.seen_at}: [{p.code}] {p.message}")
    w()
    w(f"{len(errors)} refusal{'s' if len(errors) != 1 else ''}, "
      f"{len(resolution.bindings)} bindings, {len(requests)} to issue")


def _list_line(listed: Optional[BindingDecl], consumer: str, requirement: str) -> str:
    """The head line of a requirement that takes every provider: its provision and count."""
    count = len(listed.entries) if listed is not None else 0
    what = listed.provision if listed is not None else "?"
    return (f"  {consumer} {requirement} -> every {what} provider ({count})"
            + ("" if count else ": none in scope (an empty list)"))


def change_line(c: DeclarationChange) -> str:
    """`+ create home/<container>: why` for a container, `~ lab firewall-allow 20006/tcp: why`
    for the rest."""
    why = f": {'; '.join(c.causes)}" if c.causes else ""
    if c.section == "container":
        return f"{c.action} {c.verb} {c.node}/{c.subject}{why}"
    return f"{c.action} {c.node} {c.section} {c.subject}{why}"


def print_changes(diff: Sequence[DeclarationChange], against: str, compared: bool,
                  out: TextIO) -> None:
    """What changes against the declarations compared with, section by section, as terraform
    plan lists it; one line when there was nothing to compare with."""
    w = _writer(out)
    added, changed, removed = change_counts(diff)
    w()
    if not compared:
        w(f"changes: {against}; every node's declaration is new ({added} to add)")
        return
    if not diff:
        w(f"no changes against {against}: every node is as it was")
        return
    w(f"changes against {against} ({added} to add, {changed} to change, {removed} to remove):")
    for c in diff:
        w(f"  {change_line(c)}")
