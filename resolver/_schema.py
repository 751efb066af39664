"""JSON Schema (draft 2020-12) of every document, generated from the attrs classes.

Invariants:
- The schema is derived from the same classes and the same key renames (document_key) the converter
  uses, so it cannot drift from what the loader accepts: properties are the keys as written,
  `additionalProperties` is false, `required` is exactly the fields without a default.
- Value constraints the validator enforces on single values (enumerations, port ranges, octal
  modes) are repeated here as keywords; references between keys are not expressible and are
  left to the validator.
- Pure and deterministic: the same classes give the same schema, keys in field order.
"""

from __future__ import annotations

import typing
from typing import Any, Union

import attrs
from pyrsistent.typing import PMap, PVector

from ._binding_files import BINDING_FORMATS
from ._errors import MeshError
from ._frozen import FrozenMap
from ._convert import CONVERTER, document_key
from ._declaration import Declaration
from ._ledger import LEDGER_VERSION, Ledger
from ._model import GRANT_KINDS, ROTATION_WAYS, Mesh, Module, Provision
from ._validate import (
    ACCESS_MODES,
    BINDING_KEYS,
    FLOOR_SOURCES,
    HOST_PORT_FLOOR,
    LOG_DRIVERS,
    LOG_SIZE,
    LOGIN_SLOTS,
    PROTOCOLS,
    SCOPES,
)

DIALECT = "https://json-schema.org/draft/2020-12/schema"
PORT = {"type": "integer", "minimum": 1, "maximum": 65535}
HOST_PORT = {"type": "integer", "minimum": HOST_PORT_FLOOR, "maximum": 65535}

# Single-value constraints the validator enforces, keyed by (class name, attribute name).
CONSTRAINTS: dict[tuple[str, str], dict[str, Any]] = {
    ("Listen", "port"): PORT,
    ("Listen", "fixed"): PORT,
    ("Listen", "protocol"): {"enum": list(PROTOCOLS)},
    ("SecretRotation", "how"): {"enum": list(ROTATION_WAYS)},
    ("Access", "mode"): {"enum": list(ACCESS_MODES)},
    ("StateDir", "owner"): {"pattern": "^[0-9]+:[0-9]+$"},
    ("Mount", "format"): {"enum": list(BINDING_FORMATS)},
    ("Mount", "owner"): {"pattern": "^[0-9]+:[0-9]+$"},
    ("StateDir", "mode"): {"pattern": "^[0-7]{3,4}$"},
    ("Health", "timeout"): {"minimum": 1},
    ("Provision", "scope"): {"enum": list(SCOPES)},
    ("Provision", "grant"): {"enum": list(GRANT_KINDS)},
    ("Provision", "keys"): {"items": {"enum": list(BINDING_KEYS)}},
    ("Node", "ssh_port"): PORT,
    ("PortRange", "first"): HOST_PORT,
    ("PortRange", "last"): HOST_PORT,
    ("Floor", "port"): PORT,
    ("Floor", "protocol"): {"enum": list(PROTOCOLS)},
    ("Floor", "sources"): {"enum": list(FLOOR_SOURCES)},
    ("Exposure", "to"): {"minItems": 1},
    ("CaConfig", "validity_days"): {"minimum": 1},
    ("CaConfig", "renew_before_days"): {"minimum": 0},
    ("Logs", "driver"): {"enum": list(LOG_DRIVERS)},
    ("Logs", "max_size"): {"pattern": LOG_SIZE.pattern},
    ("Logs", "max_files"): {"minimum": 1},
    ("Ledger", "version"): {"const": LEDGER_VERSION},
    ("PortAssignment", "port"): PORT,
    ("Generation", "generation"): {"minimum": 1},
    ("Generation", "slot"): {"enum": list(LOGIN_SLOTS)},
    ("Ledger", "pins"): {"additionalProperties": {"type": "string",
                                                  "pattern": "^sha256:[0-9a-f]{64}$"}},
    # written as one JSON text per instance (resolver/_documents.dump_ledger)
    ("Ledger", "declared"): {"additionalProperties": {
        "type": "string", "contentMediaType": "application/json",
        "contentSchema": {"$ref": "#/$defs/InstanceRendering"}}},
}

# Keys the loader requires although the model has a default (the ledger's version).
ALSO_REQUIRED: dict[str, tuple[str, ...]] = {"Ledger": ("version",)}


def _is_generic(t: Any, origin: Any) -> bool:
    return t is origin or typing.get_origin(t) is origin


