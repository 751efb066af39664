"""`mesh status DIR [--json]`: per node what was published and applied, per rotation what it
waits for, and each certificate expired or inside its renewal window (as `mesh check` lists
them: resolver.certificates.certificates_due at this moment); read from the ledger and the
control state, without asking the broker."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Optional, TextIO

from resolver.certificates import certificates_due

from executors.cli import _fleet_options
from executors.cli._backup_status import backup_status, reported, reported_lines, status_lines
from executors.cli._verb import Subparsers
from executors.cli.check import due_line, now_iso
from executors.control.control_state import ControlState
from executors.control.loading import load_mesh_dir
from executors.control.status import status


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "status", help="per node: serial published and applied, last report, drift, verify; "
        "rotations in progress",
        description="Show, per node, the serial last published and the serial in force by its "
        "last report, when it last reported and the result, drift repaired, `mesh verify` "
        "results; each move that carries data (state-from:) copying (with its progress), "
        "arrived, failed or waiting, and the old copy it leaves; each rotation in progress "
        "with the nodes it still waits for; and each "
        "certificate expired or inside the CA's renewal window, with what to run; and each "
        "backed-up instance's last backup as its node's agent reported it, `overdue` when older "
        "than its schedule (mesh.yaml `backups: every:`). Read from the ledger and the control "
        "plane's state (the broker is not asked).")
    _fleet_options.add_directory(parser)
    parser.add_argument("--json", action="store_true", help="print the status as JSON")
    parser.add_argument("--backup-password-file", metavar="FILE",
                        default=os.environ.get("MESH_BACKUP_PASSWORD_FILE"),
                        help="the backup repository's password file: with it, the backup "
                        "target is read and every instance whose last backup is older than "
                        "its schedule (mesh.yaml `backups: every:`) is shown overdue "
                        "($MESH_BACKUP_PASSWORD_FILE)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, out: Optional[TextIO] = None) -> int:
    out = out or sys.stdout
    directory: str = args.directory
    state_dir: Optional[str] = args.state_dir
    as_json: bool = args.json
    inputs = load_mesh_dir(directory)
    document = status(inputs.mesh_dir, ControlState(inputs.mesh_dir, state_dir))
    due = certificates_due(inputs.mesh, inputs.ledger, now_iso())
    document["certificates_due"] = [
        {"kind": d.kind.value, "name": d.name, "node": d.node, "serial": d.serial,
         "not_after": d.not_after, "expired": d.expired} for d in due]
    document["backups"] = backup_status(inputs.mesh, args.backup_password_file)
    # each instance's last backup as its node's agent reported it, overdue by the same rule
    document["backups"]["reported"] = reported(inputs.mesh, document["nodes"], int(time.time()))
    if as_json:
        json.dump(document, out, indent=2, sort_keys=True)
        out.write("\n")
        return 0
    print(f"mesh {document['mesh']}", file=out)
    for n in document["nodes"]:
        head = (f"{n['node']} ({n['address']}){'' if n['enrolled'] else ' not enrolled'}: "
                f"published {n['serial_published'] if n['serial_published'] is not None else '-'}"
                f", in force {n['serial_applied'] if n['serial_applied'] is not None else '-'}"
                + (" BEHIND" if n["behind"] else ""))
        print(head, file=out)
        if n["last_report_at"]:
            why = f" ({n['reason']})" if n["reason"] else ""
            by = f" by {n['superseded_by']}" if n["superseded_by"] is not None else ""
            print(f"  last report {n['last_report_at']}: {n['last_trigger']} serial "
                  f"{n['last_serial']} {n['last_result']}{by}{why}", file=out)
        else:
            print("  no report yet", file=out)
        if n["drift_repaired"]:
            print(f"  drift repaired {n['drift_repaired']} time(s), last "
                  f"{(n['last_drift'] or {}).get('at')}", file=out)
        if n["verify"] is not None:
            bad = n["verify"]["not_ok"]
            print(f"  verify: {n['verify']['ok']} ok, {len(bad)} not ok"
                  + "".join(f"; {b['consumer']} {b['requirement'] or ''} {b['status']}"
                            for b in bad), file=out)
    if document["rotations"]:
        print("rotations in progress:", file=out)
        for r in document["rotations"]:
            print(f"  {r['credential']} generation {r['generation']} {r['stage']}: waits for "
                  f"{', '.join(r['waiting_for']) or 'nothing'}", file=out)
    else:
        print("no rotation in progress", file=out)
    for m in document.get("moves") or []:  # moves that carry data (state-from:)
        last = (m["last"] or {}).get("result")
        print(f"move {m['instance']}: {m['from']} → {m['to']} {m['stage']}"
              + (f": {m['progress']}" if m["progress"] else f" ({last})" if last else ""),
              file=out)
        print(f"  old copy {m['old_copy']}", file=out)
    for d in due:
        print(due_line(d, directory), file=out)
    for line in status_lines(document["backups"], int(time.time())):
        print(line, file=out)
    for line in reported_lines(document["backups"]["reported"], int(time.time())):
        print(line, file=out)
    return 0
