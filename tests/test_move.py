"""Moving an instance: its values are re-sealed to the new holders (generation numbers stay,
the moved holder unseals the same value), and a move of an instance with owned state is
refused until mesh.yaml says what happens to the data; the plan names what stays behind.

Through the `mesh` command on a copy of the homelab fixture with real node keys.
"""

from __future__ import annotations

import json

from executors.common.keys import load_private_key, unseal_for_node
from executors.control.loading import load_mesh_dir

from _meshdir import FIXTURES, prepare, run_cli


def generations(mesh_dir) -> dict:
    ledger = load_mesh_dir(mesh_dir).ledger
    return {cid: (c.active.generation, c.pending, c.retiring)
            for cid, c in ledger.credentials.items()}


def values(mesh_dir, node, key) -> dict:
    return unseal_for_node(load_mesh_dir(mesh_dir).ledger, node, load_private_key(key))


def edit(mesh_dir, old: str, new: str) -> None:
    path = mesh_dir / "mesh.yaml"
    text = path.read_text()
    assert old in text, f"fixture layout changed: {old!r}"
    path.write_text(text.replace(old, new, 1))


def position(mesh_dir, needle: str, after: str) -> int:
    lines = (mesh_dir / "mesh.yaml").read_text().splitlines()
    start = next(i for i, row in enumerate(lines) if after in row)
    return next(i for i, row in enumerate(lines[start:], start + 1) if needle in row)


def test_a_move_reseals_values_to_the_new_holder_and_keeps_every_generation(tmp_path):
    mesh_dir, keys, _ = prepare(FIXTURES / "homelab", tmp_path)
    code, output = run_cli("plan", mesh_dir, "--issue", "--out", tmp_path / "out")
    assert code == 0, output
    before = generations(mesh_dir)
    held_at_home = values(mesh_dir, "home", keys["home"])
    own = "secret/umami@home/app-secret"
    db = "postgres-database/postgres@lab/umami@home"
    assert own in held_at_home and db in held_at_home

    # umami (no state directories) moves from home to lab
    edit(mesh_dir, "  umami@home:\n    module: umami\n    node: home",
         "  umami@home:\n    module: umami\n    node: lab")
    code, output = run_cli("plan", mesh_dir)
    assert code == 0, output
    assert f"credential {own} for lab" in output and "re-seal" in output
    code, output = run_cli("plan", mesh_dir, "--issue", "--out", tmp_path / "out",
                           "--key", keys["home"])
    assert code == 0, output
    assert generations(mesh_dir) == before, "a move issued new generations"
    at_lab = values(mesh_dir, "lab", keys["lab"])
    assert at_lab[own] == held_at_home[own] and at_lab[db] == held_at_home[db]
    ledger = load_mesh_dir(mesh_dir).ledger
    assert sorted(ledger.credentials[own].active.sealed) == ["lab"], "home holds it no more"
    assert "home" not in ledger.credentials[db].active.sealed
    code, output = run_cli("plan", mesh_dir)
    assert code == 0 and "  credential " not in output, output  # nothing left to seal


def test_resealing_without_the_control_key_is_refused_naming_the_way_out(tmp_path):
    mesh_dir, keys, _ = prepare(FIXTURES / "homelab", tmp_path)
    assert run_cli("plan", mesh_dir, "--issue")[0] == 0
    before = (mesh_dir / "ledger.yaml").read_text()
    edit(mesh_dir, "  umami@home:\n    module: umami\n    node: home",
         "  umami@home:\n    module: umami\n    node: lab")
    code, output = run_cli("plan", mesh_dir, "--issue")
    assert code == 2, output  # refused like a holder without a key: nothing issued
    assert "secret/umami@home/app-secret" in output and "--key" in output
    assert "mesh rotate" in output
    assert (mesh_dir / "ledger.yaml").read_text() == before, "nothing issued, nothing written"
    code, output = run_cli("plan", mesh_dir, "--issue", "--key", keys["lab"])
    assert code == 2 and "not home's key" in output, output


