"""Parsing documents from text, with every fault located as file:line:col.

Invariants:
- Pure: text and a file name in, model (or InputError) out. Reading files is the caller's job.
- The text is read by _yaml (bounded, located); its position tree is kept only to find
  positions, and the model is built from plain data by the strict converter.
- Positions are kept apart from the model and from the parser: a document's source map
  (DocumentPositions) is plain data, key path → (line, col) of the key and of the value plus
  the order keys are written in, held as a trie of tuples, dicts and lists of ints and strings;
  no object of the YAML parser is reachable from it (tests/test_source_map.py). It is never
  changed once made, and nothing of a reading is kept between calls.
- A tree a writer lays out (resolver.documents.written_ledger) may hold, in place of a
  value's subtree, that value's text written on one line at its (line, col): a str, which a
  tree the reader makes never holds. position() and key_order() read it with the document
  reader when a path descends into it, shifted to where it is written: the same answers as
  the reader's tree of the whole text (property_tests/test_written_ledger_props.py).
- Every fault of a document is reported, not the first; a fault under a key points at the key
  as the user wrote it (`run-once`, not `run_once`).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Optional, TypeVar, Union

import attrs
from cattrs.errors import (
    AttributeValidationNote,
    BaseValidationError,
    ForbiddenExtraKeysError,
    IterableValidationNote,
)

from ._convert import CONVERTER, _describe, yaml_key
from ._errors import Fault, InputError
from ._repair import repair
from ._yaml import MANIFEST_LIMITS, MESH_LIMITS, Child, Limits, Positions, read_yaml

Path = tuple[Any, ...]


@attrs.frozen
class DocumentPositions:
    """The source map of one parsed document: where each key and value is written (1-based
    line and column), and the order keys are written in, by key path; plain data only."""

    #: The file the document was read from, as faults name it.
    file: str
    #: The root's (line, col, child): a mapping's child maps each key to (key line, key col,
    #: value line, value col, child), a list's child holds (line, col, child) per item, a
    #: scalar's child is None; in a tree a writer lays out, a child may be the text of a value
    #: written on one line at (line, col), read when a path descends into it (see _in_line).
    tree: Positions = attrs.field(eq=False, repr=False)
    #: Leading path elements that are not in the text (a wrapping key).
    skip: int = 0

    def position(self, path: Path, *, at_key: bool = False) -> tuple[int, int]:
        """1-based (line, col) of the value at `path` (or of its key with at_key); the
        deepest place along `path` that the document has."""
        child: Any  # a position subtree, or a value's text (a tree a writer laid out)
        line, col, child = self.tree
        key_at = None
        for key in path[self.skip:]:
            if type(child) is str:  # a value written on one line: its tree, read now
                child = _in_line(child, line, col, self.file)
            try:
                if isinstance(child, dict) and key in child:
                    k_line, k_col, line, col, child = child[key]
                    key_at = (k_line, k_col)
                    continue
                if isinstance(child, list) and type(key) is int and 0 <= key < len(child):
                    line, col, child = child[key]
                    key_at = None
                    continue
            except TypeError:  # an unhashable path element: not in the document
                pass
            break
        if at_key and key_at is not None:
            return key_at
        return line, col

    def key_order(self, path: Path) -> tuple[str, ...]:
        """The keys of the mapping at `path` in the order the document writes them (the model's
        maps do not keep it); empty when nothing at `path` is a mapping. Plain strings only."""
        child: Any
        line, col, child = self.tree
        for key in path[self.skip:]:
            if type(child) is str:
                child = _in_line(child, line, col, self.file)
            if isinstance(child, dict) and isinstance(key, str) and key in child:
                _k_line, _k_col, line, col, child = child[key]
            elif isinstance(child, list) and type(key) is int and 0 <= key < len(child):
                line, col, child = child[key]
            else:
                return ()
        if type(child) is str:
            child = _in_line(child, line, col, self.file)
        if not isinstance(child, dict):
            return ()
        return tuple(k for k in child if isinstance(k, str))

    def fault(self, path: Path, message: str, expected: str = "", *, at_key: bool = False) -> Fault:
        """A Fault at `path`; in a document built in code (no text, so no line) it names the
        key path instead: `mesh: nodes.anchor.address: …`."""
        line, col = self.position(path, at_key=at_key)
        if line == 0 and path[self.skip:]:
            named, dotted = key_path(path[self.skip:]), ".".join(map(str, path[self.skip:]))
            # a message that begins with its own path ("port is a string") names it once
            message = (named + message[len(dotted):] if message.startswith(dotted + " ")
                       else f"{named}: {message}")
        return Fault(self.file, line, col, message, expected)


def key_path(path: Iterable[Any]) -> str:
    """A key path as an operator reads it: `nodes.anchor.ssh-port`, `containers[0].env.DB`."""
    out = ""
    for element in path:
        out += f"[{element}]" if isinstance(element, int) else ("." if out else "") + str(element)
    return out


def positionless(document: str, skip: int = 0) -> DocumentPositions:
    """The positions of a document built in code: none, so its faults name key paths."""
    return DocumentPositions(document, (0, 0, None), skip)


def _in_line(text: str, line: int, col: int, file: str) -> Child:
    """The child of the value whose text, on one line, is `text`, written at (line, col): the
    document reader's tree of `text` alone, every position moved to where it is written. A
    flow collection or scalar reads alone as it reads in place (json's compact text: no
    indentation, no plain scalar that a flow context would end); the writer's text reads
    within the mesh's limits, so its part does. Made anew each call, kept nowhere."""
    try:
        _data, (_line, _col, child) = read_yaml(text, file, MESH_LIMITS)
    except InputError:  # not reached: the whole text this was part of reads
        return None
    return _moved(child, line - 1, col - 1)


