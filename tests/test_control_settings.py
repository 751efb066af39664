"""The control loop's kept broker settings (DIR/.control/settings.json, docs/schema.md): what
`mesh init` writes from its --broker options, read back by the broker verbs as defaults, an
option given winning, the admin's password sealed (never in the clear), a damaged file one
line naming it. No broker needed: the settings are made, not used."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from resolver import MeshError

from executors.cli import _fleet_control
from executors.common.keys import create_node_key
from executors.control.control_settings import (KeptBroker, kept_admin_password,
                                                kept_from_options, read_kept, settings_path,
                                                write_kept)
from executors.control.loading import load_mesh_dir

REPO = Path(__file__).resolve().parent.parent
PASSWORD = "the broker admin's password 7f3a"


def _kept(tmp_path: Path, **given) -> tuple[Path, KeptBroker, Path]:
    key = tmp_path / "control.key"
    public = create_node_key(key)
    secret = tmp_path / "admin.pass"
    secret.write_text(PASSWORD + "\n")
    options = dict(broker="10.0.0.1:5672", api="http://10.0.0.1:15672", admin="admin",
                   admin_password_file=str(secret), for_nodes="10.0.0.1:5672", plain=True)
    options.update(given)
    kept = kept_from_options(control_public_key=public, **options)
    path = settings_path(tmp_path / ".control")
    write_kept(path, kept)
    return path, kept, key


def test_kept_settings_round_trip_with_the_password_sealed(tmp_path):
    path, kept, key = _kept(tmp_path)
    assert read_kept(path) == kept
    text = path.read_text()
    assert PASSWORD not in text and json.loads(text)["broker_admin_password_sealed"]
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert kept_admin_password(kept, str(key), path) == PASSWORD
    assert read_kept(tmp_path / "absent.json") == KeptBroker()


def test_the_password_opens_only_with_the_control_nodes_key(tmp_path):
    path, kept, _ = _kept(tmp_path)
    other = tmp_path / "other.key"
    create_node_key(other)
    with pytest.raises(MeshError, match="not the control node's key"):
        kept_admin_password(kept, str(other), path)
    with pytest.raises(MeshError, match="give --key"):
        kept_admin_password(kept, None, path)


@pytest.mark.parametrize("text, said", [
    ("{not json", "not JSON"),
    ('{"format": 2}', '"format": 1'),
    ('{"format": 1, "brokr": "x"}', "unknown keys brokr"),
    ('{"format": 1, "broker": 5672}', "broker: wrong type"),
    ('{"format": 1, "broker_plain": "yes"}', "broker_plain: wrong type"),
])
def test_a_damaged_file_is_one_error_naming_it(tmp_path, text, said):
    path = tmp_path / "settings.json"
    path.write_text(text)
    with pytest.raises(MeshError) as raised:
        read_kept(path)
    assert str(path) in str(raised.value) and said in str(raised.value), str(raised.value)


def _args(directory: Path, key: Path, **given) -> argparse.Namespace:
    args = dict(directory=str(directory), state_dir=None, broker=None, broker_api=None,
                broker_admin=None, broker_admin_password_file=None, broker_for_nodes=None,
                key=str(key), broker_plain=False)
    args.update(given)
    return argparse.Namespace(**args)


def test_the_broker_verbs_take_the_kept_settings_and_an_option_wins(tmp_path):
    directory = tmp_path / "mesh"
    directory.mkdir()
    (directory / "catalogue").mkdir()
    (directory / "catalogue" / "provisions.yaml").write_text("{}\n")
    (directory / "mesh.yaml").write_text("mesh: kept\ncatalogue: catalogue\nnodes: {}\n")
    path, _, key = _kept(directory)
    assert path == directory / ".control" / "settings.json"
    inputs = load_mesh_dir(directory)
    settings = _fleet_control.settings(_args(directory, key), inputs)
    assert (str(settings.amqp.host), settings.amqp.port) == ("10.0.0.1", 5672)
    assert settings.api == "http://10.0.0.1:15672" and settings.admin == "admin"
    assert settings.admin_password == PASSWORD
    given = tmp_path / "given.pass"
    given.write_text("given\n")
    settings = _fleet_control.settings(_args(directory, key, broker="10.0.0.9:5673",
                                             broker_admin_password_file=str(given)), inputs)
    assert (str(settings.amqp.host), settings.amqp.port) == ("10.0.0.9", 5673)
    assert settings.admin_password == "given"


def test_a_damaged_kept_file_is_one_line_from_a_broker_verb(tmp_path):
    """`mesh publish` reads the kept settings first: one line naming the file, exit 2."""
    directory = tmp_path / "mesh"
    (directory / ".control").mkdir(parents=True)
    (directory / "catalogue").mkdir()
    (directory / "catalogue" / "provisions.yaml").write_text("{}\n")
    (directory / "mesh.yaml").write_text("mesh: kept\ncatalogue: catalogue\nnodes: {}\n")
    (directory / ".control" / "settings.json").write_text("{not json")
    run = subprocess.run([sys.executable, "-m", "executors.cli", "publish", str(directory)],
                         capture_output=True, text=True, env={**os.environ,
                                                              "PYTHONPATH": str(REPO)})
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert "settings.json:1: not JSON" in run.stderr, run.stderr
