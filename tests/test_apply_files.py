"""`mesh apply` on the node's files: state directories, accessed paths, env and binding files,
sealed secrets, refusals, dry runs, latest wins and bad input (real filesystem, real engine)."""

from __future__ import annotations

import json
import os
import stat

import attrs
import pytest
from pyrsistent import pmap, pvector

from resolver import AccessDecl, BindingDecl, MountDecl, SecretRef, StateDirDecl
from resolver.rendering import secret_token

from executors.cli import main as cli

from executors.common import keys
from executors.node.apply.pipeline import apply_declaration
from _docker import cleanup, container, declaration, engine, env_image, unique_mesh, \
    write_declaration

pytestmark = pytest.mark.integration

SLEEPER = ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]


@pytest.fixture
def api():
    return engine()


@pytest.fixture
def mesh(api):
    name = unique_mesh("f")
    yield name
    cleanup(api, name)


def run_cli(capsys, *argv):
    code = cli.main(["apply", *map(str, argv)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def apply_json(capsys, *argv):
    code, out, err = run_cli(capsys, *argv, "--json", "--stop-timeout", "1")
    return code, json.loads(out), err


def owner_mode(path):
    st = os.stat(path)
    return st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)


def test_state_directory_is_created_with_owner_and_mode_and_reapply_does_nothing(
        api, mesh, tmp_path, capsys):
    target = tmp_path / "srv" / "app" / "data"
    decl = declaration(mesh, state_dirs=[StateDirDecl(str(target), 1000, 1001, "0750",
                                                      "app@n1", "data")])
    path = write_declaration(tmp_path / "d.json", decl)
    code, report, _ = apply_json(capsys, path, "--state-root", tmp_path / "state")
    assert code == 0, report
    assert [op["op"] for op in report["ops"]] == ["create-dir", "record-applied"]
    assert owner_mode(target) == (1000, 1001, 0o750)
    code, again, _ = apply_json(capsys, path, "--state-root", tmp_path / "state")
    assert code == 0 and again["ops"] == []


def test_a_directory_holding_data_the_mesh_did_not_put_there_is_kept_and_reported(
        api, mesh, tmp_path, capsys):
    target = tmp_path / "existing"
    target.mkdir(mode=0o755)
    (target / "precious.db").write_text("operator data")
    decl = declaration(mesh, state_dirs=[StateDirDecl(str(target), 1000, 1000, "0700",
                                                      "app@n1", "data")])
    path = write_declaration(tmp_path / "d.json", decl)
    code, report, err = apply_json(capsys, path, "--state-root", tmp_path / "state")
    assert code == 0
    assert [n["subject"] for n in report["notices"]] == [str(target)]
    assert "kept: holds data the mesh did not put there" in report["notices"][0]["message"]
    assert "kept" in err
    assert owner_mode(target) == (0, 0, 0o755)
    assert (target / "precious.db").read_text() == "operator data"
    assert all(op["subject"] != str(target) for op in report["ops"])
    code, again, _ = apply_json(capsys, path, "--state-root", tmp_path / "state")
    assert again["ops"] == [] and again["notices"] == report["notices"]


def test_an_empty_directory_is_fixed_and_a_directory_the_mesh_made_follows_its_declaration(
        api, mesh, tmp_path, capsys):
    target = tmp_path / "empty"
    target.mkdir(mode=0o777)
    decl = declaration(mesh, state_dirs=[StateDirDecl(str(target), 1000, 1000, "0700",
                                                      "app@n1", "data")])
    path = write_declaration(tmp_path / "d.json", decl)
    code, report, _ = apply_json(capsys, path, "--state-root", tmp_path / "state")
    assert report["ops"][0]["op"] == "fix-dir"
    assert owner_mode(target) == (1000, 1000, 0o700)
    (target / "written-by-the-app").write_text("x")
    decl2 = declaration(mesh, serial=2, state_dirs=[StateDirDecl(str(target), 1002, 1002,
                                                                 "0750", "app@n1", "data")])
    path2 = write_declaration(tmp_path / "d2.json", decl2)
    code, report, _ = apply_json(capsys, path2, "--state-root", tmp_path / "state")
    assert code == 0
    assert report["ops"][0]["op"] == "fix-dir"
    assert "contents are left as they are" in report["ops"][0]["cause"]
    assert owner_mode(target) == (1002, 1002, 0o750)
    assert os.stat(target / "written-by-the-app").st_uid == 0  # never chowned recursively


def test_an_absent_accessed_path_is_refused_and_never_created(api, mesh, tmp_path, capsys):
    image = env_image(api)
    absent = tmp_path / "media"
    decl = declaration(
        mesh, containers=[container(mesh, "web", image, mounts=[
            MountDecl("access", str(absent), "/media", True)])],
        accesses=[AccessDecl(str(absent), "ro", pvector(["app@n1"]))])
    path = write_declaration(tmp_path / "d.json", decl)
    code, report, err = apply_json(capsys, path, "--state-root", tmp_path / "state")
    assert code == 1
    assert report["result"] == "refused" and report["ops"] == []
    assert report["refusals"][0]["subject"] == str(absent)
    assert "absent" in report["refusals"][0]["message"]
    assert "refused" in err
    assert not absent.exists()
    assert api.containers(all=True, filters={"label": f"mesh.mesh={mesh}"}) == []
    assert report["serial_applied"] is None


def test_a_present_accessed_path_is_used_as_it_is(api, mesh, tmp_path, capsys):
    image = env_image(api)
    media = tmp_path / "media"
    media.mkdir(mode=0o711)
    (media / "film").write_text("x")
    os.chown(media, 1234, 1234)
    decl = declaration(
        mesh, containers=[container(mesh, "web", image, command=SLEEPER, mounts=[
            MountDecl("access", str(media), "/media", True)])],
        accesses=[AccessDecl(str(media), "ro", pvector(["app@n1"]))])
    path = write_declaration(tmp_path / "d.json", decl)
    code, report, _ = apply_json(capsys, path, "--state-root", tmp_path / "state")
    assert code == 0, report
    assert owner_mode(media) == (1234, 1234, 0o711)
    binds = api.inspect_container(f"{mesh}-web")["HostConfig"]["Binds"]
    assert binds == [f"{media}:/media:ro"]


def _sealed_ledger(tmp_path, values: dict[tuple[str, int], str]):
    """A ledger file holding `values` sealed to node n1, and n1's key file."""
    from resolver import Credential, Generation, Ledger
    from resolver.documents import dump_ledger

    key_path = tmp_path / "n1.key"
    public = keys.create_node_key(key_path)
    credentials = {}
    for (credential, generation), value in values.items():
        credentials[credential] = Credential(active=Generation(
            generation, sealed=pmap({"n1": keys.seal(public, value, "n1")})))
    ledger_path = tmp_path / "ledger.yaml"
    ledger_path.write_text(dump_ledger(Ledger(credentials=pmap(credentials))))
    return ledger_path, key_path


def test_secrets_are_unsealed_into_0600_env_and_binding_files_and_never_reported(
        api, mesh, tmp_path, capsys):
    image = env_image(api)
    secret = "s3cr3t-" + os.urandom(6).hex()
    ledger_path, key_path = _sealed_ledger(tmp_path, {("db-cred", 3): secret})
    ref = SecretRef("db-cred", 3)
    decl = declaration(
        mesh, containers=[container(mesh, "web", image, command=SLEEPER,
                                    env={"DB_HOST": "10.0.0.2",
                                         "DB_URL": f"postgres://u:{secret_token('db-cred')}@h/db"},
                                    secrets=[ref])],
        bindings=[BindingDecl("app@n1", "db", "postgres@n1", "postgres-database",
                              pmap({"host": "10.0.0.2", "password": secret_token("db-cred")}),
                              ref)])
    path = write_declaration(tmp_path / "d.json", decl)
    state = tmp_path / "state"
    code, out, err = run_cli(capsys, path, "--state-root", state, "--secrets", ledger_path,
                             "--key", key_path, "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["generations"] == {"db-cred": 3}
    env_file = state / ".mesh" / "env" / f"{mesh}-web.env"
    binding_file = state / ".mesh" / "bindings" / "app@n1--db.env"
    assert env_file.read_text() == f"DB_HOST=10.0.0.2\nDB_URL=postgres://u:{secret}@h/db\n"
    assert binding_file.read_text() == f"host=10.0.0.2\npassword={secret}\n"
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(binding_file.stat().st_mode) == 0o600
    assert secret not in out and secret not in err
    labels = api.inspect_container(f"{mesh}-web")["Config"]["Labels"]
    assert secret not in json.dumps(labels)
    assert not [p for p in (state / ".mesh" / "env").iterdir() if p.name.startswith(".")]


def test_secrets_without_a_key_and_pending_generations_are_refused(api, mesh, tmp_path, capsys):
    image = env_image(api)
    decl = declaration(mesh, containers=[
        container(mesh, "aa", image, env={"P": secret_token("c1")}, secrets=[SecretRef("c1", 1)]),
        container(mesh, "bb", image, env={"P": secret_token("c2")}, secrets=[SecretRef("c2")]),
        container(mesh, "cc", image, env={"P": secret_token("c3")})])
    path = write_declaration(tmp_path / "d.json", decl)
    code, report, _ = apply_json(capsys, path, "--state-root", tmp_path / "state")
    assert code == 1 and report["result"] == "refused"
    messages = " | ".join(r["message"] for r in report["refusals"])
    assert "no sealed secrets were given" in messages
    assert "has not been issued yet" in messages
    assert "not among its declared secrets" in messages
    assert not (tmp_path / "state" / ".mesh" / "env").exists()


def test_ports_published_on_every_address_are_refused(api, mesh, tmp_path, capsys):
    from resolver import PublishedPort

    image = env_image(api)
    web = attrs.evolve(container(mesh, "web", image),
                       ports=pvector([PublishedPort("0.0.0.0", 18080, 8080, "tcp", "http")]))
    path = write_declaration(tmp_path / "d.json", declaration(mesh, containers=[web]))
    code, report, _ = apply_json(capsys, path, "--state-root", tmp_path / "state")
    assert code == 1
    assert "every address" in report["refusals"][0]["message"]


def test_dry_run_prints_the_plan_and_changes_nothing(api, mesh, tmp_path, capsys):
    image = env_image(api)
    target = tmp_path / "data"
    decl = declaration(mesh, containers=[container(mesh, "web", image, command=SLEEPER)],
                       state_dirs=[StateDirDecl(str(target), 0, 0, "0700", "app@n1", "data")])
    path = write_declaration(tmp_path / "d.json", decl)
    code, out, err = run_cli(capsys, path, "--state-root", tmp_path / "state", "--dry-run")
    assert code == 0
    assert "create-dir" in out and "create-container" in out and "planned" in out
    assert not target.exists()
    assert not (tmp_path / "state" / ".mesh" / "env").exists()
    assert api.containers(all=True, filters={"label": f"mesh.mesh={mesh}"}) == []


def test_latest_wins_and_the_others_are_reported_superseded(api, mesh, tmp_path, capsys):
    image = env_image(api)
    spool = tmp_path / "spool"
    spool.mkdir()
    for serial in (1, 3, 2):
        write_declaration(spool / f"serial-{serial}.json", declaration(
            mesh, serial=serial,
            containers=[container(mesh, f"s{serial}", image, command=SLEEPER)]))
    state = tmp_path / "state"
    code, report, _ = apply_json(capsys, spool, "--state-root", state)
    assert code == 0 and report["result"] == "applied" and report["serial_applied"] == 3
    assert sorted((s["serial"], s["superseded_by"]) for s in report["superseded"]) == \
        [(1, 3), (2, 3)]
    names = {row["Names"][0].lstrip("/")
             for row in api.containers(all=True, filters={"label": f"mesh.mesh={mesh}"})}
    assert names == {f"{mesh}-s3"}
    code, report, _ = apply_json(capsys, spool / "serial-2.json", "--state-root", state)
    assert code == 0 and report["result"] == "superseded"
    assert report["superseded"] == [{"file": str(spool / "serial-2.json"), "serial": 2,
                                     "superseded_by": 3}]
    assert report["ops"] == []


def test_a_malformed_declaration_is_located_and_exits_2(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("mesh: m\nnode: n1\naddress: 127.0.0.1\nserial: \"3\"\n")
    code, out, err = run_cli(capsys, bad, "--state-root", tmp_path / "state")
    assert code == 2
    assert f"{bad}:4:" in err
    assert "Traceback" not in err


def test_the_digest_recorded_is_the_contents_not_the_digest_a_file_claims(
        api, mesh, tmp_path, capsys):
    """A declaration edited by hand keeps the `digest` it was written with; the node records
    the digest of what it applied (the resolver's declaration_digest), so `mesh applied`
    cannot take the edited declaration for the one the mesh declared."""
    from resolver import rendering

    target = tmp_path / "data"
    decl = declaration(mesh, state_dirs=[StateDirDecl(str(target), 0, 0, "0700",
                                                      "app@n1", "data")])
    claimed = rendering.declaration_digest(attrs.evolve(decl, state_dirs=pvector()))
    edited = attrs.evolve(decl, digest=claimed)  # says it is the declaration without the dir
    path = write_declaration(tmp_path / "d.json", edited)
    code, report, _ = apply_json(capsys, path, "--state-root", tmp_path / "state")
    assert code == 0, report
    actual = rendering.declaration_digest(decl)
    assert actual != claimed
    assert report["digest"] == actual
    record = json.loads((tmp_path / "state" / ".mesh" / "applied.json").read_text())
    assert record["digest"] == actual


def test_one_declaration_is_a_file_or_the_newest_of_a_spool(tmp_path):
    """`mesh verify` and `mesh firewall` read one declaration: a file, or of a spool
    directory the newest by serial (the one `mesh apply` applies), whatever the names."""
    from executors.node.apply.runner import load_declaration

    spool = tmp_path / "spool"
    spool.mkdir()
    newer = attrs.evolve(declaration("m", containers=[]), serial=7)
    write_declaration(spool / "a-newer.json", newer)
    write_declaration(spool / "b-older.json", attrs.evolve(newer, serial=3))
    assert load_declaration(str(spool)).serial == 7
    assert load_declaration(str(spool / "b-older.json")).serial == 3
