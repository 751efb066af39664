"""resolver.load_mesh_dir: a mesh directory's path rules in the library, read through a reader.

The library decides which files make a mesh (mesh.yaml, `catalogue:`, `ledger:`, provisions.yaml,
one module.yaml per module directory) and reads them only through the reader it is handed; an
in-memory reader (a dict of files) loads exactly what the executors' file-system reader loads
from disk, and a fault a reader raises is located where mesh.yaml named the path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import pytest

import resolver
from resolver import documents
from executors.control.loading import FileReader, load_mesh_dir, mesh_paths
from resolver import InputError, ReadFault

ROOT = Path(__file__).resolve().parent.parent
MESH = "mesh: m\nnodes:\n  a:\n    address: 10.0.0.1\n"
MODULE = ("name: web\nartifacts:\n  web:\n    repository: mesh-test/busybox\n    tag: '1'\n"
          "containers:\n  - name: web\n    artifact: web\n")


class MemoryReader:
    """A mesh directory held in memory: path → bytes; directories are the paths' prefixes."""

    def __init__(self, files: dict[str, str]):
        self.files = {path: text.encode() for path, text in files.items()}
        self.reads: list[str] = []

    def read(self, path: str) -> bytes:
        self.reads.append(path)
        if path in self.files:
            return self.files[path]
        if any(p.startswith(path + "/") for p in self.files):
            raise ReadFault("is a directory")
        raise ReadFault("is missing", missing=True)

    def subdirectories(self, path: str) -> Sequence[str]:
        below = [p[len(path) + 1:] for p in self.files if p.startswith(path + "/")]
        if not below:
            raise ReadFault("is missing", missing=True)
        return sorted({p.split("/")[0] for p in below if "/" in p})

    def display(self, path: str) -> str:
        return f"mem:{path}"


def test_a_reader_of_memory_loads_what_the_file_reader_loads_from_disk():
    homelab = ROOT / "fixtures" / "homelab"
    catalogue, ledger = mesh_paths(homelab)
    files = {str(p): p.read_text() for p in catalogue.rglob("*.yaml")}
    files[str(homelab / "mesh.yaml")] = (homelab / "mesh.yaml").read_text()
    files[str(ledger)] = ledger.read_text()
    reader = MemoryReader(files)
    in_memory = resolver.load_mesh_dir(str(homelab), reader)
    on_disk = load_mesh_dir(homelab)
    assert (in_memory.catalogue, in_memory.mesh, in_memory.ledger) == (
        on_disk.catalogue, on_disk.mesh, on_disk.ledger)
    assert set(in_memory.catalogue.modules) == set(on_disk.catalogue.modules)
    assert in_memory.mesh_dir == str(homelab) and in_memory.ledger_path == str(ledger)
    assert in_memory.sources.file("mesh") == f"mem:{homelab}/mesh.yaml"
    assert set(reader.reads) == set(files)  # nothing but the files the rules name


def test_the_path_rules_defaults_relative_absolute_and_a_missing_ledger():
    files = {"m/mesh.yaml": MESH, "m/catalogue/provisions.yaml": "{}\n",
             "m/catalogue/web/module.yaml": MODULE, "m/catalogue/.hidden/module.yaml": "x: [\n"}
    inputs = resolver.load_mesh_dir("m", MemoryReader(files))
    assert set(inputs.catalogue.modules) == {"web"}  # a hidden directory is no module
    assert inputs.ledger == resolver.EMPTY_LEDGER and inputs.ledger_path == "m/ledger.yaml"
    moved = {"/srv/m/mesh.yaml": MESH + "catalogue: /opt/cat\nledger: ../state/l.yaml\n",
             "/opt/cat/provisions.yaml": "{}\n", "/opt/cat/web/module.yaml": MODULE,
             "/srv/state/l.yaml": "version: 1\n"}
    reader = MemoryReader(moved)
    inputs = resolver.load_mesh_dir("/srv/m/", reader)
    assert inputs.mesh_dir == "/srv/m" and inputs.ledger_path == "/srv/m/../state/l.yaml"
    assert set(inputs.catalogue.modules) == {"web"}


