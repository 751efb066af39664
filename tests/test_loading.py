"""Loading a mesh directory: located faults, every fault at once, the ledger's version, exit codes."""

from __future__ import annotations

import json

import os
import subprocess
import sys
from pathlib import Path

import pytest

import resolver
from resolver import documents
from executors.cli import main as cli
from executors.common.atomic import write_atomic
from executors.control.loading import load_mesh_dir, write_ledger
from resolver import (
    EMPTY_LEDGER,
    InputError,
    Ledger,
    PortAssignment,
)
from resolver.documents import (
    unstructure,
    dump_ledger,
    load_ledger,
    load_mesh,
    load_module,
    load_provisions,
)
from resolver.rendering import (
    placeholders,
    render_placeholders,
)
from pyrsistent import pmap

REPO = Path(__file__).resolve().parent.parent
DIGEST = "sha256:" + "ab" * 32

MESH = """\
mesh: home
nodes:
  anchor:
    address: 10.0.0.1
  lab:
    address: fd00::2
instances:
  web@anchor:
    module: web
    node: anchor
"""

PROVISIONS = """\
postgres-database:
  grant: database+login
  keys: [host, port, user, password, database, url]
  url: postgres://{user}@{host}:{port}/{database}
"""

WEB = """\
name: web
artifacts:
  web:
    repository: mesh-test/busybox
    tag: "1"
listens:
  http:
    port: 8080
containers:
  - name: web
    artifact: web
    command: [httpd, -f, -p, "8080"]
"""

LEDGER = f"""\
version: 1
pins:
  mesh-test/busybox:1: {DIGEST}
"""

# A module whose every reference is valid; the reference tests break one at a time.
APP = """\
name: app
artifacts:
  app:
    repository: example/app
    tag: "2"
listens:
  http:
    port: 3000
    container: app
secrets: [admin]
provides:
  - provision: app-api
    listen: http
    admin: admin
requires:
  - as: db
    provision: postgres-database
    part: server
parts:
  server:
    description: the server
state:
  data:
    path: data
    owner: "1000:1000"
    mode: "0750"
accesses:
  media:
    path: /srv/media
    mode: ro
facilities: [docker-socket]
containers:
  - name: app
    artifact: app
    part: server
    env:
      DATABASE_URL: ${db.url}
      ADMIN_PASSWORD: ${self.admin.password}
      PUBLIC: http://${self.address}:${self.http.port}/
      PRICE: $$5
    mounts:
      - target: /data
        state: data
      - target: /media
        access: media
      - target: /var/run/docker.sock
        facility: docker-socket
    health:
      http:
        listen: http
        path: /healthz
"""


def write_tree(root: Path, files: dict[str, str]) -> Path:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def mesh_dir(tmp_path: Path, **overrides: str | None) -> Path:
    files = {
        "mesh.yaml": MESH,
        "catalogue/provisions.yaml": PROVISIONS,
        "catalogue/web/module.yaml": WEB,
        "ledger.yaml": LEDGER,
    }
    for key, text in overrides.items():
        relative = key.replace("__", "/").replace("_yaml", ".yaml")
        if text is None:
            files.pop(relative, None)
        else:
            files[relative] = text
    return write_tree(tmp_path / "mesh", files)


def locate(text: str, needle: str, nth: int = 0) -> tuple[int, int]:
    """1-based (line, col) of the nth occurrence of needle in text."""
    start = -1
    for _ in range(nth + 1):
        start = text.index(needle, start + 1)
    line = text.count("\n", 0, start) + 1
    col = start - (text.rfind("\n", 0, start) + 1) + 1
    return line, col


def faults_of(call, *args, **kwargs):
    with pytest.raises(InputError) as caught:
        call(*args, **kwargs)
    return caught.value.faults


# --------------------------------------------------------------------------- valid documents


def test_valid_mesh_dir_loads(tmp_path):
    inputs = load_mesh_dir(mesh_dir(tmp_path))
    assert set(inputs.catalogue.modules) == {"web"}
    assert set(inputs.catalogue.provisions) == {"postgres-database"}
    assert set(inputs.mesh.nodes) == {"anchor", "lab"}
    assert inputs.ledger.pins["mesh-test/busybox:1"] == DIGEST
    assert set(inputs.sources.documents) == {"mesh", "provisions", "ledger", "module:web"}
    assert inputs.sources.where("module:web", "listens", "http", "port") == (
        str(inputs.sources.file("module:web")), 8, 11)


