"""Which overloads a sample signature calls, per torch build, kept on disk and shared by workers.

    cache = OverloadCache()            # $OPMATRIX_CACHE_DIR/overloads-<torch>-<git>.json
    cache.get(key) or cache.put(key, ["aten.add.Tensor"]); cache.flush(every=5.0)

The file sits in a cache that CI jobs may share, so it is read like every cache entry
(:func:`opmatrix.schema.files.read_cache_json`): only a regular file of bounded size whose content
is a mapping of lists; anything else is a miss, said once, and the next merge replaces it.
"""

from __future__ import annotations

import json
import os
import tempfile
import time

import torch

from opmatrix.schema.files import cache_dir, read_cache_json, say_cache_miss

__all__ = ["OverloadCache"]


def _calls_table(data: object) -> dict[str, list[str]] | None:
    if not isinstance(data, dict) or not all(isinstance(v, list) for v in data.values()):
        return None
    return {str(k): [str(x) for x in v] for k, v in data.items()}


def _read(path: str, *, quiet: bool = False) -> dict[str, list[str]]:
    data = read_cache_json(path)
    table = _calls_table(data)
    if table is None and data is not None and not quiet:
        say_cache_miss(path, "is not a table of overload lists")
    return table or {}


class OverloadCache:
    """Which overloads a sample signature calls, per torch build, shared by workers on disk.

    Resolving costs one recorded CPU call (~0.3 ms, a ``make_fx`` trace where that fails); the answer depends only on the torch build,
    the OpInfo and the argument kinds, so it is kept in ``$OPMATRIX_CACHE_DIR`` (default
    ``~/.cache/opmatrix``) and merged atomically by every worker that learns something new.
    """

    def __init__(self, path: str | None = None) -> None:
        if path is None:
            root = cache_dir("overloads")
            git = str(getattr(torch.version, "git_version", "") or "")[:12]
            path = str(root.parent / f"overloads-{torch.__version__}-{git}.json") if root is not None else None
        self.path = path  # None: OPMATRIX_NO_CACHE, the answers stay in memory
        self.fresh: dict[str, list[str]] = {}
        self.flushed = -float("inf")
        self.known = _read(path) if path is not None else {}

    def get(self, key: str) -> list[str] | None:
        return self.fresh.get(key) or self.known.get(key)

    def put(self, key: str, calls: list[str]) -> None:
        self.fresh[key] = calls

    def flush(self, *, every: float = 0.0) -> None:
        """Merge what this worker learned into the file (atomic replace; lost races only cost time).

        ``every``: skip unless that many seconds passed since the last merge (the engine merges
        after each task; a merge reads and writes the whole file)."""
        if not self.fresh or time.monotonic() - self.flushed < every:
            return
        if self.path is None:
            self.known, self.fresh = {**self.known, **self.fresh}, {}
            return
        self.flushed = time.monotonic()
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            merged = _read(self.path, quiet=True)
            merged.update(self.fresh)
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(self.path), prefix=".overloads.")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as fh:
                    json.dump(merged, fh, sort_keys=True)
                os.replace(tmp, self.path)
            except BaseException:  # a full disk: no temporary file is left in the cache
                os.unlink(tmp)
                raise
            self.known, self.fresh = merged, {}
        except OSError:
            pass  # a read-only home: keep the answers in memory only
