"""The self-hosting transition (seed 003) against real registries, through pin, mirror and plan.

Genesis: images are named at their upstream repository by the pinned digest. Once the mesh has
an artifact-store instance and `mesh mirror` has copied the digests into it, declarations name
the mesh's own registry at the same digest and the plan says "self-hosting", listing the
containers that move; removing the registry instance moves the mesh back. The registry's own
module must run from upstream (`mirror: false`), or it is refused at load.
"""

from __future__ import annotations

import json
import random
import socket
from pathlib import Path

import pytest

from _registry_helpers import REGISTRY_BINARY, RegistryProcess, push_image, served_digest
from executors.cli import main as cli
from executors.control.loading import load_mesh_dir
from resolver import InputError
from resolver.artifacts import validate_artifact_store_modules

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(REGISTRY_BINARY is None,
                       reason="docker-registry is not installed (scripts/services.sh installs it)"),
]

APP = """\
name: app
artifacts:
  main:
    repository: {upstream}/mesh-test/app
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
    repository: {upstream}/mesh-test/registry
    tag: '2'
    mirror: {mirror}
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
  anchor:
    address: 127.0.0.1
instances:
  app:
    module: app
    node: anchor
{registry}"""

REGISTRY_INSTANCE = """\
  registry:
    module: registry
    node: anchor
"""


def port_in_host_range() -> int:
    """A free loopback port inside the mesh's default host-port range (20000–29999)."""
    for _ in range(200):
        port = random.randint(20000, 29999)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    raise RuntimeError("no free port in 20000–29999")


@pytest.fixture()
def registries(tmp_path):
    with RegistryProcess(tmp_path / "upstream") as upstream, \
            RegistryProcess(tmp_path / "mesh-registry", port=port_in_host_range()) as own:
        yield upstream, own


def write(directory: Path, upstream: str, *, with_registry: bool, mirror: str = "false",
          registry_port: int | None = None) -> None:
    (directory / "catalogue" / "app").mkdir(parents=True, exist_ok=True)
    (directory / "catalogue" / "registry").mkdir(parents=True, exist_ok=True)
    (directory / "catalogue" / "provisions.yaml").write_text("artifact-store:\n  description: OCI registry\n")
    (directory / "catalogue" / "app" / "module.yaml").write_text(APP.format(upstream=upstream))
    (directory / "catalogue" / "registry" / "module.yaml").write_text(
        REGISTRY.format(upstream=upstream, mirror=mirror))
    (directory / "mesh.yaml").write_text(MESH.format(registry=REGISTRY_INSTANCE if with_registry else ""))
    if registry_port is not None:  # the port the mesh assigned its registry, kept in the ledger
        ledger = directory / "ledger.yaml"
        # the mesh writes its ledger as canonical JSON (which is YAML 1.2): read it as JSON
        document = json.loads(ledger.read_text()) if ledger.exists() else {"version": 1}
        document.setdefault("ports", {})["registry"] = {
            "api": {"node": "anchor", "port": registry_port}}
        ledger.write_text(json.dumps(document, indent=2) + "\n")


