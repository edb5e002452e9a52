"""A content-addressed cache of validated artifacts, so that loading a large matrix stays fast.

Parsing YAML is the slow part of loading a matrix (even with libyaml, every node passes through
Python), while validating the same data from JSON takes pydantic's Rust core a few tens of
milliseconds. The YAML file stays the artifact of record; after a strict load, the validated
model is also kept as JSON under a key made of

- the SHA-256 of the YAML file's bytes (an edited file never hits a stale entry), and
- a hash of the schema package's source and the opmatrix version (a schema change misses),

like ``__pycache__`` for a module. The JSON is validated again when read, so a corrupted entry
is only a miss; the matrix's integrity digest, checked on the YAML when the entry was written,
is not recomputed on a hit (a quarter of a second on a full matrix), its counts are. Location:
``matrices/`` under :func:`opmatrix.schema.files.cache_dir`'s root; ``OPMATRIX_NO_CACHE=1``
turns it off. A cache that cannot be written (read-only home) is
skipped: it only ever saves time. Every reader of a matrix (``Matrix.load``, the gate, reports,
``validate``, ``diff``) goes through ``load_matrix`` and so through this cache.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from .files import cache_dir, write_text_atomic
from .matrix import DIGEST_VERIFIED
from .version import __version__

__all__ = ["load_cached", "remember"]

M = TypeVar("M", bound=BaseModel)


@functools.lru_cache(maxsize=8)
def _schema_tag(model: type[BaseModel]) -> str:
    """The model's name, the opmatrix version and the schema package's source: any change misses.

    (Its JSON Schema would serve too, but building it costs 60 ms on every cold load.)
    """
    digest = hashlib.sha256(f"{__version__}\n{model.__module__}.{model.__qualname__}\n".encode())
    for source in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(source.read_bytes())
    return digest.hexdigest()[:16]


def _entry(folder: Path, data: bytes, model: type[BaseModel]) -> Path:
    return folder / f"{hashlib.sha256(data).hexdigest()}-{_schema_tag(model)}.json"


def remember(data: bytes, model: type[BaseModel], content: dict[str, Any]) -> None:
    """Store ``content`` (the plain data of a validated ``model``) as the entry of the bytes ``data``.

    For writers: the artifact they just wrote is ``data``, made by dumping ``content``, so its
    strict load would validate ``content`` itself (the YAML dump and parse of plain data round-trip,
    which ``tests/test_schema_io.py`` checks on generated and hostile matrices). An entry that is
    already there is kept; a cache that cannot be written is skipped.
    """
    folder = cache_dir("matrices")
    if folder is None:
        return
    entry = _entry(folder, data, model)
    if not entry.exists():
        _store(entry, content)


def _store(entry: Path, content: Any) -> None:
    """Write an entry: ``content``'s JSON, or ``content`` itself when it is JSON text already."""
    try:
        # json.dumps keeps inf/nan (as Infinity/NaN, which pydantic reads back); model_dump_json
        # would write null and a second, cached load would lose them
        text = content if isinstance(content, str) else json.dumps(content, allow_nan=True)
        write_text_atomic(entry, text, sync=False)  # a torn entry is invalid JSON: a miss
    except OSError:
        pass  # a cache that cannot be written only costs time


def load_cached(path: str | os.PathLike[str], model: type[M],
                parse: Callable[[str, str], tuple[M, str | None]], strict: Callable[[], M]) -> M:
    """``strict()``'s model of ``path``, served from the cache when the same bytes were loaded before.

    ``parse(text, where)`` validates the text strictly (a miss) and returns the model with, where
    it has it, the JSON of the model's plain data (a document that is exactly what a writer
    dumped), which is then stored as is instead of dumping the model again; ``strict()`` loads the file when it
    cannot be read or decoded here, so that its errors are worded as always.
    """
    folder = cache_dir("matrices")
    if folder is None:
        return strict()
    try:
        data = Path(path).read_bytes()
    except OSError:
        return strict()
    entry = _entry(folder, data, model)
    try:
        return model.model_validate_json(entry.read_bytes(), context={DIGEST_VERIFIED: True})
    except (OSError, ValidationError):
        pass  # a miss (or an entry that is not valid any more): load strictly
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return strict()
    # parse the very bytes that were hashed: a file replaced meanwhile cannot poison the entry
    loaded, content = parse(text, str(path))
    _store(entry, content if content is not None else loaded.model_dump(mode="json"))
    return loaded
