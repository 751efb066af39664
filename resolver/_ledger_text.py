"""The ledger as text: reading it (load_ledger), writing it (dump_ledger), and writing it
with what the document reader reads from the text, again after an edit (written_ledger).

Invariants:
- Pure: a ledger in, text out; text (or a Parsed document) in, a Ledger out or InputError.
- A ledger is refused at an unknown version before its shape is looked at, so a newer ledger
  is never half-read.
- dump_ledger is deterministic: `version` first, every other key sorted, so equal ledgers are
  equal text and load_ledger(dump_ledger(x)) == x. It writes canonical JSON (YAML 1.2), one
  entry of each section a line. Each rendering under `declared` (an older ledger's record of
  what was declared: now one file per node, _declared_record) is one canonical JSON text;
  load_ledger also reads one written as a mapping.
- written_ledger(x) holds dump_ledger(x), what parse_document reads from it, and a ledger
  load_ledger reads from that as x (else MeshError: nothing to write). Without the YAML
  reader's pass: the data is json's reading, the positions laid out from dump_ledger's
  layout down to each section's entries (each entry's value, a collection, held as its one
  line of text that the positions read when a path descends into it, resolver/_load.py); a
  text that might break a limit of the reader, or not laid out as expected, is parsed by it.
  Given the WrittenLedger of the ledger before an edit, only the entries that changed are
  encoded, read, structured and laid out; the result is the one written whole
  (property_tests/test_written_ledger_props.py holds both to the reader and to each other).
"""

from __future__ import annotations

import bisect
import json
import re
from typing import Any, Mapping, Optional

import attrs
from pyrsistent import pmap

from ._convert import CONVERTER, document_key, unstructure
from ._errors import Fault, MeshError
from ._frozen import FrozenMap
from ._ledger import EMPTY_LEDGER, Ledger
from ._load import DocumentPositions, Parsed, Text, load_document, parse_document
from ._validate import ledger_version_fault, validate_ledger
from ._yaml import MAX_DEPTH, MAX_NUMBER, MAX_STRING, MESH_LIMITS, Limits, Positions


def _ledger_precheck(data: dict[Any, Any], where: DocumentPositions) -> Optional[Fault]:
    """The version first; then each `declared` rendering, written as one JSON text (see
    dump_ledger), read back in place so the converter structures it like any mapping."""
    fault = ledger_version_fault(data, where)
    if fault is not None or not isinstance(data.get("declared"), dict):
        return fault
    read = dict(data["declared"])  # a new mapping: the parsed document's stays as read
    for name, value in read.items():
        if isinstance(value, str):
            try:
                read[name] = json.loads(value)
            except ValueError as error:
                return where.fault(("declared", name), f"the rendering of {name} is not JSON "
                                   f"({error})", "a rendering as `mesh plan --out` records it")
    data["declared"] = read
    return None


def load_ledger(text: Text, file: str) -> tuple[Ledger, DocumentPositions]:
    """A ledger at version 1; any other version is refused with its position."""
    parsed = text if isinstance(text, Parsed) else parse_document(text, file, MESH_LIMITS)
    return load_document(parsed, file, Ledger, validate=validate_ledger,
                         precheck=_ledger_precheck)


#: json's encoder as dump_ledger writes every value: keys sorted, compact, non-ASCII as itself.
_ENCODE = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                           allow_nan=False).encode

#: The Ledger's attributes that hold entries (a map: one entry a line), and the rest (one
#: line each: `version`, `ca`).
_SECTIONS = tuple(a.name for a in attrs.fields(Ledger) if isinstance(a.default, Mapping))
_SCALARS = tuple(a.name for a in attrs.fields(Ledger) if a.name not in _SECTIONS)
#: Sections whose entries are written otherwise (a rendering as one JSON text): an edit of a
#: ledger holding them is written whole.
_WHOLE_ONLY = ("declared",)


def dump_ledger(ledger: Ledger) -> str:
    """The ledger as text: canonical JSON, which is YAML 1.2 (a flow mapping), one entry of
    each section a line: `version` first, then every key sorted, so equal ledgers are equal
    text. json's C encoder writes a 10,000-instance ledger in a fraction of what a YAML
    emitter takes (ruamel's: seconds). Strings are written as YAML and JSON both read them
    (canonical_json). Each `declared` rendering (an older ledger's record, see
    _declared_record) is one JSON text. written_ledger(x, …).text is this text."""
    body = _ledger_body(ledger)
    parts = ['{"version":' + _ENCODE(ledger.version)]
    for key in sorted(body):
        value = body[key]
        if isinstance(value, dict) and value:
            entries = ",\n".join([_ENCODE(name) + ":" + _ENCODE(value[name])
                                  for name in sorted(value)])
            parts.append(_ENCODE(key) + ":{\n" + entries + "\n}")
        else:
            parts.append(_ENCODE(key) + ":" + _ENCODE(value))
    # the characters YAML reads otherwise are inside strings only: escaped in one pass
    return _yaml_safe(",\n".join(parts) + "}\n")


