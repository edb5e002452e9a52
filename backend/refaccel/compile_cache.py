"""The refaccel compile cache: generated code kept on disk, keyed by everything it depends on.

The ``refaccel`` compiler writes the code it generates for a graph to a persistent cache and runs
the cached code when the key matches. The key is the graph and the cache's *identity*: the
framework build, the device generation and stepping, the driver and runtime versions, and
``OPMATRIX_REFACCEL_FAST_MATH`` (an option that changes the generated code: floating results
are rounded to bfloat16 precision). A change of any of them recompiles; nothing else does::

    >>> torch.refaccel.compile_cache_identity()["fast_math"]
    '0'
    >>> torch.refaccel.compile_cache_stats()  # counts what this process compiled: not run  # doctest: +SKIP
    {'hits': 0, 'misses': 0}

The cache lives in ``OPMATRIX_REFACCEL_CACHE_DIR`` (default: a per-user folder in the temp dir).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

import torch

from . import runtime

__all__ = ["CACHE_ENV", "OPTION_ENV", "fast_math", "identity", "load_or_store", "stats"]

CACHE_ENV = "OPMATRIX_REFACCEL_CACHE_DIR"
OPTION_ENV = "OPMATRIX_REFACCEL_FAST_MATH"
_STATS = {"hits": 0, "misses": 0}
_HEADER = "# refaccel codegen fast_math="


def identity() -> dict[str, str]:
    """What the generated code depends on (each entry part of every cache key)."""
    v = runtime.versions()
    return {
        "torch": f"{torch.__version__}+{getattr(torch.version, 'git_version', '')}",
        "generation": runtime.generation(),
        "stepping": str(v["stepping"]),
        "driver": str(v["driver"]),
        "runtime": str(v["backend_version"]),
        "fast_math": "1" if os.environ.get(OPTION_ENV, "").strip() in ("1", "true", "yes") else "0",
    }


def stats() -> dict[str, int]:
    """Cache hits (cached code ran) and misses (code generated and stored) in this process."""
    return dict(_STATS)


def _dir() -> Path:
    where = os.environ.get(CACHE_ENV, "").strip()
    return Path(where) if where else Path(tempfile.gettempdir()) / f"opmatrix-refaccel-cache-{os.getuid()}"


def load_or_store(graph_code: str) -> str:
    """The code to run for ``graph_code``: the cached code on a hit, else freshly generated (and stored)."""
    ident = identity()
    key = hashlib.sha256((graph_code + json.dumps(ident, sort_keys=True)).encode()).hexdigest()[:32]
    path = _dir() / f"{key}.py"
    try:
        code = path.read_text(encoding="utf-8")
    except OSError:
        code = None
    if code is not None and code.startswith(_HEADER):
        _STATS["hits"] += 1
        return code
    _STATS["misses"] += 1
    code = f"{_HEADER}{ident['fast_math']}\n{graph_code}"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(code, encoding="utf-8")
        tmp.replace(path)
    except OSError:
        pass  # an unwritable cache only costs recompilation
    return code


def fast_math(code: str) -> bool:
    """Whether the (cached or fresh) generated code rounds floating results (read from the code itself)."""
    return code.startswith(f"{_HEADER}1")
