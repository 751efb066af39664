"""Loading the four input documents from text, and writing the ledger back as text.

Invariants:
- Pure: text (or the bytes of a file, or a Parsed document) and a file name in; (model,
  DocumentPositions) out, or InputError carrying every fault of the document (reading faults
  located at the byte or node, structure faults, then, once it structures, validation
  faults). The limits of _yaml bound the time and memory of every load.
- A ledger is refused at an unknown version before its shape is looked at, so a newer ledger
  is never half-read (and, since nothing here writes files, never overwritten).
- load_inputs gathers the faults of every document before raising, so one run shows them all.
- dump_ledger is deterministic: `version` first, every other key sorted, so equal ledgers are
  equal text and load_ledger(dump_ledger(x)) == x. It writes canonical JSON (YAML 1.2), one
  entry of each section a line. Each rendering under `declared` (an older ledger's record of
  what was declared: now one file per node, _declared_record) is one canonical JSON text;
  load_ledger also reads one written as a mapping.
- written_ledger(x) is (dump_ledger(x), what parse_document reads from that text) without the
  YAML reader's pass: the data is json's reading; the positions are laid out from dump_ledger's
  layout down to each section's entries, each entry's value (a collection) held as its one
  line of text that the positions read when a path descends into it (resolver/_load.py); a
  text that might break a limit of the reader, or not laid out as expected, is parsed by it
  (property_tests/test_written_ledger_props.py holds both to the reader).
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Mapping, Optional, TypeVar, Union

import attrs
from pyrsistent import pmap
from ruamel.yaml import YAML

from ._convert import unstructure
from ._errors import Fault, InputError
from ._inputs import Catalogue, Sources
from ._ledger import EMPTY_LEDGER, Ledger
from ._load import DocumentPositions, Parsed, Precheck, Text, load_document, parse_document
from ._model import Mesh, Module, Provisions
from ._resolution import Resolution
from ._resolve import resolve
from ._yaml import MAX_DEPTH, MAX_NUMBER, MAX_STRING, MESH_LIMITS, Limits, Positions
from ._validate import (
    ledger_version_fault,
    validate_catalogue,
    validate_ledger,
    validate_mesh,
    validate_module,
    validate_provisions,
)


T = TypeVar("T")


def _structured(text: Text, file: str, cls: type[T],
                validate: Callable[[T, DocumentPositions], list[Fault]], *,
                wrap: Optional[str] = None,
                precheck: Optional[Precheck] = None) -> tuple[T, DocumentPositions]:
    """Parse, structure and validate one document, raising InputError with every fault."""
    return load_document(text, file, cls, wrap=wrap, precheck=precheck, validate=validate)


def load_module(text: Text, file: str, *, name: Optional[str] = None) -> tuple[Module, DocumentPositions]:
    """A module.yaml; `name`, when given, is its directory's name and must equal `name:`."""

    def validate(module: Module, where: DocumentPositions) -> list[Fault]:
        faults = validate_module(module, where)
        if name is not None and module.name != name:
            faults.append(where.fault(("name",), f"module name {module.name!r} differs from its "
                                      "directory", repr(name)))
        return faults

    return _structured(text, file, Module, validate)


def load_provisions(text: Text, file: str) -> tuple[Provisions, DocumentPositions]:
    """provisions.yaml: a bare mapping of provision name → definition."""
    return _structured(text, file, Provisions, validate_provisions, wrap="provisions")


def load_mesh(text: Text, file: str) -> tuple[Mesh, DocumentPositions]:
    """A mesh.yaml (text, bytes or a Parsed): the Mesh and its positions, or one InputError
    with every fault."""
    return _structured(_parsed(text, file), file, Mesh, validate_mesh,
                       precheck=_backup_target_precheck)


def _parsed(text: Text, file: str) -> Parsed:
    """A document of a kind that grows with the mesh (mesh.yaml, the ledger), parsed within
    its own limits (MESH_LIMITS)."""
    return text if isinstance(text, Parsed) else parse_document(text, file, MESH_LIMITS)