def _ledger_body(ledger: Ledger) -> dict[str, Any]:
    """The ledger's sections as dump_ledger writes them (plain data; `version` aside)."""
    body: dict[str, Any] = unstructure(ledger)
    body.pop("version", None)
    if "declared" in body:
        body["declared"] = {name: json.dumps(rendering, sort_keys=True, separators=(",", ":"))
                            for name, rendering in body["declared"].items()}
    return body


@attrs.frozen
class _Part:
    """One part of a written ledger's text (its parts are joined by `,` and a line break):
    `key`, as the text writes it; a section of entries (`section` given) is `head` (the
    `"key":{` line), its entries' lines and `}`; any other part is `head` alone, one line."""

    key: str
    head: str
    section: Optional["_Section"] = None

    def text(self) -> str:
        return self.head if self.section is None else \
            self.head + "\n" + self.section.block + "\n}"

    def lines(self) -> int:
        return 1 if self.section is None else len(self.section.names) + 2


@attrs.frozen
class _Section:
    """A section of entries as written: its names in the order written (sorted), each
    entry's line (without the `,` after it), and `block`, those lines as the text holds
    them."""

    names: tuple[str, ...]
    lines: tuple[str, ...]
    block: str


@attrs.frozen(eq=False)
class WrittenLedger:
    """A ledger's text as dump_ledger writes it, what the document reader reads from it
    (`parsed`: load_ledger's input, so a caller keeping it parses nothing again), and how its
    text is laid out, so that writing an edited ledger after it (written_ledger's `previous`)
    encodes, checks and lays out only the entries that changed."""

    #: The ledger the text holds: load_ledger reads it back from `parsed` as this.
    ledger: Ledger
    #: dump_ledger(ledger).
    text: str
    #: What parse_document(text, file, MESH_LIMITS) reads: data and positions.
    parsed: Parsed
    #: The text's parts in order (`version` first); None when the text was read by the
    #: document reader (near a limit, or not laid out as expected): nothing is kept then.
    layout: Optional[tuple[_Part, ...]] = attrs.field(default=None, repr=False)


def written_ledger(ledger: Ledger, file: str,
                   previous: Optional[WrittenLedger] = None) -> WrittenLedger:
    """The ledger's text (dump_ledger), what parse_document(text, file, MESH_LIMITS) reads from
    it, and the check that load_ledger reads that back as `ledger` (else MeshError, or
    load_ledger's InputError: nothing to write). Without the YAML reader's pass over the text
    (~0.25 s at 10,000 instances): the data is json's reading of the text (~0.01 s), which
    the document reader's is, and the positions are laid out from the text's known layout
    (_laid_out), each entry's value read by the document reader only when a path descends
    into it (a fault's), as the reader reads it (property_tests/test_written_ledger_props.py).
    A text that might break a limit of the reader (bounded from its layout by _reads_within),
    or that is not laid out as dump_ledger lays it out, is parsed now, so its fault is raised
    as parse_document raises it.

    `previous`: what this returned for the ledger last written (the caller's, for the file
    it wrote and that is unchanged since). Then only the entries that differ from its
    ledger's are encoded, read and checked (_written_again): the result is the one written
    whole (the property)."""
    if previous is not None and previous.parsed.where.file == file:
        if previous.ledger is ledger:
            return previous
        again = _written_again(ledger, file, previous)
        if again is not None:
            return again
    text = dump_ledger(ledger)
    laid: Optional[tuple[Positions, tuple[_Part, ...]]] = None
    if _reads_within(text, MESH_LIMITS):
        data = json.loads(text)
        laid = _laid_out(text, data) if isinstance(data, dict) else None
    if laid is None:
        parsed = parse_document(text, file, MESH_LIMITS)
    else:
        parsed = Parsed(data, DocumentPositions(file, laid[0]))
    # (the document's data as read stays so: load_ledger's precheck replaces `declared`)
    data = parsed.data
    read, _ = load_ledger(Parsed(dict(data) if isinstance(data, dict) else data, parsed.where),
                          file)
    if read != ledger:  # never replace a good ledger with one that reads differently
        raise MeshError(f"{file}: the ledger would not read back unchanged")
    return WrittenLedger(ledger, text, parsed, None if laid is None else laid[1])


