"""Parsing an edited document again in part (the lines an edit touched, not the whole text),
and loading an edited mesh.yaml structuring only the instances and nodes the edit changed.

A one-line edit of a 10,000-instance mesh.yaml changes one entry of one section; parsing the
whole document again (~0.09 s) is most of a control-loop round's loading. parse_again takes the
last parse of the document (a ParsedText) and the new text, parses only the entries of the one
top-level block mapping the edit touched, and splices them into the last parse.

Invariants:
- Pure: texts and a parse in, a parse out; nothing here reads a file.
- parse_again(text, ...) is exactly parse_document(text, ...): the same plain data, the same
  position tree (every line and column), the same faults (InputError). Anything the splice is
  not sure of is parsed whole by parse_document: the previous parse not read by the C
  parser's plain path (_yaml._read_plain: no anchor, alias, tag, merge key, duplicate key),
  an edit outside one top-level block mapping's entries or in more than one, entries that do
  not read back as whole entries at that mapping's column, a duplicate key, a limit (values,
  depth) reached, a fault of any kind. The spliced part is read by the same _read_plain, at
  the same lines and columns (the lines before it left blank), under the same limits.
- What the edit did not touch is the previous parse's very objects: an unchanged entry's
  plain value is the same object (a loader may keep what it structured from it, by identity);
  positions after an edit that added or removed lines are shifted copies.
- load_mesh_again(parsed, file, previous) is exactly load_mesh(parsed, file): an instance or
  node whose plain data is the very object the previous load structured is that load's very
  Instance or Node (structuring is a function of the plain data alone), every other one is
  structured with the rest of the document, and the whole Mesh is validated by validate_mesh
  as load_mesh validates it. Any fault, from structuring or validation, is load_mesh's own:
  it loads the document again whole and raises what it raises.
- The previous parse's data and trees are never changed (new dicts replace the section and the
  root); a loader's in-place normalization of them is idempotent (load_mesh's `backups:
  target:`), so a spliced document loads as a fresh parse of the text does.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import Any, Iterable, Optional, Union

import attrs

from ._convert import CONVERTER
from ._documents import _backup_target_precheck, load_mesh
from ._errors import MeshError
from ._load import DocumentPositions, Parsed, parse_document
from ._model import Mesh
from ._validate import validate_mesh
from ._yaml import (
    MAX_DEPTH,
    CParser,
    Limits,
    MESH_LIMITS,
    _CParserFailed,
    _PLAIN,
    _read_plain,
    decode_document,
)


@attrs.frozen(eq=False)
class ParsedText:
    """A document as parse_again read it: its text, its parse (parse_document's), and what
    splicing an edit into it needs."""

    #: The document's text.
    text: str
    #: Its parse, as parse_document(text) gives it.
    parsed: Parsed
    #: No fewer than the values it holds as the parser counts them (keys, scalars, lists and
    #: mappings; its length serves: on the plain path each value is written with a character
    #: of its own, a block collection its first `:` or `-`), to keep the document's value
    #: limit without counting; -1 when it was not read by the C parser's plain path (then
    #: never spliced into).
    values: int = -1
    #: Its lines (text.split("\n")).
    lines: tuple[str, ...] = ()


def parse_again(text: Union[str, bytes], file: str, limits: Limits = MESH_LIMITS,
                previous: Optional[ParsedText] = None) -> ParsedText:
    """parse_document(text, file, limits), reading only what changed since `previous` (the
    same document's last ParsedText, same file and limits) when the edit lies within one
    top-level block mapping's entries; every other case parsed whole. Raises InputError
    exactly as parse_document does."""
    decoded = decode_document(text, file, limits)
    if previous is not None and previous.values >= 0 and \
            previous.parsed.where.file == file:
        if decoded == previous.text:
            return previous
        try:
            spliced = _spliced(previous, decoded, limits)
        except (MeshError, ValueError, TypeError, KeyError, IndexError):
            spliced = None  # the whole parse says what is wrong, where
        if spliced is not None:
            return spliced
    return _whole(decoded, file, limits)


def _whole(text: str, file: str, limits: Limits) -> ParsedText:
    if CParser is not None and _PLAIN.fullmatch(text) is not None:
        try:
            data, tree = _read_plain(text, limits)
        except _CParserFailed:
            pass
        else:
            values = len(text) if len(text) <= limits.nodes else _measured(data)[0]
            return ParsedText(text, Parsed(data, DocumentPositions(file, tree)), values,
                              tuple(text.split("\n")))
    return ParsedText(text, parse_document(text, file, limits))


def _measured(data: Any) -> tuple[int, int]:
    """(values the parser counts in `data`, the deepest collection's depth: 0 for the root
    collection, -1 when `data` is a scalar); plain data without shared objects."""
    values, deepest = 0, -1
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        values += 1
        if isinstance(value, dict):
            deepest = max(deepest, depth)
            values += len(value)  # the keys: scalars
            stack.extend((item, depth + 1) for item in value.values())
        elif isinstance(value, list):
            deepest = max(deepest, depth)
            stack.extend((item, depth + 1) for item in value)
    return values, deepest


def _shifted(entry: tuple[Any, ...], delta: int) -> tuple[Any, ...]:
    """A mapping entry's positions (key line, key col, value line, value col, child) or a
    list item's (line, col, child), `delta` lines further (depth ≤ MAX_DEPTH: the document
    was read within it)."""
    child = entry[-1]
    if isinstance(child, dict):
        moved: Any = _shifted_entries(child.items(), delta)
    elif isinstance(child, list):
        moved = [(item[0] + delta, item[1], None) if item[2] is None else _shifted(item, delta)
                 for item in child]
    else:
        moved = None
    if len(entry) == 5:
        return (entry[0] + delta, entry[1], entry[2] + delta, entry[3], moved)
    return (entry[0] + delta, entry[1], moved)


def _shifted_entries(items: Iterable[tuple[Any, tuple[Any, ...]]],
                     delta: int) -> dict[Any, Any]:
    """A mapping's entries' positions `delta` lines further; an entry whose value is a
    mapping of scalars (an instance, a node) shifted here in one loop (10,000 of them after
    a line added near the top)."""
    shifted: dict[Any, Any] = {}
    for key, entry in items:
        child = entry[4]
        if child is None:
            shifted[key] = (entry[0] + delta, entry[1], entry[2] + delta, entry[3], None)
        elif type(child) is dict:
            moved = {}
            for name, item in child.items():
                moved[name] = (item[0] + delta, item[1], item[2] + delta, item[3], None) \
                    if item[4] is None else _shifted(item, delta)
            shifted[key] = (entry[0] + delta, entry[1], entry[2] + delta, entry[3], moved)
        else:
            shifted[key] = _shifted(entry, delta)
    return shifted


def _spliced(previous: ParsedText, text: str, limits: Limits) -> Optional[ParsedText]:
    """The new parse with the one section the edit touched read again; None when the edit
    is not one this can splice."""
    old, new = previous.lines, tuple(text.split("\n"))
    data, where = previous.parsed.data, previous.parsed.where
    root_line, root_col, top = where.tree
    if not isinstance(data, dict) or not isinstance(top, dict):
        return None
    shortest = min(len(old), len(new))
    first = 0  # lines [0, first) are the same
    while first < shortest and old[first] == new[first]:
        first += 1
    kept_tail = 0  # the last kept_tail lines are the same
    while kept_tail < shortest - first and old[-1 - kept_tail] == new[-1 - kept_tail]:
        kept_tail += 1
    end_old = len(old) - kept_tail
    delta = len(new) - len(old)
    keys = list(top)
    section: Any = None
    for number, key in enumerate(keys):
        key_line, _, value_line, value_col, child = top[key]
        if not isinstance(child, dict) or not child or not isinstance(data[key], dict):
            continue
        entry = next(iter(child.values()))
        if (entry[0], entry[1]) != (value_line, value_col) or value_line <= key_line:
            continue  # not a block mapping below its key
        start = value_line - 1
        end = top[keys[number + 1]][0] - 1 if number + 1 < len(keys) else len(old)
        if start <= first and end_old <= end:
            section = key
            break
    if section is None:
        return None
    child = top[section]
    column = child[3]
    entries: dict[Any, Any] = child[4]
    names = list(entries)
    starts = [entries[name][0] - 1 for name in names]
    # from the entry holding the first changed line, or the line before it when the changed
    # line does not start an entry (a line added at an entry's start may end the one before)
    line = new[first] if first < len(new) else ""
    text_of = line.lstrip(" ")
    starting = text_of[:1] not in ("", "#", "\t") and len(line) - len(text_of) < column
    low = bisect_right(starts, first if starting else max(first - 1, starts[0])) - 1
    high = bisect_left(starts, end_old)
    if low < 0:
        return None
    begin = starts[low]
    stop = starts[high] if high < len(starts) else (
        top[keys[keys.index(section) + 1]][0] - 1 if keys.index(section) + 1 < len(keys)
        else len(old))
    lines = new[begin:stop + delta]
    fragment: dict[Any, Any] = {}
    fragment_tree: dict[Any, Any] = {}
    fragment_values = 0
    if lines:
        body = "\n".join(lines)
        if _PLAIN.fullmatch(body) is None or any(
                written.startswith(("---", "...")) for written in lines):
            return None  # a directive, a character libyaml marks elsewhere, a document's end
        try:
            read, tree = _read_plain("\n" * begin + body + "\n", limits)
        except _CParserFailed:
            return None
        read_tree = tree[2]
        if not isinstance(read, dict) or not read or not isinstance(read_tree, dict) or \
                (tree[0], tree[1]) != (begin + 1, column):
            return None
        if any(item[1] != column for item in read_tree.values()):
            return None
        fragment, fragment_tree = read, read_tree
        counted, deepest = _measured(fragment)
        if deepest + 1 >= MAX_DEPTH:  # one level deeper in the document
            return None
        fragment_values = counted - 1  # its root is the section's mapping, counted already
    removed = names[low:high]
    old_section = data[section]
    gone = set(removed)
    if any(name in old_section and name not in gone for name in fragment):
        return None  # a duplicate key: the whole parse says where
    values = previous.values + fragment_values - sum(
        1 + _measured(old_section[name])[0] for name in removed)
    if len(names) - len(removed) + len(fragment) == 0:
        return None  # the section left empty: a null value
    section_data: dict[Any, Any] = {}
    section_tree: dict[Any, Any] = {}
    for name in names[:low]:
        section_data[name] = old_section[name]
        section_tree[name] = entries[name]
    section_data.update(fragment)
    section_tree.update(fragment_tree)
    for name in names[high:]:
        section_data[name] = old_section[name]
    if delta:
        section_tree.update(_shifted_entries(((name, entries[name]) for name in names[high:]),
                                             delta))
    else:
        section_tree.update((name, entries[name]) for name in names[high:])
    new_data: dict[Any, Any] = {}
    new_top: dict[Any, Any] = {}
    after = False
    for key in keys:
        if key == section:
            new_data[key] = section_data
            new_top[key] = child[:4] + (section_tree,)
            after = True
            continue
        new_data[key] = data[key]
        new_top[key] = _shifted(top[key], delta) if after and delta else top[key]
    if values > limits.nodes:  # a bound only: counted
        values = _measured(new_data)[0]
        if values > limits.nodes:
            return None
    positions = attrs.evolve(where, tree=(root_line, root_col, new_top))
    return ParsedText(text, Parsed(new_data, positions), values, new)


def load_mesh_again(parsed: Parsed, file: str, previous: Optional[tuple[Parsed, Mesh]] = None,
                    ) -> tuple[Mesh, DocumentPositions]:
    """load_mesh(parsed, file), structuring again only the instances and nodes whose plain
    data is not the very object `previous` (the last parse of this mesh.yaml and the Mesh
    loaded from it) structured: parse_again keeps an unchanged entry's object, and an
    unchanged entry gives back the very same Instance or Node. The whole Mesh is validated
    as load_mesh validates it; any fault, or anything off this path, is load_mesh's own."""
    if previous is not None and previous[0] is not parsed:
        try:
            mesh = _reused(parsed, *previous)
        except (MeshError, ValueError, TypeError, KeyError, AttributeError):
            mesh = None
        if mesh is not None:
            return mesh, parsed.where
    return load_mesh(parsed, file)


def _reused(parsed: Parsed, before: Parsed, last: Mesh) -> Optional[Mesh]:
    data, old = parsed.data, before.data
    if not isinstance(data, dict) or not isinstance(old, dict):
        return None
    if _backup_target_precheck(data, parsed.where) is not None:
        return None
    fresh: dict[str, dict[Any, Any]] = {}
    for field in ("instances", "nodes"):
        if field not in data:
            continue  # structured as written: a default, or the fault of a missing key
        section, was = data[field], old.get(field, {})
        if not isinstance(section, dict) or not isinstance(was, dict):
            return None
        # an entry of the last parse structured into the last Mesh under the same name
        fresh[field] = {name: value for name, value in section.items()
                        if name not in was or was[name] is not value or
                        type(name) is not str}
    try:
        partial = CONVERTER.structure({**data, **fresh}, Mesh)
    except Exception:  # noqa: BLE001 - a fault: load_mesh reports it
        return None
    whole = {}
    for field in fresh:
        made, was, section = getattr(partial, field), old.get(field, {}), data[field]
        changed = getattr(last, field).evolver()
        for name in was:
            if name not in section:
                del changed[name]
        for name in fresh[field]:
            changed[name] = made[name]
        whole[field] = changed.persistent()
    mesh = attrs.evolve(partial, **whole)
    if validate_mesh(mesh, parsed.where):
        return None
    return mesh
