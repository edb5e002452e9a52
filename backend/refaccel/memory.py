"""Device memory: a capacity-limited caching allocator whose blocks live in host memory.

A refaccel tensor is a plain PrivateUse1 tensor whose storage points at a host block: the block
is exported through DLPack with its device field rewritten to ``kDLExtDev`` (PrivateUse1) and the
device index, so PyTorch builds an ordinary ``refaccel:N`` tensor (real sizes, strides, storage
offset, views sharing storage) without a wrapper subclass. When the last storage reference dies,
DLPack's deleter drops the host alias and the block returns to this allocator's cache::

    >>> from opmatrix.backend.refaccel import install
    >>> _ = install()
    >>> t = empty_strided((2, 3), (3, 1), torch.float32, 1)
    >>> t.device, memory_stats(1)["allocated_bytes"] >= 512    # a block of 512 bytes at least
    (device(type='refaccel', index=1), True)
    >>> host_view(t).fill_(1.0)       # a CPU tensor aliasing the same bytes: what kernels use
    tensor([[1., 1., 1.],
            [1., 1., 1.]])

Statistics follow the CUDA caching allocator's vocabulary: ``allocated`` (live blocks),
``reserved`` (live + cached), peaks, ``empty_cache`` (release cached blocks). Asking for more
than the capacity raises ``torch.OutOfMemoryError`` before touching host memory.
"""

from __future__ import annotations

import ctypes
import threading
import weakref
from collections.abc import Sequence

import torch

from . import runtime

__all__ = ["empty_strided", "host_view", "memory_stats", "empty_cache", "reset_peak_memory_stats"]

_BLOCK = 512
_KDL_EXT_DEV = 12  # DLPack device type PyTorch maps to PrivateUse1
_CPU = torch.device("cpu")
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_from_ptr = torch._C._construct_storage_from_data_pointer


class _Pool:
    """Per-device cache of host blocks with CUDA-style counters."""

    def __init__(self, index: int, capacity: int):
        self.index = index
        self.capacity = capacity
        self.free: dict[int, list[torch.Tensor]] = {}
        self.allocated = 0
        self.reserved = 0
        self.peak_allocated = 0
        self.peak_reserved = 0
        self.num_allocs = 0
        self.num_frees = 0
        self.num_ooms = 0

    def take(self, size: int) -> torch.Tensor:
        cached = self.free.get(size)
        if cached:
            block = cached.pop()
        else:
            if self.reserved + size > self.capacity:
                self.release_cache()
            if self.reserved + size > self.capacity:
                self.num_ooms += 1
                status = runtime.RefaccelDriverError(f"refaccel driver: allocation of {size} bytes on refaccel:{self.index} "
                                                     "failed", "REFACCEL_ERROR_OUT_OF_MEMORY (2)")
                raise torch.OutOfMemoryError(
                    f"refaccel: out of memory on refaccel:{self.index}: tried to allocate {_human(size)}; "
                    f"capacity {_human(self.capacity)}, {_human(self.allocated)} allocated, "
                    f"{_human(self.reserved)} reserved, {_human(self.capacity - self.reserved)} free"
                ) from status
            block = torch.empty(size, dtype=torch.uint8)
            self.reserved += size
            self.peak_reserved = max(self.peak_reserved, self.reserved)
        self.allocated += size
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        self.num_allocs += 1
        return block

    def give_back(self, block: torch.Tensor) -> None:
        size = block.numel()
        self.allocated -= size
        self.num_frees += 1
        self.free.setdefault(size, []).append(block)

    def release_cache(self) -> None:
        for blocks in self.free.values():
            for block in blocks:
                self.reserved -= block.numel()
        self.free.clear()


_LOCK = threading.RLock()
_POOLS: list[_Pool] = []


def _human(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.2f} {unit}" if unit != "B" else f"{n} B"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def _pool(index: int) -> _Pool:
    if not _POOLS:
        with _LOCK:
            if not _POOLS:
                _POOLS.extend(_Pool(d.index, d.memory_bytes) for d in runtime.describe_devices())
    if not 0 <= index < len(_POOLS):
        raise RuntimeError(f"refaccel: invalid device index {index} (this process sees {len(_POOLS)} devices)")
    return _POOLS[index]


def _release(index: int, block: torch.Tensor) -> None:
    with _LOCK:
        _POOLS[index].give_back(block)


