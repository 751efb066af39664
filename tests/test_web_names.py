"""Web apps by name, as an operator meets them through `mesh check`, `mesh plan`, `mesh names`
and `mesh graph`: names in the mesh domain, routes to an ingress (the catalogue's caddy), a
certificate per name issued once and kept across moves, and the refusals with file:line
naming both places. (tests/test_web_names_netns.py serves them for real.)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from resolver.documents import load_ledger

REPO = Path(__file__).resolve().parent.parent
DIGEST = "sha256:" + "a" * 64

WEB = """\
name: web
artifacts:
  web: {repository: example.org/web, tag: "1"}
listens:
  http: {port: 8080, http: true}
  admin: {port: 9000}
provides:
  - {provision: http-route, listen: http}
containers:
  - name: httpd
    artifact: web
    env:
      PUBLIC_URL: "${self.url}"
      HOSTNAME: "${self.hostname}"
"""

MESH = """\
mesh: names
domain: home.arpa
nodes:
  n1: {{address: 10.0.0.1, control: true, public-key: "{n1}"}}
  n2: {{address: 10.0.0.2, public-key: "{n2}"}}
  n3: {{address: 10.0.0.3, public-key: "{n3}"}}
instances:
  caddy@n1:
    module: caddy
    node: n1
    expose:
      https: {{to: [10.0.0.0/24], reason: web apps by name}}
  dnsmasq@n1:
    module: dnsmasq
    node: n1
  app1:
    module: web
    node: {app1}
    name: app1
  app2:
    module: web
    node: n3
    name: app2.home.arpa
  quiet:
    module: web
    node: n3
