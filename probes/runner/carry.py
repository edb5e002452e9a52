"""Units a task finished before its worker died: kept, and handed to the task's next attempt.

Without this a task that faults ``k`` times re-runs everything before each fault: on torch_xla's
CPU device ``multi_head_attention_forward`` ran ~120 samples in 3.5 minutes, died (its JIT out of
code memory), and each of the next attempts re-ran those samples to die one sample later, an hour
and more for one task. So a handler may *checkpoint* each unit it finishes; the worker appends it
to its slot's carry file (``DIR/workers/w<i>.carry``, one incarnation's, emptied at each task's
start), and when the worker faults the parent reads back the units of the task it was running::

    writer = CarryWriter(path); writer.start("mul|float32")
    writer("0/contiguous/eager", payload_bytes)          # worker: after the unit finished
    read_carried(path, "mul|float32")                    # parent: {"0/contiguous/eager": payload}

The next attempt gets them (``RunTask.done``); the handler restores what each unit produced instead
of running it again. The payload is the handler's own (opaque bytes to the runner, which never
unpickles it). A frame is ``<task len, unit len, payload len>`` then the three byte strings,
written with one ``write`` on an ``O_APPEND`` descriptor; a frame cut short by the worker's death
is ignored (that unit runs again).
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

__all__ = ["CarryWriter", "read_carried"]

_HEAD = struct.Struct("<III")


class CarryWriter:
    """Worker side: append finished units of the current task to the slot's carry file."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.task = b""

    def start(self, task_id: str) -> None:
        """A new task: forget the previous one's units (they were reported with its record)."""
        os.ftruncate(self.fd, 0)
        self.task = task_id.encode()

    def __call__(self, unit: str, payload: bytes) -> None:
        """``unit`` of the current task finished with ``payload`` (what the handler restores)."""
        name = unit.encode()
        os.write(self.fd, _HEAD.pack(len(self.task), len(name), len(payload)) + self.task + name + payload)


def read_carried(path: str | os.PathLike[str], task_id: str) -> dict[str, bytes]:
    """Parent side: the units of ``task_id`` in the carry file; {} when there is none."""
    try:
        data = Path(path).read_bytes()
    except OSError:
        return {}
    want, found, at = task_id.encode(), {}, 0
    while at + _HEAD.size <= len(data):
        lt, lu, lp = _HEAD.unpack_from(data, at)
        end = at + _HEAD.size + lt + lu + lp
        if end > len(data):
            break  # the worker died writing this frame
        start = at + _HEAD.size
        if data[start : start + lt] == want:
            found[data[start + lt : start + lt + lu].decode(errors="replace")] = data[start + lt + lu : end]
        at = end
    return found
