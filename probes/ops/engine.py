"""The operator probe engine: one task = one OpInfo at one dtype, every sample x layout.

For each sample (generated once on the CPU) and each layout variant, the engine runs the op on
the device and on a CPU reference, compares outputs, and classifies the execution path from
registrations, the leaf ops that reached the device and the adapter's fallback evidence; first-
order backward is compared for differentiable dtypes; cells unavailable in eager are retried
through the backend's ``torch.compile`` backend (``decomposed``)::

    record = probe_task(adapter, "softmax", "float32")     # -> TaskRecord with CellRecords

The runner calls :func:`handle` in isolated workers; every risky unit is announced with
``progress(unit)`` first so a crash or hang is blamed on the unit that was running.
"""

from __future__ import annotations

import contextlib
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from opmatrix.backend import Adapter
from opmatrix.probes.ops import task_id
from opmatrix.schema import (
    TENSOR,
    Autograd,
    ErrorInfo,
    ExecPath,
    FallbackState,
    Layout,
    Mode,
    Outcome,
    ReferenceKind,
    TaskRecord,
    features_of,
)

from . import observe
from .cells import SampleResult, cells_from_samples
from .layouts import Variant, map_values, primary_tensor, to_device, transform_sample
from .numerics import Comparison, compare, dtype_mismatch, leaves, tolerance_for, upcast_dtype, values_comparable
from .source import OpEntry, all_ops, generate_samples, values_undefined

__all__ = ["ProbeOptions", "handle", "probe_task", "task_id"]


@dataclass
class ProbeOptions:
    """What to probe for each task."""

    layouts: tuple[Layout, ...] = tuple(Layout)
    autograd: bool = True
    #: off | auto (eager-unavailable cells, plus compiled == eager for one sample per op at
    #: ``representative_dtype``) | all (that check at every dtype)
    compile: str = "auto"
    representative_dtype: str = "float32"
    max_samples: int | None = None
    autograd_per_cell: int = 2
    retry_wrong: bool = True

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> ProbeOptions:
        d = dict(d or {})
        if "layouts" in d and d["layouts"] is not None:
            d["layouts"] = tuple(Layout(v) for v in d["layouts"])
        else:
            d.pop("layouts", None)
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


class _Poisoned(Exception):
    """Raised when the device fails its health check after a fault (replace the worker)."""

    def __init__(self, unit: str, message: str):
        super().__init__(message)
        self.unit, self.message = unit, message


def _poisoned_error(unit: str, message: str) -> Exception:
    try:
        from opmatrix.probes.runner.task import WorkerPoisoned
    except ImportError:  # runner not available: the engine's own signal
        return _Poisoned(unit, message)
    return WorkerPoisoned(unit, message)  # type: ignore[no-any-return, call-arg]


# -- values ---------------------------------------------------------------------------------


def _map(obj: Any, fn: Callable[[Any], Any]) -> Any:
    return map_values(obj, fn, (torch.Tensor, Variant))


