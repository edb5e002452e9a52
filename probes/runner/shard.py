"""``--shard I/N``: a deterministic slice of the planned tasks, so shards run on many machines.

A task belongs to shard ``1 + hash(task.id) mod N`` (a stable SHA-256, not Python's salted
``hash``). The slice depends only on the task's id, never on the rest of the plan, so shards
planned on machines with slightly different op lists still never overlap::

    >>> ids = [f"op{i}|float32" for i in range(9)]
    >>> shards = [select_shard([Task(i, "op") for i in ids], k, 3) for k in (1, 2, 3)]
    >>> sorted(t.id for s in shards for t in s) == sorted(ids)
    True
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from .task import Task

__all__ = ["parse_shard", "select_shard", "shard_of"]


def parse_shard(text: str) -> tuple[int, int]:
    """``"2/3"`` -> ``(2, 3)``; the error says what is expected."""
    index, sep, count = text.partition("/")
    try:
        i, n = int(index), int(count)
    except ValueError:
        raise ValueError(f"--shard {text!r}: expected I/N with whole numbers, e.g. 2/3") from None
    if not sep or n < 1 or not 1 <= i <= n:
        raise ValueError(f"--shard {text!r}: expected I/N with 1 <= I <= N, e.g. 2/3")
    return i, n


def shard_of(task_id: str, count: int) -> int:
    """The 1-based shard that owns ``task_id`` among ``count`` shards."""
    digest = hashlib.sha256(task_id.encode()).digest()
    return 1 + int.from_bytes(digest[:8], "big") % count


def select_shard(tasks: Sequence[Task], index: int, count: int) -> list[Task]:
    """The tasks of shard ``index`` (1-based) of ``count``, in their given order."""
    if count < 1 or not 1 <= index <= count:
        raise ValueError(f"shard {index}/{count}: expected 1 <= I <= N")
    return [t for t in tasks if shard_of(t.id, count) == index]