class _Builder:
    def __init__(self) -> None:
        self.defs: dict[str, dict[str, Any]] = {}

    def of(self, t: Any) -> dict[str, Any]:
        if t is str:
            return {"type": "string"}
        if t is bool:
            return {"type": "boolean"}
        if t is int:
            return {"type": "integer"}
        if t is type(None):
            return {"type": "null"}
        if t is Any:
            return {}
        if typing.get_origin(t) is Union:
            return {"anyOf": [self.of(a) for a in typing.get_args(t)]}
        if _is_generic(t, PMap) or _is_generic(t, FrozenMap) or typing.get_origin(t) is dict:
            _, value_t = typing.get_args(t) or (str, Any)
            return {"type": "object", "additionalProperties": self.of(value_t)}
        if _is_generic(t, PVector) or typing.get_origin(t) is list:
            (item_t,) = typing.get_args(t) or (Any,)
            return {"type": "array", "items": self.of(item_t)}
        if attrs.has(t):
            self.define(t)
            return {"$ref": f"#/$defs/{t.__name__}"}
        raise TypeError(f"no JSON Schema for {t!r}")

    def define(self, cls: type) -> None:
        if cls.__name__ in self.defs:
            return
        self.defs[cls.__name__] = {}  # placeholder: recursion stops here
        hints = typing.get_type_hints(cls)
        properties: dict[str, dict[str, Any]] = {}
        required: list[str] = []
        for field in attrs.fields(cls):
            schema = dict(self.of(hints[field.name]))
            extra = CONSTRAINTS.get((cls.__name__, field.name), {})
            schema = _constrain(schema, extra)
            if field.default is attrs.NOTHING:
                required.append(document_key(cls, field.name))
            else:
                default = _json_default(field.default, hints[field.name])
                if default is not _NO_DEFAULT:
                    schema["default"] = default
            properties[document_key(cls, field.name)] = schema
        required += [k for k in ALSO_REQUIRED.get(cls.__name__, ()) if k not in required]
        definition: dict[str, Any] = {"type": "object"}
        doc = _summary(cls)
        if doc:
            definition["description"] = doc
        definition["properties"] = properties
        if required:
            definition["required"] = required
        definition["additionalProperties"] = False
        self.defs[cls.__name__] = definition


def _constrain(schema: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """Apply constraints to the non-null branch of an Optional, or to the schema itself."""
    if not extra:
        return schema
    if "anyOf" in schema:
        branches = [b if b.get("type") == "null" else _constrain(dict(b), extra)
                    for b in schema["anyOf"]]
        return {**schema, "anyOf": branches}
    return {**schema, **extra}


_NO_DEFAULT = object()


def _json_default(value: Any, declared: Any) -> Any:
    if isinstance(value, attrs.Factory):  # type: ignore[arg-type]
        return _NO_DEFAULT
    plain = CONVERTER.unstructure(value, unstructure_as=declared)
    if plain is None or isinstance(plain, (str, int, bool, list, dict)):
        return plain
    return _NO_DEFAULT


def _summary(cls: type) -> str:
    doc = (cls.__doc__ or "").strip()
    if not doc or doc.startswith(f"{cls.__name__}("):  # attrs' generated signature, not prose
        return ""
    return " ".join(doc.split("\n\n")[0].split())


def _document(title: str, root: Any, description: str) -> dict[str, Any]:
    builder = _Builder()
    body = builder.of(root)
    schema: dict[str, Any] = {
        "$schema": DIALECT,
        "$id": f"https://mesh.invalid/schema/{title}.json",
        "title": title,
        "description": description,
    }
    schema.update(body)
    schema["$defs"] = dict(sorted(builder.defs.items()))
    return schema


DOCUMENTS: dict[str, tuple[Any, str]] = {
    "module": (Module, "catalogue/<module>/module.yaml: one module of the catalogue."),
    "provisions": (PMap[str, Provision],
                   "catalogue/provisions.yaml: provision name → how it is served."),
    "mesh": (Mesh, "mesh.yaml: the nodes, the instances assigned to them, mesh-wide settings."),
    "ledger": (Ledger, "The ledger (machine-written): what was issued once and is kept."),
    "declaration": (Declaration, "One node's whole desired state, as the resolver emits it."),
}


def document_names() -> list[str]:
    """The documents json_schema describes (mesh, module, provisions, ledger, …)."""
    return list(DOCUMENTS)


def json_schema(document: str) -> dict[str, Any]:
    """The JSON Schema of one document type (see document_names())."""
    if document not in DOCUMENTS:
        raise MeshError(f"no document type {document!r}; expected one of " + ", ".join(DOCUMENTS))
    root, description = DOCUMENTS[document]
    return _document(document, root, description)
