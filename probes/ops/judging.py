"""Judging a device's outputs: the CPU reference (same dtype and upcast) and the comparison.

    ref = reference(fn, unit.cpu_values, torch.bfloat16, unit.post)   # CPU outputs, bf16 and fp32
    check = check_values(st, unit, ref, out, torch.bfloat16, result)   # check.ok, check.comparison, ...
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

import torch

from opmatrix.schema import ReferenceKind

from .cells import SampleResult
from .defined import canonical
from .layouts import Values
from .numerics import (
    Comparison,
    compare,
    dtype_mismatch,
    leaves,
    moments_differ,
    tolerance_for,
    upcast_dtype,
    values_comparable,
    values_random,
)
from .state import EngineState
from .units import Unit
from .values import call, identity, map_tensors, to_cpu, upcast

__all__ = ["Reference", "check_values", "defined_only", "judge", "post", "reference"]


@dataclass
class Reference:
    """The CPU's outputs at the probed dtype, and in higher precision for low-precision dtypes."""

    same: object
    upcast: object | None
    #: the dtype the CPU computed in when it has no kernel at the probed one (its outputs in that
    #: dtype were cast back to the probed one); None: the CPU computed at the probed dtype
    widened: str | None = None


@dataclass(frozen=True)
class Judgement:
    """How outputs compare with a reference: the comparison, the tolerances and which reference judged."""

    ok: bool
    comparison: Comparison
    rtol: float
    atol: float
    kind: ReferenceKind


@dataclass(frozen=True)
class ValueCheck:
    """A call's outputs judged: whether they pass, the comparison, whether values were compared at all
    (or only dtypes and shapes), and why OpInfo's output processing failed on them (None when it did not)."""

    ok: bool
    comparison: Comparison
    compared: bool
    broken: str | None


def reference(fn: Callable[..., object], cpu_values: Values, dtype: torch.dtype, post: Callable[..., object] = identity
               ) -> Reference:
    """The CPU's outputs, through the sample's ``post`` (see :func:`post`), at the dtype and upcast."""
    same = post(to_cpu(call(fn, cpu_values)))
    up = upcast_dtype(dtype)
    higher = None
    if up is not None:
        with contextlib.suppress(Exception):
            higher = post(to_cpu(call(fn, upcast(cpu_values, dtype, up))))
    return Reference(same, higher)


#: the dtype an integer dtype is computed in when the CPU has no kernel for it (an output in that
#: dtype is cast back; int64, which index outputs have, is never one)
_WIDER_INT = {torch.uint16: torch.int32, torch.int16: torch.int32, torch.int8: torch.int32, torch.uint8: torch.int32}


def widened_reference(fn: Callable[..., object], cpu_values: Values, dtype: torch.dtype,
                      post: Callable[..., object] = identity) -> Reference | None:
    """The CPU's outputs computed in a wider dtype and cast back, for a dtype it has no kernel for
    (float16/bfloat16 in float32, small integers in int32): a device that computes such a sample
    is judged, not called ok unseen. None when there is no wider dtype or the CPU refuses that too."""
    wide = upcast_dtype(dtype) or _WIDER_INT.get(dtype)
    if wide is None:
        return None
    try:
        out = to_cpu(call(fn, upcast(cpu_values, dtype, wide)))
        same = post(map_tensors(out, lambda t: t.to(dtype) if t.dtype == wide else t))
        higher = post(out) if upcast_dtype(dtype) is not None else None
    except Exception:  # noqa: BLE001 - the CPU refuses it in the wider dtype too: no reference
        return None
    return Reference(same, higher, widened=str(wide).removeprefix("torch."))


def post(unit: Unit, out: object) -> tuple[object, str | None]:
    """The device's outputs as OpInfo compares them: through the sample's output_process_fn_grad.

    OpInfo's name for it is unfortunate: linalg samples use it to make outputs that are defined
    only up to sign or phase comparable (singular and eigen vectors: ``U.abs()``, ``U @ Vh``),
    exactly as PyTorch's own ``test_compare_cpu`` does; for most samples it is the identity.
    Returns the processed outputs, or the raw ones and why processing failed (then wrong).
    """
    try:
        return unit.post(out), None
    except Exception as exc:  # noqa: BLE001 - the device's outputs have another structure
        shapes = ", ".join(str(tuple(t.shape)) for t in leaves(out) if isinstance(t, torch.Tensor))
        return out, (f"the device's outputs (shapes {shapes}) fail OpInfo's output processing, which the CPU's pass: "
                     f"{type(exc).__name__}: {str(exc)[:160]}")


