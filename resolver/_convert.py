"""A strict cattrs converter between plain data and the frozen model.

Invariants:
- No coercion: a string field refuses 3, an int field refuses "3" and True, a bool refuses 1.
- Unknown keys are refused; keys are the YAML spellings (`run-once`, `as`), derived
  mechanically from attribute names by yaml_key, so an error can name the key as written.
- Collections come out immutable (PMap / PVector, FrozenMap where the model says so) and go
  back out as dicts and lists;
  `structure(unstructure(x)) == x` for every document type.
- Unstructuring omits attributes equal to their default, so written documents stay short.
- The shallow converter (the declaration digest's) decides keys and omissions in the same
  generated functions and only leaves each attribute's value as it is: an encoder given
  `shallow_part` as its fallback writes the same document without the copies.
"""

from __future__ import annotations

import typing
from typing import Any, Callable

import attrs
import cattrs
from cattrs.fns import identity
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override
from pyrsistent import PMap as RuntimePMap
from pyrsistent import PVector as RuntimePVector
from pyrsistent import pmap, pvector
from pyrsistent.typing import PMap, PVector

from ._frozen import FrozenMap


def yaml_key(attribute: str) -> str:
    """The document key for an attribute name: `run_once` → `run-once`, `as_` → `as`."""
    return attribute.rstrip("_").replace("_", "-")


# Documents the operator writes (and the ledger) spell keys as YAML does (`run-once`); the
# resolver's output documents (declarations, plans) are JSON for programs and keep the
# attribute names (`host_port`), as the plan's documented --json fields do.
SNAKE_CASE_MODULES = ("resolver._declaration",)


def document_key(cls: type, attribute: str) -> str:
    """The key `attribute` of `cls` has in documents (`run_once` → `run-once`)."""
    if cls.__module__ in SNAKE_CASE_MODULES:
        return attribute.rstrip("_")
    return yaml_key(attribute)


def _strict(expected: type, name: str) -> Callable[[Any, Any], Any]:
    def structure(value: Any, _type: Any) -> Any:
        if type(value) is not expected:  # bool is not int, int is not str
            raise TypeError(f"expected {name}, got {_describe(value)}")
        if isinstance(value, str) and not is_text(value):
            raise TypeError(f"expected {name} of text, got {_describe(value)} holding {NOT_TEXT}")
        return value

    return structure


#: What a string that is not text holds, as faults say it.
NOT_TEXT = ("a lone surrogate (an escape such as \\ud800 with no pair), which no file, digest "
            "or container can carry")


def is_text(value: str) -> bool:
    """Whether UTF-8 can hold `value`: a JSON or YAML escape can make a lone surrogate, which
    no file, digest or environment can carry (str.isascii answers most strings at once)."""
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _all_text(values: Any) -> bool:
    return all(map(is_text, values))


def _describe(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, (int, float)):
        return f"a number ({value!r})"
    if isinstance(value, str):
        shown = repr(value)
        return f"a string ({shown if len(shown) <= 60 else shown[:50] + '…' + shown[-5:]})"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__


PLAIN = (str, int, bool)  # the exact types the strict hooks pass through unchanged


def _entries(mapping: Any) -> Any:
    """The (key, value) pairs of a mapping; a PMap's straight from its buckets (its `items()`
    view goes through two more layers per pair, and declarations hold tens of thousands)."""
    return mapping.iteritems() if type(mapping) is RuntimePMap else mapping.items()


