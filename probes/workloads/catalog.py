"""Stand-in workload catalog (mlp, cnn) with the interface of the full catalog.

The full catalog (mlp, cnn, transformer, lstm, embeddingbag, tinygpt) replaces this file at merge;
``opmatrix bench`` relies only on this interface::

    wl = build("mlp", dtype=torch.float32, seed=0)
    wl.model(*wl.inputs)           # a forward pass; wl.loss_fn(output) a scalar loss
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

__all__ = ["WORKLOADS", "Workload", "WorkloadSpec", "build"]


@dataclass(frozen=True)
class Workload:
    """A model with its inputs, loss and the tolerances its numerics are judged by."""

    name: str
    model: nn.Module
    inputs: tuple[Any, ...]
    loss_fn: Callable[[Any], torch.Tensor]
    rtol: float
    atol: float
    batch: int
    input_desc: str


@dataclass(frozen=True)
class WorkloadSpec:
    """How to build one workload: a model factory and its input shapes."""

    description: str
    make_model: Callable[[], nn.Module]
    input_shapes: tuple[tuple[int, ...], ...]
    batch: int


def _mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10))


def _cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10),
    )


WORKLOADS: dict[str, WorkloadSpec] = {
    "mlp": WorkloadSpec("3-layer MLP 64-128-128-10 with ReLU", _mlp, ((32, 64),), 32),
    "cnn": WorkloadSpec("2-conv CNN on 3x32x32 images", _cnn, ((16, 3, 32, 32),), 16),
}


def build(name: str, dtype: torch.dtype = torch.float32, seed: int = 0) -> Workload:
    """Build workload ``name`` on the CPU with inputs drawn from ``torch.randn`` under ``seed``."""
    if name not in WORKLOADS:
        raise KeyError(f"unknown workload {name!r}; known: {', '.join(sorted(WORKLOADS))}")
    spec = WORKLOADS[name]
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = spec.make_model().to(dtype)
    inputs = tuple(torch.randn(shape, generator=gen, dtype=dtype) for shape in spec.input_shapes)
    shapes = ", ".join("x".join(map(str, s)) for s in spec.input_shapes)
    return Workload(
        name=name, model=model, inputs=inputs, loss_fn=lambda out: out.float().pow(2).mean(),
        rtol=1.3e-6 if dtype == torch.float32 else 1e-2, atol=1e-5 if dtype == torch.float32 else 1e-2,
        batch=spec.batch, input_desc=f"{shapes} {str(dtype).removeprefix('torch.')} from torch.randn, seed {seed}",
    )
