"""`mesh control backup` and `mesh control restore` as an operator types them: a control
node's mesh directory (the homelab fixture with its catalogue inside, real node keys, a CA,
a ledger issued by `mesh plan --issue`, a control state holding the control account's
password) goes into one encrypted archive and comes back byte for byte, modes kept; every
bad input is refused in one line with nothing written.
"""

from __future__ import annotations

import gzip
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from executors.control.loading import load_mesh_dir

from _meshdir import run_cli
from executors.control.backup import HEADER

REPO = Path(__file__).resolve().parent.parent
PASSPHRASE = "correct horse battery staple"
CONTROL_SECRET = "plain-control-account-password-7f3a"


def mesh(*args, env=None, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "executors.cli", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd, timeout=120,
                          stdin=subprocess.DEVNULL,
                          env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})})


def _public_key(path: Path) -> str:
    code, said = run_cli("node-key", "--show", "--path", path)
    assert code == 0, said
    return re.search(r"public-key: (\S+)", said).group(1)


@pytest.fixture(scope="module")
def control(tmp_path_factory) -> Path:
    """tmp/mesh (the control node's directory), tmp/keys/home.key (its key), tmp/pass."""
    tmp = tmp_path_factory.mktemp("control")
    directory = tmp / "mesh"
    directory.mkdir()
    for name in ("mesh.yaml", "ledger.yaml"):
        shutil.copy(REPO / "fixtures" / "homelab" / name, directory / name)
    shutil.copytree(REPO / "catalogue", directory / "catalogue")
    keys = {}
    for node in ("home", "lab"):
        code, said = run_cli("node-key", node, "--path", tmp / "keys" / f"{node}.key")
        assert code == 0, said
        keys[node] = _public_key(tmp / "keys" / f"{node}.key")
    text = (directory / "mesh.yaml").read_text()
    text = text.replace("catalogue: ../../catalogue", "catalogue: catalogue")
    text = text.replace("    control: true\n",
                        f"    control: true\n    public-key: \"{keys['home']}\"\n")
    text = text.replace("    ssh-port: 2222\n",
                        f"    ssh-port: 2222\n    public-key: \"{keys['lab']}\"\n")
    (directory / "mesh.yaml").write_text(text)
    for argv in (("ca", "init", directory),
                 ("plan", directory, "--issue", "--key", tmp / "keys" / "home.key"),
                 # declarations written: the record of what was declared, beside the ledger
                 ("plan", directory, "--out", tmp / "out")):
        code, said = run_cli(*argv)
        assert code == 0, said
    state = directory / ".control"
    (state / "accounts").mkdir(parents=True, mode=0o700)
    os.chmod(state, 0o700)
    (state / "broker-control.secret").write_text(CONTROL_SECRET + "\n")
    os.chmod(state / "broker-control.secret", 0o600)
    (state / "accounts" / "lab.json").write_text('{"user": "mesh.homelab.node.lab"}\n')
    (tmp / "pass").write_text(PASSPHRASE + "\n")
    return tmp


def _tree(root: Path) -> dict[str, tuple[int, bytes]]:
    """relative path → (mode, content; b"" for a directory)."""
    found = {".": (stat.S_IMODE(root.stat().st_mode), b"")}
    for path in sorted(root.rglob("*")):
        mode = stat.S_IMODE(path.stat().st_mode)
        found[str(path.relative_to(root))] = (mode, b"" if path.is_dir() else path.read_bytes())
    return found


@pytest.fixture(scope="module")
def archive(control) -> Path:
    out = control / "backups" / "control.mesh-backup"
    result = mesh("control", "backup", control / "mesh", "--out", out,
                  "--key", control / "keys" / "home.key", "--passphrase-file", control / "pass")
    assert result.returncode == 0, result.stderr
    assert "with the control node's key" in result.stderr
    return out


def _restore(archive_file: Path, target: Path, key: Path, passphrase_file: Path):
    return mesh("control", "restore", archive_file, "--dir", target, "--key", key,
                "--passphrase-file", passphrase_file)


def _nothing_written(place: Path) -> None:
    assert not place.exists() or sorted(os.listdir(place)) == [], \
        f"written: {sorted(os.listdir(place))}"


