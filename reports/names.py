"""Safe, stable file names for operator pages.

Operator names come from the matrix, which comes from a backend: treat them as hostile. A page
name keeps the readable part of the name and adds a short hash whenever characters had to be
replaced or two names would collide on a case-insensitive file system::

    >>> page_names(["aten.softmax.int", "aten.<script>.x"])["aten.softmax.int"]
    'aten.softmax.int.html'
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Iterable

__all__ = ["page_names"]

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_MAX_STEM = 80


def _digest(name: str, size: int = 10) -> str:
    return hashlib.sha256(name.encode("utf-8")).hexdigest()[:size]


def _stem(name: str) -> str:
    stem = _UNSAFE.sub("_", name).strip("._-")[:_MAX_STEM]
    return stem or "op"


def page_names(ops: Iterable[str]) -> dict[str, str]:
    """Map every operator name to a file name unique even on case-insensitive file systems.

    A name that sanitising changed gets a digest of the original; should two pages still meet
    (a hostile name spelled like another's hashed page), the names involved get a longer digest
    until none do, so no operator's page is ever overwritten by another's.
    """
    names = sorted(set(ops))
    stems = {name: _stem(name) for name in names}
    folded = Counter(stem.casefold() for stem in stems.values())
    out: dict[str, str] = {}
    for name in names:
        stem = stems[name]
        if stem != name or folded[stem.casefold()] > 1:
            # the digest of the original name keeps sanitised names apart from each other
            stem = f"{stem}-{_digest(name)}"
        out[name] = f"{stem}.html"
    for size in (20, 64):
        clash = _collisions(out)
        if not clash:
            return out
        for name in clash:
            out[name] = f"{stems[name]}-{_digest(name, size)}.html"
    clash = _collisions(out)
    if clash:  # pragma: no cover - would need a SHA-256 collision
        raise ValueError(f"operator pages collide: {', '.join(sorted(clash))}")
    return out


def _collisions(pages: dict[str, str]) -> list[str]:
    """Operator names whose page name (case-folded) another operator also got."""
    seen = Counter(page.casefold() for page in pages.values())
    return [name for name, page in pages.items() if seen[page.casefold()] > 1]