def _to_cpu(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu() if obj.device.type != "meta" else obj
    if isinstance(obj, (tuple, list)):
        return type(obj)(_to_cpu(o) for o in obj) if not hasattr(obj, "_fields") else tuple(_to_cpu(o) for o in obj)
    return obj


def _call(fn: Callable[..., Any], values: Any) -> Any:
    inp, args, kwargs = values
    return fn(inp, *args, **kwargs)


def _upcast(values: Any, dtype: torch.dtype, to: torch.dtype) -> Any:
    return _map(values, lambda t: t.to(to) if t.dtype == dtype else t)


def _error_info(exc: BaseException, op: str, device: str, dtype: str) -> ErrorInfo:
    message = str(exc).strip().splitlines()[0][:500] if str(exc).strip() else type(exc).__name__
    low = message.lower()
    base = op.split(".")[1] if "." in op else op
    names_op = base.lower() in low or base.lstrip("_").lower() in low
    dtype_words = {dtype.lower(), str(getattr(torch, dtype, dtype)).lower()}
    legacy = {"float64": "double", "float32": "float", "float16": "half", "bfloat16": "bfloat16",
              "int64": "long", "int32": "int", "int16": "short", "int8": "char", "uint8": "byte",
              "bool": "bool", "complex64": "complexfloat", "complex128": "complexdouble"}
    if dtype in legacy:
        dtype_words.add(legacy[dtype])
    names_ctx = any(w in low for w in dtype_words) or device.lower() in low
    return ErrorInfo(type=type(exc).__name__, message=message, actionable=names_op and names_ctx)


def _root_cause(exc: BaseException) -> BaseException:
    seen = 0
    while seen < 8:
        inner = getattr(exc, "inner_exception", None) or exc.__cause__
        if inner is None or inner is exc:
            return exc
        exc, seen = inner, seen + 1
    return exc


# -- per-worker state -----------------------------------------------------------------------


@dataclass
class _State:
    adapter: Adapter
    ops: dict[str, OpEntry]
    overloads: observe.OverloadCache = field(default_factory=observe.OverloadCache)
    backend_fallback: bool = False


def _state(ctx: Any) -> _State:
    cache = ctx.cache
    st = cache.get("op_engine")
    if st is None:
        st = _State(ctx.adapter, {o.full_name: o for o in all_ops()})
        st.backend_fallback = observe.has_backend_fallback(ctx.adapter.dispatch_key)
        cache["op_engine"] = st
    return st  # type: ignore[no-any-return]


# -- classification -------------------------------------------------------------------------


def _classify(st: _State, overload: str, leaf_ops: list[str], seen: Any) -> tuple[ExecPath, list[str], str | None]:
    """Path of a call that completed, its component ops, and a note."""
    key = st.adapter.dispatch_key
    comps = [op for op in dict.fromkeys(leaf_ops) if op not in observe.TRIVIAL_OPS and op != overload]
    moved = [op for op in dict.fromkeys(leaf_ops) if op in observe.DATA_MOVEMENT]
    if seen.state is FallbackState.observed:
        return ExecPath.fallback, comps, None
    for c in [*comps, *moved]:
        creg = observe.registration(observe.qualified(c), key)
        if not creg.backend and not creg.composite and creg.shim is None and st.backend_fallback:
            return ExecPath.fallback, comps, f"component {c} has no {key} kernel (served by the backend fallback)"
    if overload.startswith("opinfo."):
        return ExecPath.composite, comps, "composed in Python from several ATen ops"
    reg = observe.registration(observe.qualified(overload), key)
    if reg.backend:
        return ExecPath.native, [], None
    if reg.shim is not None:
        # a structured op: its generic wrapper only calls the out= overload on the backend
        if reg.out_backend:
            return ExecPath.native, [], f"served by the {reg.shim} kernel"
        if st.backend_fallback:
            return ExecPath.fallback, [reg.shim], f"{reg.shim} has no {key} kernel; served by the backend fallback"
    if reg.implicit or reg.explicit:
        if reg.implicit and len(comps) == 1 and observe.registration(observe.qualified(comps[0]), key).backend:
            # softmax.int -> _softmax: the composite is a thin alias and one native kernel did the work
            return ExecPath.native, comps, f"served by the {comps[0]} kernel"
        note = None if reg.implicit else "CompositeExplicitAutograd kernel"
        return ExecPath.composite, comps, note
    if st.backend_fallback:
        return ExecPath.fallback, comps, f"no {key} kernel; served by the backend's boxed fallback"
    return ExecPath.native, [], f"no kernel registered under {key} or a composite key; it ran, so another key served it"


@dataclass
class _Reference:
    same: Any
    upcast: Any | None


def _identity(out: Any) -> Any:
    return out


def _reference(fn: Callable[..., Any], cpu_values: Any, dtype: torch.dtype, post: Callable[[Any], Any] = _identity
               ) -> _Reference:
    """The CPU's outputs, through the sample's ``post`` (see :func:`_post`), at the dtype and upcast."""
    same = post(_to_cpu(_call(fn, cpu_values)))
    up = upcast_dtype(dtype)
    upcast = None
    if up is not None:
        with contextlib.suppress(Exception):
            upcast = post(_to_cpu(_call(fn, _upcast(cpu_values, dtype, up))))
    return _Reference(same, upcast)


def _post(unit: _Unit, out: Any) -> tuple[Any, str | None]:
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


def _judge(ref: _Reference, out: Any, op: str, dtype: torch.dtype, comparable: bool) -> tuple[bool, Any]:
    rtol, atol = tolerance_for(op, dtype)
    kind = ReferenceKind.cpu_same_dtype
    wrong_dtype = dtype_mismatch(out, ref.same)
    if wrong_dtype is not None:  # the upcast reference compares values only, never dtypes
        return False, (Comparison(False, detail=wrong_dtype), rtol, atol, kind)
    res = compare(out, ref.same, rtol, atol, values=comparable)
    if ref.upcast is not None:
        up = compare(out, ref.upcast, rtol, atol, values=comparable)
        if up.ok or not res.ok:
            res, kind = up, ReferenceKind.cpu_upcast
        if not res.ok and compare(out, ref.same, rtol, atol, values=comparable).ok:
            res, kind = compare(out, ref.same, rtol, atol, values=comparable), ReferenceKind.cpu_same_dtype
    return res.ok, (res, rtol, atol, kind)


def _named_features(overload: str, values: Any, rank: int) -> dict[str, str]:
    inp, args, kwargs = values
    named: dict[str, Any] = {}
    try:
        ns, name, ov = overload.split(".", 2)
        schema = getattr(getattr(getattr(torch.ops, ns), name), ov)._schema
        arg_names = [a.name for a in schema.arguments]
    except (AttributeError, ValueError):
        arg_names = []
    positional = [inp, *args]
    for i, v in enumerate(positional):
        named[arg_names[i] if i < len(arg_names) else f"arg{i}"] = v
    named.update(kwargs)
    plain = {k: (TENSOR if isinstance(v, torch.Tensor) else str(v).removeprefix("torch.") if isinstance(v, torch.dtype)
                 else v) for k, v in named.items()}
    plain.pop("self", None)
    plain.pop("input", None)
    return features_of(plain, rank)


# -- one sample ------------------------------------------------------------------------------


@dataclass
class _Unit:
    index: str
    layout: Layout
    cpu_values: Any  # values with CPU tensors (the layout's views)
    variants: Any  # values with Variants
    rank: int
    overload: str
    features: dict[str, str]
    post: Callable[[Any], Any] = _identity  # the sample's output_process_fn_grad
    undefined: str | None = None  # why the values cannot be compared (OpInfo; dropout_p > 0)


def _device_values(unit: _Unit, device: Any) -> Any:
    return _map(unit.variants, lambda v: to_device(v, device))


def _run_device(st: _State, fn: Callable[..., Any], values: Any, record: bool = True) -> tuple[Any, list[str], Any]:
    """Run on the device; record the leaf ops only when they can matter (composites)."""
    if not record:
        with st.adapter.observe_fallback() as seen:
            out = _call(fn, values)
        st.adapter.synchronize()
        return _to_cpu(out), [], seen
    rec = observe.LeafRecorder()
    with st.adapter.observe_fallback() as seen, rec:
        out = _call(fn, values)
    st.adapter.synchronize()
    return _to_cpu(out), rec.ops, seen


def _fault_from_exception(st: _State, unit_id: str, exc: BaseException) -> Outcome | None:
    """For an exception that is not a clean rejection: OOM/error, or raise if the device broke."""
    verdict = st.adapter.classify_exception(exc)
    # a clean rejection leaves the device usable: check that too (docs/levels.md#execution-paths, "rejected")
    problem = st.adapter.health_check()
    if problem is not None:
        raise _poisoned_error(unit_id, f"device unusable after {type(exc).__name__}: {problem}")
    if verdict.outcome == "rejected":
        return None
    return Outcome.oom if verdict.outcome == "oom" else Outcome.error


def _check_values(st: _State, unit: _Unit, ref: _Reference, out: Any, dtype: torch.dtype, result: SampleResult
                  ) -> tuple[bool, Comparison, bool, str | None]:
    """Judge a call's outputs against the reference and record the numerics on ``result``.

    Returns (ok, the comparison, whether values were compared, why OpInfo's output processing
    failed on the device's outputs or None).
    """
    comparable = st.adapter.device_type != "meta" and values_comparable(unit.overload) and unit.undefined is None
    if unit.undefined is not None:
        result.note = "; ".join(filter(None, [result.note, unit.undefined]))
    out, broken = _post(unit, out)
    ok, (res, rtol, atol, kind) = _judge(ref, out, unit.overload, dtype, comparable)
    if broken is not None:
        ok, res.detail = False, broken
    if comparable:
        result.rtol, result.atol, result.reference = rtol, atol, kind
        result.max_abs, result.max_rel = res.max_abs, res.max_rel
    return ok, res, comparable, broken


def _probe_eager(st: _State, entry: OpEntry, unit: _Unit, dtype: torch.dtype, opts: ProbeOptions,
                 ref: _Reference, autograd_budget: dict[Any, int]) -> SampleResult:
    fn = entry.info.op
    dname = str(dtype).removeprefix("torch.")
    device = st.adapter.device()
    result = SampleResult(op=unit.overload, rank=unit.rank, layout=unit.layout, mode=Mode.eager,
                          path=ExecPath.rejected, outcome=Outcome.ok, features=unit.features)
    unit_id = f"{unit.index}/{unit.layout.value}/eager"
    # an overload with a backend kernel is native (or fallback by the adapter's evidence):
    # only composites need the leaf ops, and recording them costs a Python call per op
    record = not observe.registration(observe.qualified(unit.overload), st.adapter.dispatch_key).backend
    try:
        out, leaf, seen = _run_device(st, fn, _device_values(unit, device), record)
    except Exception as exc:  # noqa: BLE001 - classified narrowly just below
        fault = _fault_from_exception(st, unit_id, exc)
        result.error = _error_info(exc, unit.overload, st.adapter.device_type, dname)
        result.outcome = fault or Outcome.ok
        return result
    path, comps, note = _classify(st, unit.overload, leaf, seen)
    result.path, result.components, result.note = path, comps, note
    result.fallback, result.fallback_ops, result.fallback_source = seen.state, list(seen.ops), seen.source
    ok, res, comparable, broken = _check_values(st, unit, ref, out, dtype, result)
    if not ok and opts.retry_wrong and broken is None:
        out2, _, _ = _run_device(st, fn, _device_values(unit, device), False)
        ok2, _ = _judge(ref, _post(unit, out2)[0], unit.overload, dtype, comparable)
        if ok2:
            result.flaky = True
    result.outcome = Outcome.ok if ok else Outcome.wrong
    if not ok:
        result.note = "; ".join(filter(None, [result.note, res.detail]))
    key = (unit.overload, unit.rank, unit.layout)
    if opts.autograd and _differentiable(entry, dtype) and autograd_budget.get(key, 0) < opts.autograd_per_cell:
        autograd_budget[key] = autograd_budget.get(key, 0) + 1
        result.autograd = _probe_backward(st, fn, unit, dtype)
    return result


def _differentiable(entry: OpEntry, dtype: torch.dtype) -> bool:
    return bool(entry.info.supports_autograd) and (dtype.is_floating_point or dtype.is_complex)


def _grad_inputs(values: Any, dtype: torch.dtype) -> tuple[Any, list[torch.Tensor]]:
    leaves: list[torch.Tensor] = []

    def leaf(t: torch.Tensor) -> torch.Tensor:
        if t.dtype == dtype and (t.is_floating_point() or t.is_complex()):
            t = t.detach().requires_grad_(True)
            leaves.append(t)
        return t

    return _map(values, leaf), leaves


def _backward(fn: Callable[..., Any], values: Any, dtype: torch.dtype, recorder: Any = None,
              post: Callable[[Any], Any] = _identity) -> list[Any] | None:
    """Gradients of ``post(fn(values))``, as gradcheck takes them; ``recorder`` (a context, if
    given) wraps only the backward."""
    vals, leaves = _grad_inputs(values, dtype)
    if not leaves:
        return None
    out = post(_call(fn, vals))
    outs = [o for o in (out if isinstance(out, (tuple, list)) else [out])
            if isinstance(o, torch.Tensor) and o.requires_grad]
    if not outs:
        return None
    gen = torch.Generator().manual_seed(1)
    grads = [torch.randn(o.shape, generator=gen, dtype=torch.float32).to(o.dtype).to(o.device) if not o.is_complex()
             else torch.randn(o.shape, generator=gen, dtype=o.dtype).to(o.device) for o in outs]
    with recorder if recorder is not None else contextlib.nullcontext():
        res = torch.autograd.grad(outs, leaves, grads, allow_unused=True)
    return [_to_cpu(r) for r in res]


def _backward_path(st: _State, names: list[str], seen: Any) -> ExecPath:
    """Path of a backward pass from the aten ops the profiler saw it run (observed, not inferred).

    The profiler (not a TorchDispatchMode) because backward runs on the autograd engine's device
    threads. Its names carry no overload: an op counts as native when some overload of it has a
    kernel for the backend key, as fallback when none has and the backend's boxed fallback served it.
    """
    if seen.state is FallbackState.observed:
        return ExecPath.fallback
    key = st.adapter.dispatch_key
    trivial = {_event_name(t) for t in observe.TRIVIAL_OPS - observe.DATA_MOVEMENT}
    for name in dict.fromkeys(names):
        if not name.startswith("aten::") or name in trivial:
            continue
        regs = [observe.registration(q, key) for q in observe.overloads_of(name)]
        if not regs or any(r.backend or r.composite for r in regs):
            continue
        if st.backend_fallback:
            return ExecPath.fallback
    return ExecPath.native


def _probe_backward(st: _State, fn: Callable[..., Any], unit: _Unit, dtype: torch.dtype) -> Autograd | None:
    try:
        expected = _backward(fn, unit.cpu_values, dtype, post=unit.post)
    except Exception:  # noqa: BLE001 - no CPU reference gradient: nothing to compare
        return None
    if expected is None:
        return None
    unit_id = f"{unit.index}/{unit.layout.value}/backward"
    prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    try:
        with st.adapter.observe_fallback() as seen:
            got = _backward(fn, _device_values(unit, st.adapter.device()), dtype, prof, post=unit.post)
        st.adapter.synchronize()
    except Exception as exc:  # noqa: BLE001 - classified narrowly just below
        fault = _fault_from_exception(st, unit_id, exc)
        return Autograd(path=ExecPath.rejected, outcome=fault or Outcome.ok)
    if got is None:
        # the CPU computes gradients for this input, the device's outputs carry no grad_fn: the
        # backward never ran (so the profiler never started) and autograd is broken on the device
        return Autograd(path=ExecPath.rejected, outcome=Outcome.wrong)
    path = _backward_path(st, [e.name for e in prof.events()], seen)
    if st.adapter.device_type == "meta":
        return Autograd(path=path, outcome=Outcome.ok)
    rtol, atol = tolerance_for(unit.overload, dtype)
    cmp = compare(got, expected, rtol * 10, atol * 10)
    return Autograd(path=path, outcome=Outcome.ok if cmp.ok else Outcome.wrong,
                    max_abs_err=float(f"{cmp.max_abs:.3g}") if cmp.max_abs is not None else None)


def _event_name(overload: str) -> str:
    """Profiler name of an overload: ``aten.add.Tensor`` -> ``aten::add``."""
    parts = overload.split(".")
    return f"{parts[0]}::{parts[1]}" if len(parts) >= 2 else overload


def _probe_compile(st: _State, entry: OpEntry, unit: _Unit, dtype: torch.dtype, ref: _Reference,
                   eager: SampleResult) -> SampleResult:
    backend = st.adapter.compile_backend()
    dname = str(dtype).removeprefix("torch.")
    result = SampleResult(op=unit.overload, rank=unit.rank, layout=unit.layout, mode=Mode.compile,
                          path=ExecPath.rejected, outcome=Outcome.ok, features=unit.features)
    if backend is None:
        result.note = "backend has no torch.compile backend"
        result.error = ErrorInfo(type="NoCompileBackend", message=result.note, actionable=False)
        return result
    import torch._dynamo

    fn = entry.info.op
    torch._dynamo.reset()
    compiled = torch.compile(lambda i, *a, **k: fn(i, *a, **k), backend=backend, dynamic=False)
    unit_id = f"{unit.index}/{unit.layout.value}/compile"
    try:
        # no dispatch mode here (an active TorchDispatchMode makes dynamo run the frame eagerly):
        # compile once, then observe one execution of the compiled graph with the profiler
        _run_device(st, compiled, _device_values(unit, st.adapter.device()), False)
        values = _device_values(unit, st.adapter.device())
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            out, _, seen = _run_device(st, compiled, values, False)
    except Exception as exc:  # noqa: BLE001 - classified narrowly just below
        root = _root_cause(exc)
        fault = _fault_from_exception(st, unit_id, root)
        result.error = _error_info(root, unit.overload, st.adapter.device_type, dname)
        result.outcome = fault or Outcome.ok
        return result
    trivial = {_event_name(t) for t in observe.TRIVIAL_OPS}
    ran = sorted({e.name for e in prof.events() if e.name.startswith("aten::") and e.name not in trivial})
    kept = {_event_name(unit.overload), *(_event_name(c) for c in (eager.components if eager.path is ExecPath.native else []))}
    if seen.state is FallbackState.observed:
        result.path = ExecPath.fallback
    elif eager.path is ExecPath.rejected or (ran and not kept & set(ran)):
        # the compiled graph ran other ops than the one called: the compiler decomposed it
        result.path = ExecPath.decomposed
        result.components = [f"{n}" for n in ran if _event_name(unit.overload) != n][:24]
    else:
        result.path = eager.path if eager.path is not ExecPath.rejected else ExecPath.native
        # no aten op at all: the graph ran as one backend executable (XLA), opaque to the profiler
        result.note = "the compiled graph ran the op itself" if ran else "the compiled graph ran as one opaque executable"
    result.fallback, result.fallback_ops, result.fallback_source = seen.state, list(seen.ops), seen.source
    ok = _check_values(st, unit, ref, out, dtype, result)[0]
    result.outcome = Outcome.ok if ok else Outcome.wrong
    return result


# -- one task --------------------------------------------------------------------------------


def _overload_of(st: _State, entry: OpEntry, values: Any) -> str:
    key = f"{entry.full_name}|{observe.signature_of(values)!r}"
    calls = st.overloads.get(key)
    if calls is None:
        try:
            calls = observe.top_level_overloads(entry.info.op, values)
        except Exception:  # noqa: BLE001 - tracing is best effort; fall back to the CPU leaf ops
            rec = observe.LeafRecorder()
            try:
                with rec:
                    _call(entry.info.op, values)
            except Exception:  # noqa: BLE001
                pass
            calls = rec.ops
        st.overloads.put(key, calls)
    return observe.primary_overload(calls) or f"opinfo.{entry.full_name}"  # several ops: the OpInfo itself


def _dim_position(overload: str, values: Any) -> tuple[str, Any] | None:
    """Where an integer ``dim`` argument sits in ``values``: ("kw", name) or ("pos", index)."""
    inp, args, kwargs = values
    for name in ("dim", "axis"):
        if isinstance(kwargs.get(name), int) and not isinstance(kwargs.get(name), bool):
            return ("kw", name)
    try:
        ns, name, ov = overload.split(".", 2)
        schema = getattr(getattr(getattr(torch.ops, ns), name), ov)._schema
    except (AttributeError, ValueError):
        return None
    for i, a in enumerate(schema.arguments):
        if a.name in ("dim", "axis") and str(a.type) == "int" and 0 < i <= len(args):
            v = args[i - 1]
            if isinstance(v, int) and not isinstance(v, bool):
                return ("pos", i - 1)
    return None


def _arg_variants(overload: str, base: Any) -> list[Any]:
    """The sample with its ``dim`` moved to the first and the last axis (argument conditions
    such as "native for the last axis" are only observable when both occur)."""
    where = _dim_position(overload, base)
    primary = primary_tensor(base)
    if where is None or primary is None or primary.dim() < 2:
        return []
    inp, args, kwargs = base
    current = kwargs[where[1]] if where[0] == "kw" else args[where[1]]
    rank = primary.dim()
    out = []
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


def _units(st: _State, entry: OpEntry, samples: list[Any], opts: ProbeOptions, undefined: str | None
           ) -> Iterator[_Unit]:
    seen_dims: set[Any] = set()
    for i, s in enumerate(samples):
        first = (s.input, tuple(s.args), dict(s.kwargs))
        overload0 = _overload_of(st, entry, first)
        bases = [(str(i), first)]
        for k, v in enumerate(_arg_variants(overload0, first)):
            shape = tuple(primary_tensor(v).shape)  # type: ignore[union-attr]
            key = (observe.signature_of(v), shape, repr(v[1:]))
            if key not in seen_dims:
                seen_dims.add(key)
                bases.append((f"{i}.{k + 1}", v))
        post = getattr(s, "output_process_fn_grad", None) or _identity
        random = "values not compared: dropout_p > 0 makes them random" if _number(s.kwargs.get("dropout_p")) > 0 else None
        for index, base in bases:
            for unit in _layout_units(st, entry, index, base, opts, overload0):
                unit.post, unit.undefined = post, undefined or random
                yield unit


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def _layout_units(st: _State, entry: OpEntry, index: str, base: Any, opts: ProbeOptions,
                  overload: str) -> Iterator[_Unit]:
    for layout in opts.layouts:
        variants = transform_sample(base, layout)
        if variants is None:
            continue
        cpu_values = _map(variants, lambda v: v.view)
        primary = primary_tensor(cpu_values)
        rank = primary.dim() if primary is not None else 0
        yield _Unit(index, layout, cpu_values, variants, rank, overload, _named_features(overload, base, rank))


def _skip_result(unit: _Unit, mode: Mode, outcome: str, message: str, signal: str | None) -> SampleResult:
    return SampleResult(op=unit.overload, rank=unit.rank, layout=unit.layout, mode=mode,
                        path=ExecPath.rejected, outcome=Outcome(outcome), features=unit.features,
                        error=ErrorInfo(type=outcome, message=message[:500], actionable=False, signal=signal))


def _where(exc: BaseException) -> str:
    """An engine failure's message with the line that raised it (a bare assert says nothing)."""
    frames = traceback.extract_tb(exc.__traceback__)
    at = f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno} in {frames[-1].name})" if frames else ""
    return f"{type(exc).__name__}: {str(exc)[:400]}{at}"


