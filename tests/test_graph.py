"""`mesh graph`: what the picture shows (pure DOT), and what the real Graphviz `dot` makes of it.

The DOT tests need nothing but the resolver. The SVG tests run Graphviz's `dot` (Debian's
`graphviz`, installed by scripts/services.sh) through the command, as an operator does, and
read the SVG back as XML: every instance and every binding is found by its id and its text.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import attrs
import pytest
from pyrsistent import pmap, pvector

import resolver
from resolver import picture
from executors.cli.graph import render
from executors.control.loading import load_mesh_dir
from resolver import Floor, Instance, Mesh, Node, Require
from resolver.picture import Opening, mesh_dot, mesh_picture, render_dot
from resolver.rotation import begin_rotation, first_generation
from property_tests.strategies import PROVISIONS, module_named, pins_for
from tests._meshdir import run_cli

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
NOW = "2026-01-01T00:00:00Z"
SVG = "{http://www.w3.org/2000/svg}"
XLINK = "{http://www.w3.org/1999/xlink}"


def load(name: str):
    inputs = load_mesh_dir(FIXTURES / name)
    resolution = resolver.resolve(inputs.catalogue, inputs.mesh, inputs.ledger,
                                  sources=inputs.sources, now=NOW)
    return inputs, resolution


def dot_of(inputs, resolution, **kwargs) -> str:
    return mesh_dot(resolution, inputs.mesh,
                    node_order=inputs.sources.key_order("mesh", "nodes"),
                    instance_order=inputs.sources.key_order("mesh", "instances"), **kwargs)


def statement(dot: str, element_id: str) -> str:
    found = [line for line in dot.splitlines() if f"id={picture.dot_quote(element_id)}" in line]
    assert len(found) == 1, (element_id, found)
    return found[0]


# --------------------------------------------------------------------------- the DOT text


def test_nodes_and_instances_follow_mesh_yaml_not_the_alphabet(tmp_path):
    (tmp_path / "mesh.yaml").write_text(
        f"mesh: order\ncatalogue: {ROOT / 'catalogue'}\n"
        "nodes:\n  zeta: {address: 10.9.0.2}\n  alpha: {address: 10.9.0.1}\n"
        "instances:\n"
        "  umami@zeta: {module: umami, node: zeta, bind: {db: postgres@alpha}}\n"
        "  registry@alpha: {module: registry, node: alpha}\n"
        "  postgres@alpha: {module: postgres, node: alpha}\n"
        "  gitea@zeta: {module: gitea, node: zeta}\n")
    inputs = load_mesh_dir(tmp_path)
    resolution = resolver.resolve(inputs.catalogue, inputs.mesh, inputs.ledger,
                                  sources=inputs.sources)
    dot = dot_of(inputs, resolution)
    statement_start = re.compile(r'^\s+(?:subgraph )?"(cluster node:[^"]+|instance:[^"]+)" ', re.M)
    order = list(dict.fromkeys(m.group(1) for m in statement_start.finditer(dot)))
    assert order == ["cluster node:zeta", "instance:umami@zeta", "instance:gitea@zeta",
                     "cluster node:alpha", "instance:registry@alpha", "instance:postgres@alpha"]
    code, out = run_cli("graph", tmp_path)
    assert out.startswith(dot), "the command prints the same text"


def test_bindings_are_labelled_with_provision_and_rule_and_cross_node_ones_differ():
    inputs, resolution = load("homelab")
    dot = dot_of(inputs, resolution)
    cross = statement(dot, "binding:umami@home/db")
    assert cross.lstrip().startswith('"instance:umami@home" -> "instance:postgres@lab" [')
    assert 'label="db: postgres-database\\ninstance override' in cross
    assert 'style="dashed"' in cross and 'color="#1f5fbf"' in cross
    same = statement(dot, "binding:gitea@home/db")
    assert 'label="db: postgres-database\\nco-located' in same
    assert 'style="solid"' in same and 'color="#404040"' in same
    assert 'label="sso: oidc\\nmesh default' in statement(dot, "binding:grafana@lab/sso")
    forge = statement(dot, "binding:act-runner@lab/forge")
    assert 'label="forge: module gitea\\nsole provider' in forge


def test_manifest_and_recorded_rules_are_named_too():
    server = module_named("db", provides=["sql"])
    client = module_named("app", requires=[Require(as_="db", provision="sql", provider="db1@a")])
    other = module_named("other", requires=[Require(as_="db", provision="sql")])
    catalogue = resolver.Catalogue(pmap({"db": server, "app": client, "other": other}),
                                   pmap(PROVISIONS))
    mesh = Mesh(mesh="m", nodes=pmap({"a": Node(address="10.0.0.1")}), instances=pmap({
        "db1@a": Instance("db", "a"), "db2@a": Instance("db", "a"),
        "app@a": Instance("app", "a"), "other@a": Instance("other", "a")}))
    ledger = resolver.Ledger(pins=pmap(pins_for([server, client, other])),
                             bindings=pmap({"other@a": pmap({"db": "db2@a"})}))
    dot = mesh_dot(resolver.resolve(catalogue, mesh, ledger), mesh)
    assert 'label="db: sql\\nmanifest' in statement(dot, "binding:app@a/db")
    assert 'label="db: sql\\nrecorded' in statement(dot, "binding:other@a/db")


def test_refused_instances_are_red_with_their_code_and_their_problem_is_a_note():
    inputs, resolution = load("refusals/ambiguous-provider")
    dot = dot_of(inputs, resolution)
    umami = statement(dot, "instance:umami@a")
    assert 'color="#c00000"' in umami and "refused: ambiguous-provider" in umami
    problem = next(p for p in resolution.problems if p.code == "ambiguous-provider")
    note = statement(dot, f"problem:{picture.problem_key(problem)}")
    assert "[ambiguous-provider] error" in note and "postgres@b, postgres@c" in note
    assert "catalogue/umami/module.yaml:19:5" in note
    assert 'color="#c00000"' not in statement(dot, "instance:postgres@b")


def test_an_instance_on_an_unknown_node_is_drawn_in_a_box_saying_so():
    inputs, resolution = load("refusals/unknown-node")
    dot = dot_of(inputs, resolution)
    assert 'label="mars\\nnot a node of this mesh"' in dot
    assert "refused: unknown-node" in statement(dot, "instance:registry@mars")


def test_held_instances_are_red_with_the_code_they_are_held_by():
    """The hook for held instances: an instance → code mapping, passed in."""
    inputs, resolution = load("refusals/ambiguous-provider")
    plain = dot_of(inputs, resolution)
    dot = dot_of(inputs, resolution, held={"umami@a": "held"})
    umami = statement(dot, "instance:umami@a")
    assert 'label="umami@a\\nheld: held, ambiguous-provider"' in umami
    assert "bold" in umami and 'color="#c00000"' in umami
    assert "0 held" in plain and "1 held" in dot and dot != plain


def test_floors_allows_and_exposures_are_on_their_node():
    inputs, resolution = load("homelab")
    instances = inputs.mesh.instances
    jellyfin = attrs.evolve(instances["jellyfin@lab"], expose=pmap({"http": resolver.Exposure(
        to=pvector(["203.0.113.0/24"]), reason="for the family")}))
    mesh = attrs.evolve(inputs.mesh, floors=pvector([Floor(9100, "tcp", "mesh", "node metrics")]),
                        instances=instances.set("jellyfin@lab", jellyfin))
    resolution = resolver.resolve(inputs.catalogue, mesh, inputs.ledger, now=NOW)
    port = next(a.port for a in resolution.declarations["lab"].firewall.expose)
    dot = render_dot(mesh_picture(resolution, mesh, node_order=("home", "lab")))
    firewall = statement(dot, "firewall:lab")
    assert "floor 2222/tcp from anywhere (ssh)" in firewall
    assert "floor 9100/tcp from the mesh's nodes (node metrics)" in firewall
    assert "allow 20007/tcp from 10.44.0.10 (postgres@lab/postgres for umami@home)" in firewall
    assert f"expose {port}/tcp from 203.0.113.0/24 (" in firewall, firewall
    assert "for the family" in firewall
    home = statement(dot, "firewall:home")
    assert "floor 20005/tcp from the mesh's nodes (broker (enrolment))" in home
    # home's own exposures (the ingress and its name server) only, never lab's
    assert "expose 443/tcp from 192.168.1.0/24 (caddy@home/https exposed" in home
    assert "expose 53/udp from 192.168.1.0/24 (dnsmasq@home/dns exposed" in home
    assert "203.0.113.0/24" not in home and "for the family" not in home


def issued(inputs, resolution):
    """The ledger with every requested credential issued (values are stand-ins: the picture
    reads generations, never values)."""
    credentials = dict(resolution.ledger.credentials)
    for request in resolution.requests:
        if request.kind == "credential":
            credentials[request.id] = first_generation({n: "sealed" for n in request.holders},
                                                       slot=request.slot)
    return attrs.evolve(resolution.ledger, credentials=pmap(credentials))


def test_pending_credentials_and_rotations_are_marked_where_they_belong():
    inputs, resolution = load("homelab")
    dot = dot_of(inputs, resolution)
    assert "credential pending" in statement(dot, "binding:umami@home/db")
    assert "admin: credential pending" in statement(dot, "instance:keycloak@home")
    assert "certificate to issue" in statement(dot, "node:home")

    ledger = issued(inputs, resolution)
    settled = resolver.resolve(inputs.catalogue, inputs.mesh, ledger, now=NOW)
    calm = [line for line in dot_of(inputs, settled).splitlines() if "id=" in line]
    assert not [line for line in calm if "credential pending" in line or "rotating" in line]

    db = "postgres-database/postgres@lab/umami@home"
    admin = "secret/keycloak@home/admin"
    rotated = ledger.credentials.set(db, begin_rotation(db, ledger.credentials[db], {"home": "x"}))
    rotated = rotated.set(admin, begin_rotation(admin, rotated[admin], {"home": "y"}))
    moving = resolver.resolve(inputs.catalogue, inputs.mesh,
                              attrs.evolve(ledger, credentials=rotated), now=NOW)
    dot = dot_of(inputs, moving)
    edge = statement(dot, "binding:umami@home/db")
    assert "rotating: generation 2 pending" in edge
    assert "waiting for the provider to report it in force" in edge  # in_progress, as tooltip
    assert "admin: rotating: generation 1 retiring" in statement(dot, "instance:keycloak@home")
    assert dot.count("rotating: generation") == 2


def edge_id(b) -> str:
    """The statement id of binding `b`'s edge: a requirement taking every provider has one
    edge per provider."""
    if b.chosen_by == resolver.ChosenBy.EACH:
        return f"binding:{b.consumer}/{b.requirement}/{b.provider}"
    return f"binding:{b.consumer}/{b.requirement}"


def test_a_focused_picture_shows_one_node_and_what_its_bindings_reach():
    inputs, resolution = load("homelab")
    dot = dot_of(inputs, resolution, nodes=["lab"])
    assert "instance:mosquitto@home" not in dot and "firewall:home" not in dot
    keycloak = statement(dot, "instance:keycloak@home")
    assert "dashed" in keycloak and "#a0a0a0" in keycloak
    edges = re.findall(r'id="(binding:[^"]+)"', dot)
    assert sorted(edges) == sorted(edge_id(b) for b in resolution.bindings
                                   if "lab" in (b.consumer_node, b.provider_node))
    assert "nodes lab and what their bindings reach" in dot


def test_the_command_exit_codes_formats_and_refusals():
    code, out = run_cli("graph", FIXTURES / "homelab", "--node", "mars")
    assert code == 2
    assert "--node: no node named 'mars' in the mesh; expected one of home, lab" in out
    code, out = run_cli("graph", FIXTURES / "refusals" / "undeclared-mount")
    assert code == 2 and "module.yaml:27:9" in out and "Traceback" not in out
    code, out = run_cli("graph", FIXTURES / "refusals" / "ambiguous-provider")
    assert code == 1 and out.startswith("// mesh ambiguous-provider")
    code, out = run_cli("graph", FIXTURES / "homelab", "--format", "png")
    assert code == 2 and "png is not for a terminal" in out


# --------------------------------------------------------------------------- real Graphviz


@pytest.fixture(scope="module")
def graphviz_dot():
    if shutil.which("dot") is None:
        pytest.fail("Graphviz's `dot` is missing: scripts/services.sh installs Debian's graphviz")
    return shutil.which("dot")


def svg_elements(svg: bytes):
    """id → (class, texts, link titles) of every node, edge and cluster. Graphviz keeps a run
    of spaces visible by writing no-break spaces after the first: read them as spaces."""
    root = ET.fromstring(svg)
    found = {}
    plain = lambda text: (text or "").replace("\xa0", " ")  # noqa: E731
    for g in root.iter(f"{SVG}g"):
        if g.get("class") in ("node", "edge", "cluster"):
            texts = [plain(t.text) for t in g.iter(f"{SVG}text")]
            titles = [plain(a.get(f"{XLINK}title")) for a in g.iter(f"{SVG}a")]
            found[g.get("id")] = (g.get("class"), texts, titles)
    return found


@pytest.mark.parametrize("name", ["homelab", "anchor", "refusals/ambiguous-provider",
                                  "refusals/unknown-node"])
def test_the_svg_names_every_instance_and_every_binding(graphviz_dot, tmp_path, name):
    out = tmp_path / "picture.svg"
    code, said = run_cli("graph", FIXTURES / name, "--out", out, "--now", NOW)
    assert code in (0, 1) and f"svg written: {out}" in said
    inputs, resolution = load(name)
    elements = svg_elements(out.read_bytes())
    for instance in inputs.mesh.instances:
        kind, texts, _ = elements[f"instance:{instance}"]
        assert kind == "node" and texts[0] == instance
    for b in resolution.bindings:
        kind, texts, titles = elements[edge_id(b)]
        assert kind == "edge"
        what = b.provision or f"module {b.module}"
        if b.chosen_by == resolver.ChosenBy.EACH:  # one edge per provider, one label for all
            assert texts[0] == f"{b.requirement}: every {what}"
        else:
            assert texts[:2] == [f"{b.requirement}: {what}", b.chosen_by]
        assert titles[0].startswith(f"{b.consumer} {b.requirement} -> {b.provider} "
                                    f"({b.chosen_by}): {b.host}:{b.port}")
    for node in inputs.mesh.nodes.values():
        assert any(node.address in " ".join(t) for k, t, _ in elements.values() if k == "cluster")
    for p in resolution.problems:
        assert f"problem:{picture.problem_key(p)}" in elements


def test_names_with_quotes_backslashes_and_other_scripts_survive_real_dot(graphviz_dot):
    """A mesh built in code (no mesh.yaml validation) with names no DOT string may hold raw."""
    weird_node = 'nœud "1" \\ '
    consumer = 'app "x" \\n 東京 \\'
    provider = 'db\\"@' + weird_node
    server = module_named("db", provides=["sql"])
    client = module_named("app", requires=[Require(as_="db", provision="sql")])
    catalogue = resolver.Catalogue(pmap({"db": server, "app": client}), pmap(PROVISIONS))
    mesh = Mesh(mesh='the "weird" mesh \\', nodes=pmap({weird_node: Node(address="10.0.0.1")}),
                instances=pmap({consumer: Instance("app", weird_node),
                                provider: Instance("db", weird_node)}),
                floors=pvector([Floor(9, "udp", "any", 'reason with "quotes" \\ and\nnewline '
                                      '\x01 ünïcode')]))
    resolution = resolver.resolve(catalogue, mesh,  # names validate() refuses, on purpose
                                  resolver.Ledger(pins=pmap(pins_for([server, client]))),
                                  checked=True)
    assert [b.provider for b in resolution.bindings] == [provider]
    dot = mesh_dot(resolution, mesh)
    elements = svg_elements(render(dot, "svg"))
    assert elements[f"instance:{consumer}"][1][0] == consumer
    assert elements[f"instance:{provider}"][1][0] == provider
    kind, texts, titles = elements[f"binding:{consumer}/db"]
    assert kind == "edge" and texts[:2] == ["db: sql", "co-located"]
    assert titles[0].startswith(f"{consumer} db -> {provider} (co-located)")
    cluster = elements[f"node:{weird_node}"]
    assert cluster[0] == "cluster" and cluster[1][0] == f"{weird_node}  10.0.0.1"
    firewall = " ".join(elements[f"firewall:{weird_node}"][1])
    assert 'reason with "quotes" \\ and newline \\x01 ünïcode' in firewall


def test_png_is_written_by_real_dot(graphviz_dot, tmp_path):
    out = tmp_path / "homelab.png"
    code, said = run_cli("graph", FIXTURES / "homelab", "--out", out)
    assert code == 0 and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(tmp_path.glob(".*.tmp")), "written atomically, no temp file left"


# --------------------------------------------------------------------------- the README picture


README_SVG = ROOT / "docs" / "homelab.svg"
README_COMMAND = "mesh graph fixtures/homelab --out docs/homelab.svg"
VERSION = re.compile(rb"<!-- Generated by graphviz version ([^\n]+?)\s*\n")


def test_readme_shows_the_homelab_picture_and_the_command_that_made_it():
    readme = (ROOT / "README.md").read_text()
    assert "](docs/homelab.svg)" in readme and README_COMMAND in readme
    assert README_SVG.exists()


def test_regenerating_the_readme_picture_gives_the_same_file(graphviz_dot, tmp_path):
    """The DOT golden (tests/golden/graph/homelab.dot) is compared strictly; the SVG depends
    on the Graphviz build that lays it out, so it is compared when the installed `dot` is the
    version that made the committed file."""
    out = tmp_path / "homelab.svg"
    run = subprocess.run([sys.executable, "-m", "executors.cli", *README_COMMAND.split()[1:-1],
                          str(out)], cwd=ROOT, capture_output=True,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, run.stderr.decode()
    made, committed = VERSION.search(out.read_bytes()), VERSION.search(README_SVG.read_bytes())
    assert made and committed
    if made.group(1) != committed.group(1):
        pytest.skip(f"installed Graphviz {made.group(1).decode()} differs from "
                    f"{committed.group(1).decode()}, which made docs/homelab.svg")
    assert out.read_bytes() == README_SVG.read_bytes(), (
        f"docs/homelab.svg is stale: run `{README_COMMAND}` from the repository root")
