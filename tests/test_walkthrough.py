"""The README's walk-through, command by command, against the real registry and engine.

node-key → ca init → pin → plan --issue --out → apply → applied → rotate → plan --out →
apply → verify. The container's HTTP reply shows its environment, so the test sees the issued
secret arrive and change on rotation; and no issued value appears in any file written or in
anything printed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from _docker import cleanup, engine, env_image, env_of, free_port, http_get, unique_mesh

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parent.parent
REGISTRY = os.environ.get("MESH_TEST_REGISTRY", "127.0.0.1:5000")

MODULE = """\
name: web
artifacts:
  image: {{repository: {repository}, tag: "{tag}"}}
listens:
  http: {{port: 8080}}
provides:
  - {{provision: web, listen: http}}
secrets: [token]
state:
  data: {{path: {state}, owner: "0:0", mode: "0750"}}
containers:
  - name: server
    artifact: image
    env: {{TOKEN: "${{self.token.password}}", WHERE: "${{self.address}}:${{self.http.port}}"}}
    mounts: [{{state: data, target: /data}}]
    health: {{http: {{listen: http, path: /cgi-bin/env}}}}
"""


def mesh(*args, cwd, check=True):
    result = subprocess.run([sys.executable, "-m", "executors.cli", *map(str, args)], cwd=cwd,
                            capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    if check:
        assert result.returncode == 0, f"mesh {' '.join(map(str, args))}:\n{result.stdout}\n{result.stderr}"
    return result


def test_the_walkthrough_end_to_end(tmp_path):
    api = engine()
    name = unique_mesh("w")
    repository, tag = f"{REGISTRY}/mesh-walkthrough/env", name
    api.tag(env_image(api), repository, tag)
    for line in api.push(repository, tag, stream=True, decode=True):
        assert "error" not in line, line
    port = free_port()
    (tmp_path / "catalogue" / "web").mkdir(parents=True)
    (tmp_path / "catalogue" / "provisions.yaml").write_text(
        'web: {scope: node, grant: none, keys: [host, port, url], url: "http://{host}:{port}"}\n')
    (tmp_path / "catalogue" / "web" / "module.yaml").write_text(
        MODULE.format(repository=repository, tag=tag, state=tmp_path / "data"))
    printed = []

    def run(*args, check=True):
        result = mesh(*args, cwd=tmp_path, check=check)
        printed.append(result.stdout + result.stderr)
        return result

    key = tmp_path / "node.key"
    public = run("node-key", "solo", "--path", key).stdout.split("public-key:")[1].split()[0]
    (tmp_path / "mesh.yaml").write_text(
        f"mesh: {name}\ncatalogue: catalogue\n"
        f"nodes:\n  solo: {{address: 127.0.0.1, control: true, public-key: \"{public}\"}}\n"
        f"instances:\n  web@solo: {{module: web, node: solo}}\n"
        f"host-ports: {{first: {port}, last: {port}}}\n")
    state = tmp_path / "state"
    apply = ["apply", "out/solo.declaration.json", "--secrets", "ledger.yaml", "--key", key,
             "--state-root", state, "--no-firewall", "--stop-timeout", "1"]
    try:
        assert run("check", ".", check=False).returncode == 1  # not pinned yet: a refusal
        run("ca", "init", ".")
        run("pin", ".")
        run("plan", ".", "--issue", "--out", "out")
        run(*apply)
        first = env_of(http_get(f"http://127.0.0.1:{port}/cgi-bin/env"))
        assert first["WHERE"] == f"127.0.0.1:{port}"
        assert len(first["TOKEN"]) >= 32
        run("applied", ".", "solo", "--report", state / ".mesh" / "applied.json")
        rotated = run("rotate", ".", "secret/web@solo/token").stdout
        assert "recreate solo/" in rotated
        run("plan", ".", "--out", "out")
        run(*apply)
        second = env_of(http_get(f"http://127.0.0.1:{port}/cgi-bin/env"))
        assert second["TOKEN"] != first["TOKEN"] and len(second["TOKEN"]) >= 32
        assert "nothing to change" in run(*apply).stdout
        assert run("verify", "out/solo.declaration.json", "--secrets", "ledger.yaml",
                   "--key", key).returncode == 0
        written = [p for p in tmp_path.rglob("*") if p.is_file() and p != key
                   and "env" not in p.parts]  # env files are the container's, mode 0600
        for secret in (first["TOKEN"], second["TOKEN"]):
            assert not any(secret in text for text in printed), "a secret was printed"
            for path in written:
                assert secret.encode() not in path.read_bytes(), f"{path} holds a secret"
        env_files = list((state / ".mesh" / "env").iterdir())
        assert env_files and all(p.stat().st_mode & 0o777 == 0o600 for p in env_files)
    finally:
        cleanup(api, name)
