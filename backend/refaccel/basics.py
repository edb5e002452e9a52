"""Infrastructure kernels: allocation, copies, views, ``set_``, ``resize_`` and scalar reads.

These are the "foundational storage, view and copy operations" every backend brings up first;
they serve every storable dtype on both generations and are not part of the kernel table. View
kernels only edit metadata: they redispatch to PyTorch's own Meta kernels, which build a new
TensorImpl over the same storage with the caller's (PrivateUse1) dispatch keys::

    >>> t = torch.arange(12.).to("refaccel")[2:8].view(2, 3)
    >>> t.storage_offset(), t.stride()
    (2, (3, 1))
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from . import memory, runtime
from .errors import unsupported_dtype
from .table import storable_dtypes

__all__ = ["register_basics", "current_device"]

_META = torch._C.DispatchKeySet(torch._C.DispatchKey.Meta)
_aten = torch.ops.aten
_CURRENT = [0]
_STORABLE: frozenset[torch.dtype] = frozenset()


def current_device() -> int:
    """The device index used when a call names ``refaccel`` without an index."""
    return _CURRENT[0]


def set_current_device(index: int) -> None:
    """Select the default device index of this process."""
    if not 0 <= index < runtime.device_count():
        raise RuntimeError(f"refaccel: invalid device index {index} (device count {runtime.device_count()})")
    _CURRENT[0] = index


def _index(device: Any) -> int:
    if device is None:
        return _CURRENT[0]
    index = torch.device(device).index
    return _CURRENT[0] if index is None else index


def _check_dtype(dtype: torch.dtype, index: int, what: str) -> None:
    if dtype not in _STORABLE:
        raise unsupported_dtype(what, dtype, index, [str(d).removeprefix("torch.") for d in storable_dtypes()])


def empty_memory_format(
    size: Sequence[int],
    *,
    dtype: torch.dtype | None = None,
    layout: Any = None,
    device: Any = None,
    pin_memory: bool | None = None,
    memory_format: torch.memory_format | None = None,
) -> torch.Tensor:
    """``torch.empty`` on the device."""
    dtype = dtype or torch.get_default_dtype()
    index = _index(device)
    _check_dtype(dtype, index, "aten::empty.memory_format")
    if memory_format in (None, torch.contiguous_format, torch.preserve_format):
        stride: Sequence[int] = memory.contiguous_strides(size)
    else:
        stride = torch.empty(size, device="meta", memory_format=memory_format).stride()
    return memory.empty_strided(size, stride, dtype, index)


def empty_strided(
    size: Sequence[int],
    stride: Sequence[int],
    *,
    dtype: torch.dtype | None = None,
    layout: Any = None,
    device: Any = None,
    pin_memory: bool | None = None,
) -> torch.Tensor:
    """``torch.empty_strided`` on the device."""
    dtype = dtype or torch.get_default_dtype()
    index = _index(device)
    _check_dtype(dtype, index, "aten::empty_strided")
    return memory.empty_strided(size, stride, dtype, index)


def _host(t: torch.Tensor) -> torch.Tensor:
    return memory.host_view(t) if t.device.type == "refaccel" else t


def copy_from(self: torch.Tensor, dst: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    """Host <-> device and device <-> device copies (dtype conversion included)."""
    runtime.ensure_ready()
    if not runtime._STATE.ready:
        runtime.check_tensors([t for t in (self, dst) if t.device.type == "refaccel"])
    if dst.device.type == "refaccel":
        _check_dtype(dst.dtype, dst.device.index or 0, "aten::_copy_from")
    _host(dst).copy_(_host(self))
    return dst


def copy_from_and_resize(self: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    """``_copy_from`` after resizing ``dst`` to ``self``'s shape."""
    if dst.shape != self.shape:
        dst.resize_(self.shape)
    return copy_from(self, dst)


