"""What the `mesh` command writes to a terminal carries no control characters from its input.

A name, a path or a value quoted in a message comes from files the operator (or someone
else) wrote; an escape sequence in one of them must not recolour, move or clear the
operator's terminal, nor hide a line of a plan. Every text the command writes to stdout and
stderr passes through one filter: C0 controls other than newline and tab, DEL and the C1
controls are written as `\\xNN` escapes. Bytes written to the binary buffer (a png) and
JSON (which escapes controls itself) are unaffected. A reader that closes the pipe early (`|
head`) ends the output, not the command: no traceback, and the command's own exit code.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any, Callable, Iterable, TextIO, cast

_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """`text` with every control character but newline and tab written as `\\xNN`."""
    return _CONTROLS.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


class _Printable:
    """A text stream that writes through `printable`; everything else is the wrapped one's.

    When its reader goes away (`mesh plan | head`), the rest of what the command writes is
    dropped, quietly: the command goes on and finishes what it does (an apply half done
    because nobody reads its report any more would be worse than the report cut short), and
    its file descriptor is pointed at /dev/null so that the interpreter's last flush at exit
    finds nothing to complain about."""

    def __init__(self, stream: TextIO):
        self._stream = stream
        self._closed = False

    def write(self, text: str) -> int:
        if not self._closed:
            try:
                self._stream.write(printable(text))
            except BrokenPipeError:
                self._reader_gone()
        return len(text)

    def flush(self) -> None:
        if not self._closed:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._reader_gone()

    def _reader_gone(self) -> None:
        self._closed = True
        to_null(self._stream)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def to_null(stream: Any) -> None:
    """Point `stream`'s file descriptor at /dev/null: its reader has gone, and whatever is
    still buffered or written later goes nowhere, without an error."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, stream.fileno())
        os.close(null)
    except (OSError, ValueError, AttributeError):  # no descriptor of its own (a StringIO)
        pass


def with_printable_output(run: Callable[[], int]) -> int:
    """`run()` with sys.stdout and sys.stderr filtered; the streams are restored after."""
    out, err = sys.stdout, sys.stderr
    wrapped_out, wrapped_err = _Printable(out), _Printable(err)
    sys.stdout, sys.stderr = cast(TextIO, wrapped_out), cast(TextIO, wrapped_err)
    try:
        return run()
    finally:
        wrapped_out.flush()
        wrapped_err.flush()
        sys.stdout, sys.stderr = out, err
