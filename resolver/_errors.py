"""The library's one exception hierarchy.

Invariants:
- Every failure the resolver raises is a MeshError; an embedding tool catches one type.
- Bad input is never reported one fault at a time: InputError carries every fault of the
  documents it was given, each located as file:line:col with what was expected.
- Positions are 1-based when printed (ruamel's are 0-based; the conversion happens here).
- A fault prints as one line, whatever the input held: one_line escapes every character that
  is not printable (line breaks, control characters and terminal escapes, bidi overrides).
"""

from __future__ import annotations

from typing import Iterable

import attrs


def one_line(text: str) -> str:
    """`text` with each character that is not printable written as its escape (`\\x85`,
    `\\u2028`, `\\x1b`), so it prints as one line and cannot drive a terminal."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class MeshError(Exception):
    """Base of every exception raised by the resolver library."""


@attrs.frozen(order=True)
class Fault:
    """One located fault in an input document."""

    file: str
    line: int  # 1-based; 0 when the position is unknown (e.g. a missing file)
    col: int  # 1-based; 0 when unknown
    message: str
    expected: str = ""

    def __str__(self) -> str:
        where = self.file if self.line == 0 else f"{self.file}:{self.line}:{self.col}"
        text = f"{where}: {self.message}" + (f"; expected {self.expected}" if self.expected else "")
        return one_line(text)


class InputError(MeshError):
    """One or more documents are malformed or refer to things that do not exist."""

    def __init__(self, faults: Iterable[Fault]) -> None:
        #: Every fault, sorted and each once.
        self.faults = tuple(sorted(set(faults)))
        super().__init__("\n".join(str(f) for f in self.faults))


class ResolutionError(MeshError):
    """A request the resolver cannot honour at all (not a problem of one instance)."""


class PlaceholderSyntaxError(MeshError, ValueError):
    """An env value whose `${…}` cannot be read (an unclosed `${`)."""


# What the package's root takes from this module (resolver/__init__.py joins these lists).
__all__ = [
    "MeshError", "InputError", "Fault", "ResolutionError", "PlaceholderSyntaxError", "one_line",
]