def _backup_target_precheck(data: dict[Any, Any], where: DocumentPositions) -> Optional[Fault]:
    """`backups: target: INSTANCE` (a string: the mesh's own backup store) read as
    `{instance: INSTANCE}`; the mapping form (an outside repository) is read as written."""
    backups = data.get("backups")
    if isinstance(backups, dict) and isinstance(backups.get("target"), str):
        backups["target"] = {"instance": backups["target"]}
    return None


def _ledger_precheck(data: dict[Any, Any], where: DocumentPositions) -> Optional[Fault]:
    """The version first; then each `declared` rendering, written as one JSON text (see
    dump_ledger), read back in place so the converter structures it like any mapping."""
    fault = ledger_version_fault(data, where)
    if fault is not None or not isinstance(data.get("declared"), dict):
        return fault
    for name, value in data["declared"].items():
        if isinstance(value, str):
            try:
                data["declared"][name] = json.loads(value)
            except ValueError as error:
                return where.fault(("declared", name), f"the rendering of {name} is not JSON "
                                   f"({error})", "a rendering as `mesh plan --out` records it")
    return None


def load_ledger(text: Text, file: str) -> tuple[Ledger, DocumentPositions]:
    """A ledger at version 1; any other version is refused with its position."""
    return _structured(_parsed(text, file), file, Ledger, validate_ledger,
                       precheck=_ledger_precheck)


