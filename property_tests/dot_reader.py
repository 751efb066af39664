"""A small reader of the DOT text `mesh graph` writes: statements, clusters and attributes.

It reads what Graphviz would read (quoted strings with `\\"` and `\\\\`, labels whose `\\n` and
`\\l` end lines), never the renderer's own helpers, so a property can compare the picture with
what the mesh says. It knows only the statement shapes the renderer writes, one per line, and
refuses anything else.
"""

from __future__ import annotations

import re
from typing import Optional

import attrs

QUOTED = r'"(?:[^"\\]|\\.)*"'
STATEMENT = re.compile(rf"^(?P<a>{QUOTED})(?: -> (?P<b>{QUOTED}))? (?P<attrs>\[.*\])$")


@attrs.define
class Statement:
    kind: str  # node | edge
    ids: tuple
    attributes: dict
    cluster: Optional[str]  # the innermost subgraph it is written in


@attrs.define
class Dot:
    name: str
    graph: dict = attrs.Factory(dict)  # the top graph's attributes
    clusters: dict = attrs.Factory(dict)  # cluster name → its graph attributes
    parents: dict = attrs.Factory(dict)  # cluster name → enclosing cluster (None: top)
    defaults: dict = attrs.Factory(dict)  # "node" / "edge" → attributes
    statements: list = attrs.Factory(list)

    def nodes(self) -> dict:
        return {s.ids[0]: s for s in self.statements if s.kind == "node"}

    def edges(self) -> list:
        return [s for s in self.statements if s.kind == "edge"]


def unquote(text: str) -> str:
    """A quoted DOT string's text, as the lexer reads it (`\\"` is a quote)."""
    assert text[0] == text[-1] == '"', text
    out, i, body = [], 0, text[1:-1]
    while i < len(body):
        if body[i] == "\\" and i + 1 < len(body) and body[i + 1] == '"':
            out.append('"')
            i += 2
        elif body[i] == "\\" and i + 1 < len(body):
            out.append(body[i:i + 2])  # kept for the label escapes
            i += 2
        else:
            assert body[i] != '"', f"an unescaped quote inside {text!r}"
            out.append(body[i])
            i += 1
    return "".join(out)


def label_lines(value: str) -> list[str]:
    """The lines of a label: `\\n` and `\\l` end a line, `\\\\` is a backslash."""
    lines, current, i = [], [], 0
    while i < len(value):
        if value[i] == "\\" and i + 1 < len(value):
            nxt = value[i + 1]
            if nxt in "nl":
                lines.append("".join(current))
                current = []
            elif nxt == "\\":
                current.append("\\")
            else:
                raise AssertionError(f"an escape Graphviz would read as {nxt!r}: {value!r}")
            i += 2
        else:
            current.append(value[i])
            i += 1
    if current or not lines:
        lines.append("".join(current))
    return lines


def attributes(text: str) -> dict:
    """`[k="v", k=v]` → {k: raw value text, unquoted when quoted}."""
    assert text.startswith("[") and text.endswith("]"), text
    found, body = {}, text[1:-1]
    pattern = re.compile(rf"\s*([A-Za-z_]+)=({QUOTED})\s*(,|$)")
    position = 0
    while position < len(body):
        match = pattern.match(body, position)
        assert match, f"unreadable attributes at {body[position:][:60]!r}"
        assert match.group(1) not in found, f"attribute {match.group(1)} given twice"
        found[match.group(1)] = unquote(match.group(2))
        position = match.end()
    return found


def read(text: str) -> Dot:
    lines = text.splitlines()
    body = [line for line in lines if line.strip() and not line.lstrip().startswith("//")]
    head = re.match(rf"^digraph ({QUOTED}) \{{$", body[0])
    assert head, body[0]
    dot = Dot(unquote(head.group(1)))
    stack: list[Optional[str]] = [None]
    for line in body[1:]:
        s = line.strip()
        sub = re.match(rf"^subgraph ({QUOTED}) \{{$", s)
        if sub:
            name = unquote(sub.group(1))
            assert name not in dot.clusters, f"cluster {name} written twice"
            dot.parents[name] = stack[-1]
            dot.clusters[name] = {}
            stack.append(name)
        elif s == "}":
            stack.pop()
        elif s.startswith("graph ["):
            target = dot.graph if stack[-1] is None else dot.clusters[stack[-1]]
            target.update(attributes(s[len("graph "):]))
        elif s.startswith(("node [", "edge [")):
            dot.defaults[s.split(" ", 1)[0]] = attributes(s.split(" ", 1)[1])
        else:
            match = STATEMENT.match(s)
            assert match, f"a statement of an unknown shape: {s!r}"
            ids = (unquote(match.group("a")),) + ((unquote(match.group("b")),)
                                                 if match.group("b") else ())
            dot.statements.append(Statement("edge" if len(ids) == 2 else "node", ids,
                                            attributes(match.group("attrs")), stack[-1]))
    assert stack == [], "a subgraph or the graph is not closed"
    return dot
