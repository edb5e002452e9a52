"""Small helpers on sample values ``(input, args, kwargs)`` and on the exceptions a call raises.

    out = call(torch.add, (x, (y,), {"alpha": 2}))        # torch.add(x, y, alpha=2)
    to_cpu(out)                                          # detached host copies, meta kept
    error_info(exc, OpName.parse("aten.add.Tensor"), "refaccel", "int8").actionable
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from pathlib import Path
from typing import cast

import torch

from opmatrix.schema import ErrorInfo, OpName

from .layouts import T, Values, Variant, map_values

__all__ = ["UnreadableError", "call", "error_info", "identity", "map_tensors", "readable", "root_cause", "tensors_in", "to_cpu",
           "upcast", "where"]


def map_tensors(obj: T, fn: Callable[..., object]) -> T:
    """``fn`` applied to every tensor (and layout :class:`Variant`) inside ``obj``."""
    return map_values(obj, fn, (torch.Tensor, Variant))


def tensors_in(obj: object) -> list[torch.Tensor]:
    """Every tensor inside ``obj`` (nested tuples, lists, dicts), in :func:`map_tensors` order."""
    found: list[torch.Tensor] = []

    def keep(t: torch.Tensor) -> torch.Tensor:
        found.append(t)
        return t

    map_values(obj, keep)
    return found


def to_cpu(obj: T) -> T:
    """Detached host copies of every tensor in ``obj`` (meta tensors stay as they are)."""
    if isinstance(obj, torch.Tensor):
        return cast(T, obj.detach().cpu()) if obj.device.type != "meta" else obj
    if isinstance(obj, (tuple, list)):
        return cast(T, type(obj)(to_cpu(o) for o in obj) if not hasattr(obj, "_fields") else tuple(to_cpu(o) for o in obj))
    return obj


def call(fn: Callable[..., object], values: Values) -> object:
    """``fn(input, *args, **kwargs)``."""
    inp, args, kwargs = values
    return fn(inp, *args, **kwargs)


def upcast(values: T, dtype: torch.dtype, to: torch.dtype) -> T:
    """``values`` with every ``dtype`` tensor converted to ``to``."""
    return map_tensors(values, lambda t: t.to(to) if t.dtype == dtype else t)


def identity(out: T) -> T:
    """The outputs unchanged (the default output processing)."""
    return out


_LEGACY = {"float64": "double", "float32": "float", "float16": "half", "bfloat16": "bfloat16", "int64": "long",
           "int32": "int", "int16": "short", "int8": "char", "uint8": "byte", "bool": "bool",
           "complex64": "complexfloat", "complex128": "complexdouble"}


class UnreadableError(RuntimeError):
    """Stands in for a backend's exception whose message cannot be read (its ``__str__`` raised)."""


def readable(exc: BaseException) -> BaseException:
    """``exc``, or an :class:`UnreadableError` naming its type when ``str(exc)`` itself raises: a
    foreign exception is evidence, and reading it must never fail the probe."""
    try:
        str(exc)
        return exc
    except Exception as inner:  # noqa: BLE001 - whatever the broken __str__ raises
        return UnreadableError(f"{type(exc).__name__} (its message could not be read: {type(inner).__name__})")


def error_info(exc: BaseException, op: OpName, device: str, dtype: str) -> ErrorInfo:
    """The exception as recorded; actionable when it names the op (an OpInfo's cell: the first
    part of its name) and the dtype or device."""
    message = str(exc).strip().splitlines()[0][:500] if str(exc).strip() else type(exc).__name__
    low = message.lower()
    base = op.name.partition(".")[0]
    names_op = base.lower() in low or base.lstrip("_").lower() in low
    dtype_words = {dtype.lower(), str(getattr(torch, dtype, dtype)).lower()}
    if dtype in _LEGACY:
        dtype_words.add(_LEGACY[dtype])
    names_ctx = any(w in low for w in dtype_words) or device.lower() in low
    return ErrorInfo(type=type(exc).__name__, message=message, actionable=names_op and names_ctx)


def root_cause(exc: BaseException) -> BaseException:
    """The innermost cause of a wrapped exception (dynamo wraps the backend's own)."""
    seen = 0
    while seen < 8:
        inner = getattr(exc, "inner_exception", None) or exc.__cause__
        if inner is None or inner is exc:
            return exc
        exc, seen = inner, seen + 1
    return exc


def where(exc: BaseException) -> str:
    """An engine failure's message with the line that raised it (a bare assert says nothing)."""
    frames = traceback.extract_tb(exc.__traceback__)
    at = f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno} in {frames[-1].name})" if frames else ""
    return f"{type(exc).__name__}: {str(exc)[:400]}{at}"