def test_module_with_every_kind_of_reference_loads():
    module, _ = load_module(APP, "app/module.yaml", name="app")
    assert module.containers[0].mounts[2].facility == "docker-socket"
    assert module.containers[0].env["PRICE"] == "$$5"


def test_missing_ledger_is_the_empty_ledger(tmp_path):
    inputs = load_mesh_dir(mesh_dir(tmp_path, ledger_yaml=None))
    assert inputs.ledger == EMPTY_LEDGER
    assert "ledger" not in inputs.sources.documents
    assert Path(inputs.ledger_path) == tmp_path / "mesh" / "ledger.yaml"


def test_ledger_and_catalogue_paths_come_from_mesh_yaml(tmp_path):
    root = write_tree(tmp_path, {
        "m/mesh.yaml": MESH + "catalogue: ../shared\nledger: state/ledger.yaml\n",
        "shared/provisions.yaml": PROVISIONS,
        "shared/web/module.yaml": WEB,
        "m/state/ledger.yaml": "version: 2\n",
    })
    faults = faults_of(load_mesh_dir, root / "m")
    assert [f.message for f in faults] == ["unsupported ledger version 2"]
    assert faults[0].file.endswith("state/ledger.yaml")


# --------------------------------------------------------------------------- the ledger


def test_wrong_ledger_version_is_refused_with_its_position(tmp_path):
    text = "# written by mesh\nversion: 7\nports: {}\n"
    directory = mesh_dir(tmp_path, ledger_yaml=text)
    (fault,) = faults_of(load_mesh_dir, directory)
    assert (fault.line, fault.col) == (2, 10)
    assert str(fault).endswith("ledger.yaml:2:10: unsupported ledger version 7; expected 1")
    assert (directory / "ledger.yaml").read_text() == text  # refused, never overwritten


@pytest.mark.parametrize("text, message, position", [
    ("ports: {}\n", "the ledger has no version", (1, 1)),
    ("version: '1'\n", "unsupported ledger version '1'", (1, 10)),
    ("version: 1\nports: [1, 2]\n", "ports is a list", (2, 8)),
    ("version: 1\nbogus: 3\n", "unknown key 'bogus'", (2, 1)),
    ("version: 1\npins: {'x:1': 'latest'}\n", "pin 'x:1' is not a digest", (2, 15)),
    ("- version: 1\n", "the document is a list", (1, 1)),
    ("version: 1\n  ports: {\n", "YAML:", (2, 8)),
])
def test_malformed_ledger_is_refused(text, message, position):
    (fault,) = faults_of(load_ledger, text, "ledger.yaml")
    assert fault.message.startswith(message)
    assert (fault.line, fault.col) == position


def test_dump_ledger_reads_back_and_is_deterministic():
    ledger = Ledger(
        ports=pmap({"web@anchor": pmap({"http": PortAssignment("anchor", 20001)})}),
        pins=pmap({"b:2": DIGEST, "a:1": DIGEST}),
        logins=pmap({"yes": "no", "1": "0x10", "on": "2024-01-01"}),
    )
    text = dump_ledger(ledger)
    assert text.startswith('{"version":1,\n')  # canonical JSON: YAML 1.2, fast to write
    assert json.loads(text) == {"version": 1, **{k: v for k, v in unstructure(ledger).items()
                                                 if k != "version"}}
    assert text.index("a:1") < text.index("b:2")
    assert load_ledger(text, "l.yaml")[0] == ledger
    assert dump_ledger(load_ledger(text, "l.yaml")[0]) == text


def test_write_ledger_is_atomic_and_round_trips(tmp_path):
    path = tmp_path / "ledger.yaml"
    path.write_text("version: 1\n")
    ledger = Ledger(pins=pmap({"a:1": DIGEST}))
    write_ledger(path, ledger)
    assert load_ledger(path.read_text(), str(path))[0] == ledger
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert [p.name for p in tmp_path.iterdir()] == ["ledger.yaml"]  # no temp file left


def test_write_atomic_leaves_the_old_file_when_writing_fails(tmp_path):
    path = tmp_path / "f.txt"
    path.write_text("old")
    with pytest.raises(TypeError):
        write_atomic(path, 12345)  # type: ignore[arg-type]  (neither bytes nor text)
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.txt"]
    write_atomic(path, "new", mode=0o640)
    assert path.read_text() == "new" and oct(path.stat().st_mode & 0o777) == "0o640"


