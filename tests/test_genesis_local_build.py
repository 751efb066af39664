"""Genesis with no registry: the control image built into the local Docker Engine by the
documented command, pinned by its image ID, and run by `mesh apply` from that Engine.

The operator's steps on the first machine, before the mesh's registry exists (README, "A mesh
from start to finish"):

    mesh plan DIR                     control@genesis refused: unpinned, says `mesh build --local`
    sh scripts/stage-control-image.sh DIR/catalogue/control/image
    mesh build DIR --local            the control image into this Engine, recorded (local: true)
    mesh plan DIR --issue --out out/  control@genesis declared with the bare image ID
    mesh apply out/genesis.declaration.json …   the control container runs; nothing is pulled

The mesh is fixtures/genesis (its mesh.yaml, its pins) with the catalogue's own control module;
what this machine cannot run is replaced: the python base is one made from this host's
interpreter (tests/_pyimage.py) behind the services' registry standing in for docker.io, and
postgres and lavinmq are stubs providing the same provisions (no public registry is reachable,
and no LavinMQ image exists here). Then the self-hosting transition: once a registry is the
mesh's (`mesh build DIR` without --local), the local build is pushed and its record moves to
the registry's digest; the declaration names it there.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

import resolver
from _docker import cleanup, docker_host, engine, env_image, unique_mesh
from _genesis import GENESIS, IMAGE_ID, built_genesis, genesis_copy
from _meshop import REGISTRY, bridge_address, free_range, push
from _pyimage import python_image
from executors.control.ca import ca_cert_path
from executors.control.loading import load_mesh_dir

REPO = Path(__file__).resolve().parent.parent
PYTHON = f"{REGISTRY}/mesh-test-genesis/python"
STUB = f"{REGISTRY}/mesh-test-genesis/stub"
UID = 10001  # the control module's state owner, its image's USER

# the provisions the control module requires, granting nothing (the stubs run no server)
PROVISIONS = """\
postgres-database:
  scope: node
  grant: none
  keys: [host, port, database, user, password, url]
  url: "postgres://{user}@{host}:{port}/{database}"
amqp:
  scope: node
  grant: none
  keys: [host, port, vhost, user, password, url]
  url: "amqp://{user}@{host}:{port}/{vhost}"
amqp-management:
  scope: node
  grant: none
  keys: [host, port, url]
  url: "http://{host}:{port}"
mesh-ca:
  scope: mesh
  grant: none
  keys: [host, port, url]
  url: "http://{host}:{port}/ca"
"""

STUB_MODULE = """\
name: {name}
artifacts:
  server:
    repository: {repository}
    tag: '{tag}'
listens:
  main:
    port: {port}{management}
provides:
  - provision: {provision}
    listen: main{admin}
containers:
  - name: server
    artifact: server
"""


def mesh(*args, check: bool = True, timeout: float = 900) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "executors.cli", *map(str, args)],
                            capture_output=True, text=True, timeout=timeout,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    if check:
        assert result.returncode == 0, \
            f"mesh {' '.join(map(str, args))}:\n{result.stdout}\n{result.stderr}"
    return result


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def untag_local_builds(api, ledger) -> None:
    """Untag what `mesh build --local` tagged for `ledger`'s local builds (never forced: an
    image another test's tag or container holds stays)."""
    for name, record in ledger.builds.items():
        if record.local:
            for tag in (record.digest[7:19], "mesh-build"):
                try:
                    api.remove_image(f"mesh.local/{name}:{tag}")
                except Exception:  # noqa: BLE001 - already gone, or the tag moved on
                    pass


# --------------------------------------------------------------------------- without an Engine


def test_genesis_as_written_refuses_the_control_plane_and_names_the_command(tmp_path):
    run = mesh("plan", genesis_copy(tmp_path), check=False)
    assert run.returncode == 1, run.stdout + run.stderr
    refusal = next(line for line in run.stdout.splitlines() if "[unpinned-artifact]" in line)
    assert "control@genesis" in refusal and "`mesh build DIR --local`" in refusal, refusal


