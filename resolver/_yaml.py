"""Reading one YAML document into plain data and positions, within stated limits.

Invariants:
- Pure: bytes or text and a file name in; (plain data, position tree) out, or InputError with
  the fault located at the offending byte, node or alias. Nothing here reads a file.
- Bounded: every limit (LIMITS, named in docs/schema.md) is checked while the parser's events
  arrive, before the node past it is built; the parser is driven lazily, so a document past a
  limit is never parsed further. Nothing here recurses on the document's shape. A document's
  size and value count are bounded by its kind (Limits: MANIFEST_LIMITS for a module or
  provisions.yaml, MESH_LIMITS for mesh.yaml, the ledger and a node's declared record).
- One outcome whichever parser runs: plain ASCII text without directives, tabs or control
  characters is read from ruamel's C parser's events (libyaml, ~20x faster) in one loop
  (_read_plain) when it is installed, for the common document: no anchor, alias, tag, merge
  key, empty value (libyaml marks some elsewhere), duplicate key or second document,
  every limit kept. Any other document, and any the C parser refuses, is read by the pure
  parser and the builder, so every fault reads exactly as they report it
  (property_tests/test_canonical_json_props.py holds the two paths to each other).
- Aliases are counted, not trusted: each alias adds every node its anchor holds (aliases
  inside it included) to the document's alias count, refused past MAX_ALIAS_NODES at the
  alias, before anything is expanded or structured. An alias of an unfinished anchor (a
  recursive structure) is refused.
- Plain values only (YAML 1.2 core schema, _scalars): strings, integers, floats, booleans,
  null, lists and mappings, and `<<` merges. Dates stay the text written; other tags are
  refused.
- The data is plain dict / list / str / int / float / bool / None; an aliased value is the
  same object at each place it appears (never copied here, so never expanded here).
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Optional, Union

import attrs
from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.events import (
    AliasEvent,
    DocumentStartEvent,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
)
import ruamel.yaml.main

from ._errors import Fault, InputError, MeshError
from ._scalars import CORE, CORE_TAGS, KINDS, MERGE, MERGE_TEXT, convert, plain_kind, shown_tag

#: The largest module manifest or provisions.yaml read, in bytes (2 MiB).
MANIFEST_DOCUMENT_BYTES = 2 * 1024 * 1024
MANIFEST_NODES = 50_000  # values (scalars, lists, mappings) written in one manifest
#: The largest mesh.yaml, ledger or node's declared record read, in bytes (32 MiB: the ledger
#: of 20,000 instances with every credential issued is about half of it).
MESH_DOCUMENT_BYTES = 32 * 1024 * 1024
MESH_NODES = 1_000_000  # values in one of them (a 10,000-instance mesh.yaml holds ~75,000)
#: The most bytes any document may hold: what a reader needs to read of a file (+ 1).
MAX_DOCUMENT_BYTES = MESH_DOCUMENT_BYTES
MAX_DEPTH = 32  # nested lists and mappings (the schemas need fewer than 8)
MAX_ALIAS_NODES = 10_000  # nodes that aliases would produce, over the whole document
MAX_STRING = 65_536  # characters in one string (a key or a value)
MAX_NUMBER = 32  # characters of one number as written

#: Every limit of a document, by name (docs/schema.md names them).
LIMITS = {
    "document size": MANIFEST_DOCUMENT_BYTES,
    "values per document": MANIFEST_NODES,
    "mesh and ledger document size": MESH_DOCUMENT_BYTES,
    "mesh and ledger values per document": MESH_NODES,
    "nesting depth": MAX_DEPTH,
    "nodes produced by aliases": MAX_ALIAS_NODES,
    "string length": MAX_STRING,
    "number length": MAX_NUMBER,
}



@attrs.frozen
class Limits:
    """The bounds of one kind of document that grow with the mesh: bytes and values."""

    document_bytes: int
    nodes: int


#: A module manifest or provisions.yaml (and any document read without a kind).
MANIFEST_LIMITS = Limits(MANIFEST_DOCUMENT_BYTES, MANIFEST_NODES)
#: mesh.yaml, the ledger and a node's declared record: they grow with the mesh.
MESH_LIMITS = Limits(MESH_DOCUMENT_BYTES, MESH_NODES)

# A position tree: the root is (line, col, child); a mapping's child is a dict
# key -> (key line, key col, value line, value col, child); a list's child is a list of
# (line, col, child); a scalar's child is None. Lines and columns are 1-based.
Child = Union[dict[Any, Any], list[Any], None]
#: A node of the position tree: (line, col, child).
Positions = tuple[int, int, Child]
#: What an anchor holds: (data, child, line, col, size, height).
_Held = tuple[Any, Child, int, int, int, int]


def _plural(n: int) -> str:
    return f"{n:,}"


def _describe_kind(value: Any) -> str:
    return "a mapping" if isinstance(value, dict) else "a list"


# --------------------------------------------------------------------------- bytes → text


def _byte_position(data: bytes, offset: int) -> tuple[int, int]:
    """1-based (line, col) of a byte offset; the column counts characters."""
    line_start = data.rfind(b"\n", 0, offset) + 1
    col = len(data[line_start:offset].decode("utf-8", "replace")) + 1
    return data.count(b"\n", 0, offset) + 1, col


def decode_document(data: Union[bytes, str], file: str,
                    limits: Limits = MANIFEST_LIMITS) -> str:
    """The document's text, refusing one past its size limit or not UTF-8, at the byte."""
    most = limits.document_bytes
    if isinstance(data, str):
        if len(data) * 4 <= most:
            return data
        raw = data.encode("utf-8", "surrogatepass")
    else:
        raw = bytes(data)
    if len(raw) > most:
        line, col = _byte_position(raw, most)
        raise InputError([Fault(
            file, line, col, f"the document goes on past {_plural(most)} bytes here",
            f"at most {_plural(most)} bytes ({most // (1024 * 1024)} MiB) per document")])
    if isinstance(data, str):
        return data
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line, col = _byte_position(raw, exc.start)
        hint = " (it looks like UTF-16: save it as UTF-8)" if raw[:2] in (b"\xff\xfe", b"\xfe\xff") \
            else ""
        raise InputError([Fault(file, line, col, f"byte 0x{raw[exc.start]:02x} is not UTF-8 "
                                f"({exc.reason}){hint}", "UTF-8 text")]) from None


