"""Pinning and mirroring against real registries (Debian's docker-registry, started per module).

Images are pushed under tags, pinned with `mesh pin`, tags are moved and nothing changes until
`--refresh`; unknown tags and repositories and an unreachable registry are errors naming the
manifest line; `mesh mirror` copies by digest into a second registry which then serves it.
"""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest
import requests
from pyrsistent import pmap

from _registry_helpers import (
    REGISTRY_BINARY,
    RegistryProcess,
    TokenService,
    closed_port,
    docker_host,
    docker_import_and_push,
    push_image,
    push_index,
    served_digest,
)
from executors.cli import main as cli
from executors.control.loading import load_mesh_dir, write_ledger
from executors.control.registry import RegistryClient, RegistryError
from resolver import BuildRecord

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(REGISTRY_BINARY is None,
                       reason="docker-registry is not installed (scripts/services.sh installs it)"),
]


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    with RegistryProcess(tmp_path_factory.mktemp("upstream")) as registry:
        yield registry


@pytest.fixture(scope="module")
def mirror(tmp_path_factory):
    with RegistryProcess(tmp_path_factory.mktemp("mirror")) as registry:
        yield registry


PROVISIONS = "artifact-store:\n  description: an OCI registry\n"


def write_mesh(root: Path, artifacts: dict[str, tuple[str, str]]) -> Path:
    """A one-node mesh running module `app`, one container per artifact (name → repository, tag)."""
    (root / "catalogue" / "app").mkdir(parents=True)
    (root / "catalogue" / "provisions.yaml").write_text(PROVISIONS)
    (root / "mesh.yaml").write_text(
        "mesh: test\nnodes:\n  anchor:\n    address: 127.0.0.1\n"
        "instances:\n  app:\n    module: app\n    node: anchor\n")
    lines = ["name: app", "artifacts:"]
    for name, (repository, tag) in artifacts.items():
        lines += [f"  {name}:", f"    repository: {repository}", f"    tag: '{tag}'"]
    lines.append("containers:")
    for name in artifacts:
        lines += [f"  - name: run-{name}", f"    artifact: {name}", "    command: [sleep, '3600']"]
    (root / "catalogue" / "app" / "module.yaml").write_text("\n".join(lines) + "\n")
    return root


