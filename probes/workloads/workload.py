"""A built workload and what the catalog's factories share: inputs, losses, tolerances.

The catalog (:mod:`.catalog`) and the model classes' optional factories (:mod:`.models`) both
build :class:`Workload` objects with these helpers; neither imports the other's privates.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812

__all__ = ["Workload", "ce_logits", "float_input", "mse", "seeded", "tolerance"]


@dataclass
class Workload:
    """One built workload: a model in ``dtype`` on the CPU, its example inputs and its tolerance."""

    name: str
    model: nn.Module
    inputs: tuple
    loss_fn: Callable | None
    rtol: float
    atol: float
    batch: int
    input_desc: str
    #: a function of the batch size giving inputs for a second shape (dynamic-shape check), or None
    make_inputs: Callable[[int], tuple] | None = None
    #: a callable run instead of ``model(*inputs)`` (e.g. token generation), or None
    run: Callable[..., Any] | None = None


_LOW = {"float32": (1e-4, 1e-5), "bfloat16": (5e-2, 5e-2), "float16": (1e-2, 1e-2)}


def tolerance(spec_tol: dict[str, tuple[float, float]], dtype: torch.dtype) -> tuple[float, float]:
    """(rtol, atol) for ``dtype``: the workload's own, else the suite's default for the dtype."""
    name = str(dtype).removeprefix("torch.")
    return spec_tol.get(name) or _LOW.get(name, (1e-4, 1e-5))


def seeded(seed: int) -> torch.Generator:
    """A CPU generator seeded with ``seed``."""
    return torch.Generator().manual_seed(seed)


def float_input(shape: tuple[int, ...], dtype: torch.dtype, seed: int) -> torch.Tensor:
    """A seeded ``randn`` input of ``shape`` in ``dtype`` (seed + 1, as the input descriptions say)."""
    return torch.randn(*shape, generator=seeded(seed + 1)).to(dtype)


def mse(out: torch.Tensor) -> torch.Tensor:
    """A loss for outputs without labels: their mean square, in float32."""
    return out.float().pow(2).mean()


def ce_logits(out: torch.Tensor) -> torch.Tensor:
    """Cross entropy of class logits against fixed labels (row i: class i mod classes), in float32."""
    target = torch.arange(out.shape[0]) % out.shape[-1]
    return F.cross_entropy(out.float(), target)
