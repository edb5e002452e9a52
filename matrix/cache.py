"""The validated-matrix cache, as the matrix package names it (it lives in ``opmatrix.schema``).

Every ``load_matrix`` goes through it now; see :mod:`opmatrix.schema.sidecar` for the key and
the location (``matrices/`` under the cache root; ``OPMATRIX_NO_CACHE=1`` turns it off).
"""

from __future__ import annotations

from pathlib import Path

from opmatrix.schema import load_matrix
from opmatrix.schema.files import cache_dir as shared_cache_dir

__all__ = ["cache_dir", "load_matrix_cached"]

#: ``opmatrix.schema.load_matrix``, which serves bytes it loaded before from the cache
load_matrix_cached = load_matrix


def cache_dir() -> Path | None:
    """Where validated matrices are kept (``<cache root>/matrices``), or None when caching is off."""
    return shared_cache_dir("matrices")