# --------------------------------------------------------------------------- every fault at once


def test_every_fault_of_every_document_is_reported(tmp_path):
    bad_web = WEB.replace("port: 8080", 'port: "8080"').replace("artifact: web", "artifact: 3")
    bad_web = bad_web.replace("    tag: \"1\"\n", "    tag: \"1\"\n    colour: blue\n")
    bad_mesh = MESH.replace("10.0.0.1", "ten.zero")
    bad_provisions = PROVISIONS.replace("database+login", "database")
    directory = mesh_dir(tmp_path, mesh_yaml=bad_mesh, catalogue__web__module_yaml=bad_web,
                         catalogue__provisions_yaml=bad_provisions, ledger_yaml="version: 0\n")
    faults = faults_of(load_mesh_dir, directory)
    messages = [(Path(f.file).name, f.message) for f in faults]
    assert ("module.yaml", "unknown key 'colour'") in messages
    assert ("module.yaml", "listens.http.port is a string ('8080')") in messages
    assert ("module.yaml", "containers.0.artifact is a number (3)") in messages
    assert ("mesh.yaml", "'ten.zero' is not an IP address") in messages
    assert ("provisions.yaml", "'database' is not allowed") in messages
    assert ("ledger.yaml", "unsupported ledger version 0") in messages
    assert len(faults) == 6
    assert all(f.line >= 1 and f.col >= 1 for f in faults)


def test_every_validation_fault_of_one_module_is_reported():
    text = APP.replace("state: data", "state: cache").replace("listen: http\n    admin", "listen: web\n    admin")
    text = text.replace("${db.url}", "${cache.url}")
    messages = [f.message for f in faults_of(load_module, text, "app.yaml")]
    assert messages == [
        "no listen named 'web'",
        "env DATABASE_URL: ${cache.url}: no requirement named 'cache'",
        "undeclared state 'cache'",
    ]


def test_type_faults_and_reference_faults_of_one_document_are_reported_together():
    text = (APP.replace("port: 3000", 'port: "3000"').replace("state: data", "state: cache")
            .replace('    tag: "2"', "    tag: 2\n    colour: red").replace("artifact: app", "artifact: 7"))
    faults = faults_of(load_module, text, "app.yaml", name="app")
    assert [(f.line, f.message) for f in faults] == [
        (5, "artifacts.app.tag is a number (2)"),  # not also "has no tag": repaired, not removed
        (6, "unknown key 'colour'"),
        (9, "listens.http.port is a string ('3000')"),
        (35, "containers.0.artifact is a number (7)"),  # not also "no artifact named ''"
        (44, "undeclared state 'cache'"),
    ]


def test_a_missing_key_stops_the_checks_between_keys():
    """A missing key cannot be filled in soundly, so only the structure faults are given."""
    text = APP.replace("    artifact: app\n", "").replace("state: data", "state: cache")
    faults = faults_of(load_module, text, "app.yaml")
    assert [f.message for f in faults] == ["missing required key 'artifact'"]


# --------------------------------------------------------------------------- reference faults


# (what to replace in APP, with what, the text the fault must point at, message start)
REFERENCES = [
    ("state: data", "state: cache", "state: cache", "undeclared state 'cache'"),
    ("access: media", "access: music", "access: music", "undeclared access 'music'"),
    ("facility: docker-socket", "facility: gpu", "facility: gpu", "undeclared facility 'gpu'"),
    ("    listen: http\n    admin", "    listen: web\n    admin", "listen: web", "no listen named 'web'"),
    ("admin: admin", "admin: root", "admin: root", "no secret named 'root'"),
    ("artifact: app", "artifact: other", "artifact: other", "no artifact named 'other'"),
    ("    part: server\nparts", "    part: client\nparts", "part: client", "no part named 'client'"),
    ("    part: server\n    env", "    part: client\n    env", "part: client", "no part named 'client'"),
    ("    container: app", "    container: sidecar", "container: sidecar",
     "no container named 'sidecar'"),
    ("        listen: http\n        path", "        listen: https\n        path", "listen: https",
     "no listen named 'https'"),
    ("${db.url}", "${cache.url}", "DATABASE_URL:", "env DATABASE_URL: ${cache.url}: no requirement"),
    ("${db.url}", "${db.colour}", "DATABASE_URL:", "env DATABASE_URL: ${db.colour}: 'colour' is not"),
    ("${self.admin.password}", "${self.root.password}", "ADMIN_PASSWORD:",
     "env ADMIN_PASSWORD: ${self.root.password}: no secret named 'root'"),
    ("${self.http.port}", "${self.https.port}", "PUBLIC:",
     "env PUBLIC: ${self.https.port}: no listen named 'https'"),
    ("${self.address}", "${self.hostnam}", "PUBLIC:", "env PUBLIC: ${self.hostnam} is not a placeholder"),
    ("${self.address}", "${secret:db}", "PUBLIC:", "env PUBLIC: ${secret:db} is not a placeholder"),
    ("$$5", "${db", "PRICE:", "env PRICE: an unclosed ${"),
]


