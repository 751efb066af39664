"""The module catalogue and the fixtures: their shape, and what each fixture resolves to.

The catalogue is real services with their upstream images, so these tests pin down the
promises other code and the README rely on: every manifest loads strictly, images are named by
fully qualified repository and tag (digests live only in ledgers), there is one postgres module,
the substrate and builder are what they say, and every fixture resolves to exactly the problems
its expected.yaml lists.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ruamel.yaml import YAML

import resolver
from executors.control.loading import load_mesh_dir
from resolver import InputError
from resolver.documents import load_module, load_provisions
from resolver.artifacts import validate_artifact_store_modules, validate_build_graph

from _genesis import built_genesis, genesis_copy

REPO = Path(__file__).resolve().parent.parent
CATALOGUE = REPO / "catalogue"
FIXTURES = REPO / "fixtures"
REFUSALS = FIXTURES / "refusals"

REQUIRED_MODULES = {
    "postgres", "lavinmq", "minio", "keycloak", "gitea", "umami", "mosquitto", "registry",
    "mailserver", "jellyfin", "audiobookshelf", "act-runner", "control",
}
MEDIA_APPS = ("jellyfin", "audiobookshelf")


def _module_dirs():
    return sorted(p for p in CATALOGUE.iterdir() if p.is_dir())


def _modules() -> dict:
    modules = {}
    for directory in _module_dirs():
        path = directory / "module.yaml"
        module, _ = load_module(path.read_text(), str(path), name=directory.name)
        modules[directory.name] = module
    return modules


@pytest.fixture(scope="module")
def modules():
    return _modules()


@pytest.fixture(scope="module")
def provisions():
    path = CATALOGUE / "provisions.yaml"
    return load_provisions(path.read_text(), str(path))[0].provisions


def _yaml(path: Path):
    return YAML(typ="safe").load(path.read_text())


# --------------------------------------------------------------------------- the catalogue


@pytest.mark.parametrize("directory", _module_dirs(), ids=lambda p: p.name)
def test_every_module_loads_strictly_and_is_named_for_its_directory(directory):
    path = directory / "module.yaml"
    module, _ = load_module(path.read_text(), str(path), name=directory.name)
    assert module.name == directory.name
    assert module.containers, f"{directory.name} runs nothing"


def test_the_whole_catalogue_loads_with_cross_references(modules):
    """load_mesh_dir loads every module of the catalogue and checks placeholders across them."""
    inputs = load_mesh_dir(FIXTURES / "genesis")
    assert set(inputs.catalogue.modules) == set(modules)
    assert validate_artifact_store_modules(inputs.catalogue) == []
    assert validate_build_graph(inputs.catalogue) == []


def test_artifacts_are_fully_qualified_repositories_and_tags_never_digests(modules):
    for name, module in modules.items():
        for artifact_name, artifact in module.artifacts.items():
            where = f"{name}/{artifact_name}"
            if artifact.build is not None:
                assert (CATALOGUE / name / artifact.build / "Dockerfile").is_file(), where
                continue
            registry, _, path = artifact.repository.partition("/")
            assert "." in registry and path.count("/") >= 1, f"{where}: {artifact.repository}"
            assert artifact.tag and artifact.tag != "latest", where
            assert "@" not in artifact.repository + artifact.tag, where
    for path in CATALOGUE.rglob("*"):
        staged = {"dist", "__pycache__"} & set(path.relative_to(CATALOGUE).parts)
        if path.is_file() and not staged:  # dist/: a wheel scripts/stage-control-image.sh made
            assert "@sha256" not in path.read_text(), f"a digest in {path}"


def test_provisions_are_defined_as_the_design_says(provisions):
    expected = {
        "postgres-database": ("node", "database+login"),
        "amqp": ("node", "vhost+account"),
        "s3-bucket": ("node", "bucket+key"),
        "oidc": ("node", "client+secret"),
        "artifact-store": ("node", "none"),
        "mesh-ca": ("mesh", "none"),
    }
    for name, (scope, grant) in expected.items():
        assert (provisions[name].scope, provisions[name].grant) == (scope, grant), name
    assert provisions["postgres-database"].url == "postgres://{user}@{host}:{port}/{database}"
    assert list(provisions["postgres-database"].keys) == [
        "host", "port", "database", "user", "password", "url"]


def test_the_required_modules_exist(modules):
    assert REQUIRED_MODULES <= set(modules)


def test_exactly_one_module_provides_postgres_database_and_it_is_postgres(modules):
    providers = [n for n, m in modules.items()
                 if any(p.provision == "postgres-database" for p in m.provides)]
    assert providers == ["postgres"]
    postgres = modules["postgres"]
    (provide,) = postgres.provides
    assert (provide.listen, provide.admin) == ("postgres", "admin")
    assert postgres.listens["postgres"].port == 5432
    server = postgres.containers[0]
    assert "POSTGRES_PASSWORD" not in server.env  # a file the image reads, never env
    (password,) = server.secret_files
    assert (password.env, password.content, password.owner) == \
        ("POSTGRES_PASSWORD_FILE", "${self.admin.password}", "999:999")
    data = postgres.state["data"]
    assert (data.owner, data.mode) == ("999:999", "0700")


def test_every_provision_a_module_names_is_defined(modules, provisions):
    for name, module in modules.items():
        named = [p.provision for p in module.provides]
        named += [r.provision for r in module.requires if r.provision is not None]
        assert set(named) <= set(provisions), name
        for req in module.requires:
            if req.module is not None:
                assert req.module in modules, f"{name} requires unknown module {req.module}"


def test_the_media_apps_share_the_library_read_only_and_downloads_read_write(modules):
    for name in MEDIA_APPS:
        module = modules[name]
        by_path = {a.path: (key, a.mode) for key, a in module.accesses.items()}
        library_key, library_mode = by_path["/srv/media"]
        downloads_key, downloads_mode = by_path["/srv/downloads"]
        assert (library_mode, downloads_mode) == ("ro", "rw"), name
        mounts = {m.access: m for c in module.containers for m in c.mounts if m.access}
        assert mounts[library_key].read_only, f"{name} mounts the library writable"
        assert not mounts[downloads_key].read_only, name
        assert not module.state or all(not s.path.startswith("/srv/") for s in module.state.values())


def test_the_builder_is_granted_the_container_runtime_socket_and_requires_the_forge(modules):
    builder = modules["act-runner"]
    assert list(builder.facilities) == ["docker-socket"]
    mounts = [m for c in builder.containers for m in c.mounts if m.facility]
    assert [(m.facility, m.target) for m in mounts] == [("docker-socket", "/var/run/docker.sock")]
    (forge,) = [r for r in builder.requires if r.as_ == "forge"]
    assert (forge.module, forge.listen, forge.provision) == ("gitea", "http", None)


def test_mosquitto_seeds_its_admin_in_a_run_once_container_before_the_broker(modules):
    containers = list(modules["mosquitto"].containers)
    names = [c.name for c in containers]
    seed, broker = containers[names.index("seed-admin")], containers[names.index("broker")]
    assert names.index("seed-admin") < names.index("broker")
    assert seed.run_once and not broker.run_once
    assert seed.artifact == broker.artifact
    assert "mosquitto_ctrl dynsec init" in " ".join(seed.command)
    (password,) = seed.secret_files  # a file, never its environment
    assert (password.path, password.content) == ("/run/secrets/admin-password",
                                                 "${self.admin.password}")
    assert "cat /run/secrets/admin-password" in " ".join(seed.command)


def test_the_control_plane_is_built_on_python_and_provides_the_mesh_ca(modules, provisions):
    control = modules["control"]
    built = [a for a in control.artifacts.values() if a.build is not None]
    assert [(a.build, list(a.base)) for a in built] == [("./image", ["python"])]
    python = control.artifacts["python"]
    assert (python.repository, python.tag) == ("docker.io/library/python", "3.11-slim")
    dockerfile = (CATALOGUE / "control" / "image" / "Dockerfile").read_text()
    assert "python:3.11-slim" in dockerfile and "\nFROM " in dockerfile
    assert [p.provision for p in control.provides] == ["mesh-ca"]
    assert provisions["mesh-ca"].scope == "mesh"
    assert {r.as_: r.provision for r in control.requires} == {
        "store": "postgres-database", "broker": "amqp", "broker-api": "amqp-management"}


def test_part_scoped_requirements_and_containers_belong_to_declared_parts(modules):
    postgres = modules["postgres"]
    assert set(postgres.parts) == {"backups"}
    assert [r.as_ for r in postgres.requires if r.part == "backups"] == ["offsite"]
    assert {c.name for c in postgres.containers if c.part == "backups"} == {"dumpall", "offsite-copy"}


# --------------------------------------------------------------------------- the fixtures


def _errors(mesh_dir: Path) -> list[tuple[str, str]]:
    inputs = load_mesh_dir(mesh_dir)
    resolution = resolver.resolve(inputs.catalogue, inputs.mesh, inputs.ledger, sources=inputs.sources)
    return sorted((p.code, p.instance) for p in resolution.problems if p.severity == "error")


def _resolution(mesh_dir: Path):
    inputs = load_mesh_dir(mesh_dir)
    return resolver.resolve(inputs.catalogue, inputs.mesh, inputs.ledger, sources=inputs.sources)


@pytest.mark.parametrize("name", ["anchor", "homelab"])
def test_example_meshes_resolve_without_refusals(name):
    assert _errors(FIXTURES / name) == []


def test_genesis_resolves_without_refusals_once_its_control_image_is_built_locally(tmp_path):
    assert _errors(genesis_copy(tmp_path)) == [("unpinned-artifact", "control@genesis")]
    assert _errors(built_genesis(tmp_path / "built")) == []


def test_anchor_runs_eight_applications_against_one_postgres():
    resolution = _resolution(FIXTURES / "anchor")
    consumers = sorted(b.consumer for b in resolution.bindings
                       if b.provision == "postgres-database")
    assert all(b.provider == "postgres@anchor" for b in resolution.bindings
               if b.provision == "postgres-database")
    assert len([c for c in consumers if c != "control@anchor"]) == 8


def test_homelab_binds_across_nodes_by_override_and_by_mesh_default():
    bound = {(b.consumer, b.requirement): b for b in _resolution(FIXTURES / "homelab").bindings}
    assert bound[("umami@home", "db")].provider == "postgres@lab"
    assert bound[("umami@home", "db")].chosen_by == "instance override"
    assert bound[("grafana@lab", "db")].provider == "postgres@lab"
    assert bound[("grafana@lab", "sso")].provider == "keycloak@home"
    assert bound[("postgres@lab", "offsite")].provider == "minio@lab"
    assert bound[("act-runner@lab", "forge")].provider == "gitea@home"


def _refusal_cases():
    return sorted(p for p in REFUSALS.iterdir() if (p / "expected.yaml").is_file())


def test_every_refusal_case_has_an_expectation():
    cases = {p.name for p in REFUSALS.iterdir() if p.is_dir()}
    assert cases == {p.name for p in _refusal_cases()}
    assert {"ambiguous-provider", "duplicate-claim", "port-conflict", "undeclared-mount",
            "unpinned-artifact", "second-mesh-provider", "state-path-owners", "unknown-node",
            "unknown-module", "no-provider"} <= cases


@pytest.mark.parametrize("case", _refusal_cases(), ids=lambda p: p.name)
def test_refusal_case_resolves_to_exactly_its_expected_problems(case):
    expected = _yaml(case / "expected.yaml")
    if "load_fault" in expected:
        with pytest.raises(InputError) as caught:
            load_mesh_dir(case)
        want = expected["load_fault"]
        located = [(f.file, f.line) for f in caught.value.faults]
        assert any(file.endswith(want["file"]) and line == want["line"] for file, line in located), (
            located)
        return
    want = sorted((p["code"], p["instance"]) for p in expected["problems"])
    for code, _ in want:
        assert code in set(resolver.ProblemCode), f"{code} is not a published code"
    assert _errors(case) == want
