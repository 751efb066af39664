"""The `tools` provision without containers: what the catalogue's tool servers and assistant
are told and granted (`mesh plan`), the tokens file the node keeps (hashes only, two slots, a
second run a no-op, a removed grant's entry gone), the provision's constant `values` checked
at load, and `mesh verify`'s MCP check against a real server (mesh_mcp.py on the `mcp` SDK)
run on this host: this consumer's token lists the tools, any other token is refused."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from resolver import BindingDecl, Declaration, GrantDecl, SecretRef
from resolver.rendering import TOKEN_KIND, secret_token

from executors.common.report import Report
from executors.node.node_paths import NodePaths
from executors.node.provisioners import tokens
from executors.node.provisioners.base import AUTH_FAILED, OK, NodeFiles, ProvisionResult
from executors.node.provisioners.mcp_probe import REFUSED, UNREACHABLE, list_tools
from executors.node.provisioners.registry import binding_checker_for, file_provisioner_for

ROOT = Path(__file__).resolve().parent.parent
SERVER = ROOT / "catalogue" / "tools-files" / "image" / "mesh_mcp.py"
PIN = "sha256:" + "1" * 64


def mesh(*args):
    return subprocess.run([sys.executable, "-m", "executors.cli", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT)


def write_mesh(directory: Path) -> None:
    """The catalogue's tools-files, tools-notes and assistant, each artifact a pinned tag."""
    catalogue = directory / "catalogue"
    catalogue.mkdir(parents=True)
    (catalogue / "provisions.yaml").write_text((ROOT / "catalogue/provisions.yaml").read_text())
    for name in ("tools-files", "tools-notes", "assistant"):
        doc = yaml.safe_load((ROOT / "catalogue" / name / "module.yaml").read_text())
        doc["artifacts"] = {a: {"repository": "example/mcp", "tag": "1"}
                            for a in {c["artifact"] for c in doc["containers"]}}
        (catalogue / name).mkdir()
        (catalogue / name / "module.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    (directory / "mesh.yaml").write_text(
        "mesh: tt\nnodes:\n  a: {address: 10.0.0.1}\n  b: {address: 10.0.0.2}\n"
        "instances:\n  tools-files@a: {module: tools-files, node: a}\n"
        "  tools-notes@b: {module: tools-notes, node: b}\n"
        "  assistant@a: {module: assistant, node: a}\n")
    (directory / "ledger.yaml").write_text(f"version: 1\npins:\n  example/mcp:1: {PIN}\n")


def test_the_assistant_is_told_each_server_with_its_own_token_and_servers_mount_their_file(tmp_path):
    write_mesh(tmp_path)
    out = tmp_path / "out"
    planned = mesh("plan", tmp_path, "--out", out)
    assert planned.returncode == 0, planned.stdout + planned.stderr
    assert "assistant@a tools -> every tools provider (2)" in planned.stdout
    decl_a = json.loads((out / "a.declaration.json").read_text())
    decl_b = json.loads((out / "b.declaration.json").read_text())
    (listed,) = decl_a["bindings"]
    assert listed["each"] and listed["kind"] == TOKEN_KIND
    for entry in listed["entries"]:
        values = entry["values"]
        credential = f"tools/{entry['provider']}/assistant@a"
        assert values["token"] == secret_token(credential)  # a token, never a value
        assert "password" not in values
        assert values["transport"] == "streamable-http"
        assert values["url"] == f"http://{values['host']}:{values['port']}/mcp"
        assert values["user"].endswith("_a")  # slot a of two, as the other logins
    (tools_file,) = [f for f in decl_a["files"] if f["path"].endswith("/tools.json")]
    names = [e["name"] for e in json.loads(tools_file["content"])]
    assert names == ["tools-files@a", "tools-notes@b"]
    # each server's node holds one bearer-token grant for the assistant, and its containers
    # mount the accounts directory its tokens file is kept in
    for decl, server in ((decl_a, "tools-files@a"), (decl_b, "tools-notes@b")):
        (grant,) = decl["grants"]
        assert (grant["kind"], grant["provider"], grant["consumer"], grant["slot"]) == \
            (TOKEN_KIND, server, "assistant@a", "a")
        (container,) = [c for c in decl["containers"] if c["instance"] == server]
        assert {"kind": "auth", "source": f"/etc/mesh/auth/{server}", "target": "/etc/mesh/auth",
                "read_only": True} in container["mounts"]
    (assistant,) = [c for c in decl_a["containers"] if c["instance"] == "assistant@a"]
    assert assistant["env"]["TOOL_SERVERS"] == "2"
    assert not any(m["kind"] == "auth" for m in assistant["mounts"])


