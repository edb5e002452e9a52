"""Accumulation mode: whether a low-precision reduction or matmul sums in float32 or in its dtype.

A bfloat16 ``sum`` can keep its running sum in float32 (and round once) or in bfloat16 (and
round at every step); the result users get differs, and tolerances alone do not say which. One
designed input separates them: a 1 followed by 2^p addends of 2^-(p+1) (p: the dtype's mantissa
bits with the implicit one). Float32 accumulation gives exactly 1.5; a low-precision running sum
loses every addend next to the 1 (1.0 in order; a pairwise tree loses some, ~1.49); anything else
is ``unknown``, with the value seen::

    mode, evidence = measure(adapter, entry, torch.bfloat16)    # (Accumulation.float32, "designed input ...")

Which ops and which design: ``extensions.yaml`` (``accumulation``), data, not branches.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from opmatrix.schema import Accumulation

from .ranks import load_extensions
from .values import where

if TYPE_CHECKING:
    from opmatrix.backend.base import Adapter

    from .source import OpEntry

__all__ = ["LOW_PRECISION", "design_of", "measure"]

#: the dtypes whose accumulation is measured, with their mantissa bits (the implicit one included)
LOW_PRECISION = {torch.bfloat16: 8, torch.float16: 11}


def design_of(entry: OpEntry) -> str | None:
    """The accumulation design of an OpInfo (``reduce``, ``matmul`` ...), or None: not measured."""
    for design, names in (load_extensions().get("accumulation") or {}).items():
        if entry.info.name in names:
            return str(design)
    return None


def _addends(dtype: torch.dtype) -> torch.Tensor:
    p = LOW_PRECISION[dtype]
    return torch.tensor([1.0] + [2.0 ** -(p + 1)] * 2 ** p, dtype=dtype)


def _values(design: str, x: torch.Tensor) -> tuple[Any, ...]:
    """The arguments of the designed call; every output element is the sum of ``x``."""
    if design == "reduce":
        return (x,)
    a, b = torch.stack([x, x]), torch.ones(x.numel(), 2, dtype=x.dtype)
    if design == "matmul":
        return (a, b)
    if design == "batched_matmul":
        return (a[None], b[None])
    if design == "addmm":
        return (torch.zeros(2, 2, dtype=x.dtype), a, b)
    raise ValueError(f"extensions.yaml: unknown accumulation design {design!r}")


def _sequential(x: torch.Tensor) -> float:
    acc = torch.zeros((), dtype=x.dtype)
    for v in x:
        acc = acc + v
    return float(acc)


def _pairwise(x: torch.Tensor) -> float:
    while x.numel() > 1:
        if x.numel() % 2:
            x = torch.cat([x, torch.zeros(1, dtype=x.dtype)])
        x = x[0::2] + x[1::2]  # each pair rounded to the dtype
    return float(x[0])


def candidates(x: torch.Tensor) -> dict[str, float]:
    """What each accumulation gives for ``x``: float32 (one rounding), the dtype in order, pairwise."""
    name = str(x.dtype).removeprefix("torch.")
    return {"float32": float(x.double().sum().to(x.dtype)), f"{name} in order": _sequential(x),
            f"{name} pairwise": _pairwise(x)}


def classify(seen: list[float], x: torch.Tensor) -> tuple[Accumulation, str]:
    """The accumulation mode every output value ``seen`` shows, with the evidence in words."""
    name = str(x.dtype).removeprefix("torch.")
    cands = candidates(x)
    said = ", ".join(f"{k} gives {v:g}" for k, v in cands.items())
    head = f"designed input: 1 and {x.numel() - 1} addends of {float(x[1]):g} ({said}); the device gave"
    values = sorted(set(seen))
    shown = ", ".join(f"{v:g}" for v in values)
    if len(values) != 1:
        return Accumulation.unknown, f"{head} {shown} (outputs disagree)"
    v = values[0]
    if v == cands["float32"] and all(v != c for k, c in cands.items() if k != "float32"):
        return Accumulation.float32, f"{head} {v:g}: float32 accumulation"
    low = [k for k, c in cands.items() if k != "float32" and c == v]
    if low:
        return Accumulation(name), f"{head} {v:g}: {name} accumulation ({low[0].split(' ', 1)[1]})"
    return Accumulation.unknown, f"{head} {v:g}: none of these orders"


def measure(adapter: Adapter, entry: OpEntry, dtype: torch.dtype,
            call: Callable[..., Any] | None = None) -> tuple[Accumulation, str] | None:
    """Run the designed call on the device; None when the op or dtype is not measured. A call
    the device refuses is ``unknown`` with its error (its cells say the rest)."""
    design = design_of(entry)
    if design is None or dtype not in LOW_PRECISION:
        return None
    x = _addends(dtype)
    device = adapter.device()
    fn = call or entry.info.op
    try:
        out = fn(*(v.to(device) for v in _values(design, x)))
        seen = [float(v) for v in out.detach().to("cpu").float().reshape(-1)]
    except Exception as exc:  # noqa: BLE001 - a refusal or fault of the designed call: not measured
        return Accumulation.unknown, f"the designed call raised: {where(exc)}"
    return classify(seen, x)