def probe_task(adapter_or_ctx: Any, source: str, dtype_name: str, *, options: Mapping[str, Any] | None = None,
               progress: Callable[[str], None] | None = None, skip: Mapping[str, Any] | None = None,
               skip_rest: Any = None) -> TaskRecord:
    """Probe OpInfo ``source`` at ``dtype_name`` on the adapter's device."""
    ctx = adapter_or_ctx if hasattr(adapter_or_ctx, "cache") else _InlineContext(adapter_or_ctx)
    st = _state(ctx)
    opts = ProbeOptions.from_dict(options)
    started = time.perf_counter()
    tid = task_id(source, dtype_name)
    entry = st.ops.get(source)
    if entry is None:
        return TaskRecord(task=tid, source=source, dtype=dtype_name, outcome=Outcome.error,
                          skipped=f"no OpInfo named {source!r} in this torch build")
    dtype = getattr(torch, dtype_name)
    try:
        samples = generate_samples(entry, dtype, limit=opts.max_samples)
    except Exception as exc:  # noqa: BLE001 - OpInfo cannot make samples for this dtype
        return TaskRecord(task=tid, source=source, dtype=dtype_name, outcome=Outcome.ok,
                          skipped=f"OpInfo yields no samples at {dtype_name}: {type(exc).__name__}: {str(exc)[:200]}")
    skip = skip or {}
    results: list[SampleResult] = []
    autograd_budget: dict[Any, int] = {}
    compile_done: dict[Any, bool] = {}
    representative_done = False
    invalid = 0
    for unit in _units(st, entry, samples, opts, values_undefined(entry, dtype)):
        try:
            ref = _reference(entry.info.op, unit.cpu_values, dtype, unit.post)
        except Exception:  # noqa: BLE001 - the CPU itself rejects this input: not a device cell
            invalid += 1
            continue
        uid = f"{unit.index}/{unit.layout.value}/eager"
        fault = skip.get(uid) or skip_rest
        if fault is not None:
            results.append(_skip_result(unit, Mode.eager, fault.outcome, fault.message, fault.signal))
            continue
        if progress:
            progress(uid)
        try:
            eager = _probe_eager(st, entry, unit, dtype, opts, ref, autograd_budget)
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception as exc:  # noqa: BLE001 - an engine failure on one unit is that cell's error
            if type(exc).__name__ in ("WorkerPoisoned", "_Poisoned"):
                raise
            eager = SampleResult(op=unit.overload, rank=unit.rank, layout=unit.layout, mode=Mode.eager,
                                 path=ExecPath.rejected, outcome=Outcome.error, features=unit.features,
                                 error=ErrorInfo(type=type(exc).__name__, actionable=False,
                                                 message=f"opmatrix could not probe this sample: {_where(exc)}"))
        results.append(eager)
        unavailable = eager.path is ExecPath.rejected and eager.outcome is Outcome.ok
        representative = (
            not representative_done and eager.outcome is Outcome.ok and not unavailable
            and (opts.compile == "all" or (opts.compile == "auto" and dtype_name == opts.representative_dtype))
        )
        want_compile = opts.compile != "off" and unit.layout is Layout.contiguous and (unavailable or representative)
        representative_done = representative_done or (want_compile and representative)
        ckey = (unit.overload, unit.rank)
        if want_compile and not compile_done.get(ckey):
            cid = f"{unit.index}/{unit.layout.value}/compile"
            cfault = skip.get(cid) or skip_rest
            if cfault is not None:
                results.append(_skip_result(unit, Mode.compile, cfault.outcome, cfault.message, cfault.signal))
            else:
                if progress:
                    progress(cid)
                results.append(_probe_compile(st, entry, unit, dtype, ref, eager))
            compile_done[ckey] = True
    st.overloads.flush()
    cells = cells_from_samples(results, dtype_name)
    faults = [r.outcome for r in results if r.outcome.is_fault]
    record = TaskRecord(
        task=tid, source=source, dtype=dtype_name, outcome=max(faults) if faults else Outcome.ok, cells=cells,
        seconds=round(time.perf_counter() - started, 3),
        skipped=None if cells else (f"no valid sample at {dtype_name}: the CPU reference rejected all {invalid}"
                                    if invalid else f"OpInfo yields no samples at {dtype_name}"),
    )
    return record


class _InlineContext:
    """A worker context for in-process use (tests, the naive benchmark loop)."""

    def __init__(self, adapter: Adapter):
        self.adapter = adapter
        self.cache: dict[str, Any] = {}
        self.options: dict[str, Any] = {}


def handle(ctx: Any, task: Any, progress: Callable[[str], None], skip: Mapping[str, Any], skip_rest: Any) -> TaskRecord:
    """Runner entry point for tasks of kind ``op``: payload ``{"source", "dtype", "options"}``."""
    p = task.payload
    return probe_task(ctx, p["source"], p["dtype"], options=p.get("options") or getattr(ctx, "options", None),
                      progress=progress, skip=skip, skip_rest=skip_rest)