def mesh(capsys, *argv: str) -> tuple[int, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def plan(capsys, directory: Path, out: Path) -> dict:
    """`mesh plan --json --out`: the plan, with the declarations it wrote (what nodes apply)."""
    code, text = mesh(capsys, "plan", str(directory), "--json", "--out", str(out))
    assert code in (0, 1), text
    document = json.loads(text[: text.rindex("}") + 1])
    document["written"] = [json.loads(p.read_text()) for p in sorted(out.glob("*.declaration.json"))]
    return document


def images(document: dict) -> dict[str, str]:
    """instance → image of every container in the declarations the plan wrote."""
    return {c["instance"]: c["image"] for d in document["written"] for c in d.get("containers", [])}


def test_genesis_then_self_hosting_then_back(tmp_path, registries, capsys):
    upstream, own = registries
    app_digest = push_image(upstream.address, "mesh-test/app", "1", b"the application")
    server_digest = push_image(upstream.address, "mesh-test/registry", "2", b"the registry server")
    directory, out = tmp_path / "mesh", tmp_path / "declarations"
    directory.mkdir()

    # genesis: no registry of its own; upstream repository at the pinned digest
    write(directory, upstream.address, with_registry=False)
    assert mesh(capsys, "pin", str(directory))[0] == 0
    genesis = plan(capsys, directory, out)
    assert genesis["artifacts"] == "external"
    assert images(genesis) == {"app": f"{upstream.address}/mesh-test/app@{app_digest}"}

    # the registry is assigned but holds nothing yet: still external, nothing moves
    write(directory, upstream.address, with_registry=True, registry_port=own.port)
    assert mesh(capsys, "pin", str(directory))[0] == 0
    assigned = plan(capsys, directory, out)
    assert assigned["artifacts"] == "external"
    assert images(assigned) == {
        "app": f"{upstream.address}/mesh-test/app@{app_digest}",
        "registry": f"{upstream.address}/mesh-test/registry@{server_digest}",
    }

    # mirror into the mesh's own registry (found from the artifact-store instance, no --registry)
    code, text = mesh(capsys, "mirror", str(directory))
    assert code == 0, text
    assert f"mirroring into {own.address}" in text and "skip registry/server: mirror: false" in text
    assert served_digest(own.address, "mesh-test/app", app_digest) == app_digest
    assert dict(load_mesh_dir(directory).ledger.mirrored) == {app_digest: own.address}

    hosting = plan(capsys, directory, out)
    assert hosting["artifacts"] == "self-hosting"
    assert images(hosting) == {
        "app": f"{own.address}/mesh-test/app@{app_digest}",  # same digest, the mesh's registry
        "registry": f"{upstream.address}/mesh-test/registry@{server_digest}",  # never from itself
    }
    moved = [c for c in hosting["container_changes"] if c["action"] != "create"]
    assert [c["instance"] for c in moved] == ["app"]

    # the upstream tag moves: nothing changes until --refresh, then exactly `app` is recreated,
    # from upstream at the new digest until that digest is mirrored too
    newer = push_image(upstream.address, "mesh-test/app", "1", b"the application, next release")
    assert mesh(capsys, "pin", str(directory))[0] == 0
    unchanged = plan(capsys, directory, out)
    assert unchanged["container_changes"] == [] and images(unchanged) == images(hosting)
    code, text = mesh(capsys, "pin", str(directory), "--refresh")
    assert code == 0 and "home-app-app" not in text and "app/app" in text, text
    refreshed = plan(capsys, directory, out)
    assert [(c["instance"], c["action"]) for c in refreshed["container_changes"]] == [("app", "recreate")]
    assert images(refreshed)["app"] == f"{upstream.address}/mesh-test/app@{newer}"
    assert refreshed["artifacts"] == "external"
    assert mesh(capsys, "mirror", str(directory))[0] == 0
    hosting = plan(capsys, directory, out)
    assert hosting["artifacts"] == "self-hosting"
    assert images(hosting)["app"] == f"{own.address}/mesh-test/app@{newer}"

    # removing the registry instance moves the mesh back to external artifacts
    write(directory, upstream.address, with_registry=False)
    back = plan(capsys, directory, out)
    assert back["artifacts"] == "external"
    assert images(back) == {"app": f"{upstream.address}/mesh-test/app@{newer}"}
    changes = {c["instance"]: c["action"] for c in back["container_changes"]}
    assert changes == {"app": "recreate", "registry": "remove"}


def test_an_artifact_store_needing_a_mirrored_artifact_is_refused(tmp_path):
    directory = tmp_path / "mesh"
    directory.mkdir()
    write(directory, "127.0.0.1:5000", with_registry=True, mirror="true")
    with pytest.raises(InputError) as refused:  # refused at load, with the reason
        load_mesh_dir(directory)
    faults = refused.value.faults
    assert len(faults) == 1
    fault = str(faults[0])
    manifest = directory / "catalogue" / "registry" / "module.yaml"
    line = next(i for i, text in enumerate(manifest.read_text().splitlines(), 1) if "server:" in text)
    assert f"registry/module.yaml:{line}:3:" in fault
    assert "would need itself to exist" in fault and "mirror: false" in fault
    write(directory, "127.0.0.1:5000", with_registry=True, mirror="false")
    inputs = load_mesh_dir(directory)
    assert validate_artifact_store_modules(inputs.catalogue, inputs.sources) == []