def test_a_move_with_state_is_refused_until_mesh_yaml_says_what_happens_to_the_data(tmp_path):
    mesh_dir, keys, _ = prepare(FIXTURES / "homelab", tmp_path)
    out = tmp_path / "out"
    assert run_cli("plan", mesh_dir, "--issue", "--out", out)[0] == 0
    before = generations(mesh_dir)
    lab_before = json.loads((out / "lab.declaration.json").read_text())
    admin = "secret/postgres@lab/admin"
    admin_value = values(mesh_dir, "lab", keys["lab"])[admin]

    edit(mesh_dir, "  postgres@lab:\n    module: postgres\n    node: lab",
         "  postgres@lab:\n    module: postgres\n    node: home")
    line = position(mesh_dir, "node: home", "postgres@lab:")
    code, output = run_cli("plan", mesh_dir, "--out", out)
    assert code == 1, output
    assert f"mesh.yaml:{line}:" in output and "[move-with-state]" in output
    for path in ("/var/lib/mesh/postgres@lab/postgres/data",
                 "/var/lib/mesh/postgres@lab/postgres/dumps",
                 "/var/lib/mesh/postgres@lab/postgres/run"):
        assert path in output
    lab = json.loads((out / "lab.declaration.json").read_text())
    assert [c for c in lab["containers"] if c["instance"] == "postgres@lab"] == [
        c for c in lab_before["containers"] if c["instance"] == "postgres@lab"], \
        "the refused move tore the server down"
    assert lab["state_dirs"] == lab_before["state_dirs"]

    edit(mesh_dir, "    node: home\n    parts: [backups]",
         "    node: home\n    state-from: lab\n    parts: [backups]")
    code, output = run_cli("plan", mesh_dir, "--issue", "--out", out, "--key", keys["home"])
    assert code == 0, output
    assert "state-left-behind" in output and "/var/lib/mesh/postgres@lab/postgres/data" in output
    assert generations(mesh_dir) == before
    # no mesh CA yet: the transfer is declared but waits, and the plan says what it waits for
    (waiting,) = json.loads((out / "home.declaration.json").read_text())["transfers"]
    assert "transfer certificate of home is not issued" in waiting["waits"], waiting
    assert "transfer certificate of lab (the state of postgres@lab waits for it)" in output
    assert not waiting.get("certificate")
    assert run_cli("ca", "init", mesh_dir)[0] == 0
    code, output = run_cli("plan", mesh_dir, "--issue", "--out", out, "--key", keys["home"])
    assert code == 0, output
    # nothing re-issued; with the CA, TLS keys are new, the two nodes' transfer keys among them
    after = generations(mesh_dir)
    assert {k: v for k, v in after.items() if k in before} == before
    assert all(k.startswith("tls/") for k in after if k not in before)
    assert {"tls/transfer:home", "tls/transfer:lab"} <= set(after)
    assert not any(k.startswith("tls/transfer:") and k not in ("tls/transfer:home",
                                                               "tls/transfer:lab")
                   for k in after), "only the two nodes of the transfer"
    ledger = load_mesh_dir(mesh_dir).ledger
    assert sorted(ledger.credentials["tls/transfer:lab"].active.sealed) == ["lab"]
    assert sorted(ledger.credentials["tls/transfer:home"].active.sealed) == ["home"]
    assert values(mesh_dir, "home", keys["home"])[admin] == admin_value
    home = json.loads((out / "home.declaration.json").read_text())
    assert any(c["instance"] == "postgres@lab" for c in home["containers"])
    lab = json.loads((out / "lab.declaration.json").read_text())
    assert not any(d["instance"] == "postgres@lab" for d in lab.get("state_dirs", []))
    # the move carries its data: both declarations name the transfer; lab opens its
    # transfer port to home's address alone, for as long as `state-from` stays
    (leave,), (arrive,) = lab["transfers"], home["transfers"]
    assert (leave["role"], arrive["role"]) == ("leave", "arrive")
    assert {k: v for k, v in leave.items() if k != "role"} == \
        {k: v for k, v in arrive.items() if k != "role"}
    assert (leave["source"], leave["target"], leave["port"]) == ("lab", "home", 7470)
    # each node holds its own transfer certificate, its key as a sealed reference, the CA
    assert "waits" not in leave, leave
    for declared, node in ((lab, "lab"), (home, "home")):
        files = {f["path"]: f for f in declared["files"]}
        assert files[leave["certificate"]]["content"] == ledger.tls[f"transfer:{node}"].pem
        key = files[leave["key"]]
        assert key["content"].startswith("${secret:tls/transfer:" + node)
        assert key["secret"]["credential"] == f"tls/transfer:{node}"
        assert leave["ca"] in files
    # `mesh renew NODE` renews the node's transfer certificate with the rest, its key too
    code, output = run_cli("renew", mesh_dir, "lab")
    assert code == 0, output
    renewed = load_mesh_dir(mesh_dir).ledger
    assert renewed.tls["transfer:lab"].serial != ledger.tls["transfer:lab"].serial
    assert renewed.credentials["tls/transfer:lab"].active.generation == 2
    assert renewed.tls["transfer:home"] == ledger.tls["transfer:home"]
    assert "/var/lib/mesh/postgres@lab/postgres/data" in [d["path"] for d in arrive["dirs"]]
    (opening,) = [a for a in lab["firewall"]["allow"] if a["port"] == 7470]
    assert opening["sources"] == [leave["target_address"]] and opening["published"] is False
    assert not any(a["port"] == 7470 for a in home["firewall"].get("allow", []))
    code, output = run_cli("plan", mesh_dir, "--out", out)
    assert code == 0 and "[stale-state-from]" in output and "carried from lab" in output, output
    assert json.loads((out / "lab.declaration.json").read_text())["transfers"] == [leave]
    edit(mesh_dir, "    state-from: lab\n", "")
    code, output = run_cli("plan", mesh_dir, "--out", out)
    assert code == 0, output
    lab = json.loads((out / "lab.declaration.json").read_text())
    assert "transfers" not in lab and not any(a["port"] == 7470 for a in lab["firewall"]["allow"])


def test_state_from_naming_another_node_is_refused_and_fresh_confirms_an_empty_start(tmp_path):
    mesh_dir, _keys, _ = prepare(FIXTURES / "homelab", tmp_path)
    assert run_cli("plan", mesh_dir, "--issue", "--out", tmp_path / "out")[0] == 0
    edit(mesh_dir, "  postgres@lab:\n    module: postgres\n    node: lab",
         "  postgres@lab:\n    module: postgres\n    node: home\n    state-from: home")
    code, output = run_cli("plan", mesh_dir)
    assert code == 1 and "[state-from-mismatch]" in output, output
    assert "postgres@lab was on lab" in output
    edit(mesh_dir, "state-from: home", "fresh: true")
    code, output = run_cli("plan", mesh_dir)
    assert code == 0, output
    assert "state-left-behind" in output and "starts with empty state" in output