@pytest.mark.parametrize("old, new, pointed, message", REFERENCES, ids=[r[3][:40] for r in REFERENCES])
def test_reference_fault_points_at_the_referencing_key(old, new, pointed, message):
    assert old in APP
    text = APP.replace(old, new, 1)
    faults = faults_of(load_module, text, "catalogue/app/module.yaml")
    assert len(faults) == 1, faults
    (fault,) = faults
    assert fault.message.startswith(message)
    assert (fault.line, fault.col) == locate(text, pointed)
    assert fault.expected


@pytest.mark.parametrize("old, new, message", [
    ("    tag: \"2\"\n", "    tag: \"2\"\n    build: .\n", "artifact 'app' names both"),
    ("    tag: \"2\"\n", "", "artifact 'app' has no tag"),
    ("    mode: ro", "    mode: rx", "'rx' is not allowed"),
    ('owner: "1000:1000"', 'owner: "me"', "owner 'me' is not uid:gid"),
    ('mode: "0750"', 'mode: "750x"', "mode '750x' is not an octal mode"),
    ("    port: 3000", "    port: 0", "port 0 is out of range"),
    ("    port: 3000", "    port: 3000\n    protocol: sctp", "'sctp' is not allowed"),
    ("    provision: postgres-database", "    provision: postgres-database\n    module: pg",
     "requirement 'db' names provision and module"),
    ("        state: data", "        state: data\n        access: media",
     "mount of '/data' names state and access"),
    ("      http:\n        listen: http", "      tcp: http\n      http:\n        listen: http",
     "health check names tcp and http"),
    ("  - as: db\n    provision: postgres-database\n    part: server\n",
     "  - as: db\n    provision: postgres-database\n    part: server\n  - as: db\n    module: x\n",
     "requirement 'db' is named twice"),
    ("name: app\n", "name: other\n", "module name 'other' differs from its directory"),
])
def test_module_value_faults(old, new, message):
    assert old in APP
    faults = faults_of(load_module, APP.replace(old, new, 1), "app.yaml", name="app")
    assert [f.message for f in faults if f.message.startswith(message)], faults


@pytest.mark.parametrize("text, message, position", [
    ("mesh: m\nnodes:\n  a: {address: 300.1.1.1}\n", "'300.1.1.1' is not an IP address", (3, 16)),
    ("mesh: m\nnodes:\n  a: {address: 10.0.0.1, ssh-port: 70000}\n", "port 70000 is out of range",
     (3, 36)),
    ("mesh: m\nnodes: {}\nhost-ports: {first: 30000, last: 20000}\n",
     "host-ports run from 30000 down to 20000", (3, 13)),
    ("mesh: m\nnodes: {}\nhost-ports: {first: 80}\n", "port 80 is out of range", (3, 21)),
    ("mesh: m\nnodes:\n  a: {address: 10.0.0.1, public-key: nope}\n",
     "public-key is not a base64 X25519 key", (3, 38)),
    ("mesh: m\nnodes:\n  a: {address: 10.0.0.1, control: true}\n  b: {address: 10.0.0.2, control: true}\n",
     "node 'b' is a second control node", (4, 26)),
    ("mesh: m\n", "missing required key 'nodes'", (1, 1)),
    ("mesh: m\nnodes: {}\ninstances:\n  x: {module: web, node: a, extra: 1}\n", "unknown key 'extra'",
     (4, 29)),
])
def test_mesh_faults(text, message, position):
    faults = faults_of(load_mesh, text, "mesh.yaml")
    (fault,) = faults
    assert fault.message.startswith(message)
    assert (fault.line, fault.col) == position