def defined_only(unit: Unit, ref: Reference, out: object) -> tuple[Reference, object, str | None]:
    """The reference and the device's outputs reduced to what the op defines (:mod:`.defined`:
    the values tied indices select, not the CPU's tie order), and what the device broke that the
    comparison cannot see (indices that repeat an element), or None."""
    same = canonical(str(unit.overload), unit.cpu_values, out, ref.same)
    if not same.rewritten:
        return ref, out, same.problem
    higher = canonical(str(unit.overload), unit.cpu_values, out, ref.upcast).ref if ref.upcast is not None else None
    return Reference(same.ref, higher, ref.widened), same.out, same.problem


def judge(ref: Reference, out: object, op: str, dtype: torch.dtype, comparable: bool) -> Judgement:
    """The device's outputs against the reference at the dtype's (or the op's) tolerance: the
    same-dtype reference, and for low-precision dtypes the upcast one, whichever passes."""
    rtol, atol = tolerance_for(op, dtype)
    kind = ReferenceKind.cpu_upcast if ref.widened else ReferenceKind.cpu_same_dtype
    wrong_dtype = dtype_mismatch(out, ref.same)
    if wrong_dtype is not None:  # the upcast reference compares values only, never dtypes
        return Judgement(False, Comparison(False, detail=wrong_dtype), rtol, atol, kind)
    res = compare(out, ref.same, rtol, atol, values=comparable)
    if ref.upcast is not None:
        up = compare(out, ref.upcast, rtol, atol, values=comparable)
        if up.ok or not res.ok:
            res, kind = up, ReferenceKind.cpu_upcast
        if not res.ok and compare(out, ref.same, rtol, atol, values=comparable).ok:
            res, kind = compare(out, ref.same, rtol, atol, values=comparable), ReferenceKind.cpu_same_dtype
    return Judgement(res.ok, res, rtol, atol, kind)


def check_values(st: EngineState, unit: Unit, ref: Reference, out: object, dtype: torch.dtype, result: SampleResult
                  ) -> ValueCheck:
    """Judge a call's outputs against the reference and record the numerics on ``result``."""
    comparable = st.adapter.device_type != "meta" and values_comparable(str(unit.overload)) and unit.undefined is None
    if unit.undefined is not None:
        result.note = "; ".join(filter(None, [result.note, unit.undefined]))
    out, broken = post(unit, out)
    undefined_order = None
    if comparable and broken is None:
        ref, out, undefined_order = defined_only(unit, ref, out)
    try:
        judged = judge(ref, out, str(unit.overload), dtype, comparable)
    except Exception as exc:  # noqa: BLE001 - opmatrix's comparison failed: never the backend's error
        note = f"values not compared: opmatrix's comparison failed ({type(exc).__name__}: {str(exc)[:160]})"
        result.note = "; ".join(filter(None, [result.note, note]))
        return ValueCheck(True, Comparison(True, detail=note), False, None)
    ok, res = judged.ok, judged.comparison
    if broken is not None:
        ok, res.detail = False, broken
    elif undefined_order is not None:
        ok, res = False, Comparison(False, res.max_abs, res.max_rel, undefined_order)
    elif ok and st.adapter.device_type != "meta" and values_random(str(unit.overload)):
        # a random draw: its distribution, not its values (``moments_differ`` says why not)
        differ = moments_differ(out, ref.same)
        if differ is not None:
            ok, res = False, Comparison(False, detail=f"random values unlike the CPU's draw: {differ}")
    if comparable:
        result.rtol, result.atol, result.reference = judged.rtol, judged.atol, judged.kind
        result.max_abs, result.max_rel = res.max_abs, res.max_rel
        result.mismatched = None if ok else res.mismatched
    return ValueCheck(ok, res, comparable, broken)
