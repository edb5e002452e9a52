"""The unit board: the unit a worker is running, in a small file both processes map.

Before each risky unit a task announces it, so that a crash or a hang is blamed on that unit.
The announcement has to be cheap, since the op engine makes about 30,000 of them for 160 tasks,
and it has to be readable after the worker died without a word. A pipe message per unit cost
about 50 us in the worker and woke the parent each time (3 s of parent CPU in a 2-worker
benchmark run, on cores the workers needed). A store into a shared page costs about a
microsecond. The parent reads the board when it looks: on each turn of its loop (deadlines),
when a worker dies (blame), and before it calls a worker hung.

Layout: ``seq`` (u64, odd while the worker writes), ``length`` (u32), then the UTF-8 text
``task id\\nunit id``. The worker is the only writer; a reader retries while ``seq`` is odd or
changes under it.
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path

__all__ = ["UnitBoard"]

SIZE = 4096
_SEQ = struct.Struct("<Q")
_LEN = struct.Struct("<I")
_TEXT = _SEQ.size + _LEN.size


class UnitBoard:
    """One worker slot's board, mapped from ``path`` (the parent creates it, the worker opens it)."""

    def __init__(self, path: str | os.PathLike[str], *, create: bool = False):
        self.path = Path(path)
        if create:
            self.path.write_bytes(bytes(SIZE))
        fd = os.open(self.path, os.O_RDWR)
        try:
            self._map = mmap.mmap(fd, SIZE)
        finally:
            os.close(fd)
        self._seq = _SEQ.unpack_from(self._map)[0]

    def post(self, task_id: str, unit: str) -> None:
        """Worker side: ``unit`` of ``task_id`` starts now."""
        data = f"{task_id}\n{unit}".encode(errors="replace")[: SIZE - _TEXT]
        seq = self._seq + 1  # odd: a reader that sees it waits for the even one
        _SEQ.pack_into(self._map, 0, seq)
        _LEN.pack_into(self._map, _SEQ.size, len(data))
        self._map[_TEXT : _TEXT + len(data)] = data
        self._seq = seq + 1
        _SEQ.pack_into(self._map, 0, self._seq)

    def read(self) -> tuple[int, str | None, str | None]:
        """Parent side: ``(seq, task id, unit)``; ``seq`` 0 (nothing posted) gives ``(0, None, None)``."""
        seq = 0
        if self._map.closed:
            return seq, None, None
        for _ in range(1000):  # the writer holds an odd seq for a few instructions
            seq = _SEQ.unpack_from(self._map)[0]
            if seq % 2:
                continue
            (length,) = _LEN.unpack_from(self._map, _SEQ.size)
            data = bytes(self._map[_TEXT : _TEXT + min(length, SIZE - _TEXT)])
            if _SEQ.unpack_from(self._map)[0] != seq:
                continue
            if seq == 0:
                return 0, None, None
            task_id, _, unit = data.decode(errors="replace").partition("\n")
            return seq, task_id, unit
        return seq, None, None  # the writer died mid-store (or never stops): nothing trustworthy

    def close(self, *, remove: bool = False) -> None:
        """Unmap; ``remove`` also deletes the file (the parent, when the worker is gone)."""
        if not self._map.closed:
            self._map.close()
        if remove:
            self.path.unlink(missing_ok=True)