def test_a_local_build_is_declared_by_its_image_id_and_never_from_a_registry(tmp_path):
    inputs = load_mesh_dir(built_genesis(tmp_path))
    resolution = resolver.resolve(inputs.catalogue, inputs.mesh, inputs.ledger,
                                  sources=inputs.sources)
    assert [p for p in resolution.problems if p.severity == "error"] == []
    assert sorted((b.consumer, b.requirement, b.provider, b.chosen_by)
                  for b in resolution.bindings) == [
        ("control@genesis", "broker", "lavinmq@genesis", "co-located"),
        ("control@genesis", "broker-api", "lavinmq@genesis", "co-located"),
        ("control@genesis", "store", "postgres@genesis", "co-located")]
    (control,) = [c for c in resolution.declarations["genesis"].containers
                  if c.instance == "control@genesis"]
    assert control.image == IMAGE_ID  # the bare ID: the Engine resolves it, nothing pulls it
    assert resolution.artifacts == "external"


# --------------------------------------------------------------------------- on the Engine


def write_mesh(directory: Path, name: str, address: str, first_port: int) -> None:
    catalogue = directory / "catalogue"
    shutil.copytree(REPO / "catalogue" / "control", catalogue / "control",
                    ignore=shutil.ignore_patterns("dist", "__pycache__"))
    module = catalogue / "control" / "module.yaml"
    text = module.read_text()
    assert "repository: docker.io/library/python" in text
    assert "path: control/data" in text
    module.write_text(text.replace("repository: docker.io/library/python",
                                   f"repository: {PYTHON}")  # the host's /var/lib/mesh: not
                      .replace("path: control/data", f"path: {directory.parent}/control-data"))
    (catalogue / "provisions.yaml").write_text(PROVISIONS)
    for stub, provision, port in (("postgres", "postgres-database", 5432),
                                  ("lavinmq", "amqp", 5672)):
        (catalogue / stub).mkdir()
        (catalogue / stub / "module.yaml").write_text(STUB_MODULE.format(
            name=stub, repository=STUB, tag=name, port=port, provision=provision,
            management="\n  management:\n    port: 15672" if stub == "lavinmq" else "",
            admin="\n    admin: admin\n  - provision: amqp-management\n    listen: management"
                  "\nsecrets: [admin]" if stub == "lavinmq" else ""))
    text = (GENESIS / "mesh.yaml").read_text()
    for old, new in (("mesh: genesis", f"mesh: {name}"),
                     ("catalogue: ../../catalogue", "catalogue: catalogue"),
                     ("address: 10.44.0.1", f"address: {address}"),
                     # the control loop's mesh directory and key: this test's (mesh init's)
                     ("mesh-dir=/srv/mesh", f"mesh-dir={directory}"),
                     ("control-key=/etc/mesh/node.key",
                      f"control-key={directory.parent / 'genesis.key'}")):
        assert old in text
        text = text.replace(old, new)
    (directory / "mesh.yaml").write_text(
        text + f"\nhost-ports: {{first: {first_port}, last: {first_port + 7}}}\n")


def set_public_key(directory: Path, public: str) -> None:
    path = directory / "mesh.yaml"
    text = path.read_text()
    assert "    control: true\n" in text
    path.write_text(text.replace("    control: true\n",
                                 f'    control: true\n    public-key: "{public}"\n'))