"""


def mesh(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "executors.cli", *map(str, args)],
                          cwd=str(REPO), env=dict(os.environ, PYTHONPATH=str(REPO)),
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> dict:
    where = tmp_path_factory.mktemp("keys")
    found = {}
    for node in ("n1", "n2", "n3"):
        made = mesh("node-key", node, "--path", where / f"{node}.key")
        found[node] = made.stdout.split("public-key:")[1].split()[0]
    found["path"] = where
    return found


def write(directory: Path, keys: dict, app1: str = "n2", mesh_text: str = MESH) -> Path:
    catalogue = directory / "catalogue"
    for name in ("caddy", "dnsmasq"):
        shutil.copytree(REPO / "catalogue" / name, catalogue / name, dirs_exist_ok=True)
    (catalogue / "web").mkdir(parents=True, exist_ok=True)
    (catalogue / "web" / "module.yaml").write_text(WEB)
    shutil.copy(REPO / "catalogue" / "provisions.yaml", catalogue / "provisions.yaml")
    (directory / "mesh.yaml").write_text(mesh_text.format(app1=app1, **keys))
    ledger = directory / "ledger.yaml"
    if not ledger.exists():
        ledger.write_text(f"version: 1\npins:\n  example.org/web:1: {DIGEST}\nbuilds:\n"
                          f"  caddy/caddy: {{digest: {DIGEST}, bases: {{}}, local: true}}\n"
                          f"  dnsmasq/dnsmasq: {{digest: {DIGEST}, bases: {{}}, local: true}}\n")
    return directory


def plan(directory: Path, keys: dict, out: Path) -> str:
    result = mesh("plan", directory, "--issue", "--key", keys["path"] / "n1.key", "--out", out)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout + result.stderr


def declaration(out: Path, node: str) -> dict:
    return json.loads((out / f"{node}.declaration.json").read_text())


def test_routes_names_and_certificates_in_the_plan(tmp_path, keys):
    directory = write(tmp_path / "mesh", keys)
    assert mesh("ca", "init", directory).returncode == 0
    planned = plan(directory, keys, tmp_path / "out")
    assert "signed the certificate of app1.home.arpa" in planned
    assert "signed the certificate of app2.home.arpa" in planned
    assert "quiet" not in re.findall(r"signed the certificate of (\S+)", planned)
    n1 = declaration(tmp_path / "out", "n1")
    files = {f["path"]: f for f in n1["files"]}
    routes = files["/etc/mesh/bindings/caddy@n1/routes.env"]["content"]
    assert "fqdn_0=app1.home.arpa\nhost_0=10.0.0.2\n" in routes
    assert "fqdn_1=app2.home.arpa\n" in routes and "fqdn_2=\n" in routes  # quiet: no name
    key = files["/etc/mesh/tls/caddy@n1/names/app1.home.arpa.key"]
    assert key["mode"] == "0600" and key["content"] == "${secret:tls/name:app1.home.arpa}"
    assert "BEGIN CERTIFICATE" in files["/etc/mesh/tls/caddy@n1/names/app1.home.arpa.crt"][
        "content"]
    caddy = next(c for c in n1["containers"] if c["instance"] == "caddy@n1")
    assert caddy["labels"]["mesh.tls-names"].startswith("app1.home.arpa=")
    dnsmasq = next(c for c in n1["containers"] if c["instance"] == "dnsmasq@n1")
    assert dnsmasq["env"] == {"INGRESS_HOST": "10.0.0.1", "MESH_DOMAIN": "home.arpa"}
    app1 = declaration(tmp_path / "out", "n2")["containers"][0]
    assert app1["env"] == {"PUBLIC_URL": "https://app1.home.arpa", "HOSTNAME": "app1.home.arpa"}
    quiet = next(c for c in declaration(tmp_path / "out", "n3")["containers"]
                 if c["instance"] == "quiet")
    # unnamed: told where it answers directly (its node's address, its published web port)
    assert quiet["env"]["HOSTNAME"] == "10.0.0.3"
    assert re.fullmatch(r"http://10\.0\.0\.3:\d+", quiet["env"]["PUBLIC_URL"]), quiet["env"]
    # the backend's port is open to the ingress's node only; its admin listen to nobody
    allows = declaration(tmp_path / "out", "n2")["firewall"]["allow"]
    assert [(a["sources"], a["reason"]) for a in allows] == [(["10.0.0.1"], "app1/http for caddy@n1")]
    # the ledger never holds a key in the clear
    ledger = (directory / "ledger.yaml").read_text()
    assert "name:app1.home.arpa" in ledger and "PRIVATE KEY" not in ledger


def test_a_move_keeps_the_name_its_url_and_its_certificate(tmp_path, keys):
    directory = write(tmp_path / "mesh", keys)
    assert mesh("ca", "init", directory).returncode == 0
    plan(directory, keys, tmp_path / "out")
    before = declaration(tmp_path / "out", "n1")
    write(directory, keys, app1="n3")
    planned = plan(directory, keys, tmp_path / "out")
    assert "signed the certificate" not in planned, planned
    after = declaration(tmp_path / "out", "n1")
    name = "/etc/mesh/tls/caddy@n1/names/app1.home.arpa.crt"
    assert [f for f in after["files"] if f["path"] == name] == \
        [f for f in before["files"] if f["path"] == name]
    routes = next(f["content"] for f in after["files"] if f["path"].endswith("routes.env"))
    assert "fqdn_0=app1.home.arpa\nhost_0=10.0.0.3\n" in routes
    moved = next(c for c in declaration(tmp_path / "out", "n3")["containers"]
                 if c["instance"] == "app1")
    assert moved["env"]["PUBLIC_URL"] == "https://app1.home.arpa"
    # the ingress moving is what gives a name a new key, sealed to its new node (its state,
    # Caddy's data, starts fresh there: with the mesh CA's certificates it holds nothing)
    text = (directory / "mesh.yaml").read_text().replace(
        "  caddy@n1:\n    module: caddy\n    node: n1",
        "  caddy@n1:\n    module: caddy\n    node: n2\n    fresh: true")
    (directory / "mesh.yaml").write_text(text)
    planned = plan(directory, keys, tmp_path / "out")
    assert "signed the certificate of app1.home.arpa" in planned
    assert "sealed to n2" in planned


def test_mesh_names_prints_hosts_zone_and_router_lines(tmp_path, keys):
    directory = write(tmp_path / "mesh", keys)
    result = mesh("names", directory)
    assert result.returncode == 0, result.stderr
    assert "10.0.0.1\tapp1.home.arpa\n" in result.stdout
    assert "app2.home.arpa.\tIN\tA\t10.0.0.1\n" in result.stdout
    assert "address=/app1.home.arpa/10.0.0.1\n" in result.stdout
    only = mesh("names", directory, "--format", "hosts")
    assert only.stdout == "10.0.0.1\tapp1.home.arpa\n10.0.0.1\tapp2.home.arpa\n"


def test_mesh_graph_shows_the_ingress_routes_and_names(tmp_path, keys):
    directory = write(tmp_path / "mesh", keys)
    drawn = mesh("graph", directory).stdout
    assert 'label="app1\\nmodule web\\nhttps://app1.home.arpa"' in drawn
    assert '"instance:caddy@n1" -> "instance:app1"' in drawn
    assert "routes: every http-route (3): app1, app2, quiet" in drawn


def _line(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def test_two_instances_claiming_one_name_are_refused_naming_both(tmp_path, keys):
    text = MESH.replace("    name: app2.home.arpa", "    name: app1.home.arpa")
    directory = write(tmp_path / "mesh", keys, mesh_text=text)
    checked = mesh("check", directory)
    written = (directory / "mesh.yaml").read_text()
    first, second = _line(written, "name: app1"), _line(written, "name: app1.home.arpa")
    assert checked.returncode == 2, checked.stdout + checked.stderr
    assert f"mesh.yaml:{second}:" in checked.stderr
    assert f"claims the name app1.home.arpa, which instance app1 claims already (line {first})" \
        in checked.stderr


def test_a_name_outside_the_domain_is_refused_naming_the_domain(tmp_path, keys):
    text = MESH.replace("    name: app2.home.arpa", "    name: app2.example.org")
    directory = write(tmp_path / "mesh", keys, mesh_text=text)
    checked = mesh("check", directory)
    written = (directory / "mesh.yaml").read_text()
    assert checked.returncode == 2
    assert (f"mesh.yaml:{_line(written, 'app2.example.org')}:11: name 'app2.example.org' is "
            f"outside the mesh domain home.arpa (line 2)") in checked.stderr


def test_a_name_without_a_domain_is_refused(tmp_path, keys):
    directory = write(tmp_path / "mesh", keys, mesh_text=MESH.replace("domain: home.arpa\n", ""))
    checked = mesh("check", directory)
    assert checked.returncode == 2
    assert "instance app1 has a name and mesh.yaml names no domain" in checked.stderr


def test_a_route_to_a_listen_that_is_not_http_is_refused_naming_both(tmp_path, keys):
    directory = write(tmp_path / "mesh", keys)
    module = directory / "catalogue" / "web" / "module.yaml"
    module.write_text(WEB.replace("{provision: http-route, listen: http}",
                                  "{provision: http-route, listen: admin}"))
    checked = mesh("check", directory)
    text = module.read_text()
    assert checked.returncode == 2
    assert (f"module.yaml:{_line(text, 'listen: admin')}:") in checked.stderr
    assert (f"an http-route is provided on listen 'admin', which does not say http: true "
            f"(line {_line(text, 'admin: {port')})") in checked.stderr


def test_mesh_renew_signs_the_names_an_ingress_on_the_node_serves(tmp_path, keys):
    directory = write(tmp_path / "mesh", keys)
    assert mesh("ca", "init", directory).returncode == 0
    plan(directory, keys, tmp_path / "out")
    before = (directory / "ledger.yaml").read_text()
    renewed = mesh("renew", directory, "n1")
    assert renewed.returncode == 0, renewed.stdout + renewed.stderr
    said = renewed.stdout + renewed.stderr
    assert "app1.home.arpa" in said and "app2.home.arpa" in said, said
    after = (directory / "ledger.yaml").read_text()
    def serial(text: str) -> str:
        return load_ledger(text, "ledger.yaml")[0].tls["name:app1.home.arpa"].serial

    assert serial(before) != serial(after)
    # nothing is renewed on a node serving no name
    assert "app1.home.arpa" not in mesh("renew", directory, "n2").stdout
