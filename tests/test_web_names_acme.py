"""Web names' certificates from ACME (mesh.yaml `acme: {email: …}`), configuration only (no
internet here): what `mesh check` refuses, what `mesh plan` then declares (no certificate of
a name from the mesh CA, the ingress told the email, Caddy's data in a state directory), and
the Caddyfile the catalogue's mesh-caddy writes from a route list, with and without ACME —
run for real on a list file, `caddy` itself either a stand-in printing the configuration or
Debian's caddy (`caddy adapt`, which reads the Caddyfile and needs no network).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.test_web_names import keys  # noqa: F401  (the fixture: node keys)
from tests.test_web_names import MESH, _line, declaration, mesh, plan, write

REPO = Path(__file__).resolve().parent.parent
MESH_CADDY = REPO / "catalogue" / "caddy" / "image" / "mesh-caddy"
ACME = MESH.replace("domain: home.arpa\n", "domain: example.org\nacme: {{email: ops@example.org}}\n") \
    .replace("name: app2.home.arpa", "name: app2.example.org")
ROUTES = ("count=3\nfqdn_0=app1.example.org\nhost_0=10.0.0.2\nport_0=20000\n"
          "fqdn_1=app2.example.org\nhost_1=10.0.0.3\nport_1=20001\n"
          "fqdn_2=\nhost_2=10.0.0.3\nport_2=20002\n")


def test_acme_plan_requests_no_name_certificate_and_tells_the_ingress(tmp_path, keys):
    # first without acme: the same mesh gets a certificate per name from the mesh CA
    directory = write(tmp_path / "mesh", keys,
                      mesh_text=ACME.replace("acme: {{email: ops@example.org}}\n", ""))
    assert mesh("ca", "init", directory).returncode == 0
    planned = plan(directory, keys, tmp_path / "out")
    assert "signed the certificate of app1.example.org" in planned, planned
    caddy = next(c for c in declaration(tmp_path / "out", "n1")["containers"]
                 if c["instance"] == "caddy@n1")
    assert caddy["env"]["ACME_EMAIL"] == ""
    # then with acme: none is requested, mounted or renewed; the ingress is told the email
    write(directory, keys, mesh_text=ACME)
    checked = mesh("check", directory)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    planned = plan(directory, keys, tmp_path / "out")
    assert "signed the certificate" not in planned, planned
    # the mesh CA's name certificates leave the ingress (the ledger keeps them, unused)
    assert "- n1 file /etc/mesh/tls/caddy@n1/names/app1.example.org.key" in planned, planned
    n1 = declaration(tmp_path / "out", "n1")
    assert not [f["path"] for f in n1["files"] if "/names/" in f["path"]]
    caddy = next(c for c in n1["containers"] if c["instance"] == "caddy@n1")
    assert caddy["env"]["ACME_EMAIL"] == "ops@example.org"
    assert caddy["env"]["XDG_DATA_HOME"] == "/var/lib/caddy"
    assert "mesh.tls-names" not in caddy["labels"]
    assert any(m["target"] == "/var/lib/caddy" for m in caddy["mounts"]), caddy["mounts"]
    assert [(d["instance"], d["path"]) for d in n1["state_dirs"]] == \
        [("caddy@n1", "/var/lib/mesh/caddy@n1/data")]
    renewed = mesh("renew", directory, "n1")
    assert renewed.returncode == 0, renewed.stdout + renewed.stderr
    assert "app1.example.org" not in renewed.stdout + renewed.stderr
    assert "PRIVATE KEY" not in (directory / "ledger.yaml").read_text()


@pytest.mark.parametrize("domain", ["home.arpa", "lab.local", "mesh.internal"])
def test_acme_with_a_domain_no_public_ca_validates_is_refused(tmp_path, keys, domain):
    text = ACME.replace("domain: example.org", f"domain: {domain}") \
        .replace("name: app2.example.org", "name: app2")
    directory = write(tmp_path / "mesh", keys, mesh_text=text)
    checked = mesh("check", directory)
    written = (directory / "mesh.yaml").read_text()
    assert checked.returncode == 2, checked.stdout + checked.stderr
    assert "Traceback" not in checked.stderr
    suffix = domain.rsplit(".", 1)[1]
    assert (f"mesh.yaml:{_line(written, 'acme:')}:1: acme for the domain {domain} (line "
            f"{_line(written, 'domain:')}): names under .{suffix} are not public") \
        in checked.stderr, checked.stderr


def test_acme_with_an_email_that_is_not_one_is_refused(tmp_path, keys):
    text = ACME.replace("ops@example.org", "ops-at-example")
    directory = write(tmp_path / "mesh", keys, mesh_text=text)
    checked = mesh("check", directory)
    written = (directory / "mesh.yaml").read_text()
    assert checked.returncode == 2
    assert f"mesh.yaml:{_line(written, 'acme:')}:" in checked.stderr
    assert "'ops-at-example' is not an email address" in checked.stderr, checked.stderr


def test_acme_without_a_domain_is_refused(tmp_path, keys):
    text = ACME.replace("domain: example.org\n", "").replace("    name: app1\n", "") \
        .replace("    name: app2.example.org\n", "")
    directory = write(tmp_path / "mesh", keys, mesh_text=text)
    checked = mesh("check", directory)
    assert checked.returncode == 2
    assert "acme and mesh.yaml names no domain" in checked.stderr, checked.stderr


# ---------------------------------------------------------------- mesh-caddy's Caddyfile

def caddyfile(tmp_path: Path, acme_email: str = "") -> str:
    """The Caddyfile mesh-caddy writes from ROUTES (a stand-in `caddy` prints it)."""
    stand_in = tmp_path / "bin" / "caddy"
    stand_in.parent.mkdir(exist_ok=True)
    stand_in.write_text('#!/bin/sh\n[ "$1 $4 $5" = "run --adapter caddyfile" ] || exit 9\n'
                        'cat "$3"\n')
    stand_in.chmod(0o755)
    routes = tmp_path / "routes.env"
    routes.write_text(ROUTES)
    env = dict(os.environ, PATH=f"{stand_in.parent}:{os.environ['PATH']}",
               CADDY_CONFIG=str(tmp_path / "Caddyfile"), ACME_EMAIL=acme_email)
    ran = subprocess.run(["sh", str(MESH_CADDY), str(routes)], env=env, capture_output=True,
                         text=True, timeout=30)
    assert ran.returncode == 0, ran.stderr
    return ran.stdout


def test_mesh_caddy_serves_each_name_with_the_mesh_ca_certificate(tmp_path):
    written = caddyfile(tmp_path)
    assert ("app1.example.org:443 {\n\ttls /etc/mesh/tls/names/app1.example.org.crt "
            "/etc/mesh/tls/names/app1.example.org.key\n\treverse_proxy 10.0.0.2:20000\n}\n") \
        in written
    assert "acme" not in written and "email" not in written
    assert "10.0.0.3:20002" not in written  # the unnamed route serves no name


def test_mesh_caddy_with_acme_has_caddy_get_the_certificates(tmp_path):
    written = caddyfile(tmp_path, "ops@example.org")
    assert written.startswith("{\n\tadmin off\n\tauto_https disable_redirects\n"
                              "\temail ops@example.org\n\tcert_issuer acme {\n"
                              "\t\tdisable_http_challenge\n\t}\n}\n"), written
    assert "app1.example.org:443 {\n\treverse_proxy 10.0.0.2:20000\n}\n" in written
    assert "/etc/mesh/tls/names/" not in written
    # the catch-all keeps the ingress's own certificate (no ACME for an address)
    assert ":443 {\n\ttls /etc/mesh/tls/server.crt /etc/mesh/tls/server.key\n" in written


@pytest.fixture(scope="module")
def real_caddy(tmp_path_factory) -> Path:
    """Debian's caddy binary, from its package (the package mirror), or skip."""
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        pytest.skip("apt-get/dpkg-deb are not installed")
    where = tmp_path_factory.mktemp("caddy")
    got = subprocess.run(["apt-get", "download", "caddy"], cwd=where, capture_output=True,
                         text=True, timeout=300)
    if got.returncode != 0:
        pytest.skip(f"caddy's package cannot be downloaded here: {got.stderr.strip()}")
    deb = next(where.glob("caddy_*.deb"))
    subprocess.run(["dpkg-deb", "-x", str(deb), str(where / "tree")], check=True)
    return where / "tree" / "usr" / "bin" / "caddy"


