"""One rule picks the mesh's own registry, and everything follows it (issue 14).

With two artifact-store instances and `defaults: {artifact-store: …}`, the resolver pointed
every image at the first registry by name while `mesh mirror` copied into the default's: the
mesh pulled from a registry that was never filled. Now `choose_artifact_store` decides once
(the default when it names a serving store, else the only one, else none: never a silent pick),
the resolution carries the answer (`Resolution.registry`) and mirroring takes it from there.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from executors.control.loading import load_mesh_dir
from executors.control.mirroring import mirror
from resolver import MeshError, resolve

APP_DIGEST = "sha256:" + "a" * 64
REGISTRY_DIGEST = "sha256:" + "b" * 64

APP = """\
name: app
artifacts:
  main:
    repository: upstream.example:5000/mesh-test/app
    tag: '1'
containers:
  - name: app
    artifact: main
    command: [sleep, '3600']
"""

REGISTRY = """\
name: registry
artifacts:
  server:
    repository: upstream.example:5000/mesh-test/registry
    tag: '2'
    mirror: false
listens:
  api:
    port: 5000
provides:
  - provision: artifact-store
    listen: api
containers:
  - name: registry
    artifact: server
"""

MESH = """\
mesh: home
nodes:
  n1:
    address: 10.0.0.1
  n2:
    address: 10.0.0.2
  n3:
    address: 10.0.0.3
instances:
  app:
    module: app
    node: n1
  reg-a:
    module: registry
    node: n2
  reg-b:
    module: registry
    node: n3
{defaults}"""

LEDGER = f"""\
version: 1
pins:
  upstream.example:5000/mesh-test/app:1: '{APP_DIGEST}'
  upstream.example:5000/mesh-test/registry:2: '{REGISTRY_DIGEST}'
mirrored:
  '{APP_DIGEST}': {{held_by}}
"""


# each registry's `api` listen gets the first host port of its node's range (20000)


def write(directory: Path, defaults: str, held_by: str) -> Path:
    for name, text in (("app", APP), ("registry", REGISTRY)):
        (directory / "catalogue" / name).mkdir(parents=True, exist_ok=True)
        (directory / "catalogue" / name / "module.yaml").write_text(text)
    (directory / "catalogue" / "provisions.yaml").write_text(
        "artifact-store:\n  description: OCI registry\n")
    (directory / "mesh.yaml").write_text(MESH.format(defaults=defaults))
    (directory / "ledger.yaml").write_text(LEDGER.format(held_by=held_by))
    return directory


class RecordingRegistry:
    """Stands in for the registry's HTTP API only to record where mirroring copies to (the
    copying itself is tested against real registries in test_self_hosting)."""

    def __init__(self) -> None:
        self.pinged: list[str] = []
        self.copied: list[tuple[str, str, str]] = []

    def ping(self, registry: str) -> None:
        self.pinged.append(registry)

    def copy_image(self, repository: str, digest: str, target: str, progress=None) -> str:
        self.copied.append((repository, digest, target))
        return repository.split("/", 1)[1]


def app_image(resolution) -> str:
    return next(c.image for d in resolution.declarations.values() for c in d.containers
                if c.instance == "app")


def test_two_registries_and_a_default_the_images_and_the_mirror_name_the_default(tmp_path):
    inputs = load_mesh_dir(write(tmp_path, "defaults:\n  artifact-store: reg-b\n",
                                 "10.0.0.3:20000"))
    resolution = resolve(inputs.catalogue, inputs.mesh, inputs.ledger, sources=inputs.sources)
    assert resolution.registry == "10.0.0.3:20000"
    assert app_image(resolution) == f"10.0.0.3:20000/mesh-test/app@{APP_DIGEST}"
    assert resolution.artifacts == "self-hosting"

    client = RecordingRegistry()
    done = mirror(inputs, client=client)  # type: ignore[arg-type]
    assert done.target == "10.0.0.3:20000" == done.registry_of_mesh
    assert client.pinged == ["10.0.0.3:20000"]
    assert {target for _r, _d, target in client.copied} == {"10.0.0.3:20000"}


def test_a_digest_held_by_the_other_registry_is_not_pulled_from_it(tmp_path):
    inputs = load_mesh_dir(write(tmp_path, "defaults:\n  artifact-store: reg-b\n",
                                 "10.0.0.2:20000"))
    resolution = resolve(inputs.catalogue, inputs.mesh, inputs.ledger, sources=inputs.sources)
    assert resolution.registry == "10.0.0.3:20000"
    assert app_image(resolution) == f"upstream.example:5000/mesh-test/app@{APP_DIGEST}"
    assert resolution.artifacts == "external"


@pytest.mark.parametrize("defaults", ["", "defaults:\n  artifact-store: app\n"],
                         ids=["no default", "default names no store"])
def test_two_registries_and_no_default_naming_one_no_silent_pick(tmp_path, defaults):
    inputs = load_mesh_dir(write(tmp_path, defaults, "10.0.0.2:20000"))
    resolution = resolve(inputs.catalogue, inputs.mesh, inputs.ledger, sources=inputs.sources)
    assert resolution.registry is None
    assert app_image(resolution) == f"upstream.example:5000/mesh-test/app@{APP_DIGEST}"
    assert resolution.artifacts == "external"
    with pytest.raises(MeshError, match="no registry to mirror into"):
        mirror(inputs, client=RecordingRegistry())  # type: ignore[arg-type]


def test_one_registry_is_the_mesh_registry_without_a_default(tmp_path):
    directory = write(tmp_path, "", "10.0.0.3:20000")
    text = (directory / "mesh.yaml").read_text()
    (directory / "mesh.yaml").write_text(text.replace("  reg-a:\n    module: registry\n"
                                                      "    node: n2\n", ""))
    inputs = load_mesh_dir(directory)
    resolution = resolve(inputs.catalogue, inputs.mesh, inputs.ledger, sources=inputs.sources)
    assert resolution.registry == "10.0.0.3:20000"
    assert app_image(resolution) == f"10.0.0.3:20000/mesh-test/app@{APP_DIGEST}"
