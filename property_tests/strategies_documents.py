"""Strategies for the document types, derived from their attrs classes.

`documents(cls)` builds any value the model can hold (for round trips through the converter);
`valid_ledgers()` narrows the values the ledger validator checks, so a ledger written by
dump_ledger must load back. `yaml_trees()` is arbitrary YAML-shaped data, and `mutations`
changes one place of a valid document, for the loader's "loads or says where" property.
"""

from __future__ import annotations

import typing
from typing import Any, Union

import attrs
from hypothesis import strategies as st
from pyrsistent import pmap, pvector
from pyrsistent.typing import PMap, PVector

from resolver import (
    BuildRecord,
    Certificate,
    Declaration,
    FrozenMap,
    Generation,
    Ledger,
    Mesh,
    Module,
    PortAssignment,
    Provisions,
)

names = st.text(st.sampled_from("abcdefghijklmnopqrstuvwxyz0123456789-_@.:/"), min_size=1, max_size=8)
texts = st.text(max_size=12)

Overrides = dict[tuple[type, str], st.SearchStrategy]


def strategy_for(t: Any, overrides: Overrides, depth: int = 0) -> st.SearchStrategy:
    if t is str:
        return texts
    if t is int:
        return st.integers(min_value=-(2**40), max_value=2**40)
    if t is bool:
        return st.booleans()
    if typing.get_origin(t) is Union:
        return st.one_of(*[strategy_for(a, overrides, depth) for a in typing.get_args(t)])
    if t is type(None):
        return st.none()
    if typing.get_origin(t) in (PMap, FrozenMap):
        key_t, value_t = typing.get_args(t)
        keys = names if key_t is str else strategy_for(key_t, overrides, depth + 1)
        return st.dictionaries(keys, strategy_for(value_t, overrides, depth + 1),
                               max_size=3 if depth < 3 else 1).map(
            pmap if typing.get_origin(t) is PMap else FrozenMap)
    if typing.get_origin(t) is PVector:
        (item_t,) = typing.get_args(t)
        return st.lists(strategy_for(item_t, overrides, depth + 1),
                        max_size=3 if depth < 3 else 1).map(pvector)
    if attrs.has(t):
        return documents(t, overrides, depth + 1)
    raise TypeError(f"no strategy for {t!r}")


def documents(cls: type, overrides: Overrides | None = None, depth: int = 0) -> st.SearchStrategy:
    """Any instance of an attrs document class; fields with defaults are sometimes left out."""
    overrides = overrides or {}
    hints = typing.get_type_hints(cls)
    required, optional = {}, {}
    for field in attrs.fields(cls):
        strategy = overrides.get((cls, field.name))
        if strategy is None:
            strategy = strategy_for(hints[field.name], overrides, depth)
        if field.default is attrs.NOTHING:
            required[field.name] = strategy
        else:
            optional[field.name] = strategy
    return st.fixed_dictionaries(required, optional=optional).map(lambda kw: cls(**kw))


DIGESTS = st.text("0123456789abcdef", min_size=64, max_size=64).map(lambda h: "sha256:" + h)

TIMES = st.builds(
    lambda y, mo, d, h, mi, sec, z: f"{y:04d}-{mo:02d}-{d:02d}T{h:02d}:{mi:02d}:{sec:02d}{z}",
    st.integers(1970, 2200), st.integers(1, 12), st.integers(1, 28), st.integers(0, 23),
    st.integers(0, 59), st.integers(0, 59), st.sampled_from(["Z", "+00:00", "-05:30"]))

LEDGER_OVERRIDES: Overrides = {
    (Ledger, "version"): st.just(1),
    (PortAssignment, "port"): st.integers(1, 65535),
    (Generation, "generation"): st.integers(1, 2**31),
    (Generation, "slot"): st.sampled_from([None, "a", "b"]),
    (Ledger, "pins"): st.dictionaries(texts, DIGESTS, max_size=3).map(pmap),
    (Ledger, "logins"): st.lists(st.tuples(texts, texts), max_size=4, unique_by=(
        lambda kv: kv[0], lambda kv: kv[1])).map(lambda pairs: pmap(dict(pairs))),  # one each
    (BuildRecord, "bases"): st.dictionaries(texts, texts, max_size=2).map(pmap),
    (Certificate, "not_before"): TIMES,
    (Certificate, "not_after"): TIMES,
}


def valid_ledgers() -> st.SearchStrategy:
    return documents(Ledger, LEDGER_OVERRIDES)


DOCUMENT_TYPES = (Module, Provisions, Mesh, Ledger, Declaration)


# --------------------------------------------------------------------------- YAML-shaped data


scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), texts,
    st.sampled_from(["tcp", "0750", "1000:1000", "${db.host}", "${self.x.port}", "10.0.0.1",
                     "state", "1", "yes", "~", "sha256:00"]),
)

yaml_keys = st.one_of(names, st.sampled_from([
    "name", "mesh", "nodes", "instances", "version", "ports", "listens", "containers",
    "artifacts", "requires", "provides", "mounts", "state", "env", "port", "as", "provision",
    "module", "node", "address", "scope", "grant", "keys", "pins", "credentials", "health",
]))


def yaml_trees(max_leaves: int = 25) -> st.SearchStrategy:
    return st.recursive(
        scalars,
        lambda children: st.one_of(
            st.lists(children, max_size=4),
            st.dictionaries(yaml_keys, children, max_size=5),
        ),
        max_leaves=max_leaves,
    )


def paths(data: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path into plain data (mapping keys and list indices), the root included."""
    found = [prefix]
    if isinstance(data, dict):
        for key, value in data.items():
            found += paths(value, prefix + (key,))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            found += paths(value, prefix + (index,))
    return found


def _parent(data: Any, path: tuple) -> Any:
    for key in path[:-1]:
        data = data[key]
    return data


@st.composite
def mutations(draw, data: Any) -> Any:
    """`data` with one place changed: replaced, removed, or given an extra key or item."""
    import copy

    data = copy.deepcopy(data)
    path = draw(st.sampled_from(paths(data)))
    kind = draw(st.sampled_from(["replace", "remove", "add"]))
    if not path:
        return draw(yaml_trees()) if kind == "replace" else data
    parent = _parent(data, path)
    if kind == "replace":
        parent[path[-1]] = draw(st.one_of(scalars, yaml_trees(8)))
    elif kind == "remove":
        del parent[path[-1]]
    else:
        target = parent[path[-1]]
        if isinstance(target, dict):
            target[draw(yaml_keys)] = draw(scalars)
        elif isinstance(target, list):
            target.insert(draw(st.integers(0, len(target))), draw(st.one_of(scalars, yaml_trees(6))))
        else:
            parent[path[-1]] = [target, draw(scalars)]
    return data
