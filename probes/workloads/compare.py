"""Moving workloads to a device and comparing their results with a reference."""

from __future__ import annotations

from typing import TypeVar, cast

import torch

T = TypeVar("T")

__all__ = ["to_device", "to_cpu", "flatten", "compare", "upcast"]


def to_device(value: T, device: torch.device | str) -> T:
    """Tensors (in tuples / lists / dicts) moved to ``device``; other values as they are."""
    if isinstance(value, torch.Tensor):
        return cast(T, value.to(device))
    if isinstance(value, (tuple, list)):
        return cast(T, type(value)(to_device(v, device) for v in value))
    if isinstance(value, dict):
        return cast(T, {k: to_device(v, device) for k, v in value.items()})
    return value


def to_cpu(value: T) -> T:
    """Tensors moved to the host (detached)."""
    if isinstance(value, torch.Tensor):
        return cast(T, value.detach().cpu())
    if isinstance(value, (tuple, list)):
        return cast(T, type(value)(to_cpu(v) for v in value))
    if isinstance(value, dict):
        return cast(T, {k: to_cpu(v) for k, v in value.items()})
    return value


def upcast(value: T) -> T:
    """Floating tensors as float32 (the reference of a low-precision run)."""
    if isinstance(value, torch.Tensor):
        return cast(T, value.float()) if value.is_floating_point() else value
    if isinstance(value, (tuple, list)):
        return cast(T, type(value)(upcast(v) for v in value))
    return value


def flatten(value: object) -> list[torch.Tensor]:
    """The tensors in a (nested) output, in order."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in flatten(v)]
    if isinstance(value, dict):
        return [t for k in sorted(value) for t in flatten(value[k])]
    if hasattr(value, "to_tuple"):
        return flatten(value.to_tuple())
    return []


def compare(got: object, want: object, rtol: float, atol: float) -> tuple[bool, float, float, str]:
    """(within tolerance, max |got - want|, max |want|, what differs) over every output tensor."""
    a, b = flatten(to_cpu(got)), flatten(to_cpu(want))
    if len(a) != len(b):
        return False, float("inf"), 0.0, f"{len(a)} output tensors, the reference has {len(b)}"
    worst, scale, ok, why = 0.0, 0.0, True, ""
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        if x.shape != y.shape:
            return False, float("inf"), 0.0, f"output {i}: shape {tuple(x.shape)}, reference {tuple(y.shape)}"
        if not (x.is_floating_point() or y.is_floating_point()):
            bad = int((x != y).sum())
            if bad:
                ok, why = False, why or f"output {i}: {bad} of {x.numel()} values differ (exact comparison)"
            continue
        xf, yf = x.double(), y.double()
        if xf.numel() == 0:
            continue
        if not torch.isfinite(xf).eq(torch.isfinite(yf)).all():
            ok, why = False, why or f"output {i}: non-finite values where the reference has none"
        diff = (xf - yf).abs().nan_to_num(0.0)
        worst, scale = max(worst, float(diff.max())), max(scale, float(yf.abs().nan_to_num(0.0).max()))
        if not torch.allclose(xf, yf, rtol=rtol, atol=atol, equal_nan=True):
            ok, why = False, why or f"output {i}: max abs error {float(diff.max()):.3g} > atol {atol:g} + rtol {rtol:g}"
    return ok, worst, scale, why
