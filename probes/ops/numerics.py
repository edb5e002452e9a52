"""Numerics: compare device outputs with a CPU reference under per-dtype tolerances.

Low-precision floats (float16, bfloat16) are referenced in float32 computed on the CPU from the
same (rounded) inputs, and compared with the low-precision dtype's tolerance, as
``torch.testing.assert_close`` would choose it. Per-op overrides and ops whose values are not
comparable (random or uninitialised outputs) are data, in ``tolerances.yaml`` beside this file.
"""

from __future__ import annotations

import fnmatch
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml

__all__ = ["Comparison", "compare", "dtype_mismatch", "leaves", "moments_differ", "tolerance_for", "upcast_dtype",
           "values_comparable", "values_random"]

_LOW_PRECISION = {torch.float16: torch.float32, torch.bfloat16: torch.float32, torch.complex32: torch.complex64}

#: assert_close's defaults (rtol, atol) by dtype
_DEFAULTS: dict[torch.dtype, tuple[float, float]] = {
    torch.float16: (1e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
    torch.float32: (1.3e-6, 1e-5),
    torch.float64: (1e-7, 1e-7),
    torch.complex32: (1e-3, 1e-5),
    torch.complex64: (1.3e-6, 1e-5),
    torch.complex128: (1e-7, 1e-7),
}


@functools.lru_cache(maxsize=1)
def _table() -> dict[str, Any]:
    path = Path(__file__).with_name("tolerances.yaml")
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return data


def upcast_dtype(dtype: torch.dtype) -> torch.dtype | None:
    """The dtype a low-precision dtype is referenced in, or None."""
    return _LOW_PRECISION.get(dtype)


@functools.lru_cache(maxsize=4096)
def values_comparable(op_name: str) -> bool:
    """False for ops whose values are random or uninitialised (only shape/dtype compared)."""
    return not any(fnmatch.fnmatchcase(op_name, p) for p in _table().get("not_comparable", []))


@functools.lru_cache(maxsize=4096)
def values_random(op_name: str) -> bool:
    """True for ops whose values are random draws: their distribution's moments are compared."""
    return any(fnmatch.fnmatchcase(op_name, p) for p in _table().get("random", []))


#: dtypes the host has no comparison kernels for (``torch.equal`` on ComplexHalf, float8): their
#: outputs are compared in the dtype beside them, which holds every value exactly
_COMPARE_AS: dict[torch.dtype, torch.dtype] = {
    torch.complex32: torch.complex64,
    **{getattr(torch, n): torch.float32 for n in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
                                                 "float8_e8m0fnu") if hasattr(torch, n)},
}


@functools.lru_cache(maxsize=8192)  # fnmatch over every rule, per call, was 5% of a probe
def tolerance_for(op_name: str, dtype: torch.dtype) -> tuple[float, float]:
    """(rtol, atol) for ``op_name`` at ``dtype``: a per-op override, else assert_close's default."""
    dname = str(dtype).removeprefix("torch.")
    for rule in _table().get("overrides", []):
        if fnmatch.fnmatchcase(op_name, rule["op"]) and (not rule.get("dtypes") or dname in rule["dtypes"]):
            return float(rule["rtol"]), float(rule["atol"])
    return _DEFAULTS.get(dtype, (0.0, 0.0))


@dataclass
class Comparison:
    """Result of comparing one call's outputs."""

    ok: bool
    max_abs: float | None = None
    max_rel: float | None = None
    detail: str = ""
    #: values outside tolerance (exact dtypes: values that differ), when counted
    mismatched: int | None = None


def leaves(obj: object) -> list[object]:
    """A call's outputs, flattened: tensors, numbers, None and shapes (as tuples), in order."""
    if isinstance(obj, torch.Tensor) or obj is None or isinstance(obj, (bool, int, float, complex)):
        return [obj]
    if isinstance(obj, (tuple, list)):
        out: list[object] = []
        for o in obj:
            out.extend(leaves(o))
        return out
    if isinstance(obj, torch.Size):
        return [tuple(obj)]
    return [obj]


def dtype_mismatch(actual: object, expected: object) -> str | None:
    """Where the device's output dtypes differ from the same-dtype reference's, if anywhere."""
    for i, (a, e) in enumerate(zip(leaves(actual), leaves(expected), strict=False)):
        if isinstance(a, torch.Tensor) and isinstance(e, torch.Tensor) and a.dtype != e.dtype:
            return f"output {i} dtype {str(a.dtype).removeprefix('torch.')}, reference {str(e.dtype).removeprefix('torch.')}"
    return None


