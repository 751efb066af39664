"""fixtures/genesis as an operator has it once `mesh build DIR --local` ran, for tests that
resolve it without a Docker Engine.

`built_genesis(tmp)` copies the fixture (its catalogue named by absolute path) and records the
control image's build through `executors.control.building.record_build`, the one function
`mesh build --local` records with: a local build (`local: true`) whose digest stands for the
Engine's image ID, built on the pinned python base. The fixture itself carries no build: the
command makes it (tests/test_genesis_local_build.py drives the real command on a real Engine).
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from pyrsistent import pmap

from executors.control.building import record_build
from executors.control.loading import load_mesh_dir
from resolver import BuildRecord

GENESIS = Path(__file__).resolve().parent.parent / "fixtures" / "genesis"
CATALOGUE = GENESIS.parent.parent / "catalogue"
PYTHON = "docker.io/library/python:3.11-slim"
# SYNTHETIC, like the fixture's pins: sha256 of the text "build control/control"
IMAGE_ID = "sha256:" + hashlib.sha256(b"build control/control").hexdigest()


def genesis_copy(tmp: Path) -> Path:
    """fixtures/genesis copied into `tmp`, its catalogue named by absolute path."""
    directory = tmp / "genesis"
    directory.mkdir(parents=True)
    shutil.copy(GENESIS / "ledger.yaml", directory / "ledger.yaml")
    text = (GENESIS / "mesh.yaml").read_text()
    assert "catalogue: ../../catalogue" in text
    (directory / "mesh.yaml").write_text(text.replace("catalogue: ../../catalogue",
                                                      f"catalogue: {CATALOGUE}"))
    return directory


def built_genesis(tmp: Path) -> Path:
    """genesis_copy with the control image recorded as `mesh build DIR --local` records it."""
    directory = genesis_copy(tmp)
    pins = load_mesh_dir(directory).ledger.pins
    record_build(directory, "control/control", BuildRecord(
        digest=IMAGE_ID, bases=pmap({"control/python": pins[PYTHON]}), local=True))
    return directory