class _Text:
    """The smallest stream ruamel can write to (resolver/ holds no io)."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def write(self, data: Union[str, bytes]) -> None:
        self.parts.append(data.decode() if isinstance(data, bytes) else data)


def dump_yaml(data: Any) -> str:
    """Plain data as block-style YAML text, keys in the order given."""
    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    yaml.sort_base_mapping_type_on_output = False  # type: ignore[assignment]  # a bool
    yaml.width = 4096  # sealed values and PEMs stay on one line each
    yaml.allow_unicode = False  # escape non-ASCII: a raw U+0085 would read back as a line break
    out = _Text()
    yaml.dump(data, out)
    return "".join(out.parts)


def dump_ledger(ledger: Ledger, previous: Optional[tuple[Ledger, str]] = None) -> str:
    """The ledger as text: canonical JSON, which is YAML 1.2 (a flow mapping), one entry of
    each section a line: `version` first, then every key sorted, so equal ledgers are equal
    text. json's C encoder writes a 10,000-instance ledger in a fraction of what a YAML
    emitter takes (ruamel's: seconds). Strings are written as YAML and JSON both read them
    (canonical_json). Each `declared` rendering (an older ledger's record, see
    _declared_record) is one JSON text.

    `previous`: a ledger and its text as this function wrote it (the caller's last write);
    each entry equal to that ledger's is given its line from that text, not encoded again
    (a one-line change of a 10,000-instance ledger: ~0.02 s against ~0.06 s). The text is
    the same either way (property_tests/test_written_ledger_props.py); a `previous` whose
    text is not laid out for its ledger is not used."""
    body = _ledger_body(ledger)
    encode = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                              allow_nan=False).encode
    kept = _entry_lines(*previous) if previous is not None else None
    parts = ['{"version":' + encode(ledger.version)]
    for key in sorted(body):
        value = body[key]
        if isinstance(value, dict) and value:
            was, lines = kept.get(key, ({}, {})) if kept is not None else ({}, {})
            entries = ",\n".join([
                line if line is not None and name in was and was[name] == value[name]
                else encode(name) + ":" + encode(value[name])
                for name in sorted(value) for line in (lines.get(name),)])
            parts.append(encode(key) + ":{\n" + entries + "\n}")
        else:
            parts.append(encode(key) + ":" + encode(value))
    # the characters YAML reads otherwise are inside strings only: escaped in one pass (a
    # line kept from `previous` is escaped already, and escaping it again changes nothing)
    return _yaml_safe(",\n".join(parts) + "}\n")


def _ledger_body(ledger: Ledger) -> dict[str, Any]:
    """The ledger's sections as dump_ledger writes them (plain data; `version` aside)."""
    body: dict[str, Any] = unstructure(ledger)
    body.pop("version", None)
    if "declared" in body:
        body["declared"] = {name: json.dumps(rendering, sort_keys=True, separators=(",", ":"))
                            for name, rendering in body["declared"].items()}
    return body


def _entry_lines(ledger: Ledger, text: str
                 ) -> Optional[dict[str, tuple[dict[str, Any], dict[str, str]]]]:
    """By section of `ledger` written as `text` by dump_ledger: (its entries as plain data,
    each entry's line without its `,`); None when `text` has not the lines that layout
    gives `ledger` (then nothing is kept)."""
    body = _ledger_body(ledger)
    lines = text.split("\n")
    found: dict[str, tuple[dict[str, Any], dict[str, str]]] = {}
    at = 1  # line 0: `{"version":N,`
    for key in sorted(body):
        value = body[key]
        if isinstance(value, dict) and value:
            names = sorted(value)
            written = lines[at + 1:at + 1 + len(names)]
            if len(written) != len(names) or not lines[at].endswith(":{"):
                return None
            found[key] = (value, {name: line[:-1] if line.endswith(",") else line
                                  for name, line in zip(names, written)})
            at += len(names) + 2
        else:
            at += 1
    if at != len(lines) - 1:  # the text ends with the root's `}` and a line break
        return None
    return found


def written_ledger(ledger: Ledger, file: str,
                   previous: Optional[tuple[Ledger, str]] = None) -> tuple[str, Parsed]:
    """The ledger's text (dump_ledger) and what parse_document(text, file, MESH_LIMITS) reads
    from it, without the YAML reader's pass over the text (~0.25 s at 10,000 instances): the
    data is json's reading of the text (~0.01 s), which the document reader's is, and the
    positions are laid out from the text's known layout (_laid_out), each entry's value
    read by the document reader only when a path descends into it (a fault's), as the reader
    reads it (property_tests/test_written_ledger_props.py). A text that might break a limit
    of the reader (bounded from its layout by _reads_within), or that is not laid out as
    dump_ledger lays it out, is parsed now, so its fault is raised as parse_document raises
    it. `previous`: as dump_ledger takes it (the lines of unchanged entries kept)."""
    text = dump_ledger(ledger, previous)
    if _reads_within(text, MESH_LIMITS):
        data = json.loads(text)
        tree = _laid_out(text, data) if isinstance(data, dict) else None
        if tree is not None:
            return text, Parsed(data, DocumentPositions(file, tree))
    return text, parse_document(text, file, MESH_LIMITS)


def _laid_out(text: str, data: dict[str, Any]) -> Optional[Positions]:
    """The position tree of dump_ledger's `text` (whose reading is `data`) from its layout:
    `{"version":N,` on line 1; then each section on lines of its own, `"key":{`, one entry a
    line (`"name":VALUE` and a `,` but the last), then `}` (and the `,` or `}` after it); or
    `"key":VALUE` on one line, an empty or non-mapping one. Every key starts its line (col 1;
    the first after the root's `{`), its value right after its `:`. A scalar value's child is
    None; a collection's is its one line of text, VALUE (see resolver/_load.py). None when a
    line is not as this expects (the reader then reads the text)."""
    lines = text.split("\n")
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
            else:
                if line[-1] != ("}" if place == last else ","):
                    return None
                sections[key] = (number + 1, start + 1, number + 1, end + 2, line[end + 1:-1]
                                 if isinstance(value, (dict, list)) else None)
            number += 1
    except (ValueError, IndexError):  # a line not as expected
        return None
    if lines[number:] != [""]:
        return None
    return 1, 1, sections


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


@attrs.frozen(eq=False)
class Loaded:
    """A document loaded already (its loader's model and positions), handed to load_inputs
    in place of its text by a caller that keeps what it loaded (the control loop's loader
    keeps the ledger, ~0.3 s to structure at 10,000 instances)."""

    model: Any
    where: DocumentPositions


@attrs.frozen
class Inputs:
    """Every input document, loaded: what resolve() takes, plus where each came from.

    Where the documents came from (`sources`, `mesh_dir`, `ledger_path`) takes no part in
    equality: the same documents read from other paths are the same inputs."""

    #: The modules and provision definitions.
    catalogue: Catalogue
    #: The mesh description (mesh.yaml).
    mesh: Mesh
    #: What was issued once and is kept (the empty ledger when there is none yet).
    ledger: Ledger
    #: Each document's positions, to locate problems as file:line:col.
    sources: Sources
    #: The mesh directory the documents were read from ("" when not read from one).
    mesh_dir: str = attrs.field(default="", eq=False)
    #: Where the ledger is kept, read from and written back to ("" when not read from one).
    ledger_path: str = attrs.field(default="", eq=False)


from ._artifacts import validate_artifact_store_modules, validate_build_graph  # noqa: E402
from ._declared_record import NodeRecord, load_record, with_records  # noqa: E402


def load_inputs(documents: Mapping[str, tuple[Union[str, bytes, Parsed], str]]) -> Inputs:
    """Load a whole mesh from documents keyed like Sources ("mesh", "provisions", "ledger",
    "module:<name>"), each (text, UTF-8 bytes, a Parsed, or a Loaded by that document's
    loader; file), and "declared:<node>", each
    node's record of what was declared (resolver/_declared_record.py; also a NodeRecord read
    already), joined into the ledger. No "ledger" means the empty ledger; no
    "provisions", none defined. Raises one InputError with the faults of every document."""
    faults: list[Fault] = []
    positions: dict[str, DocumentPositions] = {}

    def attempt(key: str, loader: Callable[..., tuple[Any, DocumentPositions]], *args: Any,
                **kwargs: Any) -> Any:
        if args and isinstance(args[0], Loaded):  # loaded already by this very loader
            positions[key] = args[0].where
            return args[0].model
        try:
            model, where = loader(*args, **kwargs)
        except InputError as error:
            faults.extend(error.faults)
            return None
        positions[key] = where
        return model

    if "mesh" not in documents:
        raise InputError([Fault("mesh.yaml", 0, 0, "no mesh description was given", "a mesh.yaml")])
    mesh = attempt("mesh", load_mesh, *documents["mesh"])
    provisions = Provisions()
    if "provisions" in documents:
        provisions = attempt("provisions", load_provisions, *documents["provisions"]) or provisions
    ledger = EMPTY_LEDGER
    if "ledger" in documents:
        ledger = attempt("ledger", load_ledger, *documents["ledger"]) or EMPTY_LEDGER
    records: list[NodeRecord] = []
    for key in sorted(k for k in documents if k.startswith("declared:")):
        given, file = documents[key]
        if isinstance(given, NodeRecord):  # read already (a long-lived loader keeps them)
            records.append(given)
            continue
        try:
            records.append(load_record(given, file, key[len("declared:"):]))
        except InputError as error:
            faults.extend(error.faults)
    ledger = with_records(ledger, records)
    modules = {}
    for key in sorted(k for k in documents if k.startswith("module:")):
        name = key[len("module:"):]
        module = attempt(key, load_module, *documents[key], name=name)
        if module is not None:
            modules[name] = module
    sources = Sources(pmap(positions))
    unloaded = {k[len("module:"):] for k in documents if k.startswith("module:")} - set(modules)
    faults.extend(validate_catalogue(modules, provisions.provisions, sources, unloaded))
    catalogue = Catalogue(modules=pmap(modules), provisions=provisions.provisions)
    if not faults:  # the artifact rules need a catalogue whose references already hold
        faults.extend(validate_artifact_store_modules(catalogue, sources))
        faults.extend(validate_build_graph(catalogue, sources))
    if faults or mesh is None:
        raise InputError(faults)
    return Inputs(catalogue=catalogue, mesh=mesh, ledger=ledger, sources=sources)


# What the package's root takes from this module (resolver/__init__.py joins these lists).
__all__ = ["resolve_inputs", "load_inputs", "Inputs"]


def resolve_inputs(inputs: Inputs, ledger: Optional[Ledger] = None, *,
                   mesh: Optional[Mesh] = None, now: Optional[str] = None) -> Resolution:
    """resolve() of loaded inputs: their catalogue, mesh and ledger, problems located through
    their sources. `ledger` (or `mesh`) stands in for the loaded one: the ledger after issuing,
    a rotation, a report; `now` enables certificate renewal windows."""
    return resolve(inputs.catalogue, inputs.mesh if mesh is None else mesh,
                   inputs.ledger if ledger is None else ledger, sources=inputs.sources, now=now)
