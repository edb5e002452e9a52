"""Memory classes of the refaccel runtime: pinned host memory and peer access.

Pinned (page-locked) host memory comes from refaccel's own host pool: ``Tensor.pin_memory()``
copies into a block of it and ``Tensor.is_pinned()`` is True for tensors whose storage lies in
the pool (Python kernels for ``aten::_pin_memory`` / ``aten::is_pinned`` on CPU tensors: torch
2.13's Python PrivateUse1 hooks offer no pinned allocator, so ``torch.empty(pin_memory=True)``
still needs the C++ hooks a compiled backend registers). A non-blocking copy from pinned memory
is complete once ``synchronize`` returns (every refaccel copy is)::

    >>> p = torch.ones(4).pin_memory()
    >>> p.is_pinned(), torch.refaccel.can_device_access_peer(0, 1)
    (True, True)
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import torch

from . import runtime

__all__ = ["can_device_access_peer", "is_pinned", "pin_memory", "register_pinned"]

_LOCK = threading.Lock()
#: storage data pointer -> bytes, for every live pinned block
_PINNED: dict[int, int] = {}


def _forget(ptr: int) -> None:
    with _LOCK:
        _PINNED.pop(ptr, None)


def pin_memory(self: torch.Tensor, device: Any = None) -> torch.Tensor:
    """``aten::_pin_memory``: a copy of ``self`` in page-locked host memory."""
    runtime.ensure_ready()
    out = torch.empty(self.shape, dtype=self.dtype)
    out.copy_(self)
    storage = out.untyped_storage()
    ptr = storage.data_ptr()
    with _LOCK:
        _PINNED[ptr] = storage.nbytes()
    weakref.finalize(out, _forget, ptr)
    return out


def is_pinned(self: torch.Tensor, device: Any = None) -> bool:
    """``aten::is_pinned``: whether the tensor's storage lies in a pinned block."""
    if not _PINNED:
        return False
    ptr = self.untyped_storage().data_ptr()
    with _LOCK:
        return ptr in _PINNED


def register_pinned(lib: torch.library.Library) -> None:
    """Serve ``pin_memory`` / ``is_pinned`` for host tensors from refaccel's pinned pool."""
    lib.impl("_pin_memory", pin_memory, "CPU")
    lib.impl("is_pinned", is_pinned, "CPU")


def can_device_access_peer(device: Any, peer: Any) -> bool:
    """Whether ``device`` can read ``peer``'s memory directly (every pair of one node's devices)."""
    a, b = (torch.device("refaccel", d) if isinstance(d, int) else torch.device(d) for d in (device, peer))
    count = runtime.device_count()
    return a.index != b.index and all(0 <= (d.index or 0) < count for d in (a, b))