@pytest.mark.integration
def test_genesis_builds_its_control_image_locally_and_runs_it_from_the_engine(tmp_path):
    api = engine()
    name = unique_mesh("gn")
    address = bridge_address(api)
    directory, out, state = tmp_path / "mesh", tmp_path / "out", tmp_path / "state"
    directory.mkdir()
    write_mesh(directory, name, address, free_range(8, address))
    push(api, python_image(api), PYTHON, "3.11-slim")  # what docker.io would serve
    push(api, env_image(api), STUB, name)
    try:
        mesh("pin", directory, "--all")
        refused = mesh("plan", directory, check=False)
        assert refused.returncode == 1 and "`mesh build DIR --local`" in refused.stdout, \
            refused.stdout

        # a mistake on purpose: before the wheel is staged the build says what to do
        unstaged = mesh("build", directory, "--local", "--docker-host", docker_host(),
                        check=False)
        assert unstaged.returncode == 1 and "stage-control-image.sh" in unstaged.stdout, \
            unstaged.stdout + unstaged.stderr
        assert "control/control" not in load_mesh_dir(directory).ledger.builds

        staged = subprocess.run(["sh", str(REPO / "scripts" / "stage-control-image.sh"),
                                 str(directory / "catalogue" / "control" / "image")],
                                capture_output=True, text=True, timeout=600)
        assert staged.returncode == 0, staged.stdout + staged.stderr
        built = mesh("build", directory, "--local", "--docker-host", docker_host())
        assert "no registry" in built.stdout and "built 1" in built.stdout, built.stdout
        ledger = load_mesh_dir(directory).ledger
        record = ledger.builds["control/control"]
        assert record.local
        assert dict(record.bases) == {"control/python": ledger.pins[f"{PYTHON}:3.11-slim"]}
        image = api.inspect_image(record.digest)  # the record is the Engine's image ID
        assert image["Id"] == record.digest
        assert f"mesh.local/control/control:{record.digest[7:19]}" in image["RepoTags"]
        assert record.digest not in ledger.mirrored
        again = mesh("build", directory, "--local", "--docker-host", docker_host())
        assert "nothing to build (nothing is stale)" in again.stdout, again.stdout
        assert load_mesh_dir(directory).ledger.builds["control/control"] == record

        made = mesh("node-key", "genesis", "--path", tmp_path / "genesis.key")
        set_public_key(directory, made.stdout.split("public-key:")[1].split()[0])
        mesh("ca", "init", directory)
        planned = mesh("plan", directory, "--issue", "--out", out)  # exit 0: nothing refused
        assert "0 refusals" in planned.stdout, planned.stdout
        declaration = json.loads((out / "genesis.declaration.json").read_text())
        (control,) = [c for c in declaration["containers"]
                      if c["instance"] == "control@genesis"]
        assert control["image"] == record.digest, control

        # the control instance's state (its home), owned by the module's user; the mesh
        # directory and key reach it as the node's mesh-dir and control-key facilities
        data = next(m["source"] for m in control["mounts"]
                    if m["target"] == "/var/lib/mesh-control")
        data_dir = Path(data)
        assert data_dir == tmp_path / "control-data", data
        data_dir.mkdir()
        shutil.copytree(directory, data_dir / "mesh",
                        ignore=shutil.ignore_patterns("dist", ".control"))
        shutil.copy(tmp_path / "genesis.key", data_dir / "node.key")
        for root, dirs, files in os.walk(data_dir):
            for entry in [root, *(os.path.join(root, n) for n in dirs + files)]:
                os.lchown(entry, UID, UID)
        data_dir.chmod(0o700)

        applied = mesh("apply", out / "genesis.declaration.json", "--secrets",
                       directory / "ledger.yaml", "--key", tmp_path / "genesis.key",
                       "--state-root", state, "--file-root", tmp_path / "files",
                       "--docker-host", docker_host(), "--no-firewall", timeout=600,
                       check=False)
        said = applied.stdout + applied.stderr
        assert applied.returncode == 0, said
        assert "pulling" not in said, said  # the local build is never pulled
        running = api.containers(filters={"label": [f"mesh.mesh={name}",
                                                    "mesh.instance=control@genesis"]})
        assert len(running) == 1 and running[0]["ImageID"] == record.digest, running
        # the real control plane runs in it (retrying the stub broker): /healthz 200, /ca
        (published,) = api.inspect_container(running[0]["Id"])["NetworkSettings"]["Ports"][
            "8080/tcp"]
        base = f"http://{published['HostIp']}:{published['HostPort']}"

        def logs() -> str:
            return api.logs(running[0]["Id"]).decode("utf-8", "replace")

        deadline = time.monotonic() + 60
        while "control plane of mesh" not in logs():
            assert time.monotonic() < deadline, logs()
            time.sleep(0.5)
        time.sleep(2)  # still running after its first attempts at the broker
        assert get(f"{base}/healthz")[0] == 200, logs()
        status, ca = get(f"{base}/ca")
        inputs = load_mesh_dir(directory)
        assert status == 200 and ca == ca_cert_path(directory, inputs.mesh).read_text(), \
            (status, ca)
    finally:
        cleanup(api, name)
        untag_local_builds(api, load_mesh_dir(directory).ledger)
        api.remove_image(f"{STUB}:{name}")  # the tag only: the image is the shared env image


# --------------------------------------------------------------------------- self-hosting

TOOL = """\
name: tool
artifacts:
  base:
    repository: {upstream}/mesh-test/genesis-base
    tag: '{tag}'
  image:
    build: ./image
    base: [base]
containers:
  - name: tool
    artifact: image
"""

