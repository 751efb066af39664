"""The catalogue's tool servers and assistant, built the way an operator builds them and run on
one Docker Engine.

tools-notes and assistant start FROM tools-files's image (`base: [tools-files/server]`), which
starts FROM the python base. `mesh build DIR --local` builds the chain in that order into the
Engine, each from its catalogue Dockerfile with its base's image ID as BASE_IMAGE, and records
each build with the base it was built on. The python base is one made from this host's
interpreter with `mcp` in it (tests/_pyimage.py: no public registry here), behind the
services' registry standing in for docker.io and pinned by `mesh pin`, as in
tests/test_genesis_local_build.py. Then `mesh plan --issue` and `mesh apply` run the three
modules (no firewall: one Engine on this host), and the assistant, with its binding file and
its own token per server, lists both servers' tools.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from _docker import cleanup, docker_host, engine, unique_mesh
from _meshop import REGISTRY, bridge_address, free_range, push
from _pyimage import python_image
from executors.control.loading import load_mesh_dir

pytestmark = pytest.mark.integration

try:
    import mcp  # noqa: F401  (the base image is made from this interpreter's copy)
except ImportError:
    pytest.skip("the mcp package is not installed (scripts/test.sh installs it)",
                allow_module_level=True)

REPO = Path(__file__).resolve().parent.parent
PYTHON = f"{REGISTRY}/mesh-test-assistant/python"
MODULES = ("tools-files", "tools-notes", "assistant")
LISTED_WITHIN = 90  # seconds: the assistant lists at start, then every 30 s


def mesh(*args, check: bool = True, timeout: float = 900) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "executors.cli", *map(str, args)],
                            capture_output=True, text=True, timeout=timeout,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    if check:
        assert result.returncode == 0, \
            f"mesh {' '.join(map(str, args))}:\n{result.stdout}\n{result.stderr}"
    return result


def write_mesh(directory: Path, name: str, address: str, first_port: int, public: str) -> None:
    catalogue = directory / "catalogue"
    for module in MODULES:
        shutil.copytree(REPO / "catalogue" / module, catalogue / module,
                        ignore=shutil.ignore_patterns("__pycache__"))
    module = catalogue / "tools-files" / "module.yaml"
    text = module.read_text()
    assert "repository: docker.io/library/python" in text
    module.write_text(text.replace("repository: docker.io/library/python",
                                   f"repository: {PYTHON}"))
    shutil.copy(REPO / "catalogue" / "provisions.yaml", catalogue / "provisions.yaml")
    (directory / "mesh.yaml").write_text("\n".join([
        f"mesh: {name}", "catalogue: catalogue", "nodes:",
        f'  solo: {{address: {address}, control: true, public-key: "{public}"}}',
        "instances:", *(f"  {m}@solo: {{module: {m}, node: solo}}" for m in MODULES),
        f"host-ports: {{first: {first_port}, last: {first_port + 5}}}"]) + "\n")


def untag_local_builds(api, directory: Path) -> None:
    """Untag what `mesh build --local` tagged (never forced: layers stay cached for the next
    run, and an image another test holds stays)."""
    for build, record in load_mesh_dir(directory).ledger.builds.items():
        if record.local:
            for tag in (record.digest[7:19], "mesh-build"):
                try:
                    api.remove_image(f"mesh.local/{build}:{tag}")
                except Exception:  # noqa: BLE001 - already gone, or the tag moved on
                    pass


def test_the_assistant_chain_builds_locally_and_lists_both_servers_tools(tmp_path):
    api = engine()
    name = unique_mesh("as")
    address = bridge_address(api)
    directory, out = tmp_path / "mesh", tmp_path / "out"
    directory.mkdir()
    made = mesh("node-key", "solo", "--path", tmp_path / "solo.key")
    write_mesh(directory, name, address, free_range(6, address),
               made.stdout.split("public-key:")[1].split()[0])
    push(api, python_image(api, also=("mcp",)), PYTHON, "3.11-slim")  # docker.io's stand-in
    try:
        mesh("pin", directory, "--all")
        built = mesh("build", directory, "--local", "--docker-host", docker_host())
        assert "built 3" in built.stdout, built.stdout
        said = built.stdout
        assert said.index("tools-files/server") < said.index("tools-notes/server"), said
        assert said.index("tools-files/server") < said.index("assistant/assistant"), said
        ledger = load_mesh_dir(directory).ledger
        server = ledger.builds["tools-files/server"]
        assert server.local
        assert dict(server.bases) == {"tools-files/python": ledger.pins[f"{PYTHON}:3.11-slim"]}
        for chained in ("tools-notes/server", "assistant/assistant"):
            record = ledger.builds[chained]
            assert record.local and dict(record.bases) == {"tools-files/server": server.digest}
            assert api.inspect_image(record.digest)["Id"] == record.digest

        mesh("ca", "init", directory)
        planned = mesh("plan", directory, "--issue", "--out", out)
        assert "assistant@solo tools -> every tools provider" in planned.stdout, planned.stdout
        applied = mesh("apply", out / "solo.declaration.json", "--secrets",
                       directory / "ledger.yaml", "--key", tmp_path / "solo.key",
                       "--state-root", tmp_path / "state", "--file-root", tmp_path / "files",
                       "--docker-host", docker_host(), "--no-firewall", "--stop-timeout", "2",
                       timeout=600, check=False)
        assert applied.returncode == 0, applied.stdout + applied.stderr
        assert "pulling" not in applied.stdout + applied.stderr  # local builds: never pulled

        (assistant,) = api.containers(filters={"label": [f"mesh.mesh={name}",
                                                         "mesh.instance=assistant@solo"]})
        deadline = time.monotonic() + LISTED_WITHIN
        rows: list = []
        while time.monotonic() < deadline:
            run = api.exec_create(assistant["Id"], ["python3", "-c", "import sys; sys.stdout."
                                                    "write(open('/var/lib/assistant/tools.json')"
                                                    ".read())"])
            text = api.exec_start(run["Id"]).decode("utf-8", "replace")
            try:
                rows = json.loads(text)
            except ValueError:
                rows = []
            if len(rows) == 2 and all("tools" in row for row in rows):
                break
            time.sleep(2)
        logs = api.logs(assistant["Id"]).decode("utf-8", "replace")
        assert {row["name"] for row in rows} == {"tools-files@solo", "tools-notes@solo"}, \
            (rows, logs)
        tools = {row["name"]: row.get("tools", row.get("error")) for row in rows}
        assert tools == {"tools-files@solo": ["list_files", "read_file"],
                         "tools-notes@solo": ["add_note", "list_notes", "read_note"]}, \
            (tools, logs)
        assert "2 tool server(s)" in logs, logs
    finally:
        cleanup(api, name)
        untag_local_builds(api, directory)
