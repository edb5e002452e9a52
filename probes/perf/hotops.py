"""Hot operators that ``opmatrix bench --ops`` measures: data, one row per operator.

Each row names the ATen operator, how to call it and the input shapes (drawn from ``torch.randn``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

__all__ = ["HOT_OPS", "HotOp"]


@dataclass(frozen=True)
class HotOp:
    """One operator to time: its ATen name, a call, and its input shapes."""

    aten: str
    call: Callable[..., torch.Tensor]
    shapes: tuple[tuple[int, ...], ...]


HOT_OPS: dict[str, HotOp] = {
    "add": HotOp("aten::add.Tensor", torch.add, ((512, 512), (512, 512))),
    "mul": HotOp("aten::mul.Tensor", torch.mul, ((512, 512), (512, 512))),
    "mm": HotOp("aten::mm", torch.mm, ((256, 256), (256, 256))),
    "softmax": HotOp("aten::softmax.int", lambda x: torch.softmax(x, -1), ((256, 512),)),
    "relu": HotOp("aten::relu", torch.relu, ((512, 512),)),
    "sum": HotOp("aten::sum", torch.sum, ((512, 512),)),
}
