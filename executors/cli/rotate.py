"""`mesh rotate DIR CREDENTIAL | --provider INSTANCE | --consumer INSTANCE`.

A new generation for each credential addressed, sealed to the holders of the current one; the
ledger is written atomically (unless --dry-run). A provider's own admin secret is rotated
provider first like its credentials (resolver.rotation.server_held_credentials). The plan
(executors/control/rotation.py) is stated in two steps, because holders only move once the provider has the new generation in
force:
  1. now: the provider's grant (a new password on the idle login, or the account's password
     replaced), and every container that changes with it;
  2. once the provider reports it applied: every holder node that changes and every container
     recreated because its environment or env-file changes.
Dual-login credentials (postgres) have no window; single ones (the AMQP broker) say theirs.

`mesh applied DIR NODE (--digest D | --report applied.json)` records that NODE applied its
current declaration (the report `mesh apply` leaves on the node): as provider, the generations
its provisioners put in force (grants and its providers' admin secrets); as holder, the
generations its containers hold. That is what moves holders to a pending generation and
retires an old one; the plan of what it changes is shown. A report of an apply that failed or
was refused in any phase is refused, naming why (executors/common/applied_record.acceptance);
the recording itself is executors/control/applied.py, which the control loop calls too.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Callable, Optional, Sequence, TextIO

from resolver import GRANT_KINDS, ContainerChange, MeshError, Resolution, container_changes
from resolver.rotation import describe_rotation, holder_nodes

from executors.cli._verb import Subparsers
from executors.control.applied import record_in_ledger
from executors.control.rotation import RotationRefused, rotate_in_ledger
from executors.node.provisioners.registry import REGISTRY

Say = Callable[[str], None]  # one line of the plan, printed


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "rotate",
        help="issue a new generation of a credential (or of every credential of a provider "
        "or consumer) and show every holder and container it changes",
        description="Rotate credentials: one by id (provision/provider/consumer or "
        "secret/instance/name), every credential a provider instance serves plus its own "
        "secrets (--provider), or every credential a consumer instance holds (--consumer). "
        "A provider's credentials and its own admin secret wait, pending, until the provider "
        "reports them in force (`mesh applied`); the admin password is changed on the running "
        "server by the provisioner, never by recreating the server.",
    )
    parser.add_argument("directory", metavar="DIR", help="the mesh directory holding mesh.yaml")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("credential", nargs="?", metavar="CREDENTIAL", help="a credential id")
    which.add_argument("--provider", metavar="INSTANCE")
    which.add_argument("--consumer", metavar="INSTANCE")
    parser.add_argument("--dry-run", action="store_true",
                        help="show the plan without writing the ledger")
    parser.set_defaults(func=run)

    applied = subparsers.add_parser(
        "applied",
        help="record that NODE applied its current declaration (advances rotations)",
        description="Record in the ledger what NODE's last apply put in force (its "
        "<state-root>/.mesh/applied.json from `mesh apply`): the generations its provisioners "
        "put in force on its providers and the generations its containers hold. Refused (exit "
        "1, nothing recorded, the reason named) when that apply failed or was refused in any "
        "phase, or was recorded by an earlier version; refused unless the digest is the one "
        "the mesh declares for NODE now. --digest records the whole declaration on the "
        "operator's word.")
    applied.add_argument("directory", metavar="DIR", help="the mesh directory holding mesh.yaml")
    applied.add_argument("node", metavar="NODE")
    source = applied.add_mutually_exclusive_group(required=True)
    source.add_argument("--digest", metavar="SHA256", help="the applied declaration's digest")
    source.add_argument("--report", metavar="FILE", help="the node's applied.json")
    applied.add_argument("--by-hand", action="append", metavar="CREDENTIAL",
                         help="a grant the report lists as not provisioned by the mesh (no "
                         "provisioner for its kind) that you put in force by hand at its "
                         "declared generation (repeatable)")
    applied.set_defaults(func=run_applied)


def run(args: argparse.Namespace, out: Optional[TextIO] = None) -> int:
    out = out or sys.stdout
    directory: str = args.directory
    credential: Optional[str] = args.credential
    provider: Optional[str] = args.provider
    consumer: Optional[str] = args.consumer
    dry_run: bool = args.dry_run
    # read → rotate → write in one ledger transaction (a dry run: no lock, nothing written)
    done = rotate_in_ledger(directory, credential=credential, provider=provider,
                            consumer=consumer, provisioned=provisioned_kinds(),
                            write=not dry_run)
    w = _writer(out)
    plan = done.result
    if isinstance(plan, RotationRefused):
        for refusal in plan.ways:
            w(f"mesh rotate: refused: {refusal.why}")
        w("nothing rotated, ledger not written")
        return 1
    for cred_id in plan.ids:  # what the operator does by hand, said before anything else
        way = plan.ways.get(cred_id)
        if way is not None and way.how == "by-hand":
            w(f"by hand, for {cred_id} ({way.where}): {way.instruction}")
    w(f"rotate {len(plan.ids)} credential{'s' if len(plan.ids) != 1 else ''}:")
    for cred_id in plan.ids:
        cred = plan.rotated.credentials[cred_id]
        new = cred.pending or cred.active
        assert new is not None, cred_id  # the issuer just made it a generation
        w(f"  {cred_id}: generation {new.generation} ({plan.kind(cred_id)}); holders: "
          f"{', '.join(holder_nodes(cred))}")
        w(f"    {describe_rotation(cred_id, cred)}")
    _print_step(w, "now", plan.before, plan.now,
                container_changes(plan.before.declarations, plan.now.declarations))
    if plan.waits_for_providers:
        _print_step(w, "once the provider reports the new generation applied", plan.now,
                    plan.once_applied,
                    container_changes(plan.now.declarations, plan.once_applied.declarations))
    if dry_run:
        w("dry run: ledger not written")
        return 0
    print(f"ledger {'written' if done.written else 'unchanged'}: {done.ledger_path}",
          file=sys.stderr)
    return 0


def _writer(out: TextIO) -> Say:
    def w(line: str = "") -> None:
        print(line, file=out)
    return w


def provisioned_kinds() -> frozenset[str]:
    """The grant kinds the node's one provisioner registry provisions."""
    return frozenset(kind for kind in GRANT_KINDS if REGISTRY.provides(kind))


