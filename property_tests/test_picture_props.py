"""The picture `mesh graph` draws, read back from its DOT text and compared with the resolution.

What the README promises, checked statement by statement on whole meshes (dot_reader.py reads
the text as Graphviz would; nothing here calls the renderer's helpers):
- each node of the mesh is a box labelled with its name, address and a certificate still to
  issue; a node only instances name is a red dashed box saying it is not a node of the mesh;
- each node's firewall note lists its floors and the allows its bindings open, sources read
  "anywhere", "the mesh's nodes" or the addresses;
- each instance is drawn once, in its node's box, with its module when its name does not say
  it, red and dashed with the codes that refuse it, orange with its own secrets still to issue;
- each binding is one arrow from consumer to provider with the requirement, the provision and
  `chosen_by`, dashed blue across nodes and solid grey within one, its tooltip the address
  and login the consumer is told, orange marks for its credential pending or rotating;
- each problem is one note beside its instance (or in the box of the mesh as a whole) with
  its code, severity, message and place, coloured by severity, linked to its instance;
- the title counts nodes, instances (refused), bindings, refusals and other problems;
- a picture of some nodes keeps their instances, the bindings that touch them and, greyed,
  the instances at the far end; Graphviz reads every picture without a warning.
"""

from __future__ import annotations

import html
import re
import shutil
import subprocess

import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from resolver import resolve
from resolver.picture import mesh_dot, problem_key, DOT_LEGEND as LEGEND

from .dot_reader import label_lines, read
from .strategies_meshes import meshes

RED, ORANGE, GREY = "#c00000", "#b35900", "#606060"
# Graphviz reads attributes it does not know without a word and draws nothing of them: every
# attribute written must be one of its own (graphviz.org/doc/info/attrs.html), every colour
# an #rrggbb, every style a combination of its styles
KNOWN = {"charset", "rankdir", "newrank", "nodesep", "ranksep", "fontname", "fontsize",
         "labelloc", "labeljust", "label", "shape", "style", "fillcolor", "id", "color",
         "fontcolor", "tooltip", "penwidth", "arrowhead"}
STYLES = {"rounded", "filled", "dashed", "dotted", "solid", "bold"}
COLOUR = re.compile(r"^#[0-9a-f]{6}$|^(white|black)$")


def well_formed(attributes: dict) -> None:
    assert set(attributes) <= KNOWN, set(attributes) - KNOWN
    for key in ("color", "fontcolor", "fillcolor"):
        if key in attributes:
            assert COLOUR.match(attributes[key]), attributes[key]
    if "style" in attributes:
        assert set(attributes["style"].split(",")) <= STYLES, attributes["style"]
    if "shape" in attributes:
        assert attributes["shape"] in ("box", "note")
    if "penwidth" in attributes:
        assert float(attributes["penwidth"]) >= 1
SEVERITY = {"error": RED, "warning": ORANGE, "info": GREY}


def plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def refusing_codes(resolution) -> dict:
    codes = {}
    for p in resolution.problems:
        if p.severity == "error":
            for name in p.blocks:
                codes.setdefault(name, [])
                if p.code not in codes[name]:
                    codes[name].append(p.code)
    return codes


def requested(resolution) -> dict:
    """credential id → the short marks of its requests (to issue, or to reseal)."""
    found = {}
    for r in resolution.requests:
        if r.kind == "credential":
            cred = resolution.ledger.credentials.get(r.id)
            issued = cred is not None and cred.active is not None
            found.setdefault(r.id, []).append("credential to reseal" if issued
                                              else "credential pending")
    return found


def rotating(resolution) -> dict:
    found = {}
    for cred_id, cred in resolution.ledger.credentials.items():
        if cred.pending is not None:
            found[cred_id] = f"rotating: generation {cred.pending.generation} pending"
        elif cred.retiring is not None:
            found[cred_id] = f"rotating: generation {cred.retiring.generation} retiring"
    return found


def sources(opening, everyone) -> str:
    if not opening.sources:
        return "anywhere"
    if everyone and list(opening.sources) == list(everyone):
        return "the mesh's nodes"
    return ", ".join(opening.sources)