def test_a_fault_the_reader_raises_is_located_where_mesh_yaml_named_the_path():
    files = {"m/mesh.yaml": MESH + "catalogue: cat\n", "m/cat/web/module.yaml": MODULE}
    with pytest.raises(InputError) as caught:
        resolver.load_mesh_dir("m", MemoryReader(files))
    [fault] = caught.value.faults
    assert (fault.file, fault.line, fault.col) == ("mem:m/mesh.yaml", 5, 12)
    assert fault.message == "the provision definitions mem:m/cat/provisions.yaml is missing"
    assert "named by `catalogue:`" in fault.expected
    files["m/ledger.yaml/x"] = ""  # the ledger's path is a directory: a fault, not "no ledger"
    files["m/cat/provisions.yaml"] = "{}\n"
    with pytest.raises(InputError) as caught:
        resolver.load_mesh_dir("m", MemoryReader(files))
    [fault] = caught.value.faults
    assert fault.message == "the ledger mem:m/ledger.yaml is a directory"
    assert (fault.line, fault.col) == (1, 1)  # the default: at the top of mesh.yaml


def test_the_mesh_directory_and_its_mesh_yaml_are_faults_by_path_alone():
    with pytest.raises(InputError) as caught:
        resolver.load_mesh_dir("nowhere", MemoryReader({"m/mesh.yaml": MESH}))
    assert [(f.file, f.line, f.message) for f in caught.value.faults] == [
        ("mem:nowhere", 0, "is missing")]
    with pytest.raises(InputError) as caught:
        resolver.load_mesh_dir("m", MemoryReader({"m/other.yaml": MESH}))
    assert [(f.file, f.message) for f in caught.value.faults] == [
        ("mem:m/mesh.yaml", "the mesh description is missing")]


def test_a_readers_own_failure_passes_through_unchanged():
    class Broken(MemoryReader):
        def read(self, path: str) -> bytes:
            raise RuntimeError("disk on fire")

    with pytest.raises(RuntimeError, match="disk on fire"):
        resolver.load_mesh_dir("m", Broken({"m/mesh.yaml": MESH}))


@pytest.mark.parametrize("text, expected", [
    (None, ("m/catalogue", "m/ledger.yaml")),
    (MESH, ("m/catalogue", "m/ledger.yaml")),
    (MESH + "catalogue: ../cat  # shared\nledger: 'state/l.yaml'\n", ("cat", "m/state/l.yaml")),
    ("{mesh: m, catalogue: /abs/cat, ledger: [1]}", ("/abs/cat", "m/ledger.yaml")),
    ("mesh: [\n", ("m/catalogue", "m/ledger.yaml")),
])
def test_mesh_paths_reads_catalogue_and_ledger_without_loading(text, expected):
    paths = documents.mesh_paths("m", text)
    assert (paths.catalogue, paths.ledger) == (
        expected[0] if expected[0] != "cat" else "m/../cat", expected[1])


def test_the_file_reader_says_what_is_wrong_with_a_path(tmp_path):
    reader = FileReader()
    with pytest.raises(ReadFault) as caught:
        reader.read(str(tmp_path / "absent"))
    assert caught.value.missing and caught.value.problem == "is missing"
    with pytest.raises(ReadFault, match="is a directory"):
        reader.read(str(tmp_path))
    (tmp_path / "sub").mkdir()
    (tmp_path / ".hid").mkdir()
    (tmp_path / "file").write_text("x")
    assert reader.subdirectories(str(tmp_path)) == ["sub"]
    with pytest.raises(ReadFault, match="is not a directory"):
        reader.subdirectories(str(tmp_path / "file"))