#: The Ledger's attribute whose section a key of the text is.
_ATTRIBUTE = {document_key(Ledger, name): name for name in _SECTIONS}
_MISSING = object()


def _written_again(ledger: Ledger, file: str, previous: WrittenLedger
                   ) -> Optional[WrittenLedger]:
    """written_ledger(ledger, file) from `previous`, an edit's: the entries that differ from
    its ledger's encoded, each changed line read by json and structured as its section's
    entry, which it must be; every other line is the previous text's, read back then as its
    ledger's entries; the whole ledger validated as load_ledger validates it; the reader's
    limits bounded as _reads_within bounds them (the changed lines alone for the bounds a
    line keeps). None where this cannot say (an edit of more than entries: the version,
    `ca`, a section begun or emptied, an older ledger's `declared`; a previous text read by
    the document reader; any check failing): written whole then, which says what is wrong."""
    before = previous.ledger
    if previous.layout is None or any(getattr(ledger, name) != getattr(before, name)
                                      for name in _SCALARS):
        return None
    edits: dict[str, tuple[list[str], list[str]]] = {}  # attribute → (changed, removed)
    for name in _SECTIONS:
        now, was = getattr(ledger, name), getattr(before, name)
        if now is was or not now and not was:  # (an empty section is not written)
            continue
        if not now or not was or name in _WHOLE_ONLY:
            return None  # a part of the text begun or ended; an older ledger's renderings
        changed = [n for n in now if (old := was.get(n, _MISSING)) is _MISSING or
                   not (old is now[n] or old == now[n])]
        removed = [n for n in was if n not in now]
        if changed or removed:
            edits[name] = (changed, removed)
    if not edits:
        return WrittenLedger(ledger, previous.text, previous.parsed, previous.layout)
    # the changed entries, as a ledger of their own: encoded, and what they must read as
    expected = attrs.evolve(EMPTY_LEDGER, version=ledger.version, **{
        name: _like(getattr(EMPTY_LEDGER, name),
                    {n: getattr(ledger, name)[n] for n in changed})
        for name, (changed, _) in edits.items() if changed})
    plain = unstructure(expected)
    read: dict[str, dict[str, Any]] = {}  # text key → name → the value its new line reads
    new_lines: dict[str, dict[str, str]] = {}
    for key, entries in plain.items():
        if key == "version":
            continue
        new_lines[key], read[key] = {}, {}
        for n, value in entries.items():
            line = _yaml_safe(_ENCODE(n) + ":" + _ENCODE(value))
            entry = _entry(line)
            if entry is None or entry[0] != n or not _line_within(line):
                return None
            new_lines[key][n], read[key][n] = line, entry[2]
    try:
        structured = CONVERTER.structure({"version": ledger.version, **read}, Ledger)
    except Exception:  # noqa: BLE001 - the converter's exception tree: written whole
        return None
    if structured != expected or validate_ledger(ledger, previous.parsed.where):
        return None
    return _laid_again(ledger, file, previous, edits, new_lines, read)


def _like(empty: Any, entries: dict[str, Any]) -> Any:
    """`entries` as the map type of a section whose empty value is `empty`."""
    return FrozenMap(entries) if isinstance(empty, FrozenMap) else pmap(entries)


