"""Neutral repairs of a document that failed to structure, so its other checks can still run.

Invariants:
- Only two repairs are made: an unknown key is removed, and a scalar of the wrong type is
  replaced by a neutral scalar of the right type ("" / 0 / false, never null). Anything else (a
  missing key, a collection or mapping of the wrong shape, a bad mapping key) is not repaired:
  the caller then reports the type faults alone rather than guess.
- The input data is never changed; a repaired copy is returned with the paths it touched, so
  the caller can drop faults that merely echo a repair.
"""

from __future__ import annotations

import copy
import typing
from typing import Any, Optional, Union

import attrs
from cattrs.errors import (
    AttributeValidationNote,
    BaseValidationError,
    ForbiddenExtraKeysError,
    IterableValidationNote,
)
from pyrsistent.typing import PMap, PVector

from ._convert import document_key

NEUTRAL = {str: "", int: 0, bool: False}


def _failures(exc: BaseException,
              path: tuple[Any, ...] = ()) -> list[tuple[str, tuple[Any, ...], Any]]:
    """(kind, path, detail) for each leaf of the converter's exception tree."""
    if isinstance(exc, ForbiddenExtraKeysError):
        return [("extra", path, key) for key in exc.extra_fields]
    if isinstance(exc, BaseValidationError):
        found = []
        for sub in exc.exceptions:
            sub_path, kind = path, "value"
            for note in getattr(sub, "__notes__", ()):
                if isinstance(note, AttributeValidationNote):
                    # the attribute's name: document_path spells it as documents write it
                    # (note.type is the attribute's type, not the class that holds it)
                    sub_path = path + (note.name,)
                elif isinstance(note, IterableValidationNote):
                    sub_path = path + (note.index,)
                    if str(note).startswith("Structuring mapping key"):
                        kind = "key"
            if isinstance(sub, KeyError):
                found.append(("missing", sub_path, None))
            elif kind == "key":
                found.append(("key", sub_path, None))
            else:
                found.extend(_failures(sub, sub_path))
        return found
    return [("value", path, None)]


def _strip_optional(t: Any) -> tuple[Any, bool]:
    if typing.get_origin(t) is Union:
        args = [a for a in typing.get_args(t) if a is not type(None)]
        return (args[0] if len(args) == 1 else t), True
    return t, False


def type_at(cls: type, path: tuple[Any, ...]) -> Optional[Any]:
    """The declared type of the value at `path` in a document of `cls`, if it can be told."""
    return _walk(cls, path)[0]


def document_path(cls: type, path: tuple[Any, ...]) -> tuple[Any, ...]:
    """`path` with each attribute name spelled as documents write its key (the converter's
    notes name `run_once`, the document says `run-once`)."""
    return _walk(cls, path)[1]


def _walk(cls: type, path: tuple[Any, ...]) -> tuple[Optional[Any], tuple[Any, ...]]:
    t: Any = cls
    spelled: list[Any] = []
    for i, key in enumerate(path):
        t, _ = _strip_optional(t)
        if attrs.has(t):
            hints = typing.get_type_hints(t)
            names = {document_key(t, a.name): a.name for a in attrs.fields(t)}
            names.update({a.name: a.name for a in attrs.fields(t) if a.name not in names})
            if key not in names:
                return None, tuple(spelled) + path[i:]
            spelled.append(document_key(t, names[key]))
            t = hints[names[key]]
            continue
        spelled.append(key)
        if typing.get_origin(t) in (PMap, dict):
            t = typing.get_args(t)[1]
        elif typing.get_origin(t) in (PVector, list):
            t = typing.get_args(t)[0]
        else:
            return None, tuple(spelled) + path[i + 1:]
    return t, tuple(spelled)


def _container(data: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        if isinstance(data, dict) and key in data:
            data = data[key]
        elif isinstance(data, list) and isinstance(key, int) and 0 <= key < len(data):
            data = data[key]
        else:
            return None
    return data


def repair(data: Any, cls: type,
           exc: BaseException) -> tuple[Any, Optional[list[tuple[Any, ...]]]]:
    """A copy of `data` with the converter's failures neutralised, and the paths repaired;
    (data, None) when some failure is not one this module repairs."""
    data = copy.deepcopy(data)
    repaired: list[tuple[Any, ...]] = []
    for kind, path, detail in _failures(exc):
        if kind == "extra":
            holder = _container(data, path)
            if not isinstance(holder, dict):
                return data, None
            holder.pop(detail, None)
            continue
        if kind != "value" or not path:
            return data, None
        path = document_path(cls, path)
        declared, _ = _strip_optional(type_at(cls, path))
        holder = _container(data, path[:-1])
        if declared not in NEUTRAL or holder is None:
            return data, None
        holder[path[-1]] = NEUTRAL[declared]  # not null: "absent" would raise faults of its own
        repaired.append(path)
    return data, repaired
