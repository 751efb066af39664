"""The DOT text of a mesh picture (Graphviz's language), byte-stable and safely quoted.

Invariants:
- Pure and deterministic: the same picture gives the same text, byte for byte; nothing in it
  depends on the clock, the Graphviz version or dict order (statements follow the picture's
  order, which follows mesh.yaml).
- Every identifier and every text is a quoted string made by `quote`: a name with quotes,
  backslashes, line breaks or any non-ASCII character reads back as written, and no text can
  end a string, start a statement or be taken as one of Graphviz's `\\N`-style escapes.
- Every statement id has a kind prefix (`instance:`, `binding:`, `problem:`, …), so no name an
  operator writes can collide with another kind of element; the `id` attribute Graphviz
  copies into SVG is the same string, so a rendered picture can be searched by name.
- One binding is one edge statement and one problem one node statement, each carrying its
  `id`; the dotted links from an instance to its problems carry none.
"""

from __future__ import annotations

import textwrap
import unicodedata
from typing import Callable, Iterable, Mapping, Optional, Sequence

from ._resolution import Resolution
from ._model import Mesh
from ._picture import (
    HELD,
    REFUSED,
    EdgeView,
    InstanceView,
    MeshPicture,
    NodeView,
    Opening,
    ProblemView,
    focus,
    mesh_picture,
)

FONT = "Helvetica,Arial,sans-serif"  # SVG viewers pick the first they have; dot measures one
WRAP = 64  # characters per line of a problem's message
SAME_NODE = {"color": "#404040", "style": "solid"}
CROSS_NODE = {"color": "#1f5fbf", "fontcolor": "#1f5fbf", "style": "dashed"}
PENDING_COLOUR = "#b35900"
SEVERITY_COLOURS = {"error": "#c00000", "warning": "#b35900", "info": "#606060"}
#: The legend line every rendered picture ends its label with (the colours and styles said).
LEGEND = ("solid grey: binding on one node · dashed blue: binding across nodes · "
          "red: refused (dashed, not declared) or held (bold, last good declaration runs) · "
          "orange: credential pending or rotating")


def mesh_dot(resolution: Resolution, mesh: Mesh, *, node_order: tuple[str, ...] = (),
             instance_order: tuple[str, ...] = (), held: Optional[Mapping[str, str]] = None,
             nodes: Optional[Sequence[str]] = None) -> str:
    """The DOT text of the whole mesh (or, with `nodes`, of those nodes and what their bindings
    reach). Orders and `held` are as for mesh_picture."""
    if held is None:  # mesh_picture's default: as the declarations list them
        picture = mesh_picture(resolution, mesh, node_order=node_order,
                               instance_order=instance_order)
    else:
        picture = mesh_picture(resolution, mesh, node_order=node_order,
                               instance_order=instance_order, held=held)
    if nodes is not None:
        picture = focus(picture, nodes)
    return render_dot(picture)


# --------------------------------------------------------------------------- quoting


def escape(text: str) -> str:
    """The body of a DOT quoted string whose value (as a label, an id or a tooltip) is `text`.

    DOT strings keep backslashes as written and labels then read `\\n`, `\\l`, `\\N`, … as
    escapes, so a backslash is doubled and a quote escaped. A line break becomes `\\n`; other
    control and format characters (and lone surrogates) are shown as `\\xNN`/`\\uNNNN`, since
    they cannot stand in an SVG file."""
    out = []
    for ch in text:
        if ch == "\\":
            out.append("\\\\")
        elif ch == '"':
            out.append('\\"')
        elif ch == "\n":
            out.append("\\n")
        elif unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"):
            code = ord(ch)
            out.append(f"\\\\x{code:02x}" if code < 0x100 else f"\\\\u{code:04x}")
        else:
            out.append(ch)
    return "".join(out)


def quote(text: str) -> str:
    """`text` as a quoted DOT string."""
    return '"' + escape(text) + '"'


def lines(parts: Iterable[str], *, left: bool = False) -> str:
    """A quoted label of several lines, centred (`\\n`) or left-justified (`\\l`)."""
    parts = list(parts)
    if left:
        return '"' + "".join(escape(p) + "\\l" for p in parts) + '"'
    return '"' + "\\n".join(escape(p) for p in parts) + '"'


def attributes(attrs: Mapping[str, str], raw: Optional[Mapping[str, str]] = None) -> str:
    """`[k=v, …]` with every value quoted, except `raw` ones already written as DOT strings;
    keys in the order given."""
    items = [f"{k}={quote(str(v))}" for k, v in attrs.items()]
    items += [f"{k}={v}" for k, v in (raw or {}).items()]
    return "[" + ", ".join(items) + "]"


