"""First-order backward on the device: gradients compared with the CPU's, path observed.

The gradients judged come from a plain backward; off the host a second one runs under the
profiler for the path (the autograd engine runs it on its device threads, where no
``TorchDispatchMode`` of the caller reaches): host copies inside it are fallback, and an op that
has no kernel for the backend but ran anyway was served by the boxed fallback::

    grad = probe_backward(st, fn, unit, torch.float32)    # Autograd(path=native, outcome=ok, ...)
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from opmatrix.backend.base import FallbackSeen
from opmatrix.schema import Autograd, ExecPath, FallbackState, Outcome

from . import observe
from .defined import canonical_gradients
from .faults import fault_from_exception
from .layouts import Values
from .numerics import compare, tolerance_for
from .source import OpEntry, generate_samples
from .state import EngineState
from .trace import CallTrace, Observed
from .units import Unit, device_values, unit_dtypes, unit_id, values_key
from .values import call, identity, map_tensors, readable, tensors_in, to_cpu

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from torch.testing._internal.opinfo.core import SampleInput

    from .state import ProbeOptions

__all__ = ["NoGradient", "claims_backward", "differentiable", "grad_masks", "probe_backward"]


def differentiable(entry: OpEntry, dtype: torch.dtype) -> bool:
    """Whether OpInfo says the op has gradients, at a dtype that can carry them."""
    return bool(entry.info.supports_autograd) and (dtype.is_floating_point or dtype.is_complex)


def claims_backward(entry: OpEntry, dtype: torch.dtype) -> bool:
    """Whether OpInfo declares a backward for ``dtype`` on the CPU (its ``backward_dtypes``)."""
    try:
        return dtype in entry.info.supported_backward_dtypes("cpu")
    except Exception:  # noqa: BLE001 - an OpInfo without backward dtypes claims none
        return False


def grad_masks(entry: OpEntry, dtype: torch.dtype, samples: list[SampleInput], opts: ProbeOptions) -> list[tuple[bool, ...] | None]:
    """Per sample, which of its tensors OpInfo's own ``requires_grad=True`` generation marks
    (its gradient tests differentiate those only: never running statistics or a loss target).

    The samples are generated again with OpInfo's flag and the same seed; a sample whose tensors
    line up with none of those (count and dtypes) gets None (its backward is not probed, and says so)."""
    if not opts.autograd or not differentiable(entry, dtype):
        return [None] * len(samples)
    try:
        marked = generate_samples(entry, dtype, limit=opts.max_samples, requires_grad=True, partial=[])
    except Exception:  # noqa: BLE001 - OpInfo's gradient generation fails: no gradient is asked for
        return [None] * len(samples)
    graded = [_tensor_list(m) for m in marked]
    # a tensor's role (input, weight, running statistic, target) sits at its position: samples
    # whose tensors have the same count and dtypes take the same mask (by index first, then the
    # first alike; OpInfo's two generations may differ in shapes or in number)
    by_kinds: dict[tuple[torch.dtype, ...], tuple[bool, ...]] = {}
    for ts in graded:
        by_kinds.setdefault(tuple(t.dtype for t in ts), tuple(t.requires_grad for t in ts))
    # a generation that marks every tensor it makes marks every tensor of any sample
    marks_all = bool(graded) and all(all(m) for m in by_kinds.values())
    out: list[tuple[bool, ...] | None] = []
    for i, s in enumerate(samples):
        kinds = tuple(t.dtype for t in _tensor_list(s))
        if i < len(graded) and tuple(t.dtype for t in graded[i]) == kinds:
            out.append(tuple(t.requires_grad for t in graded[i]))
        else:
            out.append(by_kinds.get(kinds) or ((True,) * len(kinds) if marks_all else None))
    return out


def _tensor_list(sample: SampleInput) -> list[torch.Tensor]:
    return tensors_in((sample.input, tuple(sample.args), dict(sample.kwargs)))


def _grad_inputs(values: Values, dtype: torch.dtype, mask: tuple[bool, ...] | None
                 ) -> tuple[Values, list[torch.Tensor]]:
    leaves: list[torch.Tensor] = []
    position = [0]

    def leaf(t: torch.Tensor) -> torch.Tensor:
        i = position[0]
        position[0] += 1
        wanted = mask is not None and i < len(mask) and mask[i]
        if wanted and (t.is_floating_point() or t.is_complex()):
            t = t.detach().requires_grad_(True)
            leaves.append(t)
        return t

    return map_tensors(values, leaf), leaves


class NoGradient(Exception):
    """Why a sample has no backward to compare (said on its cell when OpInfo claims one)."""


def backward(fn: Callable[..., object], values: Values, dtype: torch.dtype, recorder: AbstractContextManager[object] | None = None,
             post: Callable[..., object] = identity, mask: tuple[bool, ...] | None = None) -> list[object] | None:
    """Gradients of ``post(fn(values))`` with respect to the tensors ``mask`` marks (OpInfo's
    ``requires_grad=True`` generation), as gradcheck takes them; ``recorder`` (a context, if
    given) wraps only the backward. None: no marked tensor, or no output carries a gradient."""
    vals, leaves = _grad_inputs(values, dtype, mask)
    if not leaves:
        return None
    out = post(call(fn, vals))
    outs = [o for o in (out if isinstance(out, (tuple, list)) else [out])
            if isinstance(o, torch.Tensor) and o.requires_grad]
    if not outs:
        return None
    gen = torch.Generator().manual_seed(1)
    grads = [torch.randn(o.shape, generator=gen, dtype=torch.float32).to(o.dtype).to(o.device) if not o.is_complex()
             else torch.randn(o.shape, generator=gen, dtype=o.dtype).to(o.device) for o in outs]
    with recorder if recorder is not None else contextlib.nullcontext():
        res = torch.autograd.grad(outs, leaves, grads, allow_unused=True)
    return [to_cpu(r) for r in res]


def _served_on_device(reg: observe.Registration) -> bool:
    """Whether the kernel the dispatcher picks for the backend runs there: its own, or a composite
    of other ops. A structured op's generic wrapper (``threshold_backward`` around its ``out=``
    overload) is no kernel of the backend's: without a backend kernel for that ``out=`` overload
    the boxed fallback serves it (counting the wrapper as a composite read relu's backward native)."""
    if reg.shim is not None:
        return reg.out_backend
    return reg.backend or reg.composite


def backward_path(st: EngineState, observed: Observed, seen: FallbackSeen) -> ExecPath:
    """Path of a backward pass from what the profiler saw it run (observed, not inferred).

    Host copies inside it, or the adapter's counter, are fallback. Event names carry no overload:
    an op counts as native when some overload of it has a kernel for the backend key, as fallback
    when none has and the backend's boxed fallback served it.
    """
    if FallbackState.observed in (seen.state, observed.state):
        return ExecPath.fallback
    key = st.adapter.dispatch_key
    trivial = observe.event_names(observe.TRIVIAL_OPS - observe.DATA_MOVEMENT)
    for name in dict.fromkeys(observed.names):
        if not name.startswith("aten::") or name in trivial:
            continue
        regs = [observe.registration(q, key) for q in observe.overloads_of(name)]
        if not regs or any(_served_on_device(r) for r in regs):
            continue
        if st.backend_fallback:
            return ExecPath.fallback
    return ExecPath.native


def _device_backward(st: EngineState, fn: Callable[..., object], unit: Unit, dtype: torch.dtype,
                     recorder: CallTrace | None) -> tuple[list[Any] | None, BaseException | None, FallbackSeen]:
    """One backward on the device: (gradients, None, fallback seen) or (None, the exception, seen)."""
    seen: FallbackSeen | None = None
    try:
        with st.adapter.observe_fallback() as seen:
            got = backward(fn, device_values(unit, st.adapter.device()), dtype, recorder, post=unit.post,
                           mask=unit.grad_mask)
        st.adapter.synchronize()
    except Exception as exc:  # noqa: BLE001 - classified narrowly by the caller
        return None, readable(exc), seen if seen is not None else FallbackSeen()
    return got, None, seen


def probe_backward(st: EngineState, fn: Callable[..., object], unit: Unit, dtype: torch.dtype,
                   references: dict[tuple[str, bool], Any] | None = None) -> Autograd | None:
    """The unit's backward on the device against the CPU's gradients (None: nothing to compare).

    ``references``: the CPU gradients per sample, shared by its layouts (a layout changes memory,
    not values); on a mismatch this layout's own CPU gradients judge instead."""
    why: list[str] = []

    def own() -> list[object] | None:
        try:
            return backward(fn, unit.cpu_values, dtype, post=unit.post, mask=unit.grad_mask)
        except Exception as exc:  # noqa: BLE001 - no CPU reference gradient: nothing to compare
            why.append(f"the CPU's backward raised ({type(exc).__name__}: {str(exc)[:120]})")
            return None

    key = values_key(unit)
    shared = references is not None and key in references
    expected = references[key] if shared else own()  # type: ignore[index]
    if references is not None and not shared and expected is not None:
        references[key] = expected
    if expected is None:
        if unit.grad_mask is None:
            raise NoGradient("OpInfo's gradient generation does not line up with this sample")
        if not any(unit.grad_mask):
            raise NoGradient("OpInfo's samples mark no tensor as needing a gradient")
        raise NoGradient(why[0] if why else "no output of the CPU's call carries a gradient")
    uid = unit_id(unit, "backward")
    # the gradients judged come from a plain backward; off the host a second one under the
    # profiler is evidence of the path only (an instrument never changes the verdict)
    got, error, seen = _device_backward(st, fn, unit, dtype, None)
    trace = CallTrace()
    if not st.adapter.is_host:
        _, _, traced_seen = _device_backward(st, fn, unit, dtype, trace)
        if traced_seen.state is FallbackState.observed or seen.state is FallbackState.unknown:
            seen = traced_seen
    if error is not None:
        fault = fault_from_exception(st, uid, error, unit_dtypes(unit))
        observed = trace.observed.state is FallbackState.observed or seen.state is FallbackState.observed
        path = ExecPath.fallback if observed else ExecPath.rejected if fault is None else ExecPath.unknown
        return Autograd(path=path, outcome=fault or (Outcome.error if observed else Outcome.ok))
    if got is None:
        # the CPU computes gradients for this input, the device's outputs carry no grad_fn: the
        # backward never ran (so the profiler never started) and autograd is broken on the device
        return Autograd(path=ExecPath.rejected, outcome=Outcome.wrong)
    path = ExecPath.native if st.adapter.is_host else backward_path(st, trace.observed, seen)
    if st.adapter.device_type == "meta":
        return Autograd(path=path, outcome=Outcome.ok)
    rtol, atol = tolerance_for(str(unit.overload), dtype)
    op, x = str(unit.overload), unit.cpu_values
    cmp = compare(*canonical_gradients(op, x, unit.grad_mask, got, expected), rtol * 10, atol * 10)
    if not cmp.ok and shared and (mine := own()) is not None:
        cmp = compare(*canonical_gradients(op, x, unit.grad_mask, got, mine), rtol * 10, atol * 10)
    return Autograd(path=path, outcome=Outcome.ok if cmp.ok else Outcome.wrong,
                    max_abs_err=float(f"{cmp.max_abs:.3g}") if cmp.max_abs is not None else None)