def test_a_provision_value_must_be_a_constant_key_it_lists(tmp_path):
    write_mesh(tmp_path)
    provisions = tmp_path / "catalogue" / "provisions.yaml"
    text = provisions.read_text()
    provisions.write_text(text.replace("values: {transport: streamable-http}",
                                       "values: {transport: streamable-http, url: x}"))
    checked = mesh("check", tmp_path)
    assert checked.returncode == 2, checked.stdout + checked.stderr
    assert "provisions.yaml:" in checked.stdout + checked.stderr
    assert "value 'url' is one the mesh derives" in checked.stdout + checked.stderr
    provisions.write_text(text.replace("keys: [host, port, user, token, url, transport]",
                                       "keys: [host, port, user, token, url]"))
    checked = mesh("check", tmp_path)
    assert "value 'transport' is not one of the provision's keys" in \
        checked.stdout + checked.stderr


# --------------------------------------------------------------------------- the tokens file


def _grant(consumer: str, generation: int, slot: str = "a", retiring: int | None = None,
           retiring_slot: str | None = None) -> GrantDecl:
    credential = f"tools/srv@a/{consumer}"
    return GrantDecl(provision="tools", kind=TOKEN_KIND, provider="srv@a", consumer=consumer,
                     consumer_node="a", login=consumer.replace("@", "_"),
                     resource=consumer.replace("@", "_"),
                     credential=SecretRef(credential, generation), slot=slot,
                     retiring=SecretRef(credential, retiring) if retiring else None,
                     retiring_slot=retiring_slot)


def _values(ref: SecretRef) -> str:
    return f"token-of-{ref.credential}-{ref.generation}"


def _provision(tmp_path: Path, grants: list[GrantDecl]) -> tuple[ProvisionResult, Report]:
    report, result = Report(), ProvisionResult()
    declaration = Declaration(mesh="tt", node="a", address="10.0.0.1", serial=1, digest="")
    tokens.provision_file(declaration, "srv@a", grants, _values, report, result,
                          NodeFiles(NodePaths(tmp_path / "state", tmp_path)))
    return result, report


def test_the_tokens_file_holds_hashes_of_each_consumers_tokens_in_two_slots(tmp_path):
    assert file_provisioner_for(TOKEN_KIND) is tokens
    assert binding_checker_for(TOKEN_KIND) is tokens
    path = tokens.tokens_path(NodePaths(tmp_path / "state", tmp_path), "srv@a")
    result, _ = _provision(tmp_path, [_grant("one@a", 1), _grant("two@b", 1)])
    text = path.read_text()
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert "token-of" not in text  # never a token
    for consumer in ("one@a", "two@b"):
        want = hashlib.sha256(f"token-of-tools/srv@a/{consumer}-1".encode()).hexdigest()
        assert f"{consumer.replace('@', '_')}_a:sha256:{want}" in text
    assert [o.status for o in result.outcomes] == ["in-force", "in-force"]
    assert result.statements == 2
    again, _ = _provision(tmp_path, [_grant("one@a", 1), _grant("two@b", 1)])
    assert again.statements == 0 and path.read_text() == text  # a second run: nothing
    # a rotation: the new generation in slot b beside the old one in a (both accepted)
    rotated, _ = _provision(tmp_path, [_grant("one@a", 2, "b", 1, "a"), _grant("two@b", 1)])
    text = path.read_text()
    assert "one_a_a:" in text and "one_a_b:" in text and rotated.statements == 1
    # the consumer goes: both its entries go, the other's stays byte for byte
    line = next(li for li in text.splitlines() if li.startswith("two_b_a:"))
    gone, report = _provision(tmp_path, [_grant("two@b", 1)])
    text = path.read_text()
    assert "one_a" not in text and line in text
    assert any("token one_a_a on srv@a (removed)" == o for o in gone.orphaned)