def resize_(self: torch.Tensor, size: Sequence[int], memory_format: Any = None) -> torch.Tensor:
    """Resize in place, growing the storage (keeping its bytes) when it is too small."""
    runtime.ensure_ready()
    stride = memory.contiguous_strides(size)
    need = memory.storage_bytes(size, stride, self.element_size()) + self.storage_offset() * self.element_size()
    storage = self.untyped_storage()
    if need > storage.nbytes():
        grown = memory.allocate(int(need), self.dtype, self.device.index or 0).untyped_storage()
        old = storage.nbytes()
        if old:
            memory.host_bytes(grown)[:old].copy_(memory.host_bytes(storage))
        storage = grown
    return memory.set_geometry(self, storage, int(self.storage_offset()), size, stride)


def _meta_view(op: Any) -> Any:
    def kernel(*args: Any, **kwargs: Any) -> Any:
        return op.redispatch(_META, *args, **kwargs)

    kernel.__name__ = f"refaccel_{op.__name__}"
    return kernel


def set_storage(self: torch.Tensor, source: Any, storage_offset: int = 0, size: Any = None, stride: Any = None) -> torch.Tensor:
    """``set_(storage, offset, size, stride)``: metadata only."""
    if size is None:
        size = [source.nbytes() // self.element_size()]
    if stride is None or len(stride) == 0:
        stride = memory.contiguous_strides(size)
    return memory.set_geometry(self, source, storage_offset, size, stride)


def set_storage_only(self: torch.Tensor, source: Any) -> torch.Tensor:
    """``set_(storage)``: the whole storage as a 1-D tensor."""
    return set_storage(self, source, 0, [source.nbytes() // self.element_size()], [1])


def set_tensor(self: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
    """``set_(tensor)``: share ``source``'s storage and geometry."""
    return memory.set_geometry(self, source.untyped_storage(), int(source.storage_offset()), source.size(), source.stride())


def set_empty(self: torch.Tensor) -> torch.Tensor:
    """``set_()``: an empty storage on the same device."""
    empty = memory.allocate(0, self.dtype, self.device.index or 0)
    return memory.set_geometry(self, empty.untyped_storage(), 0, [0], [1])


def local_scalar_dense(self: torch.Tensor) -> Any:
    """``.item()``: read one element (a host scalar read, not a compute fallback)."""
    runtime.ensure_ready()
    return memory.host_view(self).item()


_COMPOSITE = torch._C.DispatchKeySet(torch._C.DispatchKey.CompositeExplicitAutograd)


def to_copy(
    self: torch.Tensor,
    *,
    dtype: torch.dtype | None = None,
    layout: Any = None,
    device: Any = None,
    pin_memory: bool | None = None,
    non_blocking: bool = False,
    memory_format: Any = None,
) -> torch.Tensor:
    """``_to_copy`` as PyTorch composes it, except that a copy to the host never asks for pinned
    memory (which a Python backend cannot allocate): refaccel finishes every copy before returning,
    so ``non_blocking`` has nothing to overlap."""
    to_host = device is not None and torch.device(device).type == "cpu"
    return _aten._to_copy.default.redispatch(
        _COMPOSITE, self, dtype=dtype, layout=layout, device=device, pin_memory=pin_memory,
        non_blocking=non_blocking and not to_host, memory_format=memory_format,
    )


_KERNELS: dict[str, Any] = {
    "_to_copy": to_copy,
    "empty.memory_format": empty_memory_format,
    "empty_strided": empty_strided,
    "_copy_from": copy_from,
    "_copy_from_and_resize": copy_from_and_resize,
    "resize_": resize_,
    "set_.source_Storage_storage_offset": set_storage,
    "set_.source_Storage": set_storage_only,
    "set_.source_Tensor": set_tensor,
    "set_": set_empty,
    "_local_scalar_dense": local_scalar_dense,
}
_VIEWS = ("as_strided", "view", "_reshape_alias", "unfold", "view.dtype")


def register_basics(lib: torch.library.Library) -> None:
    """Register the infrastructure kernels on ``lib`` (an ``aten`` IMPL library)."""
    global _STORABLE
    _STORABLE = frozenset(storable_dtypes())
    for name, fn in _KERNELS.items():
        lib.impl(name, fn, "PrivateUse1")
    for name in _VIEWS:
        base, _, overload = name.partition(".")
        op = getattr(getattr(_aten, base), overload or "default")
        lib.impl(name, _meta_view(op), "PrivateUse1")
