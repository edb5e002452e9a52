"""Streams and events of the refaccel runtime (``torch.refaccel.Stream`` / ``Event``).

The ordering contract, as documented for users: work issued to one stream runs in issue order;
work in different streams is ordered only through events (``record`` on one stream,
``wait_event`` on another) or ``wait_stream``; ``Event.query()`` is True once everything recorded
before it completed; ``synchronize`` blocks the host until then; ``elapsed_time`` needs two
recorded events created with ``enable_timing=True``. refaccel runs every kernel to completion
before the call returns, the strongest implementation of that contract (no overlap to lose).
The current stream is thread-local and per device::

    >>> from opmatrix.backend.refaccel import install
    >>> _ = install()
    >>> x = torch.ones(2, device="refaccel")
    >>> s = torch.refaccel.Stream()
    >>> with torch.refaccel.stream(s):
    ...     y = x * 2
    >>> e = s.record_event(); torch.refaccel.current_stream().wait_event(e)

The Python device guard of torch 2.13 has no stream support, so the generic ``torch.Stream`` /
``torch.Event`` / ``torch.accelerator.current_stream`` do not reach these objects.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Iterator
from typing import Any

import torch

from . import runtime

__all__ = ["Stream", "Event", "current_stream", "default_stream", "set_stream", "stream", "synchronize"]

_IDS = itertools.count(1)
_LOCAL = threading.local()
_DEFAULTS: dict[int, Stream] = {}
_PRIORITY_RANGE = (0, -2)


def _index(device: Any) -> int:
    from .basics import current_device

    if device is None:
        return current_device()
    if isinstance(device, int):
        return device
    d = torch.device(device)
    return current_device() if d.index is None else d.index


class Stream:
    """An ordered queue of device work on one device."""

    def __init__(self, device: Any = None, priority: int = 0, *, _stream_id: int | None = None):
        runtime.ensure_ready()
        self.device_index = _index(device)
        if not 0 <= self.device_index < runtime.device_count():
            raise RuntimeError(f"refaccel: invalid device index {self.device_index}")
        least, greatest = _PRIORITY_RANGE
        self.priority = max(greatest, min(least, priority))  # clamped to the range, as CUDA does
        self.stream_id = next(_IDS) if _stream_id is None else _stream_id

    @staticmethod
    def priority_range() -> tuple[int, int]:
        """(least, greatest) priority; lower numbers run first when streams compete."""
        return _PRIORITY_RANGE

    @property
    def device(self) -> torch.device:
        """The device this stream belongs to."""
        return torch.device("refaccel", self.device_index)

    def query(self) -> bool:
        """True when all work issued to this stream has completed."""
        runtime.ensure_ready()
        return True

    def synchronize(self) -> None:
        """Block the host until all work issued to this stream has completed."""
        runtime.ensure_ready()

    def wait_event(self, event: Event) -> None:
        """Make later work on this stream wait for ``event``."""
        runtime.ensure_ready()
        if event.device_index is not None and event.device_index != self.device_index:
            return  # cross-device waits are allowed (peer ordering); completion already holds

    def wait_stream(self, other: Stream) -> None:
        """Make later work on this stream wait for all work issued to ``other`` so far."""
        self.wait_event(other.record_event())

    def record_event(self, event: Event | None = None) -> Event:
        """Record ``event`` (or a new one) on this stream."""
        event = event or Event()
        event.record(self)
        return event

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stream) and (self.device_index, self.stream_id) == (other.device_index, other.stream_id)

    def __hash__(self) -> int:
        return hash((self.device_index, self.stream_id))

    def __repr__(self) -> str:
        return f"<torch.refaccel.Stream device=refaccel:{self.device_index} stream_id={self.stream_id}>"


class Event:
    """A marker in a stream: completion point for the host and dependency for other streams."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        self.enable_timing = enable_timing
        self.blocking = blocking
        self.device_index: int | None = None
        self._time: float | None = None

    def record(self, stream: Stream | None = None) -> None:
        """Mark the point after all work issued so far to ``stream`` (default: current)."""
        stream = stream or current_stream()
        if self.device_index is not None and self.device_index != stream.device_index:
            raise RuntimeError(
                f"refaccel: event was recorded on refaccel:{self.device_index} and cannot be recorded on "
                f"refaccel:{stream.device_index}"
            )
        runtime.ensure_ready()
        self.device_index = stream.device_index
        self._time = time.perf_counter()

    def query(self) -> bool:
        """True when the work before the recorded point completed (True if never recorded)."""
        runtime.ensure_ready()
        return True

    def synchronize(self) -> None:
        """Block the host until the recorded point is reached."""
        runtime.ensure_ready()

    def wait(self, stream: Stream | None = None) -> None:
        """Make ``stream`` (default: current) wait for this event."""
        (stream or current_stream()).wait_event(self)

    def elapsed_time(self, end_event: Event) -> float:
        """Milliseconds between this event and ``end_event`` (both recorded, timing enabled)."""
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("refaccel: elapsed_time needs both events created with enable_timing=True")
        if self._time is None or end_event._time is None:
            raise RuntimeError("refaccel: elapsed_time needs both events to be recorded first")
        return (end_event._time - self._time) * 1000.0

    def __repr__(self) -> str:
        state = "unrecorded" if self._time is None else f"recorded on refaccel:{self.device_index}"
        return f"<torch.refaccel.Event {state}>"


def default_stream(device: Any = None) -> Stream:
    """The default stream (id 0) of a device."""
    index = _index(device)
    if index not in _DEFAULTS:
        _DEFAULTS[index] = Stream(index, _stream_id=0)
    return _DEFAULTS[index]


def current_stream(device: Any = None) -> Stream:
    """This thread's current stream on a device (the default stream unless set)."""
    index = _index(device)
    current = getattr(_LOCAL, "current", None)
    if current is None:
        current = _LOCAL.current = {}
    return current.get(index) or default_stream(index)


def set_stream(s: Stream) -> None:
    """Make ``s`` this thread's current stream on its device."""
    if getattr(_LOCAL, "current", None) is None:
        _LOCAL.current = {}
    _LOCAL.current[s.device_index] = s


@contextlib.contextmanager
def stream(s: Stream | None) -> Iterator[Stream | None]:
    """Within the block, ``s`` is this thread's current stream on its device."""
    if s is None:
        yield None
        return
    before = current_stream(s.device_index)
    set_stream(s)
    try:
        yield s
    finally:
        set_stream(before)


def synchronize(device: Any = None) -> None:
    """Block until all work on a device (every stream) has completed."""
    runtime.ensure_ready()
