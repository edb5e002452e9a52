"""Text from artifacts, made safe for a terminal: control characters are shown, never sent.

Names and messages come from backends and files, so treat them as hostile: an ESC or BEL
written raw to a terminal can recolour, retitle or rewrite what a reviewer sees::

    >>> terminal_text("aten.\\x1b[2Jadd ok\\n")
    'aten.\\\\x1b[2Jadd ok\\n'
"""

from __future__ import annotations

import re

__all__ = ["recorded_text", "terminal_text"]

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