def test_backup_then_restore_gives_every_file_back_byte_for_byte_with_its_mode(
        control, archive, tmp_path):
    assert stat.S_IMODE(archive.stat().st_mode) == 0o600
    assert sorted(os.listdir(archive.parent)) == [archive.name]  # no temp file left
    target, key = tmp_path / "new-machine" / "mesh", tmp_path / "new-machine" / "node.key"
    result = _restore(archive, target, key, control / "pass")
    assert result.returncode == 0, result.stderr
    before, after = _tree(control / "mesh"), _tree(target)
    assert after == before
    assert after["ca"][0] == 0o700 and after["ca/mesh-ca.key"][0] == 0o600
    assert after[".control/broker-control.secret"][0] == 0o600
    for node in ("home", "lab"):  # the per-node records beside the ledger come back too
        assert after[f"ledger.declared/{node}/declared.json"][0] == 0o600
    assert load_mesh_dir(target).ledger == load_mesh_dir(control / "mesh").ledger
    assert load_mesh_dir(target).ledger.declared
    assert key.read_bytes() == (control / "keys" / "home.key").read_bytes()
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert sorted(os.listdir(target.parent)) == ["mesh", "node.key"]  # no staging left
    # the restored directory is a control node: its key opens the escrow, nothing to issue
    planned = mesh("plan", target, "--issue", "--key", key)
    assert planned.returncode == 0, planned.stderr
    assert "issued" not in planned.stderr and "signed" not in planned.stderr
    assert (target / "ledger.yaml").read_bytes() == (control / "mesh" / "ledger.yaml").read_bytes()


def test_an_existing_empty_directory_and_the_same_key_already_there_are_accepted(
        control, archive, tmp_path):
    target = tmp_path / "mesh"
    target.mkdir()
    key = tmp_path / "node.key"
    shutil.copy(control / "keys" / "home.key", key)
    result = _restore(archive, target, key, control / "pass")
    assert result.returncode == 0, result.stderr
    assert (target / "mesh.yaml").read_bytes() == (control / "mesh" / "mesh.yaml").read_bytes()


def test_the_passphrase_may_come_from_the_environment(control, archive, tmp_path):
    result = mesh("control", "restore", archive, "--dir", tmp_path / "mesh", "--key",
                  tmp_path / "node.key", env={"MESH_BACKUP_PASSPHRASE": PASSPHRASE})
    assert result.returncode == 0, result.stderr


def test_no_passphrase_and_no_terminal_is_a_usage_error(control, archive, tmp_path):
    result = mesh("control", "restore", archive, "--dir", tmp_path / "mesh", "--key",
                  tmp_path / "node.key", env={"MESH_BACKUP_PASSPHRASE": ""})
    assert result.returncode == 2
    assert "--passphrase-file" in result.stderr and "MESH_BACKUP_PASSPHRASE" in result.stderr
    _nothing_written(tmp_path)


def test_a_wrong_passphrase_is_refused_and_nothing_is_written(control, archive, tmp_path):
    wrong = tmp_path / "wrong"
    wrong.write_text("correct horse battery stapler\n")
    place = tmp_path / "new"
    result = _restore(archive, place / "mesh", place / "node.key", wrong)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "wrong passphrase" in result.stderr and "Traceback" not in result.stderr
    _nothing_written(place)