def instance_id(name: str) -> str:
    """The DOT id of an instance's box."""
    return f"instance:{name}"


def binding_id(edge: EdgeView) -> str:
    """The DOT id of a binding's edge."""
    return f"binding:{edge.key}"


def problem_id(problem: ProblemView) -> str:
    """The DOT id of a problem's note."""
    return f"problem:{problem.key}"


def cluster_id(node: str) -> str:
    return f"cluster node:{node}"  # Graphviz draws a subgraph as a box when its name starts so


# --------------------------------------------------------------------------- rendering


def render_dot(picture: MeshPicture) -> str:
    """The DOT text of a MeshPicture: nodes as clusters, instances as boxes, bindings as
    edges from consumer to provider; the same picture gives the same text."""
    out: list[str] = []
    w = out.append
    w(f"// mesh {escape(picture.mesh)}: `mesh graph` output. Nodes are clusters, instances")
    w("// boxes, bindings edges from consumer to provider. The same mesh gives the same text.")
    w(f"digraph {quote('mesh:' + picture.mesh)} {{")
    w("  graph " + attributes({"charset": "UTF-8", "rankdir": "TB", "newrank": "true",
                              "nodesep": "0.25", "ranksep": "0.9", "fontname": FONT,
                              "fontsize": "12", "labelloc": "t", "labeljust": "l"},
                             {"label": lines(_title(picture), left=True)}))
    w("  node " + attributes({"shape": "box", "style": "rounded,filled", "fillcolor": "white",
                             "fontname": FONT, "fontsize": "11"}))
    w("  edge " + attributes({"fontname": FONT, "fontsize": "9"}))
    by_node: dict[str, list[InstanceView]] = {}
    for instance in picture.instances:
        by_node.setdefault(instance.node, []).append(instance)
    drawn = {i.name for i in picture.instances}
    node_of = {i.name: i.node for i in picture.instances}
    problems_at: dict[str, list[ProblemView]] = {}
    loose: list[ProblemView] = []
    for problem in picture.problems:
        if problem.instance in drawn:
            problems_at.setdefault(node_of[problem.instance], []).append(problem)
        else:
            loose.append(problem)
    for node in picture.nodes:
        _cluster(w, node, by_node.get(node.name, ()), problems_at.get(node.name, ()))
    for edge in picture.edges:
        _edge(w, edge)
    for problem in picture.problems:
        if problem.instance in drawn:
            w(f"  {quote(instance_id(problem.instance))} -> {quote(problem_id(problem))} "
              + attributes({"style": "dotted", "arrowhead": "none",
                            "color": SEVERITY_COLOURS.get(problem.severity, "#606060")}))
    if loose or picture.notes:
        w(f"  subgraph {quote('cluster mesh')} {{")
        w("    graph " + attributes({"id": "mesh", "style": "dashed,rounded", "color": "#a0a0a0"},
                                    {"label": lines(["the mesh as a whole"])}))
        for problem in loose:
            _problem(w, problem, "    ")
        if picture.notes:
            w("    " + quote("notes") + " " + attributes(
                {"id": "notes", "shape": "note", "style": "filled", "fillcolor": "#fff4e5",
                 "color": PENDING_COLOUR, "fontsize": "9"},
                {"label": lines(["pending, not shown elsewhere:", *picture.notes], left=True)}))
        w("  }")
    w("}")
    return "\n".join(out) + "\n"


def _title(picture: MeshPicture) -> list[str]:
    shown = [i for i in picture.instances if not i.context]
    refused = sum(1 for i in shown if i.state == REFUSED)
    held = sum(1 for i in shown if i.state == HELD)
    errors = sum(1 for p in picture.problems if p.severity == "error")
    head = f"mesh {picture.mesh}"
    if picture.focus:
        head += f" (nodes {', '.join(picture.focus)} and what their bindings reach)"
    counts = (f"{_count(sum(1 for n in picture.nodes if not n.context and n.address), 'node')}, "
              f"{_count(len(shown), 'instance')} ({refused} refused, {held} held), "
              f"{_count(len(picture.edges), 'binding')}, {_count(errors, 'refusal')}, "
              f"{_count(len(picture.problems) - errors, 'other problem')}")
    return [head, counts, LEGEND]


