"""No issued secret appears in plaintext anywhere: not in a file written, not in anything printed.

For every fixture (copied to a temporary directory, every node given a real key): mesh ca init,
plan --issue, rotate (one credential, a provider, a consumer), the providers and holders
reporting applied, rotate again, renew a certificate, plan --out and plan --json. Then every
value ever issued is recovered by unsealing with the node keys the test made, and every byte
written under the temporary directory and every character printed is searched for each one.

On a node, the same scan covers what the container runtime shows: tests/test_secret_files_docker.py
searches `docker inspect` of every container and `/proc/<pid>/environ` of every process in them
for every issued value. Here, the declarations say which containers are told a secret through
their environment at all: only those of modules whose image reads no secret from a file.
"""

from __future__ import annotations

import pytest

import resolver

from executors.common.keys import load_private_key, unseal_for_node
from executors.control.loading import load_mesh_dir, write_ledger
from resolver.rotation import holder_nodes, report_applied

from _meshdir import fixture_dirs, fixture_id, prepare, run_cli


def _report_everything_applied(mesh_dir) -> None:
    """Every provider, then every holder, reports the newest generation applied."""
    inputs = load_mesh_dir(mesh_dir)
    ledger = inputs.ledger
    for cred_id, cred in sorted(ledger.credentials.items()):
        newest = (cred.pending or cred.active).generation
        ledger = report_applied(ledger, cred_id, "", provider=newest)
        for node in holder_nodes(ledger.credentials[cred_id]):
            ledger = report_applied(ledger, cred_id, node, holder=newest)
    write_ledger(inputs.ledger_path, ledger)


def _digest(mesh_dir, node) -> str:
    inputs = load_mesh_dir(mesh_dir)
    resolution = resolver.resolve(inputs.catalogue, inputs.mesh, inputs.ledger,
                                  sources=inputs.sources)
    declaration = resolution.declarations.get(node)
    return declaration.digest if declaration is not None else "sha256:none"


def _issued_values(mesh_dir, keys, seen: set) -> None:
    ledger = load_mesh_dir(mesh_dir).ledger
    for node, key_path in keys.items():
        for generations in unseal_for_node(ledger, node, load_private_key(key_path)).values():
            seen.update(generations.values())


@pytest.mark.parametrize("fixture", fixture_dirs(), ids=fixture_id)
def test_no_issued_secret_in_any_file_or_output(fixture, tmp_path):
    mesh_dir, keys, printed = prepare(fixture, tmp_path)
    outputs = [printed]
    values: set[str] = set()

    def mesh(*argv, allowed=(0, 1)):
        code, output = run_cli(*argv)
        outputs.append(output)
        assert code in allowed, output
        return code, output

    mesh("ca", "init", mesh_dir, allowed=(0, 2))
    code, _ = mesh("plan", "--issue", mesh_dir, "--out", tmp_path / "out", allowed=(0, 1, 2))
    if code == 2:  # bad input: nothing was issued; what it printed is still scanned below
        assert not (mesh_dir / "ledger.yaml").exists() or "credentials" not in \
            (mesh_dir / "ledger.yaml").read_text()
    else:
        _issued_values(mesh_dir, keys, values)
        credentials = sorted(load_mesh_dir(mesh_dir).ledger.credentials)
        binding_ids = [c for c in credentials  # provision/provider/consumer: not own, not TLS
                       if not c.startswith(("secret/", "tls/"))]
        if binding_ids:
            first = binding_ids[0]
            mesh("rotate", mesh_dir, first)
            _issued_values(mesh_dir, keys, values)
            provider = first.split("/")[1]
            others = sorted({c.split("/")[2] for c in binding_ids} - {first.split("/")[2]})
            if others:
                mesh("rotate", mesh_dir, "--consumer", others[0])
                _issued_values(mesh_dir, keys, values)
            for node in sorted(keys):  # every node reports its declaration applied
                mesh("applied", mesh_dir, node, "--digest", _digest(mesh_dir, node),
                     allowed=(0, 2))
            _report_everything_applied(mesh_dir)
            _issued_values(mesh_dir, keys, values)
            mesh("rotate", mesh_dir, "--provider", provider)
            _issued_values(mesh_dir, keys, values)
            _report_everything_applied(mesh_dir)
            _issued_values(mesh_dir, keys, values)
        own = [c for c in credentials if c.startswith("secret/")]
        if own:
            mesh("rotate", mesh_dir, own[0])
            _issued_values(mesh_dir, keys, values)
        node = sorted(keys)[0]
        mesh("renew", mesh_dir, node)
        mesh("plan", mesh_dir, "--out", tmp_path / "out")
        mesh("plan", mesh_dir, "--json")
        if not fixture_id(fixture).startswith("refusals/"):  # some refusals hold no secret
            assert values, "the fixture issued no secret, so the scan proves nothing"

    for value in values:
        assert len(value) >= 40
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert files
    for path in files:
        data = path.read_bytes()
        for value in values:
            assert value.encode() not in data, f"an issued secret is in plaintext in {path}"
    everything_printed = "".join(outputs)
    for value in values:
        assert value not in everything_printed, "an issued secret was printed"