def _moved(child: Child, lines: int, cols: int) -> Child:
    """A position subtree `lines` lines further, and `cols` columns on its first line."""
    if isinstance(child, dict):
        return {key: (k_line + lines, k_col + cols if k_line == 1 else k_col,
                      v_line + lines, v_col + cols if v_line == 1 else v_col,
                      _moved(sub, lines, cols))
                for key, (k_line, k_col, v_line, v_col, sub) in child.items()}
    if isinstance(child, list):
        return [(i_line + lines, i_col + cols if i_line == 1 else i_col, _moved(sub, lines, cols))
                for i_line, i_col, sub in child]
    return child


def parse_yaml(text: Union[str, bytes], file: str, limits: Limits = MANIFEST_LIMITS, *,
               pure: bool = False) -> tuple[Any, DocumentPositions]:
    """Parse one YAML document (text, or bytes that must be UTF-8) into plain data and its
    positions; every fault (encoding, limits, syntax, duplicate keys) is an InputError
    located at the offending byte, node or alias. `limits`: its kind's (a manifest's unless
    said: resolver.documents.MESH_LIMITS for mesh.yaml and the ledger). `pure`: read by
    ruamel's pure parser only, never the C one (the same outcome, slower: for tests)."""
    data, tree = read_yaml(text, file, limits, pure=pure)
    return data, DocumentPositions(file, tree)


@attrs.frozen(eq=False)
class Parsed:
    """A document already parsed (by parse_document), handed to a loader in place of its
    text so that it is not parsed twice (the executor reads mesh.yaml's paths first)."""

    data: Any
    where: DocumentPositions


def parse_document(text: Union[str, bytes], file: str,
                   limits: Limits = MANIFEST_LIMITS) -> Parsed:
    """One YAML document read once (bounded by `limits`, every fault located), to look into
    before loading it: hand the Parsed to a loader in place of the text and it is not read
    again."""
    return Parsed(*parse_yaml(text, file, limits))


T = TypeVar("T")


def structure(data: Any, cls: type[T], *, document: str = "") -> T:
    """`data` (plain dicts, lists and scalars, keys as documents write them) as an instance of
    `cls`, strictly: no coercion, unknown keys refused. Every fault is an InputError named by
    key path (under `document`, default the class name); never the converter's own errors."""
    try:
        return CONVERTER.structure(data, cls)
    except Exception as exc:  # noqa: BLE001 - the converter's exception tree, mapped
        where = positionless(document or cls.__name__)
        faults = structure_faults(exc, where) or [where.fault((), str(exc))]
        raise InputError(faults) from None


