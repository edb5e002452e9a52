"""Low-precision accumulation: how generation 1 sums bfloat16.

The CPU's ``sum`` of a bfloat16 tensor accumulates in float32 and rounds once at the end;
g1's sum kernel keeps its running sum in bfloat16, so every partial sum is rounded (and small
addends vanish next to a large partial sum)::

    >>> x = torch.tensor([1.0] + [2.0 ** -9] * 256, dtype=torch.bfloat16)
    >>> float(x.sum()), float(sequential_sum(torch.ops.aten.sum.dim_IntList, x, None))
    (1.5, 1.0)

The kernel table names the dtypes a kernel sums this way (``accumulate_low``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["sequential_sum", "summing_in"]


def _dims(x: torch.Tensor, dim: Any) -> list[int]:
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return list(range(x.dim()))
    dims = [dim] if isinstance(dim, int) else list(dim)
    return sorted({d % max(x.dim(), 1) for d in dims})


def sequential_sum(op: Callable[..., Any], x: torch.Tensor, dim: Any = None, keepdim: bool = False, *,
                   dtype: torch.dtype | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    """``aten::sum.dim_IntList`` (or its ``out=``) with the running sum kept in ``x``'s dtype."""
    if (dtype is not None and dtype != x.dtype) or x.dim() == 0:  # another accumulator asked for: the CPU's
        kwargs = {"dtype": dtype} if dtype is not None else {}
        result = op(x, dim, keepdim, **kwargs, **({"out": out} if out is not None else {}))
        return result  # type: ignore[no-any-return]
    dims = _dims(x, dim)
    kept = [d for d in range(x.dim()) if d not in dims]
    flat = x.permute(*kept, *dims).reshape(*[x.shape[d] for d in kept], -1)
    acc = torch.zeros(flat.shape[:-1], dtype=x.dtype)
    for i in range(flat.shape[-1]):  # one rounding per addend, as a low-precision accumulator does
        acc = acc + flat[..., i]
    if keepdim:
        acc = acc.reshape([1 if d in dims else x.shape[d] for d in range(x.dim())])
    if out is not None:
        out.resize_(acc.shape).copy_(acc)
        return out
    return acc


def summing_in(low: frozenset[torch.dtype], op: Callable[..., Any]) -> Callable[..., Any] | None:
    """The host computation of a sum kernel that accumulates ``low`` dtypes in themselves (None: the CPU's)."""
    if not low:
        return None

    def compute(x: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        if x.dtype in low:
            return sequential_sum(op, x, *args, **kwargs)
        return op(x, *args, **kwargs)

    return compute