def _damaged(archive_file: Path, tmp: Path) -> dict[str, bytes]:
    data = archive_file.read_bytes()
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0x01
    salt = bytearray(data)
    salt[HEADER.size - 1] ^= 0x80
    ops = bytearray(data)
    ops[13] ^= 0x01  # opslimit 3 → 2: another key
    return {"truncated-by-one": data[:-1], "truncated-half": data[:len(data) // 2],
            "header-only": data[:HEADER.size], "cut-in-header": data[:20],
            "a-bit-flipped": bytes(flipped), "salt-altered": bytes(salt),
            "kdf-parameters-altered": bytes(ops)}


@pytest.mark.parametrize("how", ["truncated-by-one", "truncated-half", "header-only",
                                 "cut-in-header", "a-bit-flipped", "salt-altered",
                                 "kdf-parameters-altered"])
def test_a_truncated_or_altered_archive_is_refused_and_nothing_is_written(
        control, archive, tmp_path, how):
    bad = tmp_path / "bad.mesh-backup"
    bad.write_bytes(_damaged(archive, tmp_path)[how])
    place = tmp_path / "new"
    result = _restore(bad, place / "mesh", place / "node.key", control / "pass")
    assert result.returncode == 2, result.stdout + result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stderr and "another copy" in result.stderr
    _nothing_written(place)


@pytest.mark.parametrize("content", [b"", b"mesh: homelab\n", b"MESHBKU",
                                     b"\x1f\x8b\x08\x00" + bytes(200)])
def test_a_file_that_is_not_an_archive_is_refused_by_name(control, tmp_path, content):
    bad = tmp_path / "not-a-backup"
    bad.write_bytes(content)
    place = tmp_path / "new"
    result = _restore(bad, place / "mesh", place / "node.key", control / "pass")
    assert result.returncode == 2
    assert "not a mesh control backup" in result.stderr, result.stderr
    _nothing_written(place)


def test_a_directory_with_something_in_it_is_refused_and_left_as_it_was(
        control, archive, tmp_path):
    target = tmp_path / "mesh"
    target.mkdir()
    (target / "mine.txt").write_text("the operator's\n")
    result = _restore(archive, target, tmp_path / "node.key", control / "pass")
    assert result.returncode == 2
    assert "not empty" in result.stderr and "new directory" in result.stderr
    assert sorted(os.listdir(tmp_path)) == ["mesh"]
    assert sorted(os.listdir(target)) == ["mine.txt"]


def test_a_different_key_file_at_the_key_path_is_refused_and_nothing_is_written(
        control, archive, tmp_path):
    key = tmp_path / "node.key"
    shutil.copy(control / "keys" / "lab.key", key)
    result = _restore(archive, tmp_path / "mesh", key, control / "pass")
    assert result.returncode == 2
    assert "different key" in result.stderr
    assert sorted(os.listdir(tmp_path)) == ["node.key"]
    assert key.read_bytes() == (control / "keys" / "lab.key").read_bytes()


def test_the_archive_holds_no_secret_in_plaintext(control, archive):
    data = archive.read_bytes()
    ledger = (control / "mesh" / "ledger.yaml").read_text()
    sealed = re.findall(r"[A-Za-z0-9+/]{60,}={0,2}", ledger)
    assert len(sealed) > 20  # the ledger's sealed values (and certificates' base64)
    ca_key = (control / "mesh" / "ca" / "mesh-ca.key").read_text()
    secrets = [s.encode() for s in sealed] + [
        line.encode() for line in ca_key.splitlines()] + [
        CONTROL_SECRET.encode(),
        (control / "keys" / "home.key").read_text().strip().encode(),
        b"mesh: homelab", b"ledger.yaml"]
    for secret in secrets:
        assert secret not in data, secret[:40]
    with pytest.raises((OSError, EOFError)):
        gzip.decompress(data[HEADER.size + 40:])  # after nonce and MAC: ciphertext, not gzip


def test_backup_refuses_what_would_make_an_archive_the_control_node_cannot_go_on_with(
        control, tmp_path):
    out = tmp_path / "a.mesh-backup"
    out.write_bytes(b"an older archive\n")
    key, passphrase = control / "keys" / "home.key", control / "pass"
    cases = [
        (("--out", out, "--passphrase-file", passphrase), "--key FILE"),
        (("--out", out, "--key", control / "keys" / "lab.key", "--passphrase-file", passphrase),
         "not the control node's key"),
        (("--out", control / "mesh" / "a.mesh-backup", "--key", key, "--passphrase-file",
          passphrase), "inside the mesh directory"),
    ]
    short = tmp_path / "short"
    short.write_text("short\n")
    cases.append((("--out", out, "--key", key, "--passphrase-file", short), "shorter than"))
    for options, said in cases:
        result = mesh("control", "backup", control / "mesh", *options,
                      env={"MESH_CONTROL_KEY": ""})
        assert result.returncode == 2, (options, result.stderr)
        assert said in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert out.read_bytes() == b"an older archive\n"
    assert not (control / "mesh" / "a.mesh-backup").exists()
    assert sorted(os.listdir(tmp_path)) == ["a.mesh-backup", "short"]


def test_without_key_the_archive_restores_without_asking_for_a_key_path(control, tmp_path):
    out = tmp_path / "a.mesh-backup"
    result = mesh("control", "backup", control / "mesh", "--out", out, "--without-key",
                  "--passphrase-file", control / "pass")
    assert result.returncode == 0, result.stderr
    restored = mesh("control", "restore", out, "--dir", tmp_path / "mesh",
                    "--passphrase-file", control / "pass", env={"MESH_CONTROL_KEY": ""})
    assert restored.returncode == 0, restored.stderr
    assert "no control node's key" in restored.stderr
    assert sorted(os.listdir(tmp_path)) == ["a.mesh-backup", "mesh"]


def test_both_verbs_are_listed_and_mesh_control_DIR_still_takes_its_directory():
    listed = mesh("--help").stdout
    assert "control backup" in listed and "control restore" in listed
    assert "--passphrase-file" in mesh("control", "backup", "--help").stdout
    assert "--dir" in mesh("control", "restore", "--help").stdout
    assert "backup" in mesh("control", "--help").stdout