@pytest.mark.parametrize("acme_email", ["", "ops@example.org"])
def test_caddy_reads_the_caddyfile_mesh_caddy_writes(tmp_path, real_caddy, acme_email):
    (tmp_path / "Caddyfile.in").write_text(caddyfile(tmp_path, acme_email))
    with tempfile.TemporaryDirectory() as home:
        adapted = subprocess.run(
            [str(real_caddy), "adapt", "--config", str(tmp_path / "Caddyfile.in"),
             "--adapter", "caddyfile"], capture_output=True, text=True, timeout=60,
            env=dict(os.environ, HOME=home, XDG_DATA_HOME=home, XDG_CONFIG_HOME=home))
    assert adapted.returncode == 0, adapted.stderr
    config = json.loads(adapted.stdout)
    policies = config["apps"]["tls"].get("automation", {}).get("policies", [])
    issuers = [i for p in policies for i in p.get("issuers", [])]
    if acme_email:
        assert issuers and all(i["module"] == "acme" and i["email"] == acme_email
                               and i["challenges"]["http"]["disabled"] for i in issuers), \
            issuers
        loaded = config["apps"]["tls"].get("certificates", {}).get("load_files", [])
        assert [f["certificate"] for f in loaded] == ["/etc/mesh/tls/server.crt"]
    else:
        assert all(i["module"] != "acme" for i in issuers), issuers
        loaded = config["apps"]["tls"]["certificates"]["load_files"]
        assert "/etc/mesh/tls/names/app1.example.org.crt" in [f["certificate"] for f in loaded]
