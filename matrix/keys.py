"""Parsing the parts of a query's cell key: dtype, layout, mode (as values, with a hint for a typo);
the operator is an :class:`~opmatrix.schema.OpName`.

    >>> parse_dtype("torch.bfloat16"), parse_mode(Mode.compile)
    ('bfloat16', 'compile')
"""

from __future__ import annotations

import difflib

from opmatrix.schema import DType, Layout, Mode

__all__ = ["parse_dtype", "parse_layout", "parse_mode"]


_DTYPES = frozenset(d.value for d in DType)
_LAYOUTS = frozenset(x.value for x in Layout)
_MODES = frozenset(x.value for x in Mode)


#: common names people type for a value opmatrix spells differently (hints only, never accepted)
_ALIASES = {
    "strided": "noncontiguous", "nhwc": "channels_last", "channels-last": "channels_last",
    "bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32", "float": "float32",
    "fp64": "float64", "double": "float64", "int": "int64", "long": "int64",
}


def _close(word: str, choices: frozenset[str] | list[str], what: str) -> str:
    alias = _ALIASES.get(word.lower())
    close = [alias] if alias in choices else difflib.get_close_matches(word, sorted(choices), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"unknown {what} {word!r}{hint} (one of {', '.join(sorted(choices))})"


def parse_dtype(value: object) -> str:
    """``"float32"``, ``DType.float32`` or ``torch.float32`` -> ``"float32"``; ``ValueError`` otherwise."""
    text = str(value.value if isinstance(value, DType) else value).removeprefix("torch.")
    if text not in _DTYPES:
        raise ValueError(_close(text, _DTYPES, "dtype"))
    return text


def parse_layout(value: object) -> str:
    """A layout name (or :class:`Layout`) -> its value; ``ValueError`` otherwise."""
    text = str(value.value if isinstance(value, Layout) else value)
    if text not in _LAYOUTS:
        raise ValueError(_close(text, _LAYOUTS, "layout"))
    return text


def parse_mode(value: object) -> str:
    """``"eager"`` / ``"compile"`` (or :class:`Mode`) -> its value; ``ValueError`` otherwise."""
    text = str(value.value if isinstance(value, Mode) else value)
    if text not in _MODES:
        raise ValueError(_close(text, _MODES, "mode"))
    return text
