"""Rejection errors: clean, actionable, and recognisable as rejections by any classifier.

Every rejection is a ``RefaccelUnsupportedError`` (a ``NotImplementedError``) whose message names
the op, the dtype, the layout, the rank and the device, and says what would be served::

    refaccel: aten::add.Tensor does not support dtype float64 on refaccel:0 (supported: dtypes
    float32, bfloat16, float16, int32, int64, bool; ranks 0-8; any layout) [call: dtype float64,
    layout contiguous, rank 2]
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["RefaccelUnsupportedError", "layout_of", "unsupported_call", "unsupported_dtype", "no_kernel"]


class RefaccelUnsupportedError(NotImplementedError):
    """The device does not support this call; the device stays usable."""


def layout_of(tensors: Sequence[torch.Tensor]) -> str:
    """``contiguous`` / ``expanded`` (a zero stride) / ``strided`` for the call's device tensors."""
    if all(t.is_contiguous() for t in tensors):
        return "contiguous"
    if any(st == 0 and n > 1 for t in tensors for n, st in zip(t.shape, t.stride(), strict=True)):
        return "expanded"
    return "strided"


def _call(tensors: Sequence[torch.Tensor]) -> str:
    if not tensors:
        return "no device tensor arguments"
    dtypes = sorted({str(t.dtype).removeprefix("torch.") for t in tensors})
    rank = max(t.dim() for t in tensors)
    return f"dtype {'/'.join(dtypes)}, layout {layout_of(tensors)}, rank {rank}"


def _device(tensors: Sequence[torch.Tensor], index: int | None = None) -> str:
    if index is None:
        index = (tensors[0].device.index or 0) if tensors else 0
    return f"refaccel:{index}"


def unsupported_call(op: str, what: str, tensors: Sequence[torch.Tensor], supported: str) -> RefaccelUnsupportedError:
    """A native kernel exists but not for this dtype / rank / layout / argument."""
    return RefaccelUnsupportedError(
        f"refaccel: {op} does not support {what} on {_device(tensors)} (supported: {supported}) "
        f"[call: {_call(tensors)}]"
    )


def unsupported_dtype(op: str, dtype: torch.dtype, index: int, storable: Sequence[str]) -> RefaccelUnsupportedError:
    """Device memory cannot hold ``dtype`` (float64, complex)."""
    name = str(dtype).removeprefix("torch.")
    return RefaccelUnsupportedError(
        f"refaccel: {op} does not support dtype {name} on refaccel:{index}: device memory cannot hold {name} "
        f"(supported: {', '.join(storable)})"
    )


def no_kernel(op: str, tensors: Sequence[torch.Tensor], generation: str, reason: str) -> RefaccelUnsupportedError:
    """No native kernel, and the host fallback may not serve this call (``reason`` says why)."""
    return RefaccelUnsupportedError(
        f"refaccel: {op} is not supported on {_device(tensors)} (generation {generation}: no native kernel; "
        f"{reason}) [call: {_call(tensors)}]"
    )
