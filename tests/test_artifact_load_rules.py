"""Artifact rules enforced at load: the artifact store cannot need itself, and build bases
form no cycle. Both are faults in the catalogue itself, reported with their position."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from resolver import InputError
from executors.control.loading import load_mesh_dir

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def mesh_dir(tmp_path):
    shutil.copytree(ROOT / "catalogue", tmp_path / "catalogue")
    (tmp_path / "mesh.yaml").write_text(
        "mesh: t\ncatalogue: catalogue\nnodes: {a: {address: 10.0.0.1}}\n"
        "instances: {registry@a: {module: registry, node: a}}\n")
    return tmp_path


def test_the_catalogue_as_shipped_loads(mesh_dir):
    load_mesh_dir(mesh_dir)


def test_an_artifact_store_that_needs_a_mirrored_artifact_is_refused_with_the_reason(mesh_dir):
    manifest = mesh_dir / "catalogue" / "registry" / "module.yaml"
    text = manifest.read_text()
    assert "mirror: false" in text
    manifest.write_text(text.replace("mirror: false", "mirror: true"))
    with pytest.raises(InputError) as caught:
        load_mesh_dir(mesh_dir)
    (fault,) = [f for f in caught.value.faults if "registry" in f.file]
    assert fault.line > 0 and "itself" in str(fault)


def test_an_artifact_store_the_mesh_would_build_is_refused_even_with_mirror_false(mesh_dir):
    """The artifact store builds nothing: a build is pushed to the mesh's own registry, so a
    registry module with a `build:` artifact needs itself, whatever `mirror:` says."""
    manifest = mesh_dir / "catalogue" / "registry" / "module.yaml"
    text = manifest.read_text()
    upstream = ('    repository: docker.io/library/registry\n    tag: "2.8.3"\n'
                '    mirror: false')
    assert upstream in text
    manifest.write_text(text.replace(upstream, "    build: ./image\n    mirror: false"))
    with pytest.raises(InputError) as caught:
        load_mesh_dir(mesh_dir)
    (fault,) = [f for f in caught.value.faults if "registry" in f.file]
    assert fault.line > 0 and "cannot be built by the mesh" in str(fault)
    assert fault.line == text.splitlines().index(upstream.splitlines()[0]) + 1  # at `build:`


def test_a_cycle_of_build_bases_is_refused(mesh_dir):
    manifest = mesh_dir / "catalogue" / "control" / "module.yaml"
    text = manifest.read_text()
    assert "build:" in text
    loop = mesh_dir / "catalogue" / "loop"
    loop.mkdir()
    (loop / "module.yaml").write_text(
        "name: loop\nartifacts:\n"
        "  one: {build: ./one, base: [two]}\n"
        "  two: {build: ./two, base: [one]}\n")
    with pytest.raises(InputError) as caught:
        load_mesh_dir(mesh_dir)
    faults = [f for f in caught.value.faults if "loop" in f.file]
    assert len(faults) == 2 and all(f.line > 0 for f in faults)
