"""A content-addressed cache of validated matrices, so that loading a large matrix stays fast.

Parsing YAML is the slow part of loading a matrix (libyaml builds Python objects node by node:
about 1 s per MB), while validating the same data from JSON takes pydantic's Rust core a few
tens of milliseconds. The YAML file stays the artifact of record; after a strict load, the
validated model is also kept as JSON under a key made of

- the SHA-256 of the YAML file's bytes (an edited file never hits a stale entry), and
- a hash of the matrix JSON Schema and the opmatrix version (a schema change misses),

like ``__pycache__`` for a module. The JSON is validated again when read, so a corrupted entry
is only a miss. Location: ``matrices/`` under the cache root of ``opmatrix.schema.files.cache_dir``
(``$OPMATRIX_CACHE_DIR``, else ``$XDG_CACHE_HOME/opmatrix``, else ``~/.cache/opmatrix``);
``OPMATRIX_NO_CACHE=1`` turns it off. A cache that cannot be
written (read-only home) is silently skipped: it only ever saves time.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path

from pydantic import ValidationError

from opmatrix.schema import Matrix as MatrixModel
from opmatrix.schema import load_matrix, loads_yaml, validate_data
from opmatrix.schema.files import cache_dir as shared_cache_dir
from opmatrix.schema.files import write_text_atomic

__all__ = ["cache_dir", "load_matrix_cached"]


def cache_dir() -> Path | None:
    """Where validated matrices are kept (``<cache root>/matrices``), or None when caching is off."""
    return shared_cache_dir("matrices")


@functools.lru_cache(maxsize=1)
def _schema_tag() -> str:
    from opmatrix import __version__

    schema = json.dumps(MatrixModel.model_json_schema(), sort_keys=True)
    return hashlib.sha256(f"{__version__}\n{schema}".encode()).hexdigest()[:16]


def load_matrix_cached(path: str | os.PathLike[str]) -> MatrixModel:
    """``opmatrix.schema.load_matrix(path)``, served from the cache when the bytes were seen before."""
    folder = cache_dir()
    if folder is None:
        return load_matrix(path)
    try:
        data = Path(path).read_bytes()
    except OSError:
        return load_matrix(path)  # the strict loader words this error
    entry = folder / f"{hashlib.sha256(data).hexdigest()}-{_schema_tag()}.json"
    try:
        return MatrixModel.model_validate_json(entry.read_bytes())
    except (OSError, ValidationError):
        pass  # a miss (or an entry that is not valid any more): load strictly
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return load_matrix(path)  # the strict loader words this error
    # parse the very bytes that were hashed: a file replaced meanwhile cannot poison the entry
    model = validate_data(loads_yaml(text, str(path)), MatrixModel, str(path), text)
    try:
        write_text_atomic(entry, model.model_dump_json())
    except OSError:
        pass
    return model

