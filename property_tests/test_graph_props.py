"""Properties of the mesh picture's DOT text (resolver/_picture.py, resolver/_dot.py).

- Every binding of a random mesh is exactly one edge statement, from its consumer to its
  provider, labelled with its requirement, provision and how the provider was chosen; every
  problem is exactly one note carrying its code; nothing else carries either kind of id.
  Seen to fail when the picture kept one problem per (code, instance) — the simplification
  that loses an instance's second refusal of the same kind (two ambiguous requirements).
- The text is a function of the mesh and the written order alone: the order of the model's
  maps does not reach it, and statements follow the order given.
- Quoting: any text reads back as written from the DOT string made of it.
"""

from __future__ import annotations

import re
import unicodedata

import attrs
from hypothesis import given, note
from hypothesis import strategies as st
from pyrsistent import pmap

from resolver import resolve
from resolver.picture import mesh_dot, problem_key
from resolver.picture import (binding_id, dot_escape as escape, instance_id, problem_id,
                              dot_quote as quote)
from resolver.picture import EdgeView, ProblemView

from .strategies import worlds

ID = re.compile(r'\bid="((?:[^"\\]|\\.)*)"')


def statement_with(dot: str, element_id: str) -> list[str]:
    needle = "id=" + quote(element_id)
    return [line for line in dot.splitlines() if needle in line]


@given(worlds())
def test_every_binding_and_every_problem_appears_exactly_once(world):
    resolution = resolve(world.catalogue, world.mesh, world.ledger)
    dot = mesh_dot(resolution, world.mesh)
    note(dot)
    for b in resolution.bindings:
        edge = EdgeView(consumer=b.consumer, requirement=b.requirement, provider=b.provider,
                        what="", chosen_by=b.chosen_by, cross=False, target="")
        lines = statement_with(dot, binding_id(edge))
        assert len(lines) == 1, (b, lines)
        line = lines[0].strip()
        assert line.startswith(f"{quote(instance_id(b.consumer))} -> "
                               f"{quote(instance_id(b.provider))} ")
        what = b.provision if b.provision is not None else f"module {b.module}"
        assert f'label="{escape(f"{b.requirement}: {what}")}\\n{escape(b.chosen_by)}' in line
    for p in resolution.problems:
        view = ProblemView(key=problem_key(p), code=p.code, severity=p.severity,
                           message=p.message, where=p.where, instance=p.instance)
        lines = statement_with(dot, problem_id(view))
        assert len(lines) == 1, (p, lines)
        assert f"[{escape(p.code)}] {p.severity}" in lines[0]
    ids = ID.findall(dot)
    assert sum(1 for i in ids if i.startswith("binding:")) == len(resolution.bindings)
    assert sum(1 for i in ids if i.startswith("problem:")) == len(resolution.problems)
    assert len(ids) == len(set(ids)), "an id names one element"


@given(worlds(), st.randoms(use_true_random=False))
def test_text_depends_on_the_written_order_only(world, random):
    resolution = resolve(world.catalogue, world.mesh, world.ledger)
    instances = list(world.mesh.instances)
    nodes = list(world.mesh.nodes)
    random.shuffle(instances)
    random.shuffle(nodes)
    dot = mesh_dot(resolution, world.mesh, node_order=tuple(nodes),
                   instance_order=tuple(instances))
    shuffled = attrs.evolve(world.mesh,
                            instances=pmap(dict(reversed(list(world.mesh.instances.items())))),
                            nodes=pmap(dict(reversed(list(world.mesh.nodes.items())))))
    assert mesh_dot(resolution, shuffled, node_order=tuple(nodes),
                    instance_order=tuple(instances)) == dot
    declared = [line.strip().split(" ", 1)[0] for line in dot.splitlines()
                if line.startswith("    \"instance:")]
    by_node = {n: [quote(instance_id(i)) for i in instances
                   if world.mesh.instances[i].node == n] for n in nodes}
    assert declared == [i for n in nodes for i in by_node[n]]
    clusters = [line for line in dot.splitlines() if line.startswith('  subgraph "cluster node:')]
    assert clusters == [f"  subgraph {quote('cluster node:' + n)} {{" for n in nodes]


def read_back(quoted: str) -> str:
    """What Graphviz makes of a quoted DOT string used as a label: the lexer turns \\" into ",
    then escString turns \\\\ into \\ and \\n into a line break."""
    assert quoted[0] == quoted[-1] == '"'
    body, out, i = quoted[1:-1], [], 0
    while i < len(body):
        ch = body[i]
        if ch == '"':
            raise AssertionError(f"an unescaped quote ends the string early: {quoted!r}")
        if ch == "\\":
            nxt = body[i + 1]
            out.append({"\\": "\\", '"': '"', "n": "\n"}[nxt])
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def shown(ch: str) -> str:
    """How a character reads back: as itself, or (control, format, unassigned, private use,
    line and paragraph separators: nothing an SVG should carry) as its code point."""
    if ch == "\n" or unicodedata.category(ch) not in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"):
        return ch
    return f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}"


@given(st.text())
def test_quote_reads_back_as_written(text):
    assert read_back(quote(text)) == "".join(shown(c) for c in text)
