"""The units of a task: every sample of an OpInfo, its argument variants and its layouts.

A *unit* is one sample in one layout, with the overload it calls (resolved per full argument
signature: kinds, ranks and dtypes) and the argument features its cell may be conditioned on::

    for unit in units(st, entry, samples, opts, undefined=None):
        unit.index, unit.layout, unit.overload, unit.rank     # "3.1", transposed, aten.add.Tensor, 3
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from opmatrix.schema import TENSOR, Layout, OpName, UnitId, features_of
from opmatrix.schema.conditions import INPUT
from opmatrix.schema.enums import DTYPES

from . import observe
from .layouts import Values, primary_tensor, to_device, transform_sample
from .source import OpEntry
from .state import EngineState, ProbeOptions
from .values import call, identity, map_tensors, tensors_in

if TYPE_CHECKING:
    from collections.abc import Hashable

    from torch.testing._internal.opinfo.core import SampleInput

__all__ = ["Unit", "device_values", "dtype_of", "holds_dtype", "overload_of", "unit_id", "units", "values_key"]


@functools.lru_cache(maxsize=4096)
def _schema_args(op: OpName) -> tuple[torch._C.Argument, ...]:
    """The schema arguments of ``op`` (none for an OpInfo's cell or a Python-only op)."""
    if op.is_opinfo:
        return ()
    try:
        return tuple(getattr(getattr(getattr(torch.ops, op.namespace), op.name), op.overload)._schema.arguments)
    except (AttributeError, RuntimeError):
        return ()


def _arg_names(overload: OpName) -> list[str]:
    return [a.name for a in _schema_args(overload)]


def _named_features(overload: OpName, values: Values, rank: int) -> dict[str, str]:
    inp, args, kwargs = values
    named: dict[str, Any] = {}
    arg_names = _arg_names(overload)
    positional = [inp, *args]
    for i, v in enumerate(positional):
        named[arg_names[i] if i < len(arg_names) else f"arg{i}"] = v
    named.update(kwargs)
    plain = {k: (TENSOR if isinstance(v, torch.Tensor) else str(v).removeprefix("torch.") if isinstance(v, torch.dtype)
                 else v) for k, v in named.items()}
    plain.pop("self", None)
    plain.pop("input", None)
    out = features_of(plain, rank)
    if isinstance(inp, torch.Tensor):
        out[INPUT] = "empty" if inp.numel() == 0 else "nonempty"
    return out


@dataclass
class Unit:
    index: str
    layout: Layout
    cpu_values: Values  # values with CPU tensors (the layout's views)
    variants: Values  # values with Variants
    rank: int
    overload: OpName
    features: dict[str, str]
    post: Callable[..., object] = identity  # the sample's output_process_fn_grad
    undefined: str | None = None  # why the values cannot be compared (OpInfo; dropout_p > 0)
    #: the dtype the cell is filed under: the first tensor's (a factory's: its output's)
    dtype: str = ""
    #: a factory sample (no tensor input): it runs with ``device=`` the probed device
    factory: bool = False
    #: per tensor of the values (in :func:`map_tensors` order), whether OpInfo's own
    #: ``requires_grad=True`` generation asks for its gradient; None: not known
    grad_mask: tuple[bool, ...] | None = None


def unit_id(unit: Unit, step: str) -> UnitId:
    """The unit's id at ``step`` (eager, backward, compile); printed once where the runner (its
    board, ``skip``) or a record (``not_run``) names it."""
    return UnitId(unit.index, unit.layout, step)


def values_key(unit: Unit) -> tuple[str, bool]:
    """Units with equal keys hold equal values (their layouts differ in memory only): one CPU
    reference serves them all. ``expanded`` broadcasts the first row, so its values differ."""
    return unit.index, unit.layout is Layout.expanded


def asks_device(unit: Unit) -> bool:
    """Whether the sample says where its output is made: a factory (no tensor input), or a
    sample whose own ``device=`` argument names the host it was generated on (OpInfo's
    ``linspace(start_tensor, end_tensor, steps, device=...)``, ``new_zeros``): on the device that
    argument must name the device, or the op runs on the host and proves nothing."""
    if unit.factory:
        return True
    kwargs = unit.variants[2]
    if "device" not in kwargs:
        return False
    try:
        return torch.device(kwargs["device"]).type == "cpu"  # type: ignore[call-overload]
    except (RuntimeError, TypeError, ValueError):
        return False


def device_values(unit: Unit, device: torch.device | str) -> Values:
    """The unit's values with every tensor on ``device`` in the unit's layout; a sample that
    says where its output is made (:func:`asks_device`) with ``device=`` the device (the CPU
    one's says ``device="cpu"`` or nothing)."""
    values = map_tensors(unit.variants, lambda v: to_device(v, device))
    if asks_device(unit):
        inp, args, kwargs = values
        values = (inp, args, {**kwargs, "device": device})
    return values


def dtype_of(values: object) -> str | None:
    """The dtype a sample is filed under: its first tensor's that the matrix can name."""
    for t in tensors_in(values):
        name = str(t.dtype).removeprefix("torch.")
        if name in DTYPES:
            return name
    return None


def unit_dtypes(unit: Unit) -> tuple[str, ...]:
    """Every dtype the unit involves, its own first: its tensors' and the ``dtype=`` it asks for
    (a refusal may name any of them: ``linspace(int64 tensors, dtype=complex128)``)."""
    names = [unit.dtype, *(str(t.dtype).removeprefix("torch.") for t in tensors_in(unit.cpu_values))]
    asked = unit.cpu_values[2].get("dtype")
    if isinstance(asked, torch.dtype):
        names.append(str(asked).removeprefix("torch."))
    return tuple(dict.fromkeys(n for n in names if n))


def holds_dtype(values: Values, dtype: torch.dtype) -> bool:
    """Whether any tensor of the sample (or a factory's ``dtype=``) is of ``dtype``."""
    inp, args, kwargs = values
    return kwargs.get("dtype") == dtype or any(t.dtype == dtype for t in tensors_in(values))


def overload_of(st: EngineState, entry: OpEntry, values: Values) -> OpName:
    """The overload a sample calls, or its OpInfo's name when it calls several ops (parsed here,
    once: the recorded calls are the matrix's spellings, see :func:`.observe.overload_name`)."""
    key = f"{entry.full_name}|{observe.signature_of(values)!r}"
    calls = st.overloads.get(key)
    if calls is None:
        try:
            calls = observe.top_level_overloads(entry.info.op, values)
        except Exception:  # noqa: BLE001 - tracing is best effort; fall back to the CPU leaf ops
            rec = observe.LeafRecorder()
            try:
                with rec:
                    call(entry.info.op, values)
            except Exception:  # noqa: BLE001
                pass
            calls = rec.ops
        st.overloads.put(key, calls)
    primary = observe.primary_overload(calls)
    return OpName.parse(primary) if primary is not None else OpName.opinfo(entry.full_name)


def _dim_position(overload: OpName, values: Values) -> tuple[str, Any] | None:
    """Where an integer ``dim`` argument sits in ``values``: ("kw", name) or ("pos", index)."""
    inp, args, kwargs = values
    for name in ("dim", "axis"):
        if isinstance(kwargs.get(name), int) and not isinstance(kwargs.get(name), bool):
            return ("kw", name)
    for i, a in enumerate(_schema_args(overload)):
        if a.name in ("dim", "axis") and str(a.type) == "int" and 0 < i <= len(args):
            v = args[i - 1]
            if isinstance(v, int) and not isinstance(v, bool):
                return ("pos", i - 1)
    return None


def _arg_variants(overload: OpName, base: Values) -> list[Values]:
    """The sample with its ``dim`` moved to the first and the last axis (argument conditions
    such as "native for the last axis" are only observable when both occur)."""
    where = _dim_position(overload, base)
    primary = primary_tensor(base)
    if where is None or primary is None or primary.dim() < 2:
        return []
    inp, args, kwargs = base
    current = kwargs[where[1]] if where[0] == "kw" else args[where[1]]
    if not isinstance(current, int):  # _dim_position found an int there
        return []
    rank = primary.dim()
    out: list[Values] = []
    for d in (0, rank - 1):
        if d % rank == current % rank:
            continue
        if where[0] == "kw":
            out.append((inp, args, {**kwargs, where[1]: d}))
        else:
            a = list(args)
            a[where[1]] = d
            out.append((inp, tuple(a), kwargs))
    return out


def units(st: EngineState, entry: OpEntry, samples: list[SampleInput], opts: ProbeOptions, undefined: str | None,
          masks: list[tuple[bool, ...] | None] | None = None) -> Iterator[Unit]:
    """Every unit of the samples: argument variants x layouts; a factory sample (no tensor
    input) is one contiguous unit. ``masks``: per sample, which tensors OpInfo's gradient
    generation marks (see :func:`grad_masks`)."""
    seen_dims: set[tuple[Hashable, tuple[int, ...], str]] = set()
    for i, s in enumerate(samples):
        first = (s.input, tuple(s.args), dict(s.kwargs))
        mask = masks[i] if masks is not None and i < len(masks) else None
        if primary_tensor(first) is None:
            factory = _factory_unit(st, entry, str(i), first, opts, undefined)
            if factory is not None:
                yield factory
            continue
        overload0 = overload_of(st, entry, first)
        bases: list[tuple[str, Values]] = [(str(i), first)]
        for k, v in enumerate(_arg_variants(overload0, first)):
            shape = tuple(primary_tensor(v).shape)  # type: ignore[union-attr]
            key = (observe.signature_of(v), shape, repr(v[1:]))
            if key not in seen_dims:
                seen_dims.add(key)
                bases.append((f"{i}.{k + 1}", v))
        post = getattr(s, "output_process_fn_grad", None) or identity
        random = "values not compared: dropout_p > 0 makes them random" if _number(s.kwargs.get("dropout_p")) > 0 else None
        for index, base in bases:
            for unit in _layout_units(st, entry, index, base, opts, overload0):
                unit.post, unit.undefined = post, undefined or random
                unit.grad_mask = mask
                yield unit


def _factory_unit(st: EngineState, entry: OpEntry, index: str, values: Values, opts: ProbeOptions,
                  undefined: str | None) -> Unit | None:
    """The unit of a sample with no tensor input (``zeros``, ``arange``, a window function): it runs
    with ``device=`` the device and the sample's dtype; rank and dtype come from the CPU's output.
    None when the layout set has no ``contiguous`` or the CPU's output holds no tensor either
    (``broadcast_shapes``: no device is involved)."""
    if Layout.contiguous not in opts.layouts:
        return None
    try:
        out = call(entry.info.op, values)
    except Exception:  # noqa: BLE001 - the CPU rejects it: the device still runs, the cell says why
        out = None
    produced = tensors_in(out) if out is not None else []
    if out is not None and not produced:
        return None
    kw_dtype = values[2].get("dtype")
    dtype = (str(kw_dtype).removeprefix("torch.") if isinstance(kw_dtype, torch.dtype)
             else dtype_of(out) if produced else None) or ""
    rank = produced[0].dim() if produced else 0
    overload = overload_of(st, entry, values)
    features = _named_features(overload, values, rank)
    features.pop("device", None)  # the device is the probe's, not an argument condition
    return Unit(index, Layout.contiguous, values, values, rank, overload, features, undefined=undefined,
                dtype=dtype if dtype in DTYPES else "", factory=True)


def _number(value: object) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def _layout_units(st: EngineState, entry: OpEntry, index: str, base: Values, opts: ProbeOptions,
                  overload: OpName) -> Iterator[Unit]:
    # a layout changes memory, not shapes nor dtypes: the rank, the features and the dtype of the
    # base are every layout's (computed once per base; they were 2% of a probe)
    shared: tuple[int, dict[str, str], str] | None = None
    for layout in opts.layouts:
        variants = transform_sample(base, layout)
        if variants is None:
            continue
        cpu_values = map_tensors(variants, lambda v: v.view)
        if shared is None:
            primary = primary_tensor(cpu_values)
            rank = primary.dim() if primary is not None else 0
            shared = rank, _named_features(overload, base, rank), dtype_of(cpu_values) or ""
        rank, features, dtype = shared
        yield Unit(index, layout, cpu_values, variants, rank, overload, dict(features), dtype=dtype)
