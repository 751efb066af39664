"""Tool servers as a provision, for real: two network namespaces, each with its own dockerd and
the mesh firewall on.

The catalogue's tools-files (on n1) and tools-notes (on n2) serve MCP over streamable HTTP;
the catalogue's assistant (on n1) takes every `tools` provider (`each: true`) and gets their
list as the JSON binding file the mesh mounts, one entry per server with its own token. A
second consumer, helper@n2 (the assistant's manifest with `within: node`), is bound to
tools-notes@n2 only. All run the catalogue's own program (mesh_mcp.py on the `mcp` SDK), in
an image built from the catalogue's Dockerfile on a python base made from this host's
interpreter (_pyimage.py: no public registry here), pushed to a registry on each node's
loopback (one storage behind both) and pinned by `mesh pin` inside n1.

The walk: the assistant lists both servers' tools through its binding file with its own
tokens; helper's token is refused by tools-files@n1, which it is not bound to; `mesh verify`
on n1 checks each entry from inside the assistant's container (MCP initialize and
tools/list with its token, a stranger's token refused). Rotating the assistant's token at
tools-files@n1 (`mesh rotate`, then `mesh applied` twice) never leaves it without a working
token: the server holds both slots until the assistant holds the new one, then the old one
stops working. Adding a third tool server
(tools-notes@n1) and applying adds exactly one entry, the other two unchanged. Removing
helper@n2 removes its token from tools-notes@n2's tokens file, and its token stops working
at once (the server reads the file again; nothing restarts it). Removing tools-notes@n2
removes its entry from the assistant's list.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import yaml

try:
    from . import _netns
except ImportError:
    import _netns

from _machines import UPSTREAM, machines, mesh_host, mesh_in  # noqa: E402

pytestmark = pytest.mark.integration

_why = _netns.have_tools()
for tool, package in (("dockerd", "docker.io"), ("busybox", "busybox-static"),
                      ("docker-registry", "docker-registry")):
    if not _why and shutil.which(tool) is None:
        _why = f"{tool} is not installed ({package}; scripts/services.sh installs it)"
if not _why:
    try:
        import mcp  # noqa: F401  (the test image is made from this interpreter's copy)
    except ImportError:
        _why = "the mcp package is not installed (pip install mcp; scripts/test.sh does)"
if _why:
    pytest.skip(f"two-namespace tool server test: {_why}", allow_module_level=True)

from _pyimage import python_image  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
IMAGE = f"{UPSTREAM}/mesh-test-tools/mcp"
FILES_TOOLS = ["list_files", "read_file"]
NOTES_TOOLS = ["add_note", "list_notes", "read_note"]


def catalogue(target: Path) -> None:
    """The catalogue's tool modules and provisions, each artifact the test image by tag (the
    catalogue builds them; here one image built from the same Dockerfile stands in), and
    helper: the assistant, taking only the tool servers on its own node."""
    target.mkdir(parents=True)
    shutil.copy(REPO / "catalogue" / "provisions.yaml", target / "provisions.yaml")
    docs = {}
    for name in ("tools-files", "tools-notes", "assistant"):
        doc = yaml.safe_load((REPO / "catalogue" / name / "module.yaml").read_text())
        used = {c["artifact"] for c in doc["containers"]}
        doc["artifacts"] = {a: {"repository": IMAGE, "tag": "1"} for a in used}
        docs[name] = doc
    helper = json.loads(json.dumps(docs["assistant"]))
    helper["name"] = "helper"
    helper["requires"][0]["within"] = "node"
    helper["state"]["data"]["path"] = "helper/data"
    docs["helper"] = helper
    for name, doc in docs.items():
        (target / name).mkdir()
        (target / name / "module.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))


def write_mesh(directory: Path, topology, keys: dict, instances: dict) -> None:
    nodes = "".join(f"  {node}:\n    address: {topology.addresses[node]}\n"
                    f"    public-key: {keys[node]}\n" + ("    control: true\n" if node == "n1"
                                                         else "")
                    for node in ("n1", "n2"))
    listed = "".join(f"  {name}:\n    module: {name.split('@')[0]}\n    node: {node}\n"
                     for name, node in sorted(instances.items()))
    (directory / "mesh.yaml").write_text(
        f"mesh: tools{os.getpid()}\ncatalogue: catalogue\nledger: ledger.yaml\n"
        f"nodes:\n{nodes}instances:\n{listed}")



def test_an_assistant_lists_the_tools_of_every_tool_server_with_its_own_tokens():
    with tempfile.TemporaryDirectory(prefix="mesh-tools-") as scratch, \
            _netns.Topology("t", count=2,
                            subnet=f"10.83.{20 + os.getpid() % 200}") as topology:
        tmp = Path(scratch)
        with machines(topology, tmp, ("n1", "n2")) as daemons:
            _walk(topology, daemons, tmp)


def _build_image(daemon) -> None:
    """The catalogue's tools-files image (its Dockerfile, mesh_mcp.py), on a python base made
    from this interpreter with `mcp` in it, pushed to the loopback registry."""
    from executors.node import docker_engine

    engine = docker_engine.connect(daemon.host, timeout=600)
    base = python_image(engine, also=("mcp",))
    for _ in engine.build(path=str(REPO / "catalogue" / "tools-files" / "image"),
                          tag=f"{IMAGE}:1", buildargs={"BASE_IMAGE": base}, rm=True,
                          decode=True):
        pass
    engine.inspect_image(f"{IMAGE}:1")  # raises when the build failed
    daemon.docker("push", f"{IMAGE}:1")


def _walk(topology, daemons: dict, tmp: Path) -> None:
    n1, n2 = daemons["n1"], daemons["n2"]
    _build_image(n1)

    directory, out = tmp / "mesh", tmp / "out"
    directory.mkdir()
    catalogue(directory / "catalogue")
    keys = {}
    for node in ("n1", "n2"):
        made = mesh_host("node-key", node, "--path", str(tmp / f"{node}.key"))
        keys[node] = made.split("public-key:")[1].split()[0]
    instances = {"tools-files@n1": "n1", "tools-notes@n2": "n2", "assistant@n1": "n1",
                 "helper@n2": "n2"}
    write_mesh(directory, topology, keys, instances)
    mesh_in(topology, "n1", "pin", str(directory))

    def plan() -> None:
        if out.exists():
            shutil.rmtree(out)
        planned = mesh_host("plan", str(directory), "--issue", "--out", str(out))
        assert "\n0 refusals," in planned, planned

    def apply(node: str) -> str:
        return mesh_in(topology, node, "apply", str(out / f"{node}.declaration.json"),
                       "--secrets", str(directory / "ledger.yaml"), "--key",
                       str(tmp / f"{node}.key"), "--docker-host", daemons[node].host,
                       "--state-root", str(tmp / f"{node}-state"), "--file-root",
                       str(tmp / f"{node}-root"), "--no-fast")

    def binding_file(node: str, consumer: str) -> list:
        path = tmp / f"{node}-root" / "etc/mesh/bindings" / consumer / "tools.json"
        return json.loads(path.read_text())

    def container(node: str, instance: str) -> str:
        decl = json.loads((out / f"{node}.declaration.json").read_text())
        (name,) = [c["name"] for c in decl["containers"] if c["instance"] == instance]
        return name

    def listed(deadline: float = 60) -> dict:
        """What the assistant's own program lists through its binding file (it retries
        while a server just started)."""
        end = time.monotonic() + deadline
        while True:
            done = n1.docker("exec", container("n1", "assistant@n1"), "python3",
                             "/opt/mesh-mcp/mesh_mcp.py", "list", "--bindings",
                             "/etc/assistant/tools.json", check=False)
            rows = {r["name"]: r for r in json.loads(done.stdout)} if done.returncode == 0 \
                else {}
            if rows and all("tools" in r for r in rows.values()) or time.monotonic() > end:
                assert done.returncode == 0, done.stdout + done.stderr
                return rows
            time.sleep(1)

    def call(url: str, token: str) -> subprocess.CompletedProcess:
        """One tools/list at `url` with `token`, from inside the assistant's container."""
        return subprocess.run(["docker", "-H", n1.host, "exec", "-i",
                               container("n1", "assistant@n1"), "python3",
                               "/opt/mesh-mcp/mesh_mcp.py", "tools", url],
                              input=token, capture_output=True, text=True, timeout=60)

    plan()
    apply("n2")
    apply("n1")

    # the list the mesh mounts: one entry per server, each with this consumer's own token
    first = binding_file("n1", "assistant@n1")
    assert [e["name"] for e in first] == ["tools-files@n1", "tools-notes@n2"]
    for entry in first:
        assert entry["transport"] == "streamable-http" and entry["url"].endswith("/mcp")
        assert entry["url"].startswith(f"http://{entry['host']}:{entry['port']}/")
    assert len({e["token"] for e in first}) == 2
    # what the tool servers hold: hashes, never the tokens
    tokens_file = tmp / "n1-root" / "etc/mesh/auth/tools-files@n1/tokens"
    held = tokens_file.read_text()
    assert first[0]["token"] not in held and ":sha256:" in held
    assert oct(tokens_file.stat().st_mode & 0o777) == "0o600"

    rows = listed()
    assert rows["tools-files@n1"]["tools"] == FILES_TOOLS, rows
    assert rows["tools-notes@n2"]["tools"] == NOTES_TOOLS, rows

    # helper@n2 takes only the tool servers on its node: its token is no good at tools-files@n1
    (helper_entry,) = binding_file("n2", "helper@n2")
    assert helper_entry["name"] == "tools-notes@n2"
    files_url = first[0]["url"]
    refused = call(files_url, helper_entry["token"])
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert call(files_url, first[0]["token"]).returncode == 0
    assert call(files_url, first[1]["token"]).returncode == 1  # a token is one server's

    # mesh verify on n1: each entry from inside the assistant's container
    verified = topology.mesh("n1", "verify", str(out / "n1.declaration.json"), "--json",
                             "--secrets", str(directory / "ledger.yaml"), "--key",
                             str(tmp / "n1.key"), "--docker-host", n1.host)
    said = json.loads(verified.stdout)
    assert said["ok"] and verified.returncode == 0, verified.stdout + verified.stderr
    results = said["results"]
    tools_results = [r for r in results if r.get("kind") == "bearer-token"]
    assert len(tools_results) == 2, verified.stdout + verified.stderr
    for result in tools_results:
        assert result["status"] == "ok", result
        assert "refuses another" in result["message"] and "from inside" in result["message"]

    # rotating the assistant's token at tools-files@n1: two slots, no window
    files_user = first[0]["user"][:-2]

    def slots_held() -> int:
        return sum(line.startswith(files_user + "_")
                   for line in tokens_file.read_text().splitlines())

    def report_applied() -> None:
        said = mesh_host("applied", str(directory), "n1", "--report",
                         str(tmp / "n1-state" / ".mesh" / "applied.json"))
        assert "recorded" in said.lower(), said

    old_token = first[0]["token"]
    mesh_host("rotate", str(directory), "tools/tools-files@n1/assistant@n1")
    plan()
    apply("n1")  # the server holds the new generation beside the old one
    assert slots_held() == 2
    assert binding_file("n1", "assistant@n1") == first  # holders wait for the provider
    assert call(files_url, old_token).returncode == 0
    report_applied()
    plan()
    apply("n1")  # now the assistant is told the new token (and recreated with it)
    rotated = binding_file("n1", "assistant@n1")
    assert rotated[0]["token"] != old_token and rotated[1] == first[1]
    assert rotated[0]["user"] != first[0]["user"]  # the other slot
    assert call(files_url, rotated[0]["token"]).returncode == 0
    assert listed()["tools-files@n1"]["tools"] == FILES_TOOLS
    report_applied()
    plan()
    apply("n1")  # every holder has the new one: the old slot goes, its token stops working
    assert slots_held() == 1
    assert call(files_url, old_token).returncode == 1
    first = rotated

    # a third tool server: exactly one entry more, the others unchanged
    instances["tools-notes@n1"] = "n1"
    write_mesh(directory, topology, keys, instances)
    plan()
    apply("n1")
    apply("n2")
    second = binding_file("n1", "assistant@n1")
    assert [e["name"] for e in second] == ["tools-files@n1", "tools-notes@n1", "tools-notes@n2"]
    assert [e for e in second if e["name"] != "tools-notes@n1"] == first
    rows = listed()
    assert sorted(rows) == ["tools-files@n1", "tools-notes@n1", "tools-notes@n2"]
    assert rows["tools-notes@n1"]["tools"] == NOTES_TOOLS, rows

    # helper@n2 goes: its token leaves tools-notes@n2's file and stops working there at once
    notes_url = first[1]["url"]
    assert call(notes_url, helper_entry["token"]).returncode == 0
    del instances["helper@n2"]
    write_mesh(directory, topology, keys, instances)
    plan()
    applied = apply("n2")
    assert "remove-token" in applied, applied
    end = time.monotonic() + 10
    while call(notes_url, helper_entry["token"]).returncode == 0:
        assert time.monotonic() < end, "helper's removed token still works"
        time.sleep(0.5)
    assert call(notes_url, first[1]["token"]).returncode == 0  # the assistant's still does

    # tools-notes@n2 goes: its entry leaves the assistant's list, the others stay as they were
    del instances["tools-notes@n2"]
    write_mesh(directory, topology, keys, instances)
    plan()
    apply("n2")
    apply("n1")
    third = binding_file("n1", "assistant@n1")
    assert [e["name"] for e in third] == ["tools-files@n1", "tools-notes@n1"]
    assert third == second[:2]
    assert call(notes_url, first[1]["token"]).returncode == 1  # nothing answers it now
    assert sorted(listed()) == ["tools-files@n1", "tools-notes@n1"]