def _to_device(alias: torch.Tensor, index: int) -> torch.Tensor:
    capsule = torch._C._to_dlpack(alias)
    dl = _capsule_pointer(capsule, b"dltensor")
    device = (ctypes.c_int32 * 2).from_address(dl + 8)  # DLTensor.device follows the data pointer
    device[0] = _KDL_EXT_DEV
    device[1] = index
    return torch._C._from_dlpack(capsule)


def storage_bytes(size: Sequence[int], stride: Sequence[int], itemsize: int) -> int:
    """Bytes a strided tensor of this geometry needs (0 for an empty tensor)."""
    if any(s == 0 for s in size):
        return 0
    return (1 + sum((n - 1) * st for n, st in zip(size, stride, strict=True))) * itemsize


def allocate(nbytes: int, dtype: torch.dtype, index: int) -> torch.Tensor:
    """A 1-D device tensor of ``dtype`` over a fresh block of at least ``nbytes``."""
    runtime.ensure_ready()
    if not runtime._STATE.ready:
        runtime.check_device(index, streams=False)  # allocation is not stream-ordered
    itemsize = _itemsize(dtype)
    numel = -(-nbytes // itemsize)
    if numel == 0:
        return _to_device(torch.empty(0, dtype=dtype), index)
    size = -(-nbytes // _BLOCK) * _BLOCK
    with _LOCK:
        block = _pool(index).take(size)
    alias = block.view(dtype)[:numel]
    weakref.finalize(alias, _release, index, block)
    return _to_device(alias, index)


_ITEMSIZE: dict[torch.dtype, int] = {}


def _itemsize(dtype: torch.dtype) -> int:
    size = _ITEMSIZE.get(dtype)
    if size is None:
        size = _ITEMSIZE[dtype] = torch.empty((), dtype=dtype).element_size()
    return size


def empty_strided(size: Sequence[int], stride: Sequence[int], dtype: torch.dtype, index: int) -> torch.Tensor:
    """A device tensor with exactly this size and stride (storage offset 0)."""
    base = allocate(storage_bytes(size, stride, _itemsize(dtype)), dtype, index)
    return set_geometry(base, base.untyped_storage(), 0, size, stride)


# CPU's set_ kernel only edits metadata and checks bounds; Meta's would try to resize our
# (non-resizable, DLPack-owned) storages
_CPU_KEY = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
_SET = torch.ops.aten.set_.source_Storage_storage_offset


def set_geometry(t: torch.Tensor, storage: object, offset: int, size: Sequence[int], stride: Sequence[int]) -> torch.Tensor:
    """Point ``t`` at ``storage`` with this geometry (metadata only; storage must be big enough)."""
    return _SET.redispatch(_CPU_KEY, t, storage, offset, list(size), list(stride))


def contiguous_strides(size: Sequence[int]) -> list[int]:
    """Row-major strides for ``size``."""
    strides = [1] * len(size)
    for i in range(len(size) - 2, -1, -1):
        strides[i] = strides[i + 1] * max(size[i + 1], 1)
    return strides


def host_view(t: torch.Tensor) -> torch.Tensor:
    """A CPU tensor aliasing ``t``'s device bytes with the same geometry (no copy)."""
    storage = t.untyped_storage()
    cpu = _from_ptr(storage.data_ptr(), _CPU, storage.nbytes())
    return torch.empty(0, dtype=t.dtype).set_(cpu, t.storage_offset(), t.size(), t.stride())


def host_bytes(storage: torch.UntypedStorage) -> torch.Tensor:
    """All bytes of a device storage as a CPU uint8 tensor (no copy)."""
    cpu = _from_ptr(storage.data_ptr(), _CPU, storage.nbytes())
    return torch.empty(0, dtype=torch.uint8).set_(cpu)


def memory_stats(index: int = 0) -> dict[str, int]:
    """Allocator counters of one device (bytes unless named ``num_*``)."""
    with _LOCK:
        p = _pool(index)
        return {
            "allocated_bytes": p.allocated,
            "reserved_bytes": p.reserved,
            "peak_allocated_bytes": p.peak_allocated,
            "peak_reserved_bytes": p.peak_reserved,
            "capacity_bytes": p.capacity,
            "num_allocs": p.num_allocs,
            "num_frees": p.num_frees,
            "num_ooms": p.num_ooms,
        }


def empty_cache() -> None:
    """Release every cached (reserved but unallocated) block of every device."""
    with _LOCK:
        for index in range(runtime.device_count()):
            _pool(index).release_cache()


def reset_peak_memory_stats(index: int = 0) -> None:
    """Restart peak tracking from the current values."""
    with _LOCK:
        p = _pool(index)
        p.peak_allocated = p.allocated
        p.peak_reserved = p.reserved