def test_cross_document_references_are_not_load_faults(tmp_path):
    mesh = MESH + "  x@lab:\n    module: nothing\n    node: nowhere\n    bind: {db: ghost}\n" \
                  "defaults: {postgres-database: ghost}\n"
    inputs = load_mesh_dir(mesh_dir(tmp_path, mesh_yaml=mesh))
    assert inputs.mesh.instances["x@lab"].module == "nothing"
    file, line, col = inputs.sources.where("mesh", "instances", "x@lab", "module", at_key=True)
    assert (line, col) == (12, 5)


@pytest.mark.parametrize("text, message", [
    ("pg: {scope: world}\n", "'world' is not allowed"),
    ("pg: {grant: everything}\n", "'everything' is not allowed"),
    ("pg: {keys: [host, colour]}\n", "'colour' is not allowed"),
    ("pg: {keys: [host, port], url: 'pg://{user}@{host}'}\n", "url template names {user}"),
    ("pg: [host]\n", "pg is a list"),
])
def test_provisions_faults(text, message):
    (fault,) = faults_of(load_provisions, text, "provisions.yaml")
    assert fault.message.startswith(message)
    assert fault.line == 1


def test_placeholder_key_must_be_offered_by_the_provision(tmp_path):
    app = APP.replace("${db.url}", "${db.vhost}")
    directory = mesh_dir(tmp_path, catalogue__app__module_yaml=app)
    (fault,) = faults_of(load_mesh_dir, directory)
    assert fault.message == "${db.vhost}: postgres-database offers no 'vhost'"
    assert (fault.line, fault.col) == locate(app, "DATABASE_URL:")


def test_missing_files_are_faults_at_the_top_of_mesh_yaml_that_implies_them(tmp_path):
    """No `catalogue:` key: the default catalogue's missing files are located at the top of
    the mesh.yaml that left the path to its default, and name the file."""
    directory = mesh_dir(tmp_path, catalogue__provisions_yaml=None)
    (directory / "catalogue" / "empty").mkdir()
    faults = faults_of(load_mesh_dir, directory)
    assert [(f.line, f.col) for f in faults] == [(1, 1), (1, 1)]
    assert all(f.file.endswith("mesh/mesh.yaml") for f in faults)
    messages = sorted(f.message for f in faults)
    assert messages[0].startswith("module empty's manifest ")
    assert messages[0].endswith("catalogue/empty/module.yaml is missing")
    assert messages[1].endswith("catalogue/provisions.yaml is missing")
    assert all("the default (no `catalogue:` key)" in f.expected for f in faults)
    missing = faults_of(load_mesh_dir, tmp_path / "nowhere")
    assert missing[0].message == "is missing"


def test_missing_catalogue_is_located_at_its_key_and_reported_with_other_faults(tmp_path):
    root = write_tree(tmp_path, {"mesh.yaml": "mesh: m\nnodes: []\ncatalogue: cat\n"})
    faults = faults_of(load_mesh_dir, root)
    assert [(f.line, f.col, f.message.split(" /")[0]) for f in faults] == [
        (2, 8, "nodes is a list"), (3, 12, "the catalogue directory")]
    assert faults[1].message.endswith("/cat is missing")


def test_placeholders_parse_and_render():
    assert placeholders("a ${x.host}:${self.http.port} $$ $${not}") == ["x.host", "self.http.port"]
    assert render_placeholders("${a}-$$-${b}$", lambda b: b.upper()) == "A-$-B$"


# --------------------------------------------------------------------------- the command line


def run_cli(*argv: str) -> tuple[int, str, str]:
    return cli_result(lambda: cli.main(list(argv)))


def cli_result(call):
    import contextlib
    import io
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = call()
    return code, out.getvalue(), err.getvalue()


def test_check_ok_exits_0(tmp_path):
    code, out, err = run_cli("check", str(mesh_dir(tmp_path)))
    assert (code, err) == (0, "")
    assert out == "OK: 2 nodes, 1 instances, 1 modules\n"


def test_check_bad_input_exits_2_with_every_fault(tmp_path):
    directory = mesh_dir(tmp_path, ledger_yaml="version: 9\n",
                         mesh_yaml=MESH.replace("10.0.0.1", "anchor.lan"))
    code, out, err = run_cli("check", str(directory))
    assert code == 2 and out == ""
    lines = err.splitlines()
    assert lines[-1] == "2 errors"
    assert any(line.endswith("ledger.yaml:1:10: unsupported ledger version 9; expected 1") for line in lines)
    assert any("mesh.yaml:4:14: 'anchor.lan' is not an IP address" in line for line in lines)


