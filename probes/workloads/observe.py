"""What a workload run costs: host<->device copies (torch.profiler), host RSS, device peak memory."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import torch

if TYPE_CHECKING:
    from types import ModuleType

    from opmatrix.backend.base import Adapter

__all__ = ["copies_during", "host_rss", "device_peak", "reset_peak"]

T = TypeVar("T")

#: profiler events that move data between the host and a device
_COPY_EVENTS = ("aten::_copy_from", "aten::_copy_from_and_resize")


def copies_during(body: Callable[[], T]) -> tuple[T, tuple[int | None, int | None]]:
    """``body()``'s result and (host<->device copies the CPU profiler saw, None); (None, None) without a profiler."""
    try:
        from torch.profiler import ProfilerActivity, profile
    except ImportError:
        return body(), (None, None)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        result = body()
    count = sum(1 for ev in prof.events() if ev.name in _COPY_EVENTS)
    return result, (count, None)  # the CPU profiler does not record copied bytes without shapes and dtypes


def host_rss() -> int | None:
    """Resident set size of this worker process in bytes (Linux /proc), or None."""
    try:
        with open(f"/proc/{os.getpid()}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _module(adapter: Adapter) -> ModuleType | None:
    return getattr(torch, adapter.device_type, None) if adapter.device_type != "cpu" else None


def reset_peak(adapter: Adapter) -> None:
    """Reset the device's peak-memory counter where the runtime has one."""
    fn = getattr(_module(adapter), "reset_peak_memory_stats", None)
    if callable(fn):
        try:
            fn()
        except Exception:  # noqa: BLE001 - a runtime without the statistic simply does not report it
            pass


def device_peak(adapter: Adapter) -> int | None:
    """Peak device memory allocated since :func:`reset_peak`, or None when the runtime does not report it."""
    fn = getattr(_module(adapter), "max_memory_allocated", None)
    if not callable(fn):
        return None
    try:
        return int(fn())
    except Exception:  # noqa: BLE001
        return None
