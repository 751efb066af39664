"""YAML 1.2 core-schema scalars: which type a plain scalar is, and its value.

Invariants:
- The patterns are those ruamel's YAML 1.2 resolver uses, so dump_yaml quotes exactly the
  strings that would read back as something other than a string.
- A plain scalar that only looks like a number (`_`, `0x`) is text; an explicitly tagged one
  that is not what its tag says is an error (ValueError).
- Dates, `=` and other YAML 1.1 types are text; `<<` is MERGE only where the reader asks.
- Numbers are converted only after the caller has bounded their length, so no conversion
  ever meets CPython's 4,300-digit limit.
"""

from __future__ import annotations

import re
from typing import Any, Optional

CORE = "tag:yaml.org,2002:"
CORE_TAGS = tuple(CORE + kind for kind in ("str", "int", "float", "bool", "null", "map", "seq"))
KINDS = {"null": "null", "bool": "true or false", "int": "a whole number", "float": "a number"}
MERGE_TEXT = "<<"

_PATTERNS = {
    "null": re.compile(r"^(?:~|null|Null|NULL|)$"),
    "bool": re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
    # ruamel tries the int pattern only on a scalar starting with a sign or a digit: `_0` is text
    "int": re.compile(r"^(?=[-+0-9])(?:[-+]?0b[0-1_]+|[-+]?0o?[0-7_]+|[-+]?[0-9_]+|[-+]?0x[0-9a-fA-F_]+)$"),
    "float": re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                         |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
                         |[-+]?\.[0-9_]+(?:[eE][-+][0-9]+)?
                         |[-+]?\.(?:inf|Inf|INF)
                         |\.(?:nan|NaN|NAN))$""", re.X),
}


class _MergeKey:
    """The `<<` key: not a value, an instruction to merge."""

    def __repr__(self) -> str:
        return "'<<'"


MERGE = _MergeKey()


def plain_kind(value: str) -> Optional[str]:
    """The core-schema type a plain (unquoted, untagged) scalar resolves to, or None for a
    string: null, bool, int, float, or merge."""
    if value == MERGE_TEXT:
        return "merge"
    for kind, pattern in _PATTERNS.items():
        if pattern.match(value):
            return kind
    return None


def convert(kind: str, value: str) -> Any:
    """The value of a scalar of a core type; ValueError when it is not one."""
    if not _PATTERNS[kind].match(value):
        raise ValueError(value)
    if kind == "null":
        return None
    if kind == "bool":
        return value.lower() == "true"
    if kind == "int":
        return _int(value)
    return _float(value)


def _int(text: str) -> int:
    text = text.replace("_", "")
    sign = -1 if text.startswith("-") else 1
    text = text.lstrip("+-")
    for prefix, base in (("0b", 2), ("0x", 16), ("0o", 8)):
        if text.startswith(prefix):
            return sign * int(text[2:], base)  # "0x" alone: ValueError
    return sign * int(text, 10)


def _float(text: str) -> float:
    text = text.replace("_", "").lower()
    if text.endswith("nan"):
        return float("nan")
    if text.endswith("inf"):
        return float("-inf") if text.startswith("-") else float("inf")
    return float(text)


def shown_tag(tag: str) -> str:
    """A tag as an operator writes it: `!!int`, `!custom`."""
    return "!!" + tag[len(CORE):] if tag.startswith(CORE) else tag