def test_an_operators_own_lines_are_kept(tmp_path):
    path = tokens.tokens_path(NodePaths(tmp_path / "state", tmp_path), "srv@a")
    path.parent.mkdir(parents=True)
    path.write_text("# my own\nbyhand:sha256:" + "0" * 64 + "\n")
    _provision(tmp_path, [_grant("one@a", 1)])
    text = path.read_text()
    assert text.startswith("# my own\nbyhand:sha256:" + "0" * 64 + "\n")
    assert "one_a_a:sha256:" in text


# --------------------------------------------------------------------------- the MCP check


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def server(tmp_path):
    pytest.importorskip("mcp")
    token = secrets.token_urlsafe(32)
    tokens_file = tmp_path / "tokens"
    tokens_file.write_text(f"c_a:{tokens.token_hash(token)}\n")
    port = _free_port()
    process = subprocess.Popen([sys.executable, str(SERVER), "serve", "notes", "--root",
                                str(tmp_path / "notes"), "--port", str(port)],
                               env=dict(os.environ, MCP_TOKENS_FILE=str(tokens_file)),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/mcp"
    deadline = time.monotonic() + 30
    while list_tools(url, token, 1).status == UNREACHABLE:
        assert time.monotonic() < deadline and process.poll() is None, "server did not start"
        time.sleep(0.2)
    yield url, token, tokens_file
    process.terminate()
    process.wait(10)


def _binding(url: str) -> BindingDecl:
    host, port = url.split("//")[1].split("/")[0].split(":")
    return BindingDecl("assistant@a", "tools", "notes@a", "tools",
                       {"host": host, "port": port, "url": url, "user": "c_a",
                        "token": secret_token("tools/notes@a/assistant@a")},
                       SecretRef("tools/notes@a/assistant@a", 1), TOKEN_KIND)


def test_verify_lists_the_tools_with_the_consumers_token_and_a_strangers_is_refused(server):
    url, token, tokens_file = server
    checked = tokens.check_binding(_binding(url), token, 5)
    assert checked.status == OK, checked.message
    assert "lists 3 tool(s) (add_note, list_notes, read_note)" in checked.message
    assert token not in checked.message
    assert list_tools(url, "not-" + token, 5).status == REFUSED
    wrong = tokens.check_binding(_binding(url), "not-" + token, 5)
    assert wrong.status == AUTH_FAILED and "refuses c_a's token" in wrong.message
    # the server reads its file again when it changes: the token removed stops working
    tokens_file.write_text("# nobody\n")
    assert list_tools(url, token, 5).status == REFUSED


def test_a_tool_server_whose_last_consumer_left_has_its_tokens_file_emptied(tmp_path):
    """No grant left on the server: the file is still visited (with no values, none needed)
    and the entries the mesh marked go, so the last consumer's token stops working too."""
    from pyrsistent import pvector

    from resolver import ProviderDecl
    from executors.node.apply.runner import file_hooks
    from executors.node.provisioners.grants import provision_files

    _provision(tmp_path, [_grant("one@a", 1)])
    path = tokens.tokens_path(NodePaths(tmp_path / "state", tmp_path), "srv@a")
    assert "one_a_a:" in path.read_text()
    declaration = Declaration(mesh="tt", node="a", address="10.0.0.1", providers=pvector([
        ProviderDecl("srv@a", "tools", TOKEN_KIND, "mcp", 20000, 8000)]))
    assert file_hooks(declaration, NodePaths(tmp_path / "state", tmp_path), None)
    report = Report()
    result = provision_files(declaration, None, report,
                             paths=NodePaths(tmp_path / "state", tmp_path))
    assert not result.problems and all(op.ok for op in report.ops)
    assert "one_a" not in path.read_text()
    assert result.orphaned == ["token one_a_a on srv@a (removed)"]