@given(meshes())
def test_the_picture_draws_what_the_resolution_says(world):
    mesh = world.mesh
    resolution = resolve(world.catalogue, mesh, world.ledger)
    text = mesh_dot(resolution, mesh)
    note(text)
    dot = read(text)
    assert dot.name == f"mesh:{mesh.mesh}"
    for attributes in [dot.graph, *dot.clusters.values(), *dot.defaults.values(),
                       *(s.attributes for s in dot.statements)]:
        well_formed(attributes)
    assert dot.defaults["node"]["shape"] == "box" and "label" not in dot.defaults["edge"]
    refused = refusing_codes(resolution)
    asked, turning = requested(resolution), rotating(resolution)
    errors = [p for p in resolution.problems if p.severity == "error"]

    # the title
    counts = (f"{plural(len(mesh.nodes), 'node')}, {plural(len(mesh.instances), 'instance')} "
              f"({len([n for n in mesh.instances if n in refused])} refused, 0 held), "
              f"{plural(len(resolution.bindings), 'binding')}, "
              f"{plural(len(errors), 'refusal')}, "
              f"{plural(len(resolution.problems) - len(errors), 'other problem')}")
    assert label_lines(dot.graph["label"]) == [f"mesh {mesh.mesh}", counts, LEGEND]

    # nodes, in name order, then the nodes instances name that the mesh does not list
    unknown = list(dict.fromkeys(mesh.instances[n].node for n in sorted(mesh.instances)
                                 if mesh.instances[n].node not in mesh.nodes))
    boxes = [f"cluster node:{n}" for n in sorted(mesh.nodes) + unknown]
    assert [c for c in dot.clusters if c != "cluster mesh"] == boxes
    certificates = {r.id: r.reason for r in resolution.requests if r.kind == "certificate"}
    nodes = dot.nodes()
    for name, described in mesh.nodes.items():
        box = dot.clusters[f"cluster node:{name}"]
        marks = [f"certificate to issue ({certificates[name]})"] if name in certificates else []
        assert box["id"] == f"node:{name}"
        assert label_lines(box["label"]) == [f"{name}  {described.address}", *marks]
        assert box["fontcolor"] == (ORANGE if marks else "black")
        intent = resolution.declarations[name].firewall
        everyone = list(intent.mesh_sources)
        wanted = ["firewall"] + [
            f"floor {f.port}/{f.protocol} from {sources(f, everyone)}"
            + (f" ({f.reason})" if f.reason else "") for f in intent.floors] + [
            f"allow {a.port}/{a.protocol} from {sources(a, everyone)}"
            + (f" ({a.reason})" if a.reason else "") for a in intent.allow]
        firewall = nodes[f"firewall:{name}"]
        assert firewall.cluster == f"cluster node:{name}"
        assert label_lines(firewall.attributes["label"]) == wanted
    for name in unknown:
        box = dot.clusters[f"cluster node:{name}"]
        assert label_lines(box["label"]) == [name, "not a node of this mesh"]
        assert (box["style"], box["color"]) == ("dashed,rounded", RED)

    # instances
    drawn = [s for s in dot.statements if s.kind == "node" and s.ids[0].startswith("instance:")]
    assert [s.ids[0] for s in drawn] == [
        f"instance:{n}" for node in sorted(mesh.nodes) + unknown
        for n in sorted(mesh.instances) if mesh.instances[n].node == node]
    for name, inst in mesh.instances.items():
        statement = nodes[f"instance:{name}"]
        assert statement.cluster == f"cluster node:{inst.node}"
        label = [name]
        if not name.startswith(inst.module + "@"):
            label.append(f"module {inst.module}")
        if name in refused:
            label.append(f"refused: {', '.join(refused[name])}")
        marks = []
        for cred in sorted(set(asked) | set(turning)):
            if cred.startswith(f"secret/{name}/") and "/" not in cred[len(f"secret/{name}/"):]:
                secret = cred[len(f"secret/{name}/"):]
                marks += [f"{secret}: {short}" for short in asked.get(cred, ())]
                marks += [f"{secret}: {turning[cred]}"] if cred in turning else []
        assert label_lines(statement.attributes["label"]) == label + marks
        if name in refused:
            assert statement.attributes["style"] == "rounded,filled,dashed"
            assert statement.attributes["color"] == RED
        elif marks:
            assert statement.attributes["color"] == ORANGE
        else:
            assert "color" not in statement.attributes

    # bindings
    arrows = [e for e in dot.edges() if e.attributes.get("id", "").startswith("binding:")]
    assert len(arrows) == len(resolution.bindings)
    by_id = {e.attributes["id"]: e for e in arrows}
    for b in resolution.bindings:
        arrow = by_id[f"binding:{b.consumer}/{b.requirement}"]
        assert arrow.ids == (f"instance:{b.consumer}", f"instance:{b.provider}")
        cross = b.consumer_node != b.provider_node
        assert (arrow.attributes["style"], arrow.attributes["color"]) == (
            ("dashed", "#1f5fbf") if cross else ("solid", "#404040"))
        cred = b.secret.credential if b.secret is not None else None
        marks = list(asked.get(cred, ())) + ([turning[cred]] if cred in turning else [])
        what = b.provision if b.provision is not None else f"module {b.module}"
        assert label_lines(arrow.attributes["label"]) == [f"{b.requirement}: {what}",
                                                          b.chosen_by, *marks]
        tooltip = label_lines(arrow.attributes["tooltip"])
        assert tooltip[0] == (f"{b.consumer} {b.requirement} -> {b.provider} ({b.chosen_by}): "
                              f"{b.host}:{b.port}" + (f", login {b.login}" if b.login else ""))
        assert len(tooltip) == 1 + len(marks)
        if marks:  # orange, and drawn heavier
            assert (arrow.attributes["fontcolor"], arrow.attributes["penwidth"]) == (ORANGE,
                                                                                   "1.6")
        else:
            assert "penwidth" not in arrow.attributes
            assert arrow.attributes.get("fontcolor") == ("#1f5fbf" if cross else None)

    # problems: a note each, beside its instance or in the mesh's own box
    notes = [s for s in dot.statements if s.kind == "node" and s.ids[0].startswith("problem:")]
    assert len(notes) == len(resolution.problems)
    links = [e for e in dot.edges() if e.ids[1].startswith("problem:")]
    for p in resolution.problems:
        key = problem_key(p)
        assert key.startswith(f"{p.code}:{p.instance or 'mesh'}:")
        statement = nodes[f"problem:{key}"]
        assert statement.attributes["id"] == f"problem:{key}"
        home = (f"cluster node:{mesh.instances[p.instance].node}" if p.instance in mesh.instances
                else "cluster mesh")
        assert statement.cluster == home
        label = label_lines(statement.attributes["label"])
        assert label[0] == f"[{p.code}] {p.severity}"
        body = label[1:-1] if p.where else label[1:]
        assert " ".join(body) == " ".join(p.message.split())
        assert all(len(line) <= 64 for line in body)
        if p.where:
            assert label[-1] == p.where
        assert statement.attributes["color"] == SEVERITY[p.severity]
        linked = [e for e in links if e.ids[1] == f"problem:{key}"]
        if p.instance in mesh.instances:
            assert [e.ids[0] for e in linked] == [f"instance:{p.instance}"]
            assert linked[0].attributes["style"] == "dotted"
            assert linked[0].attributes["color"] == SEVERITY[p.severity]
        else:
            assert linked == []
    assert len({problem_key(p) for p in resolution.problems}) == len(resolution.problems)

    # what concerns nothing drawn is a note of the mesh
    shown = {b.secret.credential for b in resolution.bindings if b.secret is not None}
    shown |= {c for c in set(asked) | set(turning)
              if c.startswith("secret/") and c.split("/")[1] in mesh.instances}
    pending = [r for r in resolution.requests
               if (r.kind == "credential" and r.id not in shown)
               or (r.kind == "certificate" and r.id not in mesh.nodes)
               or r.kind not in ("credential", "certificate")]  # the registry's TLS
    pending_rotations = [c for c in turning if c not in shown]
    if pending or pending_rotations:
        lines = label_lines(nodes["notes"].attributes["label"])
        assert lines[0] == "pending, not shown elsewhere:"
        assert len(lines) == 1 + len(pending) + len(pending_rotations)
    else:
        assert "notes" not in nodes
    assert ("cluster mesh" in dot.clusters) == bool(
        pending or pending_rotations or any(p.instance not in mesh.instances
                                            for p in resolution.problems))


