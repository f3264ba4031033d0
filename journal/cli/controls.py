"""Keeping control characters read from a store off the user's terminal.

Messages, turn ids, tool call ids and error texts are the agent's or a client's
data: printed raw, an escape sequence among them could retitle the terminal's
window, clear its screen or fake output. What the CLI prints on a terminal
shows each control character as ``?`` (:func:`printable`); error lines do
wherever they go (:func:`error_line`), being read by a person, not parsed;
JSON on a terminal escapes the controls JSON encoders leave raw
(:func:`json_for_terminal`). Output that is not a terminal keeps the text as
stored. Nothing here imports a rendering library.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import TextIO

__all__ = ["CONTROL", "error_line", "is_terminal", "json_for_terminal", "printable"]

CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
r"""What a terminal must not be sent (shown as ``?``): C0 but tab and newline, which
layouts handle, DEL and the C1 controls (``\x9b`` starts a sequence as ESC [ does).
"""

# DEL and the C1 controls as UTF-8: JSON encoders escape only what is below a
# space. 0xC2 never continues a UTF-8 sequence, so every match is one character.
_RAW_IN_JSON = re.compile(b"\x7f|\xc2[\x80-\x9f]")


def printable(text: str) -> str:
    """``text`` with every :data:`CONTROL` character shown as ``?``."""
    return CONTROL.sub("?", text)


def error_line(message: str) -> str:
    """``message`` as one printable line: whitespace runs become one space."""
    return printable(" ".join(message.split()))


def is_terminal(out: TextIO) -> bool:
    """Whether ``out`` is a terminal (a stream without ``isatty`` is not)."""
    isatty = getattr(out, "isatty", None)
    return bool(callable(isatty) and isatty())


def _escape(match: re.Match[bytes]) -> bytes:
    return b"\\u%04x" % ord(match.group().decode("utf-8"))


def json_for_terminal(document: bytes) -> bytes:
    r"""A UTF-8 JSON text with DEL and the C1 controls as ``\u`` escapes.

    They can only stand inside strings, where an escape is the same value: the
    document decodes to exactly what it did.
    """
    return _RAW_IN_JSON.sub(_escape, document)