# --------------------------------------------------------------------------- text → events → data


class _Refusal(MeshError):
    """A fault that ends reading the document (a limit, a structure that cannot be read)."""

    def __init__(self, line: int, col: int, message: str, expected: str) -> None:
        super().__init__(message)
        self.line, self.col, self.message, self.expected = line, col, message, expected


def _at(mark: Any) -> tuple[int, int]:
    return mark.line + 1, mark.column + 1


class _Frame:
    """A mapping or list being built."""

    __slots__ = ("value", "child", "line", "col", "anchor", "size", "height", "key", "merges")

    def __init__(self, value: Any, child: Any, line: int, col: int,
                 anchor: Optional[str]) -> None:
        self.value, self.child, self.line, self.col, self.anchor = value, child, line, col, anchor
        self.size, self.height = 1, 1
        self.key: Optional[tuple[Any, int, int, bool]] = None  # a mapping's pending key: (key, line, col, keep)
        self.merges: list[tuple[dict[Any, Any], Any]] = []


class _Builder:
    def __init__(self, file: str, limits: Limits = MANIFEST_LIMITS) -> None:
        self.file = file
        self.max_nodes = limits.nodes
        self.stack: list[_Frame] = []
        self.anchors: dict[str, Optional[_Held]] = {}  # None while the anchored node is open
        self.root: Optional[tuple[Any, Positions]] = None
        self.nodes = 0
        self.aliased = 0
        self.faults: list[Fault] = []  # faults that do not end reading (duplicate keys)

    # ---------------------------------------------------------------- events

    def scalar(self, event: Any) -> None:
        line, col = _at(event.start_mark)
        self._count(line, col)
        value = event.value
        if len(value) > MAX_STRING:
            raise _Refusal(line, col, f"a string of {_plural(len(value))} characters",
                           f"at most {_plural(MAX_STRING)} characters")
        data = self._construct(self._tag(event, line, col), event, line, col)
        self._anchor_open(event.anchor)
        self._done(data, None, line, col, 1, 0, event.anchor)

    def start(self, event: Any, mapping: bool) -> None:
        line, col = _at(event.start_mark)
        self._count(line, col)
        top = self.stack[-1] if self.stack else None
        if top is not None and isinstance(top.value, dict) and top.key is None:
            raise _Refusal(line, col, f"a mapping key that is {'a mapping' if mapping else 'a list'}",
                           "a plain key such as a name")
        if len(self.stack) + 1 > MAX_DEPTH:
            raise _Refusal(line, col, f"nesting deeper than {MAX_DEPTH} levels",
                           f"at most {MAX_DEPTH} nested mappings and lists")
        tag = self._tag(event, line, col)
        wanted = CORE + ("map" if mapping else "seq")
        if tag is not None and tag != wanted:
            raise _Refusal(line, col, f"tag {shown_tag(tag)} on "
                           f"{'a mapping' if mapping else 'a list'}",
                           "no tag (plain YAML values)")
        self._anchor_open(event.anchor)
        self.stack.append(_Frame({} if mapping else [], {} if mapping else [], line, col,
                                 event.anchor))

    def end(self) -> None:
        frame = self.stack.pop()
        if frame.merges:
            self._merge(frame)
        self._done(frame.value, frame.child, frame.line, frame.col, frame.size, frame.height,
                   frame.anchor)

    def alias(self, event: Any) -> None:
        line, col = _at(event.start_mark)
        name = event.anchor
        if name not in self.anchors:
            raise _Refusal(line, col, f"alias *{name} names no anchor before it",
                           f"an anchor &{name} defined earlier in the document")
        held = self.anchors[name]
        if held is None:
            raise _Refusal(line, col, f"alias *{name} refers to a node that contains it",
                           "an alias of a complete node (recursive structures are not read)")
        data, child, a_line, a_col, size, height = held
        self.aliased += size
        if self.aliased > MAX_ALIAS_NODES:
            raise _Refusal(line, col, f"alias *{name} brings the nodes aliases produce to "
                           f"{_plural(self.aliased)}",
                           f"at most {_plural(MAX_ALIAS_NODES)} nodes produced by aliases")
        if len(self.stack) + height > MAX_DEPTH:
            raise _Refusal(line, col, f"alias *{name} nests deeper than {MAX_DEPTH} levels",
                           f"at most {MAX_DEPTH} nested mappings and lists")
        top = self.stack[-1] if self.stack else None
        if child is not None and top is not None and isinstance(top.value, dict) \
                and top.key is None:
            raise _Refusal(line, col, f"a mapping key that is {_describe_kind(data)} (alias "
                           f"*{name})", "a plain key such as a name")
        self._done(data, child, line, col, size, height, None)

    # ---------------------------------------------------------------- helpers

    def _count(self, line: int, col: int) -> None:
        self.nodes += 1
        if self.nodes > self.max_nodes:
            most = self.max_nodes
            raise _Refusal(line, col, f"more than {_plural(most)} values in one document",
                           f"at most {_plural(most)} values per document")

    def _anchor_open(self, name: Optional[str]) -> None:
        if name is not None:
            self.anchors[name] = None  # a later anchor of the same name replaces it (YAML 1.2)

    @staticmethod
    def _tag(event: Any, line: int, col: int) -> Optional[str]:
        text: Optional[str] = event.tag
        if text is None or text == "!":
            return None
        if text in CORE_TAGS:
            return text
        raise _Refusal(line, col, f"tag {shown_tag(text)} is not read",
                       "plain YAML values: strings, numbers, true/false, null, lists, mappings")

    @staticmethod
    def _construct(tag: Optional[str], event: Any, line: int, col: int) -> Any:
        """A scalar's value: resolved as YAML 1.2's core schema does when untagged, converted
        when tagged; a number is bounded before it is converted."""
        value = event.value
        if tag is None:
            kind = plain_kind(value) if event.implicit[0] else None  # quoted: text
        else:
            kind = tag[len(CORE):]
        if kind is None or kind == "str":
            return value
        if kind == "merge":
            return MERGE
        if kind in ("int", "float") and len(value) > MAX_NUMBER:
            raise _Refusal(line, col, f"a number of {_plural(len(value))} characters",
                           f"at most {MAX_NUMBER} characters (quote it if it is text)")
        try:
            return convert(kind, value)
        except ValueError:
            if tag is None:
                return value  # looked like a number to the pattern, is not one: text
            raise _Refusal(line, col, f"{_short(value)} is not {KINDS[kind]} (tag !!{kind})",
                           f"{KINDS[kind]} as YAML 1.2 writes one, or no tag") from None

    def _done(self, data: Any, child: Child, line: int, col: int, size: int, height: int,
              anchor: Optional[str]) -> None:
        if anchor is not None:
            self.anchors[anchor] = (data, child, line, col, size, height)
        top = self.stack[-1] if self.stack else None
        if data is MERGE and not (top is not None and isinstance(top.value, dict)
                                  and top.key is None):
            data = MERGE_TEXT  # `<<` merges only as a key; elsewhere it is the text
        if top is None:
            self.root = (data, (line, col, child))
            return
        top.size += size
        top.height = max(top.height, height + 1)
        if isinstance(top.value, list):
            top.value.append(data)
            top.child.append((line, col, child))
            return
        if top.key is None:  # this node is a key
            if child is not None:  # an aliased collection (a written one is refused at start)
                raise _Refusal(line, col, f"a mapping key that is {_describe_kind(data)}",
                               "a plain key such as a name")
            keep = True
            if data is not MERGE and data in top.value:
                first = top.child[data][0]
                self.faults.append(Fault(self.file, line, col, f"duplicate key {_short(data)} "
                                         f"(first at line {first})", "each key once"))
                keep = False
            top.key = (data, line, col, keep)
            return
        key, k_line, k_col, keep = top.key
        top.key = None
        if key is MERGE:
            self._merge_source(top, data, child, line, col)
        elif keep:
            top.value[key] = data
            top.child[key] = (k_line, k_col, line, col, child)

    def _merge_source(self, frame: _Frame, data: Any, child: Child, line: int, col: int) -> None:
        if isinstance(data, dict):
            frame.merges.append((data, child))
            return
        if isinstance(data, list) and isinstance(child, list) \
                and all(isinstance(d, dict) for d in data):
            frame.merges.extend((d, c[2]) for d, c in zip(data, child))
            return
        raise _Refusal(line, col, f"<< merges {_describe_value(data)}",
                       "a mapping, or a list of mappings, to merge")

    @staticmethod
    def _merge(frame: _Frame) -> None:
        """`<<` keys: the merged mappings' keys that the mapping does not set itself, the
        earlier merged mapping first."""
        for data, child in frame.merges:
            for key, value in data.items():
                if key not in frame.value:
                    frame.value[key] = value
                    frame.child[key] = child[key]


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:50] + "…" + text[-5:]