def test_the_scan_would_find_a_leak(tmp_path):
    """The scan is not vacuous: a value written anywhere under the directory is found."""
    fixture = next(f for f in fixture_dirs() if fixture_id(f) == "homelab")
    mesh_dir, keys, _ = prepare(fixture, tmp_path)
    run_cli("plan", "--issue", mesh_dir)
    values: set[str] = set()
    _issued_values(mesh_dir, keys, values)
    leaked = sorted(values)[0]
    (mesh_dir / "debug.log").write_text(f"password={leaked}\n")
    found = [p for p in tmp_path.rglob("*") if p.is_file() and leaked.encode() in p.read_bytes()]
    assert found == [mesh_dir / "debug.log"]


# Modules whose image reads a secret from its environment only, with why: every other
# container of the fixtures is told its secrets as files (docs/schema.md, `secret-files`).
ENV_ONLY = {
    "keycloak": "Keycloak reads KC_DB_PASSWORD and KEYCLOAK_ADMIN_PASSWORD from env or a keystore",
    "umami": "Umami reads DATABASE_URL and APP_SECRET from its environment only",
    "minio": "MinIO's *_FILE variables are undocumented and name Docker secrets, not paths",
    "control": "the control plane's own image reads its broker and store URLs from env",
}


@pytest.mark.parametrize("fixture", fixture_dirs(), ids=fixture_id)
def test_only_modules_whose_image_reads_no_file_are_told_a_secret_in_env(fixture):
    try:
        inputs = load_mesh_dir(fixture)
    except resolver.InputError:  # a fixture of bad input: nothing is declared
        return
    resolution = resolver.resolve(inputs.catalogue, inputs.mesh, inputs.ledger,
                                  sources=inputs.sources)
    told_in_env, told_as_files = set(), set()
    for declaration in resolution.declarations.values():
        for container in declaration.containers:
            module = inputs.mesh.instances[container.instance].module
            if any("${secret:" in value for value in container.env.values()):
                told_in_env.add(module)
            for secret_file in container.secret_files:
                assert secret_file.mode == "0400" and secret_file.path.startswith("/run/secrets/")
                if "${secret:" in secret_file.content:
                    told_as_files.add(module)
                # a file's variable names its path, never a value
                assert not any(v == secret_file.content for v in container.env.values())
    assert told_in_env <= set(ENV_ONLY), sorted(told_in_env - set(ENV_ONLY))
    used = {inputs.mesh.instances[c.instance].module  # declared, not refused
            for declaration in resolution.declarations.values() for c in declaration.containers}
    readers = {"postgres", "gitea", "grafana", "miniflux", "nextcloud", "wikijs", "vaultwarden",
               "act-runner", "mosquitto", "lavinmq"}  # their images read secret files
    assert readers & used <= told_as_files, sorted(readers & used - told_as_files)
    if fixture_id(fixture) == "homelab":
        assert len(told_as_files) >= 5, told_as_files  # the check is not vacuous