def _laid_again(ledger: Ledger, file: str, previous: WrittenLedger,
                edits: Mapping[str, tuple[list[str], list[str]]],
                new_lines: Mapping[str, Mapping[str, str]],
                read: Mapping[str, Mapping[str, Any]]) -> Optional[WrittenLedger]:
    """The text, data and positions of `previous` with the edited sections' lines replaced
    (`new_lines` by text key, `read` what each reads), added and removed (`edits`)."""
    assert previous.layout is not None
    old_data = previous.parsed.data
    old_tree: Any = previous.parsed.where.tree[2]
    parts: list[_Part] = []
    data: dict[str, Any] = {}
    tree: dict[str, Any] = {}
    number = 0  # 0-based: the line this part starts on
    for part in previous.layout:
        key, head, section = part.key, part.head, part.section
        old = old_tree[key]
        if section is None:  # one line, unchanged
            tree[key] = _shifted(old, number + 1 - old[0])
            data[key] = old_data[key]
            parts.append(part)
            number += 1
            continue
        name = _ATTRIBUTE.get(key)
        if name is None or name not in edits:
            delta = number + 1 - old[0]
            tree[key] = old if delta == 0 else _shifted(old[:4] + (
                {n: _shifted(e, delta) for n, e in old[4].items()},), delta)
            data[key] = old_data[key]
            parts.append(part)
            number += part.lines()
            continue
        changed, removed = edits[name]
        lines_of, values = new_lines.get(key, {}), read.get(key, {})
        names, lines = list(section.names), list(section.lines)
        for n in removed:
            at = bisect.bisect_left(names, n)
            del names[at], lines[at]
        for n, line in lines_of.items():
            at = bisect.bisect_left(names, n)
            if at < len(names) and names[at] == n:
                lines[at] = line
            else:
                names.insert(at, n)
                lines.insert(at, line)
        header = number + 1
        old_entries, was = old[4], old_data[key]
        entries: dict[str, Any] = {}
        values_now: dict[str, Any] = {}
        for index, (n, line) in enumerate(zip(names, lines)):
            at = header + 1 + index
            if n in lines_of:
                entries[n] = _position(line, at, values[n])
                values_now[n] = values[n]
            else:
                e = old_entries[n]
                entries[n] = (at, 1, at, e[3], e[4])
                values_now[n] = was[n]
        tree[key] = (header, old[1], header, old[3], entries)
        data[key] = values_now
        new = _Section(tuple(names), tuple(lines), ",\n".join(lines))
        parts.append(_Part(key, head, new))
        number += len(names) + 2
    text = ",\n".join(part.text() for part in parts) + "}\n"
    if len(text.encode("utf-8")) > MESH_LIMITS.document_bytes or \
            1 + sum(text.count(mark) for mark in "[{,:") > MESH_LIMITS.nodes:
        return None
    parsed = Parsed(data, DocumentPositions(file, (1, 1, tree)))
    return WrittenLedger(ledger, text, parsed, tuple(parts))


def _shifted(position: tuple[Any, ...], delta: int) -> tuple[Any, ...]:
    """A key's position tuple (key line, key col, value line, value col, child) `delta`
    lines further down."""
    if delta == 0:
        return position
    return (position[0] + delta, position[1], position[2] + delta) + position[3:]


def _entry(line: str) -> Optional[tuple[str, int, Any]]:
    """A line `"name":VALUE` (no `,` after it) as json reads it: (name, the index of its
    `:`, VALUE); None when it is not one."""
    try:
        name, end = _DECODER.raw_decode(line)
        if not isinstance(name, str) or line[end] != ":":
            return None
        value, stop = _DECODER.raw_decode(line, end + 1)
    except (ValueError, IndexError):
        return None
    return (name, end, value) if stop == len(line) else None


def _position(line: str, number: int, value: Any) -> tuple[Any, ...]:
    """The position tuple of the entry written as `line` (1-based line `number`): its key at
    column 1, its value after the `:`; a collection's child its text (read on demand)."""
    end = _DECODER.raw_decode(line)[1]
    return (number, 1, number, end + 2,
            line[end + 1:] if isinstance(value, (dict, list)) else None)


def _line_within(line: str) -> bool:
    """Whether one entry's line keeps the limits _reads_within bounds line by line: its
    length (a string's), its numbers' lengths, the collections it opens (the depth)."""
    return len(line) + 1 <= MAX_STRING and \
        not any(number.search(line) is not None for number in _LONG_NUMBERS) and \
        2 + line.count("[") + line.count("{") <= MAX_DEPTH