def make_converter(omit_defaults: bool = True, shallow: bool = False) -> cattrs.Converter:
    """The converter; `shallow`: a model unstructures to a dict of its document keys (renamed,
    defaults omitted, exactly as here) whose values are the attributes themselves, unconverted
    (for an encoder that reaches them through `shallow_part`)."""
    conv = cattrs.Converter(forbid_extra_keys=True, omit_if_default=omit_defaults)

    conv.register_structure_hook(str, _strict(str, "a string"))
    conv.register_structure_hook(int, _strict(int, "a whole number"))
    conv.register_structure_hook(bool, _strict(bool, "true or false"))

    def is_pmap(t: Any) -> bool:
        return typing.get_origin(t) is PMap or t is PMap

    def is_frozen_map(t: Any) -> bool:
        return typing.get_origin(t) is FrozenMap or t is FrozenMap

    def is_pvector(t: Any) -> bool:
        return typing.get_origin(t) is PVector or t is PVector

    def structure_mapping(value: Any, t: Any) -> Any:
        """The entries of a mapping document, structured to the declared key and value types."""
        if not isinstance(value, dict):
            raise TypeError(f"expected a mapping, got {_describe(value)}")
        key_t, val_t = typing.get_args(t) or (str, Any)
        if (key_t in PLAIN and val_t in PLAIN and {*map(type, value)} <= {key_t}
                and {*map(type, value.values())} <= {val_t}
                and (key_t is not str or _all_text(value))
                and (val_t is not str or _all_text(value.values()))):
            return value  # every key and value already what its strict hook accepts
        return conv.structure(value, dict[key_t, val_t])  # type: ignore[valid-type]

    def structure_pmap(value: Any, t: Any) -> PMap[Any, Any]:
        return pmap(structure_mapping(value, t))

    def structure_frozen_map(value: Any, t: Any) -> FrozenMap[Any, Any]:
        return FrozenMap(structure_mapping(value, t))

    def structure_pvector(value: Any, t: Any) -> PVector[Any]:
        if not isinstance(value, list):
            raise TypeError(f"expected a list, got {_describe(value)}")
        (item_t,) = typing.get_args(t) or (Any,)
        if item_t in PLAIN and {*map(type, value)} <= {item_t} \
                and (item_t is not str or _all_text(value)):
            return pvector(value)  # every element already what its strict hook accepts
        return pvector(conv.structure(value, list[item_t]))  # type: ignore[valid-type]

    conv.register_structure_hook_func(is_pmap, structure_pmap)
    conv.register_structure_hook_func(is_frozen_map, structure_frozen_map)
    conv.register_structure_hook_func(is_pvector, structure_pvector)
    def element_hook(item_t: Any) -> Any:
        """How one element of a declared type unstructures, decided once per type (not looked
        up again for every element): a plain value stays itself, anything else goes through
        the hook of its declared type (runtime dispatch for `Any`)."""
        if item_t in (str, int, bool):
            return None
        if item_t is Any:
            return conv.unstructure
        return conv.get_unstructure_hook(item_t)

    def unstructure_pmap_factory(t: Any) -> Any:
        args = typing.get_args(t)
        val_t = args[1] if len(args) == 2 else Any
        hook = element_hook(val_t)
        if hook is None:  # the exact plain type needs nothing; a subclass (a StrEnum) its value
            return lambda m: {k: v if type(v) is val_t else conv.unstructure(v)
                              for k, v in _entries(m)}
        return lambda m: {k: hook(v) for k, v in _entries(m)}

    def unstructure_pvector_factory(t: Any) -> Any:
        args = typing.get_args(t)
        item_t = args[0] if len(args) == 1 else Any
        hook = element_hook(item_t)
        if hook is None:
            return lambda v: [i if type(i) is item_t else conv.unstructure(i) for i in v]
        return lambda v: [hook(i) for i in v]

    conv.register_unstructure_hook_factory(is_pmap, unstructure_pmap_factory)
    conv.register_unstructure_hook_factory(is_frozen_map, unstructure_pmap_factory)
    conv.register_unstructure_hook_factory(is_pvector, unstructure_pvector_factory)
    # values unstructured without a declared type arrive with pyrsistent's runtime classes
    conv.register_unstructure_hook_func(
        lambda t: isinstance(t, type) and issubclass(t, RuntimePMap),
        lambda m: {k: conv.unstructure(v) for k, v in _entries(m)})
    conv.register_unstructure_hook_func(
        lambda t: isinstance(t, type) and issubclass(t, RuntimePVector),
        lambda v: [conv.unstructure(i) for i in v])

    def attrs_structure(cls: type) -> Callable[[Any, Any], Any]:
        renames: dict[str, Any] = {a.name: override(rename=document_key(cls, a.name))
                                   for a in attrs.fields(cls)}
        inner: Callable[[Any, Any], Any] = make_dict_structure_fn(
            cls, conv, _cattrs_forbid_extra_keys=True, **renames)

        def structure(value: Any, t: Any) -> Any:
            if not isinstance(value, dict):
                raise TypeError(f"expected a mapping, got {_describe(value)}")
            return inner(value, t)

        return structure

    def attrs_unstructure(cls: type) -> Callable[[Any], Any]:
        leave = identity if shallow else None  # None: the hook of the attribute's type
        renames: dict[str, Any] = {
            a.name: override(rename=document_key(cls, a.name), unstruct_hook=leave)
            for a in attrs.fields(cls)}
        return make_dict_unstructure_fn(cls, conv, _cattrs_omit_if_default=omit_defaults,
                                        **renames)

    conv.register_structure_hook_factory(attrs.has, attrs_structure)
    conv.register_unstructure_hook_factory(attrs.has, attrs_unstructure)
    return conv


CONVERTER = make_converter()
FULL_CONVERTER = make_converter(omit_defaults=False)  # every field, for programs reading plans
SHALLOW_CONVERTER = make_converter(shallow=True)  # CONVERTER's documents, one level at a time


def unstructure(obj: Any) -> Any:
    """A model as plain data (dicts, lists, scalars) with keys as documents write them,
    attributes at their default left out."""
    return CONVERTER.unstructure(obj)


def unstructure_full(obj: Any) -> Any:
    """Like unstructure, but every attribute is present (defaults too): plans for programs."""
    return FULL_CONVERTER.unstructure(obj)


def _part_for(cls: type) -> Callable[[Any], Any]:
    """How shallow_part writes one level of a `cls` (decided once per class)."""
    if issubclass(cls, RuntimePVector):
        return cls.tolist
    if issubclass(cls, RuntimePMap):
        return lambda m: dict(_entries(m))
    if attrs.has(cls):
        return SHALLOW_CONVERTER.get_unstructure_hook(cls)

    def refuse(value: Any) -> Any:
        raise TypeError(f"{cls.__name__} has no document form")

    return refuse


_PARTS: dict[type, Callable[[Any], Any]] = {}  # memo of _part_for, by exact class


def shallow_part(value: Any) -> Any:
    """One level of `value` as unstructure would write it, for an encoder's fallback (orjson's
    `default=`) when it meets what it does not write itself: a model → the dict of its document
    keys (SHALLOW_CONVERTER: values left for the encoder), a vector → a list, a PMap → a dict.
    The encoder writes str, int, bool, None, dicts (FrozenMap included), lists and enums (by
    value) as unstructure leaves them; anything else is refused (TypeError), as JSON would."""
    part = _PARTS.get(type(value))
    if part is None:
        part = _PARTS[type(value)] = _part_for(type(value))
    return part(value)
