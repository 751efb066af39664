"""Loading the four input documents from text (the ledger's text: resolver/_ledger_text.py).

Invariants:
- Pure: text (or the bytes of a file, or a Parsed document) and a file name in; (model,
  DocumentPositions) out, or InputError carrying every fault of the document (reading faults
  located at the byte or node, structure faults, then, once it structures, validation
  faults). The limits of _yaml bound the time and memory of every load.
- load_inputs gathers the faults of every document before raising, so one run shows them all.
- The ledger's text (load_ledger, dump_ledger, written_ledger) is resolver/_ledger_text.py's.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional, TypeVar, Union

import attrs
from pyrsistent import pmap
from ruamel.yaml import YAML

from ._errors import Fault, InputError
from ._inputs import Catalogue, Sources
from ._ledger import EMPTY_LEDGER, Ledger
from ._load import DocumentPositions, Parsed, Precheck, Text, load_document, parse_document
from ._model import Mesh, Module, Provisions
from ._resolution import Resolution
from ._resolve import resolve
from ._ledger_text import load_ledger
from ._yaml import MESH_LIMITS
from ._validate import (
    validate_catalogue,
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
