"""A certificate about to expire is in `mesh check` and `mesh status` (issue 29), as an operator
runs them: a real node certificate signed by `mesh plan --issue` with the mesh CA, then the
CA's renewal window (`ca.renew-before-days` in mesh.yaml, where `mesh plan --issue` and the
control loop read it) widened so that certificate falls inside it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from executors.control.loading import load_mesh_dir

REPO = Path(__file__).resolve().parent.parent


def mesh(*args, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "executors.cli", *map(str, args)],
                            capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    if check:
        assert result.returncode == 0, result.stdout + result.stderr
    return result


def write_mesh(directory: Path, public_key: str, ca: str) -> None:
    (directory / "mesh.yaml").write_text(
        "mesh: certs\nnodes:\n  lab:\n    address: 10.0.0.2\n    control: true\n"
        f'    public-key: "{public_key}"\n{ca}')


def test_check_and_status_name_a_certificate_inside_its_renewal_window(tmp_path):
    directory = tmp_path / "mesh"
    (directory / "catalogue").mkdir(parents=True)
    (directory / "catalogue" / "provisions.yaml").write_text("{}\n")
    made = mesh("node-key", "lab", "--path", tmp_path / "lab.key")
    public = made.stdout.split("public-key:")[1].split()[0]
    write_mesh(directory, public, "")
    mesh("ca", "init", directory)
    mesh("plan", directory, "--issue")
    certificate = load_mesh_dir(directory).ledger.certificates["lab"]

    # a fresh certificate (365 days) outside the default 30-day window: nothing said
    quiet = mesh("check", directory)
    assert "certificate" not in quiet.stdout and quiet.stdout.startswith("OK"), quiet.stdout

    # the window widened past the certificate's remaining life: listed, with what to run
    write_mesh(directory, public, "ca:\n  validity-days: 730\n  renew-before-days: 400\n")
    checked = mesh("check", directory)  # a reminder: it does not fail the check
    (line,) = [text for text in checked.stdout.splitlines() if text.startswith("certificate:")]
    assert line == (f"certificate: the certificate of node lab (serial {certificate.serial}) "
                    f"expires {certificate.not_after}, inside the 400-day renewal window: "
                    f"run `mesh renew {directory} lab`"), line
    assert checked.stdout.splitlines()[-1].startswith("OK"), checked.stdout

    status = mesh("status", directory)
    assert line in status.stdout.splitlines(), status.stdout
    document = json.loads(mesh("status", directory, "--json").stdout)
    assert document["certificates_due"] == [
        {"kind": "node", "name": "lab", "node": "lab", "serial": certificate.serial,
         "not_after": certificate.not_after, "expired": False}]