@given(meshes(), st.data())
def test_a_picture_of_some_nodes_keeps_what_touches_them(world, data):
    mesh = world.mesh
    resolution = resolve(world.catalogue, mesh, world.ledger)
    chosen = data.draw(st.lists(st.sampled_from(sorted(mesh.nodes)), min_size=1, unique=True))
    dot = read(mesh_dot(resolution, mesh, nodes=chosen))
    inside = {n for n, i in mesh.instances.items() if i.node in chosen}
    touching = [b for b in resolution.bindings if b.consumer in inside or b.provider in inside]
    far = {b.consumer for b in touching} | {b.provider for b in touching}
    nodes = dot.nodes()
    drawn = {s.ids[0][len("instance:"):] for s in nodes.values()
             if s.ids[0].startswith("instance:")}
    assert drawn == inside | far
    for name in far - inside:
        assert nodes[f"instance:{name}"].attributes["style"] == "rounded,dashed"
        assert nodes[f"instance:{name}"].attributes["color"] == "#a0a0a0"
    arrows = {e.attributes["id"] for e in dot.edges() if e.attributes.get("id", "").startswith(
        "binding:")}
    assert arrows == {f"binding:{b.consumer}/{b.requirement}" for b in touching}
    problems = {s.ids[0] for s in nodes.values() if s.ids[0].startswith("problem:")}
    assert problems == {f"problem:{problem_key(p)}" for p in resolution.problems
                        if p.instance in inside or p.instance not in mesh.instances}
    boxes = {c[len("cluster node:"):] for c in dot.clusters if c.startswith("cluster node:")}
    assert boxes == set(chosen) | {mesh.instances[n].node for n in far}
    for name in boxes - set(chosen):
        assert f"firewall:{name}" not in nodes, "a node shown for context has no firewall"
        box = dot.clusters[f"cluster node:{name}"]
        if name in mesh.nodes:  # greyed and dashed, its address still said
            assert (box["style"], box["color"], box["fontcolor"]) == ("dashed,rounded",
                                                                      "#a0a0a0", "#707070")
            assert label_lines(box["label"]) == [f"{name}  {mesh.nodes[name].address}"]
    for attributes in [dot.graph, *dot.clusters.values(), *(s.attributes
                                                          for s in dot.statements)]:
        well_formed(attributes)
    title = label_lines(dot.graph["label"])[0]
    assert title == f"mesh {mesh.mesh} (nodes {', '.join(chosen)} and what their bindings reach)"


@settings(max_examples=min(settings.default.max_examples, 30))  # each runs Graphviz
@given(meshes())
def test_graphviz_reads_every_picture_without_a_warning(world):
    if shutil.which("dot") is None:
        pytest.skip("Graphviz's dot is not installed (scripts/services.sh installs it)")
    resolution = resolve(world.catalogue, world.mesh, world.ledger)
    text = mesh_dot(resolution, world.mesh)
    result = subprocess.run(["dot", "-Tsvg"], input=text.encode(), capture_output=True,
                            timeout=120)
    assert result.returncode == 0 and result.stderr == b"", result.stderr.decode()[-2000:]
    ids = {html.unescape(i) for i in re.findall(r'\bid="([^"]*)"', result.stdout.decode())}
    for b in resolution.bindings:  # the SVG can be searched by name
        assert f"binding:{b.consumer}/{b.requirement}" in ids
    for name in world.mesh.instances:
        assert f"instance:{name}" in ids