def _print_step(w: Say, title: str, old: Resolution, new: Resolution,
                changes: Sequence[ContainerChange]) -> None:
    nodes = sorted(n for n in new.declarations
                   if n not in old.declarations
                   or old.declarations[n].digest != new.declarations[n].digest)
    w(f"{title}:")
    w(f"  nodes whose declaration changes: {', '.join(nodes) or 'none'}")
    for node in nodes:
        grants = [g for g in new.declarations[node].grants
                  if g not in set(old.declarations[node].grants
                                  if node in old.declarations else ())]
        for g in grants:
            slot = f" slot {g.slot}" if g.slot else ""
            keep = (f", keeps generation {g.retiring.generation} (slot {g.retiring_slot}) "
                    f"valid" if g.retiring else "")
            w(f"  grant on {node}: {g.kind} {g.login} for {g.consumer}: generation "
              f"{g.credential.generation}{slot}{keep}")
        before = {p.instance: p for p in (old.declarations[node].providers
                                          if node in old.declarations else ())}
        for p in new.declarations[node].providers:
            pending = p.admin_pending
            if pending is not None and (p.instance not in before
                                        or before[p.instance].admin_pending != pending):
                assert p.admin is not None, p.instance  # a pending admin password replaces one
                w(f"  admin on {node}: {p.instance} changes its admin password on the running "
                  f"server to {pending.credential} generation {pending.generation}, "
                  f"authenticating with generation {p.admin.generation}")
    for change in changes:
        causes = f": {'; '.join(change.causes)}" if change.causes else ""
        w(f"  {change.action} {change.node}/{change.container}{causes}")
    if not any(c.action != "in-place" for c in changes):
        w("  no container is recreated")


def _read_report(path: str) -> object:
    """The applied report at `path`, as JSON: whether it is one is record_report's to say."""
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError) as exc:
        raise MeshError(f"{path}: not a readable applied report ({exc})") from None


def run_applied(args: argparse.Namespace, out: Optional[TextIO] = None) -> int:
    out = out or sys.stdout
    directory: str = args.directory
    node: str = args.node
    report: Optional[str] = args.report
    digest: Optional[str] = args.digest
    by_hand: Sequence[str] = args.by_hand or ()
    record = _read_report(report) if report else None
    # read → record → write in one ledger transaction; --digest: the operator's word that
    # the whole declaration is in force (--report or --digest: argparse requires one)
    done = record_in_ledger(directory, node, report=record,
                            digest=None if report else digest, by_hand=by_hand)
    recorded, after = done.result.recorded, done.result.after
    if after is None or recorded.ledger is None:
        print(f"mesh applied: {report}: not recorded: {recorded.why}", file=out)
        return 1
    current, ledger = recorded.current, recorded.ledger
    w = _writer(out)
    moved = recorded.moved
    w(f"{node} applied {recorded.digest}: {len(moved)} credential"
      f"{'s' if len(moved) != 1 else ''} recorded")
    for cred_id in moved:
        w(f"  {describe_rotation(cred_id, ledger.credentials[cred_id])}")
    if isinstance(record, dict):  # an accepted report is a JSON object
        for grant in record.get("not_provisioned") or []:
            if grant["credential"] not in by_hand:
                w(f"  not provisioned by the mesh: {grant['kind']} grant of {grant['consumer']} "
                  f"on {grant['provider']} ({grant['credential']}): its rotation does not "
                  f"advance until you put it in force by hand and say so with --by-hand")
    _print_step(w, "as a result", current, after,
                container_changes(current.declarations, after.declarations))
    print(f"ledger {'written' if done.written else 'unchanged'}: {done.ledger_path}",
          file=sys.stderr)
    return 0