REGISTRY_MODULE = """\
name: registry
artifacts:
  server:
    repository: {upstream}/mesh-test/genesis-base
    tag: '{tag}'
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


@pytest.mark.integration
def test_once_the_mesh_has_a_registry_the_next_build_pushes_what_was_built_locally(tmp_path):
    from _registry_helpers import REGISTRY_BINARY, RegistryProcess

    if REGISTRY_BINARY is None:
        pytest.skip("docker-registry is not installed (scripts/services.sh installs it)")
    api = engine()
    tag = unique_mesh("gs")
    directory = tmp_path / "mesh"
    (directory / "catalogue" / "tool" / "image").mkdir(parents=True)
    (directory / "catalogue" / "registry").mkdir()
    (directory / "catalogue" / "provisions.yaml").write_text(
        "artifact-store:\n  description: OCI registry\n")
    (directory / "catalogue" / "tool" / "image" / "Dockerfile").write_text(
        f"ARG BASE_IMAGE\nFROM ${{BASE_IMAGE}}\nLABEL mesh-test.build={tag}\n")
    first = free_range(4)
    nodes = (f"mesh: home\nhost-ports: {{first: {first}, last: {first + 3}}}\n"
             "nodes:\n  anchor:\n    address: 127.0.0.1\n    control: true\n")
    with RegistryProcess(tmp_path / "upstream") as upstream:
        push(api, env_image(api), f"{upstream.address}/mesh-test/genesis-base", tag)
        for module, text in (("tool", TOOL), ("registry", REGISTRY_MODULE)):
            (directory / "catalogue" / module / "module.yaml").write_text(
                text.format(upstream=upstream.address, tag=tag))
        (directory / "mesh.yaml").write_text(
            nodes + "instances:\n  tool:\n    module: tool\n    node: anchor\n")
        mesh("pin", directory, "--all")
        built = mesh("build", directory, "--local", "--docker-host", docker_host())
        local_ledger = load_mesh_dir(directory).ledger
        local = local_ledger.builds["tool/image"]
        assert local.local and api.inspect_image(local.digest)["Id"] == local.digest, built.stdout

        # without a registry, a build that is not --local says what to do
        refused = mesh("build", directory, "tool/image", "--docker-host", docker_host(),
                       check=False)
        assert refused.returncode == 2 and "--local" in refused.stderr, refused.stderr

        # the mesh's registry is assigned; the plan gives it its host port, where it runs
        (directory / "mesh.yaml").write_text(
            nodes + "instances:\n  tool:\n    module: tool\n    node: anchor\n"
            "  registry:\n    module: registry\n    node: anchor\n")
        mesh("plan", directory, "--out", tmp_path / "out", check=False)
        port = load_mesh_dir(directory).ledger.ports["registry"]["api"].port
        try:
            with RegistryProcess(tmp_path / "own", port=port) as own:
                self_hosting(directory, tmp_path, api, local, own)
        finally:
            untag_local_builds(api, local_ledger)
            try:
                api.remove_image(f"127.0.0.1:{port}/tool/image:mesh-build")
            except Exception:  # noqa: BLE001 - never pushed
                pass


def self_hosting(directory: Path, tmp_path: Path, api, local, own) -> None:
    """The mesh's registry `own` runs: the next build without --local pushes the local build
    there and moves its record; the declaration names it in the registry."""
    from _registry_helpers import served_digest

    external = mesh("plan", directory, "--json", check=False)
    assert '"artifacts": "external"' in external.stdout, external.stdout
    pushed = mesh("build", directory, "--docker-host", docker_host())
    assert "pushing the local build" in pushed.stdout and "built 1" in pushed.stdout, \
        pushed.stdout
    ledger_now = load_mesh_dir(directory).ledger
    record = ledger_now.builds["tool/image"]
    assert not record.local and record.bases == local.bases
    assert served_digest(own.address, "tool/image", record.digest) == record.digest
    assert ledger_now.mirrored[record.digest] == own.address
    out = tmp_path / "out"
    mesh("plan", directory, "--out", out)
    declaration = json.loads((out / "anchor.declaration.json").read_text())
    images = {c["instance"]: c["image"] for c in declaration["containers"]}
    assert images["tool"] == f"{own.address}/tool/image@{record.digest}", images
    assert "nothing is stale" in mesh("stale", directory).stdout
    # nothing local is left: a bare `mesh build DIR` has nothing to do and says so
    idle = mesh("build", directory, "--docker-host", docker_host(), check=False)
    assert idle.returncode == 2 and "name the artifacts" in idle.stderr, idle.stderr