def structure_faults(exc: BaseException, where: DocumentPositions, path: Path = ()) -> list[Fault]:
    """Map a cattrs exception tree to located faults, naming keys as written."""
    if isinstance(exc, ForbiddenExtraKeysError):
        return [
            where.fault(path + (k,), f"unknown key {k!r}", _known_keys(exc.cl), at_key=True)
            for k in sorted(exc.extra_fields, key=str)
        ]
    if isinstance(exc, BaseValidationError):
        faults: list[Fault] = []
        for sub in exc.exceptions:
            sub_path = path
            for note in getattr(sub, "__notes__", ()):
                if isinstance(note, AttributeValidationNote):
                    sub_path = path + (yaml_key(note.name),)
                elif isinstance(note, IterableValidationNote):
                    sub_path = path + (note.index,)
            if isinstance(sub, KeyError):
                faults.append(where.fault(path, f"missing required key {sub_path[-1]!r}",
                                          "that key to be present"))
            else:
                faults.extend(structure_faults(sub, where, sub_path))
        return faults
    label = ".".join(str(p) for p in path[where.skip:]) or "document"
    message = str(exc) if isinstance(exc, (TypeError, ValueError)) else repr(exc)
    expected = ""
    if message.startswith("expected "):
        expected, _, got = message[len("expected "):].partition(", got ")
        message = f"{label} is {got}" if got else f"{label} is wrong"
    return [where.fault(path, message, expected)]


def _known_keys(cls: Optional[type]) -> str:
    if cls is None or not attrs.has(cls):
        return ""
    return "one of " + ", ".join(yaml_key(a.name) for a in attrs.fields(cls))


#: What a loader takes: the text, the file's bytes (UTF-8), or a document already parsed.
Text = Union[str, bytes, "Parsed"]

Precheck = Callable[[dict[Any, Any], "DocumentPositions"], Optional[Fault]]


def load_document(text: Union[str, bytes, Parsed], file: str, cls: type[T], *,
                  wrap: Optional[str] = None, precheck: Optional[Precheck] = None,
                  validate: Optional[Callable[[T, DocumentPositions], list[Fault]]] = None,
                  ) -> tuple[T, DocumentPositions]:
    """Parse and structure one document (text, UTF-8 bytes, or a Parsed). Returns (model,
    positions) or raises InputError.

    `wrap` nests the document under one key before structuring (provisions.yaml is a bare
    mapping of provision names; its model has one field).

    `precheck(data, where)` may refuse the plain data before structuring (one Fault or None);
    `validate(model, where)` returns the faults between keys. When some values have the wrong
    type, the document is structured once more with those values replaced by neutral ones, so
    `validate` still runs and reports the rest; its faults at a replaced value are dropped."""
    if isinstance(text, Parsed):
        data, where = text.data, text.where
    else:
        data, where = parse_yaml(text, file)
    if data is None:
        raise InputError([Fault(file, 1, 1, "the document is empty", f"a {cls.__name__} mapping")])
    if not isinstance(data, dict):
        raise InputError([where.fault((), f"the document is {_describe(data)}", "a mapping")])
    if precheck is not None and (refusal := precheck(data, where)) is not None:
        raise InputError([refusal])
    if wrap is not None:
        data = {wrap: data}
        where = attrs.evolve(where, skip=1)
    try:
        model = CONVERTER.structure(data, cls)
    except Exception as exc:  # the converter's exception tree, mapped to positions
        faults = structure_faults(exc, where) or [Fault(file, 1, 1, str(exc))]
        if validate is not None:
            faults += _faults_beyond_types(data, cls, exc, where, validate)
        raise InputError(faults) from None
    faults = validate(model, where) if validate is not None else []
    if faults:
        raise InputError(faults)
    return model, where


def _faults_beyond_types(data: Any, cls: type[T], exc: BaseException, where: DocumentPositions,
                         validate: Callable[[T, DocumentPositions], list[Fault]]) -> list[Fault]:
    repaired: list[tuple[Any, ...]] = []
    for _ in range(4):
        data, paths = repair(data, cls, exc)
        if paths is None:
            return []  # something was missing or not a plain value: nothing sound to check
        repaired += paths
        try:
            model = CONVERTER.structure(data, cls)
        except Exception as again:  # noqa: BLE001 - the converter's exception tree
            exc = again
            continue
        covered = {where.position(path, at_key=key) for path in repaired for key in (False, True)}
        return [f for f in validate(model, where) if (f.line, f.col) not in covered]
    return []


def join_errors(*attempts: Iterable[Fault]) -> None:
    faults = [f for group in attempts for f in group]
    if faults:
        raise InputError(faults)