def _laid_out(text: str, data: dict[str, Any]) -> Optional[tuple[Positions, tuple[_Part, ...]]]:
    """The position tree of dump_ledger's `text` (whose reading is `data`) from its layout:
    `{"version":N,` on line 1; then each section on lines of its own, `"key":{`, one entry a
    line (`"name":VALUE` and a `,` but the last), then `}` (and the `,` or `}` after it); or
    `"key":VALUE` on one line, an empty or non-mapping one. Every key starts its line (col 1;
    the first after the root's `{`), its value right after its `:`. A scalar value's child is
    None; a collection's is its one line of text, VALUE (see resolver/_load.py). None when a
    line is not as this expects (the reader then reads the text). With the tree, the text's
    parts (WrittenLedger.layout)."""
    lines = text.split("\n")
    parts: list[_Part] = []
    decode = _DECODER.raw_decode
    sections: dict[str, Any] = {}
    number = 0  # the 0-based index of the line a key starts
    last = len(data) - 1
    try:
        for place, (key, value) in enumerate(data.items()):
            line = lines[number]
            start = 1 if place == 0 else 0  # the root's `{` before the first key
            written, end = decode(line, start)
            if written != key or line[end] != ":":
                return None
            if place and isinstance(value, dict) and value and len(line) == end + 2 and \
                    line[end + 1] == "{":
                header, value_col = number + 1, end + 2
                entries = {}
                head = line
                for name, item in value.items():
                    number += 1
                    line = lines[number]
                    written, end = decode(line)
                    if written != name or line[end] != ":":
                        return None
                    entries[name] = (number + 1, 1, number + 1, end + 2,
                                     line[end + 1:].removesuffix(",")
                                     if isinstance(item, (dict, list)) else None)
                number += 1
                if lines[number] != ("}}" if place == last else "},"):
                    return None
                sections[key] = (header, 1, header, value_col, entries)
                written_lines = lines[header:number]
                parts.append(_Part(key, head, _Section(
                    tuple(value), tuple(line.removesuffix(",") for line in written_lines),
                    "\n".join(written_lines))))
            else:
                if line[-1] != ("}" if place == last else ","):
                    return None
                sections[key] = (number + 1, start + 1, number + 1, end + 2, line[end + 1:-1]
                                 if isinstance(value, (dict, list)) else None)
                parts.append(_Part(key, line[:-1]))
            number += 1
    except (ValueError, IndexError):  # a line not as expected
        return None
    if lines[number:] != [""]:
        return None
    return (1, 1, sections), tuple(parts)


#: Reads the JSON value (a key) a line starts with, and where it ends.
_DECODER = json.JSONDecoder()


def _reads_within(text: str, limits: Limits) -> bool:
    """Whether dump_ledger's `text` certainly keeps every limit of the document reader
    (resolver/_yaml.py), from upper bounds that cost a few passes of C over it (~0.01 s at
    10,000 instances): its bytes; its values (each but the root follows one of `[{,:`:
    those in strings only raise the bound); its nesting (at most two mappings are open where
    a line starts, the rest open on the line); a string's length (none spans a line); a
    number's (json writes a float in at most 24 characters, an integer as its digits, after
    `":`, `[` or `,`)."""
    if len(text.encode("utf-8")) > limits.document_bytes:
        return False
    if 1 + sum(text.count(mark) for mark in "[{,:") > limits.nodes:
        return False
    if max(map(len, text.split("\n"))) > MAX_STRING:
        return False
    if any(number.search(text) is not None for number in _LONG_NUMBERS):
        return False
    return 2 + max(map(len, text.translate(_OPENERS_ONLY).split("\n"))) <= MAX_DEPTH


#: Where a number of more than MAX_NUMBER characters may be written: a value (after `":`) or
#: an item (after `[` or `,`) that begins with that many digits, its sign aside (a string
#: holding one of these only raises the bound). One pattern each: a literal first character
#: is what the regex engine searches fastest.
_LONG_NUMBERS = tuple(re.compile(re.escape(after) + "-?[0-9]{%d}" % MAX_NUMBER)
                      for after in ('":', "[", ","))
#: Every ASCII character but a line break and the two that open a list or a mapping, deleted
#: (str.translate): what is left of a line counts the collections it opens, and more.
_OPENERS_ONLY = {code: None for code in range(128) if chr(code) not in "\n[{"}


#: Characters YAML does not read as themselves inside a double-quoted string though JSON
#: does: non-printable ones (DEL, C1 controls with U+0085, surrogates, U+FEFF/FFFE/FFFF), and
#: U+2028/U+2029, line breaks to a YAML 1.1 reader. Both read the `\\uXXXX` escape the same.
_NOT_YAML_TEXT = re.compile("[\x7f-\x9f\u2028\u2029\ud800-\udfff\ufeff\ufffe\uffff]")


def canonical_json(value: Any) -> str:
    """`value` (plain data) as compact JSON with sorted keys that YAML 1.2 reads as the same
    value: non-ASCII written as itself (YAML's reader would split an astral character's
    surrogate-pair escape in two), except the characters YAML does not take as text."""
    return _yaml_safe(json.dumps(value, sort_keys=True, separators=(",", ":"),
                                 ensure_ascii=False, allow_nan=False))


def _yaml_safe(text: str) -> str:
    return _NOT_YAML_TEXT.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