def line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def mesh(capsys, *argv: str) -> tuple[int, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def pins(directory: Path) -> dict[str, str]:
    return dict(load_mesh_dir(directory).ledger.pins)


# --------------------------------------------------------------------------- pinning


def test_pin_records_the_digest_and_keeps_it_until_refresh(tmp_path, upstream, capsys):
    repository = f"{upstream.address}/mesh-test/app"
    first = push_image(upstream.address, "mesh-test/app", "1", b"first build")
    directory = write_mesh(tmp_path, {"main": (repository, "1")})

    code, out = mesh(capsys, "pin", str(directory))
    assert code == 0, out
    assert pins(directory) == {f"{repository}:1": first}
    ledger_text = (directory / "ledger.yaml").read_text()

    second = push_image(upstream.address, "mesh-test/app", "1", b"second build")  # the tag moves
    assert second != first and served_digest(upstream.address, "mesh-test/app", "1") == second
    code, out = mesh(capsys, "pin", str(directory))
    assert code == 0 and "nothing to pin" in out
    assert (directory / "ledger.yaml").read_text() == ledger_text  # byte for byte

    code, out = mesh(capsys, "pin", str(directory), "--refresh")
    assert code == 0, out
    assert pins(directory) == {f"{repository}:1": second}
    assert f"{first} → {second}" in out
    assert "app/run-main" in out  # the container that changes because of it


def test_refresh_of_one_artifact_leaves_the_others_pinned(tmp_path, upstream, capsys):
    a1 = push_image(upstream.address, "mesh-test/one", "v", b"one")
    b1 = push_image(upstream.address, "mesh-test/two", "v", b"two")
    one, two = f"{upstream.address}/mesh-test/one", f"{upstream.address}/mesh-test/two"
    directory = write_mesh(tmp_path, {"one": (one, "v"), "two": (two, "v")})
    assert mesh(capsys, "pin", str(directory))[0] == 0
    a2 = push_image(upstream.address, "mesh-test/one", "v", b"one again")
    b2 = push_image(upstream.address, "mesh-test/two", "v", b"two again")

    code, out = mesh(capsys, "pin", str(directory), "--refresh", "app/two")
    assert code == 0, out
    assert pins(directory) == {f"{one}:v": a1, f"{two}:v": b2}
    assert "app/run-two" in out and "app/run-one" not in out
    code, out = mesh(capsys, "pin", str(directory), "--refresh", f"{one}:v")
    assert code == 0, out
    assert pins(directory) == {f"{one}:v": a2, f"{two}:v": b2}


def test_refresh_of_an_unknown_artifact_is_refused(tmp_path, upstream, capsys):
    push_image(upstream.address, "mesh-test/app", "1", b"x")
    directory = write_mesh(tmp_path, {"main": (f"{upstream.address}/mesh-test/app", "1")})
    code, out = mesh(capsys, "pin", str(directory), "--refresh", "app/nope")
    assert code == 2 and "--refresh app/nope: no such artifact" in out


def test_a_tag_pointing_at_a_manifest_list_pins_the_list(tmp_path, upstream, capsys):
    index, children = push_index(upstream.address, "mesh-test/multi", "2",
                                 {"amd64": b"for amd64", "arm64": b"for arm64"})
    directory = write_mesh(tmp_path, {"main": (f"{upstream.address}/mesh-test/multi", "2")})
    assert mesh(capsys, "pin", str(directory))[0] == 0
    assert pins(directory) == {f"{upstream.address}/mesh-test/multi:2": index}
    assert index not in children


def test_unknown_tag_and_repository_are_errors_naming_the_manifest_line(tmp_path, upstream, capsys):
    known = push_image(upstream.address, "mesh-test/app", "1", b"known")
    directory = write_mesh(tmp_path, {
        "good": (f"{upstream.address}/mesh-test/app", "1"),
        "badtag": (f"{upstream.address}/mesh-test/app", "no-such-tag"),
        "badrepo": (f"{upstream.address}/mesh-test/no-such-repository", "1"),
    })
    manifest = directory / "catalogue" / "app" / "module.yaml"
    code, out = mesh(capsys, "pin", str(directory))
    assert code == 1, out
    tag_line = line_of(manifest, "no-such-tag")
    repo_line = line_of(manifest, "no-such-repository") + 1  # the tag line under it
    assert f"module.yaml:{tag_line}:10: artifact badtag" in out and "not-found" in out
    assert f"module.yaml:{repo_line}:10: artifact badrepo" in out
    assert "2 tags could not be pinned" in out
    assert pins(directory) == {f"{upstream.address}/mesh-test/app:1": known}  # the good one is kept


def test_an_unreachable_registry_is_a_clear_error(tmp_path, capsys):
    port = closed_port()
    directory = write_mesh(tmp_path, {"main": (f"127.0.0.1:{port}/mesh-test/app", "1"),
                                      "more": (f"127.0.0.1:{port}/mesh-test/more", "1")})
    code, out = mesh(capsys, "pin", str(directory))
    assert code == 1
    manifest = directory / "catalogue" / "app" / "module.yaml"
    main_line, more_line = line_of(manifest, "tag: '1'"), line_of(manifest, "more") + 2
    assert f"module.yaml:{main_line}:10: artifact main" in out
    assert "unreachable: resolving" in out and "connection refused" in out
    assert (f"module.yaml:{more_line}:10: artifact more (127.0.0.1:{port}/mesh-test/more:1): "
            f"unreachable: not asked: 127.0.0.1:{port} did not answer") in out  # asked once only
    assert "Traceback" not in out
    assert not (directory / "ledger.yaml").exists()


def test_the_client_names_each_kind_of_failure(upstream):
    client = RegistryClient(timeout=(3, 3))
    with pytest.raises(RegistryError) as missing:
        client.resolve(f"{upstream.address}/mesh-test/never-pushed", "1")
    assert missing.value.kind == "not-found"
    with pytest.raises(RegistryError) as unreachable:
        client.resolve(f"127.0.0.1:{closed_port()}/x/y", "1")
    assert unreachable.value.kind == "unreachable"
    with pytest.raises(RegistryError) as unreachable_hub:  # no internet here: docker.io is unreachable
        RegistryClient(timeout=(2, 2)).resolve("docker.io/library/postgres", "16")
    assert unreachable_hub.value.kind == "unreachable"


def test_images_pushed_through_the_engine_pin_to_the_pushed_digest(tmp_path, upstream, capsys):
    host = docker_host()
    if host is None:
        pytest.skip("the test Docker Engine is not running (scripts/services.sh starts it)")
    first = docker_import_and_push(host, upstream.address, "mesh-test/imported", "1", b"imported one")
    directory = write_mesh(tmp_path, {"main": (f"{upstream.address}/mesh-test/imported", "1")})
    assert mesh(capsys, "pin", str(directory))[0] == 0
    assert pins(directory) == {f"{upstream.address}/mesh-test/imported:1": first}
    second = docker_import_and_push(host, upstream.address, "mesh-test/imported", "1", b"imported two")
    assert mesh(capsys, "pin", str(directory))[0] == 0
    assert pins(directory) == {f"{upstream.address}/mesh-test/imported:1": first}
    assert mesh(capsys, "pin", str(directory), "--refresh")[0] == 0
    assert pins(directory) == {f"{upstream.address}/mesh-test/imported:1": second}


# --------------------------------------------------------------------------- mirroring


def test_mirror_copies_by_digest_and_records_it(tmp_path, upstream, mirror, capsys):
    digest = push_image(upstream.address, "mesh-test/mirrored", "1", b"mirror me")
    index, children = push_index(upstream.address, "mesh-test/mirrored-multi", "1",
                                 {"amd64": b"m amd64", "arm64": b"m arm64"})
    directory = write_mesh(tmp_path, {
        "single": (f"{upstream.address}/mesh-test/mirrored", "1"),
        "multi": (f"{upstream.address}/mesh-test/mirrored-multi", "1"),
    })
    assert mesh(capsys, "pin", str(directory))[0] == 0
    assert served_digest(mirror.address, "mesh-test/mirrored", digest) is None

    code, out = mesh(capsys, "mirror", str(directory), "--registry", mirror.address)
    assert code == 0, out
    assert served_digest(mirror.address, "mesh-test/mirrored", digest) == digest
    assert served_digest(mirror.address, "mesh-test/mirrored-multi", index) == index
    for child in children:
        assert served_digest(mirror.address, "mesh-test/mirrored-multi", child) == child
    ledger = load_mesh_dir(directory).ledger
    assert dict(ledger.mirrored) == {digest: mirror.address, index: mirror.address}

    code, out = mesh(capsys, "mirror", str(directory), "--registry", mirror.address)
    assert code == 0 and "already there" in out and "copied" not in out


def test_mirror_without_a_registry_is_refused(tmp_path, upstream, capsys):
    push_image(upstream.address, "mesh-test/app", "1", b"x")
    directory = write_mesh(tmp_path, {"main": (f"{upstream.address}/mesh-test/app", "1")})
    assert mesh(capsys, "pin", str(directory))[0] == 0
    code, out = mesh(capsys, "mirror", str(directory))
    assert code == 2 and "no registry to mirror into" in out
    code, out = mesh(capsys, "mirror", str(directory), "--registry", f"127.0.0.1:{closed_port()}")
    assert code == 2 and "unreachable" in out


# --------------------------------------------------------------------------- staleness


def write_build_mesh(root: Path, os_repository: str) -> Path:
    """base/os (upstream) ← toolchain/sdk (built) ← app/main (built), and app runs main."""
    for module in ("base", "toolchain", "app"):
        (root / "catalogue" / module).mkdir(parents=True)
    (root / "catalogue" / "provisions.yaml").write_text(PROVISIONS)
    (root / "catalogue" / "base" / "module.yaml").write_text(
        f"name: base\nartifacts:\n  os:\n    repository: {os_repository}\n    tag: '1'\n")
    (root / "catalogue" / "toolchain" / "module.yaml").write_text(
        "name: toolchain\nartifacts:\n  sdk:\n    build: sdk\n    base: [base/os]\n")
    (root / "catalogue" / "app" / "module.yaml").write_text(
        "name: app\nartifacts:\n  main:\n    build: .\n    base: [toolchain/sdk]\n"
        "containers:\n  - name: app\n    artifact: main\n")
    (root / "mesh.yaml").write_text(
        "mesh: test\nnodes:\n  anchor:\n    address: 127.0.0.1\n"
        "instances:\n  app:\n    module: app\n    node: anchor\n")
    return root


def record_builds(directory: Path, os_digest: str) -> None:
    """What a build would record: each artifact's digest and its bases' digests at the time."""
    ledger = load_mesh_dir(directory).ledger
    sdk = "sha256:" + "5" * 64
    write_ledger(directory / "ledger.yaml", attrs.evolve(ledger, builds=pmap({
        "toolchain/sdk": BuildRecord(digest=sdk, bases=pmap({"base/os": os_digest})),
        "app/main": BuildRecord(digest="sha256:" + "6" * 64, bases=pmap({"toolchain/sdk": sdk})),
    })))


def stale_answer(capsys, directory: Path) -> dict:
    code, out = mesh(capsys, "stale", str(directory), "--json")
    assert code == 0, out
    return json.loads(out)


def test_stale_compares_digests_of_the_pinned_foundation(tmp_path, upstream, capsys):
    first = push_image(upstream.address, "mesh-test/os", "1", b"os release 1")
    directory = write_build_mesh(tmp_path, f"{upstream.address}/mesh-test/os")
    assert mesh(capsys, "pin", str(directory))[0] == 0  # the base is pinned though only built FROM
    answer = stale_answer(capsys, directory)
    assert set(answer["graph"]) == {"base/os", "toolchain/sdk", "app/main"}  # the foundation is there
    assert answer["stale"] == ["app/main", "toolchain/sdk"]  # never built yet
    record_builds(directory, first)
    assert stale_answer(capsys, directory)["stale"] == []

    # the same content pushed again: the tag is rewritten, the digest is equal, nothing is stale
    assert push_image(upstream.address, "mesh-test/os", "1", b"os release 1") == first
    assert mesh(capsys, "pin", str(directory), "--refresh")[0] == 0
    assert stale_answer(capsys, directory)["stale"] == []

    # a new base digest: everything built from it, transitively, must be rebuilt
    push_image(upstream.address, "mesh-test/os", "1", b"os release 2")
    assert stale_answer(capsys, directory)["stale"] == []  # not until the pin is refreshed
    assert mesh(capsys, "pin", str(directory), "--refresh", "base/os")[0] == 0
    answer = stale_answer(capsys, directory)
    assert answer["stale"] == ["app/main", "toolchain/sdk"]
    assert "base base/os changed" in answer["reasons"]["toolchain/sdk"]
    assert answer["reasons"]["app/main"] == "builds from toolchain/sdk, which is stale"
    code, out = mesh(capsys, "stale", str(directory))
    assert code == 0 and "2 of 2 built artifacts must be rebuilt" in out


# --------------------------------------------------------------------------- token auth


def test_a_token_challenge_is_followed_and_a_refusal_is_unauthorised(tmp_path, capsys):
    storage = tmp_path / "token-registry"
    with RegistryProcess(storage) as open_registry:  # fill the storage without auth …
        digest = push_image(open_registry.address, "mesh-test/guarded", "1", b"behind a token")
        push_image(open_registry.address, "mesh-test/forbidden", "1", b"nobody may read this")
    tokens = TokenService(tmp_path / "tokens")
    try:
        with RegistryProcess(storage, auth=tokens.registry_auth()) as guarded:  # … serve it with
            assert requests.get(f"http://{guarded.address}/v2/", timeout=5).status_code == 401
            directory = write_mesh(tmp_path / "mesh", {"main": (f"{guarded.address}/mesh-test/guarded", "1")})
            code, out = mesh(capsys, "pin", str(directory))
            assert code == 0, out
            assert pins(directory) == {f"{guarded.address}/mesh-test/guarded:1": digest}
            assert tokens.requests == ["repository:mesh-test/guarded:pull"]

            with pytest.raises(RegistryError) as refused:
                RegistryClient(timeout=(3, 3)).resolve(f"{guarded.address}/mesh-test/forbidden", "1")
            assert refused.value.kind == "unauthorised"
            assert "refused anonymous access" in str(refused.value)
    finally:
        tokens.stop()
