"""What the `mesh` command writes to a terminal carries no control characters from its input.

A name, a path or a value quoted in a message comes from files the operator (or someone
else) wrote; an escape sequence in one of them must not recolour, move or clear the
operator's terminal, nor hide a line of a plan. Every text the command writes to stdout and
stderr passes through one filter: C0 controls other than newline and tab, DEL and the C1
controls are written as `\\xNN` escapes. Bytes written to the binary buffer (a png) and
JSON (which escapes controls itself) are unaffected.
"""

from __future__ import annotations

import re
import sys
from typing import Any, Callable, TextIO

_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """`text` with every control character but newline and tab written as `\\xNN`."""
    return _CONTROLS.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


class _Printable:
    """A text stream that writes through `printable`; everything else is the wrapped one's."""

    def __init__(self, stream: TextIO):
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(printable(text))
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def with_printable_output(run: Callable[[], int]) -> int:
    """`run()` with sys.stdout and sys.stderr filtered; the streams are restored after."""
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Printable(out), _Printable(err)  # type: ignore[assignment]
    try:
        return run()
    finally:
        sys.stdout, sys.stderr = out, err