def compare(actual: object, expected: object, rtol: float, atol: float, *, values: bool = True) -> Comparison:
    """Compare (CPU copies of) device outputs with the reference outputs."""
    a_leaves, e_leaves = leaves(actual), leaves(expected)
    if len(a_leaves) != len(e_leaves):
        return Comparison(False, detail=f"{len(a_leaves)} outputs, reference has {len(e_leaves)}")
    max_abs = 0.0
    max_rel = 0.0
    for i, (a, e) in enumerate(zip(a_leaves, e_leaves, strict=True)):
        if isinstance(e, torch.Tensor):
            if not isinstance(a, torch.Tensor):
                return Comparison(False, detail=f"output {i} is {type(a).__name__}, expected a tensor")
            if a.layout is not torch.strided:  # sparse results compare by value
                a = a.to_dense()
            if e.layout is not torch.strided:
                e = e.to_dense()
            if a.shape != e.shape:
                return Comparison(False, detail=f"output {i} shape {tuple(a.shape)} != {tuple(e.shape)}")
            if not values or e.numel() == 0:
                continue
            wide = _COMPARE_AS.get(e.dtype)
            if wide is not None:
                a, e = a.to(wide), e.to(wide)
            if a.dtype != e.dtype:
                if a.is_floating_point() or a.is_complex():
                    a = a.to(e.dtype)
                else:
                    return Comparison(False, detail=f"output {i} dtype {a.dtype} != {e.dtype}")
            res = _compare_tensor(a, e, rtol, atol)
            if res.max_abs is not None:
                max_abs = max(max_abs, res.max_abs)
                max_rel = max(max_rel, res.max_rel or 0.0)
            if not res.ok:
                return Comparison(False, max(max_abs, res.max_abs or 0.0), max(max_rel, res.max_rel or 0.0),
                                  f"output {i}: {res.detail}", res.mismatched)
        elif isinstance(a, torch.Tensor):  # the device returned a tensor where the CPU returns a value
            return Comparison(False, detail=f"output {i} is a tensor, expected {type(e).__name__} {e!r:.40}")
        elif values and a != e and not (isinstance(e, float) and e != e and a != a):
            if isinstance(e, (int, float, complex)) and isinstance(a, (int, float, complex)):
                if abs(a - e) <= atol + rtol * abs(e):
                    continue
            return Comparison(False, detail=f"output {i}: {a!r} != {e!r}")
    return Comparison(True, max_abs, max_rel)


def _compare_tensor(a: torch.Tensor, e: torch.Tensor, rtol: float, atol: float) -> Comparison:
    if e.dtype == torch.bool or not (e.is_floating_point() or e.is_complex()):
        if torch.equal(a, e):
            return Comparison(True, 0.0, 0.0)
        # the error in a wide type (an int64 difference can overflow; bool has no subtraction)
        a64, e64 = a.to(torch.float64), e.to(torch.float64)
        err = (a64 - e64).abs()
        rel = torch.where(err == 0, torch.zeros_like(err), err / e64.abs().clamp_min(1.0))
        mism = int((a != e).sum().item())
        return Comparison(False, float(err.max().item()), float(rel.max().item()),
                          f"{mism} of {e.numel()} values differ (exact dtype)", mism)
    if torch.equal(a, e):  # bitwise-equal outputs (the common case) need no error arithmetic
        return Comparison(True, 0.0, 0.0)
    a64 = a.to(torch.complex128 if e.is_complex() else torch.float64)
    e64 = e.to(a64.dtype)
    both_nan = torch.isnan(a64) & torch.isnan(e64)
    same_inf = torch.isinf(e64) & (a64 == e64)
    err = (a64 - e64).abs()
    err = torch.where(both_nan | same_inf, torch.zeros_like(err), err)
    err = torch.nan_to_num(err, nan=float("inf"), posinf=float("inf"))
    bound = atol + rtol * e64.abs()
    bad = err > torch.nan_to_num(bound, nan=0.0, posinf=float("inf"))
    max_abs = float(err.max().item()) if err.numel() else 0.0
    denom = e64.abs().clamp_min(1e-30)
    rel = torch.where(err == 0, torch.zeros_like(err), err / denom)
    max_rel = float(rel.max().item()) if rel.numel() else 0.0
    if bool(bad.any()):
        n = int(bad.sum().item())
        return Comparison(False, max_abs, max_rel, f"{n} of {e.numel()} values outside atol={atol:g} rtol={rtol:g}", n)
    return Comparison(True, max_abs, max_rel)


#: random draws are compared by their first two moments when they have at least this many values
_MOMENT_MIN = 16
#: how many standard errors two draws' means (and standard deviations) may differ by: a wrong
#: distribution (a constant, another scale) is far outside; two honest draws almost never are
_MOMENT_SIGMAS = 8.0


def moments_differ(actual: object, expected: object) -> str | None:
    """Why two random draws of one distribution (the device's and the CPU's, same arguments) do
    not look alike (mean, standard deviation), or None. Values are never compared one by one."""
    for i, (a, e) in enumerate(zip(leaves(actual), leaves(expected), strict=False)):
        if not (isinstance(a, torch.Tensor) and isinstance(e, torch.Tensor)) or e.numel() < _MOMENT_MIN:
            continue
        if e.is_complex() or a.shape != e.shape:
            continue
        a64, e64 = a.detach().to(torch.float64).flatten(), e.detach().to(torch.float64).flatten()
        if not (bool(torch.isfinite(a64).all()) and bool(torch.isfinite(e64).all())):
            continue  # heavy tails (cauchy) or infinities: moments say nothing
        n = e64.numel()
        va, ve = float(a64.var()), float(e64.var())
        mean_se = ((va + ve) / n) ** 0.5
        da = abs(float(a64.mean()) - float(e64.mean()))
        if da > _MOMENT_SIGMAS * mean_se + 1e-6 * (1 + abs(float(e64.mean()))):
            return (f"output {i}: mean {float(a64.mean()):.4g}, the CPU's draw {float(e64.mean()):.4g} "
                    f"({da / max(mean_se, 1e-300):.1f} standard errors apart)")
        sa, se = va ** 0.5, ve ** 0.5
        std_se = ((va + ve) / (2 * n)) ** 0.5 * 2.0  # generous: tails heavier than normal
        if abs(sa - se) > _MOMENT_SIGMAS * std_se + 1e-6 * (1 + se):
            return f"output {i}: standard deviation {sa:.4g}, the CPU's draw {se:.4g}"
    return None