@pytest.mark.skipif(not hasattr(resolver, "resolve"), reason="resolver.resolve is not written yet")
def test_check_refusal_exits_1_with_located_problem(tmp_path):
    mesh = MESH + "  ghost@lab:\n    module: nothing\n    node: lab\n"
    code, out, _ = run_cli("check", str(mesh_dir(tmp_path, mesh_yaml=mesh)))
    assert code == 1
    assert "mesh.yaml:" in out and "[unknown-module]" in out


def subprocess_check(directory: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "executors.cli", "check", str(directory)],
                          capture_output=True, text=True, env=env, cwd=directory.parent, timeout=120)


def test_check_subprocess_exit_codes_and_no_traceback(tmp_path):
    good = subprocess_check(mesh_dir(tmp_path))
    assert good.returncode == 0, good.stderr
    assert good.stdout.startswith("OK:")
    bad = write_tree(tmp_path / "bad", {
        "mesh.yaml": "mesh: [\n",
        "catalogue/provisions.yaml": "{}\n",
    })
    result = subprocess_check(bad)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("bad/mesh.yaml:2:1: YAML:")  # relative to the current directory


def test_schema_command(tmp_path):
    code, out, _ = run_cli("schema")
    assert code == 0 and out.split() == ["module", "provisions", "mesh", "ledger", "declaration",
                                         "message-envelope", "declaration-message", "report",
                                         "enrolment-request", "enrolment-answer",
                                         "logs-request", "logs-answer", "backup-request",
                                         "backup-answer"]
    code, out, _ = run_cli("schema", "mesh")
    assert code == 0 and '"$schema": "https://json-schema.org/draft/2020-12/schema"' in out
    code, _, err = run_cli("schema", "nonsense")
    assert code == 2 and "no document type 'nonsense'" in err


# --------------------------------------------------------------------------- the fixtures


FIXTURES = REPO / "fixtures"


def fixture_meshes() -> list[Path]:
    return sorted(p.parent for p in FIXTURES.glob("*/mesh.yaml"))


def refusal_cases() -> list[Path]:
    return sorted(p.parent for p in FIXTURES.glob("refusals/*/expected.yaml"))


@pytest.mark.parametrize("directory", fixture_meshes(), ids=lambda p: p.name)
def test_fixture_loads_without_faults(directory: Path):
    code, out, err = run_cli("check", str(directory))
    assert code in (0, 1), err  # 1 is a refusal by the resolver, not a load fault
    assert code == 0 or "[" in out


def _load_fault_cases() -> list[tuple[Path, dict]]:
    cases = []
    for directory in refusal_cases():
        expected, _ = documents.parse_yaml((directory / "expected.yaml").read_text(), "expected.yaml")
        if isinstance(expected, dict) and "load_fault" in expected:
            cases.append((directory, expected["load_fault"]))
    return cases


@pytest.mark.parametrize("directory, expected", _load_fault_cases(),
                         ids=lambda v: v.name if isinstance(v, Path) else "")
def test_refusal_fixture_load_fault(directory: Path, expected: dict):
    faults = faults_of(load_mesh_dir, directory)
    wanted = (directory / expected["file"]).resolve()
    located = [f for f in faults if Path(f.file).resolve() == wanted]
    assert located, faults
    if "line" in expected:
        assert expected["line"] in [f.line for f in located], faults


def test_a_login_recorded_for_two_credentials_is_refused_where_each_is_written(tmp_path):
    """Two consumers never share a login: a ledger recording one login for two credentials (a
    hand edit, a bad merge) is refused at each credential's line, naming both; the same
    ledger with the second login changed loads."""
    text = ('{"version":1,\n"logins":{\n"db/a@n":"u_shared",\n"db/b@n":"u_shared",\n'
            '"db/c@n":"u_other"\n}}\n')
    with pytest.raises(resolver.InputError) as refused:
        documents.load_ledger(text, "ledger.yaml")
    faults = refused.value.faults
    assert [(f.line, f.col) for f in faults] == [(3, 10), (4, 10)]
    assert all("'u_shared' is recorded for 2 credentials: db/a@n, db/b@n" in f.message
               for f in faults)
    ledger, _ = documents.load_ledger(text.replace('"db/b@n":"u_shared"', '"db/b@n":"u_b"'),
                                      "ledger.yaml")
    assert dict(ledger.logins) == {"db/a@n": "u_shared", "db/b@n": "u_b", "db/c@n": "u_other"}
