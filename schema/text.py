"""Text from artifacts, made safe for a terminal: control characters are shown, never sent.

Names and messages come from backends and files, so treat them as hostile: an ESC or BEL
written raw to a terminal can recolour, retitle or rewrite what a reviewer sees::

    >>> terminal_text("aten.\\x1b[2Jadd ok\\n")
    'aten.\\\\x1b[2Jadd ok\\n'
"""

from __future__ import annotations

import codecs
import re

__all__ = ["ASCII_SYMBOLS", "ELLIPSIS", "FALLBACK_ERRORS", "cut", "non_utf8", "recorded_text", "terminal_text"]

#: symbols opmatrix prints, and what a terminal that cannot show them (the plain C locale) gets instead
ASCII_SYMBOLS: dict[str, str] = {
    "\u2705": "[ok]", "\u274c": "[x]", "\u2192": "->", "\u00d7": "x", "\u2026": "...", "\u2264": "<=",
    "\u2265": ">=", "\u2014": "--", "\u2013": "-", "\u26a0": "!", "\u2713": "ok", "\u2717": "x", "\u00b7": "*",
}

#: the error handler for output streams: known symbols in ASCII, anything else as an escape
FALLBACK_ERRORS = "opmatrix.fallback"


def _escape(ch: str) -> str:
    code = ord(ch)
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8 (surrogateescape): shown as that byte
        return f"\\x{code - 0xDC00:02x}"
    return ASCII_SYMBOLS.get(ch) or ch.encode("ascii", "backslashreplace").decode("ascii")


def _fallback(exc: UnicodeError) -> tuple[str, int]:
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    return "".join(_escape(ch) for ch in exc.object[exc.start:exc.end]), exc.end


codecs.register_error(FALLBACK_ERRORS, _fallback)


def non_utf8(text: str) -> str | None:
    """``text`` with its non-UTF-8 bytes escaped (``site-\\xfe``) when it has any (from a file name or
    an argument the OS handed over undecoded), else None."""
    if not any(0xDC80 <= ord(ch) <= 0xDCFF for ch in text):
        return None
    return "".join(_escape(ch) if 0xDC80 <= ord(ch) <= 0xDCFF else ch for ch in text)

# C0 and C1 controls and DEL, but not newline and tab (the layout of the text itself)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# what recorded_text changes: those, and lone surrogates
_UNSAFE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")


def terminal_text(text: str) -> str:
    """``text`` with every control character (but newline and tab) written as a ``\\xNN`` escape."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def recorded_text(text: object) -> object:
    """Text a backend wrote (an exception's message, a worker's last output) as a record keeps it:
    lone surrogates (which no UTF-8 file or JSON line can hold) and control characters become
    visible escapes, so a hostile message is evidence, never a crash of the writer or a terminal."""
    if not isinstance(text, str):
        return text  # the field's own type check names what is wrong
    if _UNSAFE.search(text) is None:  # the common case (no control character, no surrogate): as is
        return text
    return terminal_text(text.encode("utf-8", "backslashreplace").decode("utf-8"))


#: what ends a text that was cut, so nobody reads a cut message as whole
ELLIPSIS = "\u2026"


def cut(text: str, most: int) -> str:
    """``text`` on one line, at most ``most`` characters, ending in an ellipsis when it was cut.

    >>> cut("aten::bmm.out is not supported on refaccel:0", 20)
    'aten::bmm.out is no\u2026'
    """
    line = " ".join(text.split())
    return line if len(line) <= most else line[: max(0, most - 1)].rstrip() + ELLIPSIS
