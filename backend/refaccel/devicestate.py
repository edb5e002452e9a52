"""Device state that outlives a process: a device a fault left unusable, until it is reset.

A device fault (``poison-device``) is not the faulting process's alone: every process that opens
the device afterwards finds it unavailable, until the run's reset hook resets it (an operator's
device reset). The mark is a file per device in ``OPMATRIX_REFACCEL_STATE_DIR`` (one directory
per run: refaccel's preflight makes one when a run injects ``poison-device``)::

    >>> mark(0, "uncorrectable ECC error (injected)")
    >>> poisoned(0)
    'uncorrectable ECC error (injected)'
    >>> clear(0)
    'uncorrectable ECC error (injected)'
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["STATE_ENV", "any_poisoned", "clear", "mark", "poisoned"]

STATE_ENV = "OPMATRIX_REFACCEL_STATE_DIR"
#: this process's own marks (read first: the faulting process knows without a file)
_OWN: dict[int, str] = {}


def _dir() -> Path:
    where = os.environ.get(STATE_ENV, "").strip()
    return Path(where) if where else Path(tempfile.gettempdir()) / f"opmatrix-refaccel-{os.getuid()}"


def _file(index: int) -> Path:
    from .runtime import generation

    return _dir() / f"{generation()}-device{index}.unavailable"


def mark(index: int, reason: str) -> None:
    """Make device ``index`` unavailable here and for every process started before :func:`clear`."""
    _OWN[index] = reason
    path = _file(index)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(reason + "\n", encoding="utf-8")


def poisoned(index: int) -> str | None:
    """Why device ``index`` is unavailable, or None."""
    if index in _OWN:
        return _OWN[index]
    try:
        return _file(index).read_text(encoding="utf-8").strip() or "unavailable"
    except OSError:
        return None


def any_poisoned() -> bool:
    """Whether any device is marked (read once at initialisation: the hot path skips the files)."""
    if _OWN:
        return True
    try:
        return any(_dir().glob("*.unavailable"))
    except OSError:
        return False


def clear(index: int) -> str | None:
    """Reset device ``index``: the mark goes; returns why it was unavailable (None: it was not)."""
    was = _OWN.pop(index, None)
    path = _file(index)
    try:
        was = was or path.read_text(encoding="utf-8").strip()
        path.unlink()
    except OSError:
        pass
    return was