def _describe_value(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return _describe_kind(value)
    return f"a value ({_short(value)})"


def read_yaml(source: Union[bytes, str], file: str, limits: Limits = MANIFEST_LIMITS, *,
              pure: bool = False) -> tuple[Any, Positions]:
    """One YAML document as (plain data, position tree); InputError with its position if it
    is not UTF-8, breaks a limit, is not well-formed, or holds more than one document.
    `pure`: by the pure parser only (the reference the C parser's paths are held to)."""
    text = decode_document(source, file, limits)
    if not pure and CParser is not None and _PLAIN.fullmatch(text) is not None:
        try:
            return _read_plain(text, limits)
        except _CParserFailed:
            pass  # read by the pure parser: what it builds, its faults as it reports them
    return _read(text, file, limits)


def _read_plain(text: str, limits: Limits) -> tuple[Any, Positions]:
    """The common document (no anchor, alias, tag, merge key, duplicate key, directive or
    second document, every limit kept) read from the C parser's events in one loop: what
    _read builds from the same events, in a fraction of the calls. Anything else raises
    _CParserFailed before anything is returned, and _read reads the document instead."""
    parser = CParser(text)
    most, nodes = limits.nodes, 0
    # a frame: [value, child, is_mapping, pending key (_NO_KEY: none), key line, key col,
    #           line, col]
    stack: list[list[Any]] = []
    root: Optional[tuple[Any, Positions]] = None
    documents = 0
    kinds: dict[str, Any] = {}
    try:
        while True:
            event = parser.get_event()
            kind = type(event)
            if kind is ScalarEvent:
                mark = event.start_mark
                line, col = mark.line + 1, mark.column + 1
                nodes += 1
                value = event.value
                if nodes > most or event.anchor is not None or len(value) > MAX_STRING or \
                        event.tag is not None or not value:
                    raise _CParserFailed()  # an empty value: libyaml marks some elsewhere
                data: Any = value
                if event.implicit[0]:
                    resolved = kinds.get(value, _UNSEEN)
                    if resolved is _UNSEEN:  # keys repeat (module, node): resolved once each
                        resolved = kinds[value] = plain_kind(value)
                    if resolved is not None and resolved != "str":
                        if resolved == "merge" or len(value) > MAX_NUMBER:
                            raise _CParserFailed()
                        try:
                            data = convert(resolved, value)
                        except ValueError:
                            data = value
                child: Child = None
            elif kind is MappingStartEvent or kind is SequenceStartEvent:
                nodes += 1
                top = stack[-1] if stack else None
                if nodes > most or event.anchor is not None or len(stack) >= MAX_DEPTH or \
                        event.tag is not None or \
                        (top is not None and top[2] and top[3] is _NO_KEY):
                    raise _CParserFailed()
                mark = event.start_mark
                mapping = kind is MappingStartEvent
                stack.append([{} if mapping else [], {} if mapping else [], mapping, _NO_KEY,
                              0, 0, mark.line + 1, mark.column + 1])
                continue
            elif kind is MappingEndEvent or kind is SequenceEndEvent:
                frame = stack.pop()
                data, child, line, col = frame[0], frame[1], frame[6], frame[7]
            elif kind is StreamEndEvent:
                break
            elif kind is DocumentStartEvent:
                documents += 1
                if documents > 1 or event.version is not None:
                    raise _CParserFailed()
                continue
            elif kind is AliasEvent:
                raise _CParserFailed()
            else:  # stream start, document end
                continue
            if not stack:
                root = (data, (line, col, child))
                continue
            top = stack[-1]
            if not top[2]:
                top[0].append(data)
                top[1].append((line, col, child))
            elif top[3] is _NO_KEY:
                if child is not None or data in top[0]:
                    raise _CParserFailed()  # a collection as a key; a duplicate key
                top[3], top[4], top[5] = data, line, col
            else:
                key = top[3]
                top[0][key] = data
                top[1][key] = (top[4], top[5], line, col, child)
                top[3] = _NO_KEY
    except (YAMLError, ValueError, TypeError, AttributeError, IndexError, KeyError):
        raise _CParserFailed() from None
    finally:
        parser.dispose()
    if root is None:
        return None, (1, 1, None)
    return root


_NO_KEY = object()  # a mapping frame waiting for its next key
_UNSEEN = object()  # a plain scalar not resolved yet in this document


#: ruamel.yaml.clib's C parser (libyaml), None when it is not installed.
CParser: Any = getattr(ruamel.yaml.main, "CParser", None)

#: Text the C parser reads with the same events and marks as the pure one: printable ASCII
#: and line feeds, no directive line.
_PLAIN = re.compile(r"(?![\s\S]*^%)[\x20-\x7e\n]*", re.MULTILINE)




class _CParserFailed(MeshError):
    """The C parser stopped on something; the pure parser says what, and where."""


def _read(text: str, file: str, limits: Limits) -> tuple[Any, Positions]:
    """The document read by ruamel's pure parser, event by event, through the builder."""
    builder = _Builder(file, limits)
    last = (1, 1)
    documents = 0
    events: Iterable[Any] = YAML(typ="safe", pure=True).parse(text)
    try:
        for event in events:
            last = _at(event.start_mark)
            if isinstance(event, ScalarEvent):
                builder.scalar(event)
            elif isinstance(event, MappingStartEvent):
                builder.start(event, mapping=True)
            elif isinstance(event, SequenceStartEvent):
                builder.start(event, mapping=False)
            elif isinstance(event, (MappingEndEvent, SequenceEndEvent)):
                builder.end()
            elif isinstance(event, AliasEvent):
                builder.alias(event)
            elif isinstance(event, DocumentStartEvent):
                documents += 1
                if documents > 1:
                    raise _Refusal(*last, "a second document in the file",
                                   "one YAML document per file")
                if event.version is not None and tuple(event.version) != (1, 2):
                    version = ".".join(str(v) for v in event.version)
                    raise _Refusal(*last, f"YAML {version} is not read",
                                   "YAML 1.2 (no %YAML directive, or %YAML 1.2)")
    except _Refusal as refusal:
        raise InputError([Fault(file, refusal.line, refusal.col, refusal.message,
                                refusal.expected)]) from None
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = _at(mark) if mark else last
        what = " ".join(x for x in (exc.context, exc.problem) if x) or "malformed YAML"
        raise InputError([Fault(file, line, col, f"YAML: {what}", "well-formed YAML")]) from None
    except YAMLError as exc:
        line, col = _text_position(text, getattr(exc, "position", None))
        what = getattr(exc, "reason", None) or str(exc).split("\n")[0]
        character = getattr(exc, "character", None)
        if character is not None:
            what = f"character {character!r} is not allowed ({what})"
        raise InputError([Fault(file, line, col, f"YAML: {what}", "well-formed YAML")]) from None
    except (ValueError, TypeError, AttributeError, IndexError, KeyError, AssertionError) as exc:
        # the parser failing on its own: still a fault at the last place it reached
        raise InputError([Fault(file, *last, f"YAML: the parser failed here ({type(exc).__name__}"
                                f": {str(exc)[:80]})", "well-formed YAML")]) from None
    if builder.faults:
        raise InputError(builder.faults)
    if builder.root is None:
        return None, (1, 1, None)
    return builder.root


def _text_position(text: str, index: Optional[int]) -> tuple[int, int]:
    """1-based (line, col) of a character index (the reader reports indices, not marks)."""
    if not isinstance(index, int) or index < 0:
        return 1, 1
    index = min(index, len(text))
    return text.count("\n", 0, index) + 1, index - (text.rfind("\n", 0, index) + 1) + 1


# What the package's root takes from this module (resolver/__init__.py joins these lists).
__all__ = ["MAX_DOCUMENT_BYTES"]