def _count(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _cluster(w: Callable[[str], None], node: NodeView, instances: Sequence[InstanceView],
             problems: Sequence[ProblemView]) -> None:
    w(f"  subgraph {quote(cluster_id(node.name))} {{")
    if node.address is None:
        title = [node.name, "not a node of this mesh"]
        style = {"style": "dashed,rounded", "color": SEVERITY_COLOURS["error"],
                 "fontcolor": SEVERITY_COLOURS["error"]}
    elif node.context:
        title = [f"{node.name}  {node.address}"]
        style = {"style": "dashed,rounded", "color": "#a0a0a0", "fontcolor": "#707070"}
    else:
        title = [f"{node.name}  {node.address}", *node.marks]
        style = {"style": "rounded", "color": "#707070",
                 "fontcolor": PENDING_COLOUR if node.marks else "black"}
    w("    graph " + attributes({"id": f"node:{node.name}", "labeljust": "c", **style},
                                {"label": lines(title)}))
    firewall = _firewall_lines(node)
    if firewall:
        w(f"    {quote('firewall:' + node.name)} " + attributes(
            {"id": f"firewall:{node.name}", "shape": "note", "style": "filled",
             "fillcolor": "#f2f2f2", "color": "#909090", "fontsize": "9"},
            {"label": lines(firewall, left=True)}))
    for instance in instances:
        _instance(w, instance)
    for problem in problems:
        _problem(w, problem, "    ")
    w("  }")


def _firewall_lines(node: NodeView) -> list[str]:
    if node.context or node.address is None:
        return []
    found = []
    for label, openings in (("floor", node.floors), ("expose", node.exposures),
                            ("allow", node.allows)):
        for o in openings:
            found.append(f"{label} {o.port}/{o.protocol} from {_sources(o, node)}"
                         + (f" ({o.reason})" if o.reason else ""))
    return ["firewall"] + found if found else []


def _sources(opening: Opening, node: NodeView) -> str:
    if not opening.sources:
        return "anywhere"
    if node.mesh_sources and tuple(opening.sources) == tuple(node.mesh_sources):
        return "the mesh's nodes"
    return ", ".join(opening.sources)


def _instance(w: Callable[[str], None], instance: InstanceView) -> None:
    label = [instance.name]
    if instance.module and not instance.name.startswith(instance.module + "@"):
        label.append(f"module {instance.module}")
    if instance.url:
        label.append(instance.url)
    attrs_ = {"id": instance_id(instance.name)}
    if instance.state == HELD:
        label.append(f"held: {', '.join(instance.codes)}")
        attrs_.update({"color": SEVERITY_COLOURS["error"], "fontcolor": SEVERITY_COLOURS["error"],
                       "fillcolor": "#fde8e8", "style": "rounded,filled,bold", "penwidth": "2"})
    elif instance.state == REFUSED:
        label.append(f"refused: {', '.join(instance.codes)}")
        attrs_.update({"color": SEVERITY_COLOURS["error"], "fontcolor": SEVERITY_COLOURS["error"],
                       "fillcolor": "#fde8e8", "style": "rounded,filled,dashed"})
    elif instance.marks:
        attrs_.update({"color": PENDING_COLOUR})
    if instance.context:
        attrs_.update({"style": "rounded,dashed", "color": "#a0a0a0", "fontcolor": "#707070"})
    label.extend(instance.lists)
    label.extend(instance.marks)
    w(f"    {quote(instance_id(instance.name))} "
      + attributes(attrs_, {"label": lines(label)}))


def _edge(w: Callable[[str], None], edge: EdgeView) -> None:
    label = [f"{edge.requirement}: {edge.what}" + (" (each)" if edge.each else ""),
             edge.chosen_by, *edge.marks]
    if edge.each:  # every provider of the requirement gets its edge: the rule is said once
        label = [f"{edge.requirement}: every {edge.what}", *edge.marks]
    tooltip = [f"{edge.consumer} {edge.requirement} -> {edge.provider} ({edge.chosen_by}): "
               f"{edge.target}" + (f", login {edge.login}" if edge.login else ""),
               *edge.details]
    attrs_ = {"id": binding_id(edge), **(CROSS_NODE if edge.cross else SAME_NODE)}
    if edge.marks:
        attrs_.update({"fontcolor": PENDING_COLOUR, "penwidth": "1.6"})
    w(f"  {quote(instance_id(edge.consumer))} -> {quote(instance_id(edge.provider))} "
      + attributes(attrs_, {"label": lines(label), "tooltip": lines(tooltip)}))


def _problem(w: Callable[[str], None], problem: ProblemView, indent: str) -> None:
    colour = SEVERITY_COLOURS.get(problem.severity, "#606060")
    body = textwrap.wrap(problem.message, WRAP, break_on_hyphens=False) or [""]
    label = [f"[{problem.code}] {problem.severity}", *body]
    if problem.where:
        label.append(problem.where)
    w(f"{indent}{quote(problem_id(problem))} " + attributes(
        {"id": problem_id(problem), "shape": "note", "style": "filled", "fillcolor": "#fff8f8"
         if problem.severity == "error" else "#fffaf0", "color": colour, "fontcolor": colour,
         "fontsize": "9"},
        {"label": lines(label, left=True)}))
