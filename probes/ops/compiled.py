"""The compile mode of a unit: run it through the backend's ``torch.compile`` backend.

Eager-unavailable but compile-correct is ``decomposed``; the compiled graph's own run is
observed with the profiler like an eager call (host copies inside it are fallback)::

    result = probe_compile(st, entry, unit, torch.float32, ref, eager)   # SampleResult, mode compile
"""

from __future__ import annotations

import contextlib
import sys
from typing import TYPE_CHECKING, Any

import torch

from opmatrix.schema import ErrorInfo, ExecPath, FallbackState, Mode, OpName, Outcome

from . import observe
from .cells import SampleResult
from .classify import DeviceCall, apply_evidence, run_device
from .faults import failed_call
from .judging import Reference, check_values
from .source import OpEntry
from .state import EngineState
from .units import Unit, device_values, unit_dtypes, unit_id
from .values import error_info, readable, root_cause

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

__all__ = ["probe_compile"]


def _result(unit: Unit) -> SampleResult:
    return SampleResult(op=str(unit.overload), rank=unit.rank, layout=unit.layout, mode=Mode.compile,
                        path=ExecPath.rejected, outcome=Outcome.ok, features=unit.features, dtype=unit.dtype)


def _compiled_path(unit: Unit, eager: SampleResult, ran: list[str], fell_back: bool
                   ) -> tuple[ExecPath, list[str], str | None]:
    kept = {unit.overload.event_name, *(OpName.parse(c).event_name for c in (eager.components if eager.path is ExecPath.native else []))}
    if fell_back:
        return ExecPath.fallback, [], None
    if eager.path is ExecPath.rejected or (ran and not kept & set(ran)):
        # the compiled graph ran other ops than the one called: the compiler decomposed it
        return ExecPath.decomposed, [n for n in ran if unit.overload.event_name != n][:24], None
    path = eager.path if eager.path is not ExecPath.rejected else ExecPath.native
    # no aten op at all: the graph ran as one backend executable (XLA), opaque to the profiler
    note = "the compiled graph ran the op itself" if ran else "the compiled graph ran as one opaque executable"
    return path, [], note


def _skip_funcname_scan(fn: Callable[..., object]) -> None:
    """Spare dynamo tokenizing op_db's source file for a debug-log header.

    For every traced call dynamo names the enclosing function in its TRACE log header, and to do
    so it tokenizes the whole file the traced code lives in, once per process, whether that log
    is on or not. OpInfo's ops are mostly lambdas in ``common_methods_invocations.py`` (1 MB:
    about a second of tokenizing, more than all compiles of a task). OpInfo's own files
    are entered in dynamo's name cache as having no names: the only effect is a log header without the
    function's name. Nothing happens if dynamo's cache is not where this expects it.
    """
    code = getattr(fn, "__code__", None)
    if code is None or "testing/_internal/" not in code.co_filename.replace("\\", "/"):
        return
    try:
        from torch._dynamo import funcname_cache
    except ImportError:
        return
    cache = getattr(funcname_cache, "cache", None)
    if isinstance(cache, dict):
        cache.setdefault(code.co_filename, {})


def _skip_guard_latency_profile() -> None:
    """Spare dynamo timing each new set of guards after flushing the CPU caches.

    After dynamo builds a frame's guards it checks them once (kept: a guard that fails on the
    frame it was made for is a dynamo bug) and then times one more evaluation for a metric
    (``guard_latency_us``), first flushing the CPU caches, which its own comment calls expensive:
    6 of the 12.6 ms a small compile takes here, 6% of a probe. The timing is replaced by a zero
    latency in the workers, which compile for the compile check and log no metrics; nothing
    happens if dynamo's code is not where this expects it.
    """
    from torch._dynamo import guards

    if callable(getattr(guards, "profile_guard_manager", None)):
        guards.profile_guard_manager = _no_latency  # type: ignore[attr-defined,assignment]


def _no_latency(*_: Any) -> float:
    return 0.0


def _seeded(op: Callable[..., object], *args: object, **kwargs: object) -> object:
    """OpInfo's ``wrapper_set_seed`` without its ``freeze_rng_state``, for compiled calls."""
    torch.manual_seed(42)
    return op(*args, **kwargs)


@contextlib.contextmanager
def _traceable_seeding() -> Iterator[None]:
    """OpInfo wraps random ops (``randn``, ``dropout``, ``bernoulli``, also ``item``) in
    ``wrapper_set_seed``, whose ``freeze_rng_state`` restores the accelerator's RNG state inside
    ``no_dispatch()``. Compiled, dynamo traces into that restore, and a backend whose device
    module sets its RNG state in Python (OpenReg-style plugins) makes dynamo build fake tensors
    under ``no_dispatch``: an AssertionError of the test harness, read as the backend's compile
    ``error`` while the op compiles and runs fine. For the compiled calls the wrapper seeds as
    before and leaves out the restore (random results are judged by their moments)."""
    from torch.testing._utils import wrapper_set_seed

    patched = [m for name, m in list(sys.modules.items())
               if name.startswith("torch.testing._internal") and getattr(m, "wrapper_set_seed", None) is wrapper_set_seed]
    for module in patched:
        module.wrapper_set_seed = _seeded  # type: ignore[attr-defined]
    try:
        yield
    finally:
        for module in patched:
            module.wrapper_set_seed = wrapper_set_seed  # type: ignore[attr-defined]


def probe_compile(st: EngineState, entry: OpEntry, unit: Unit, dtype: torch.dtype, ref: Reference,
                  eager: SampleResult, backend: str | None = None) -> SampleResult:
    """Compile the op for the unit's values (with ``backend``, else the adapter's), run it once
    observed, and judge it (OpInfo's seeding wrapper made traceable: :func:`_traceable_seeding`)."""
    with _traceable_seeding():
        return _probe_compile(st, entry, unit, dtype, ref, eager, backend)


def _probe_compile(st: EngineState, entry: OpEntry, unit: Unit, dtype: torch.dtype, ref: Reference,
                   eager: SampleResult, backend: str | None) -> SampleResult:
    backend = backend or st.adapter.compile_backend()
    result = _result(unit)
    if backend is None:
        result.note = "backend has no torch.compile backend"
        result.error = ErrorInfo(type="NoCompileBackend", message=result.note, actionable=False)
        return result
    import torch._dynamo

    _skip_funcname_scan(fn := entry.info.op)
    _skip_guard_latency_profile()
    torch._dynamo.reset()
    compiled = torch.compile(lambda i, *a, **k: fn(i, *a, **k), backend=backend, dynamic=False)
    uid = unit_id(unit, "compile")
    # no dispatch mode here (an active TorchDispatchMode makes dynamo run the frame eagerly): the
    # first call compiles and runs plainly (the verdict); a second, under the profiler, is evidence
    try:
        values, again = device_values(unit, st.adapter.device()), device_values(unit, st.adapter.device())
    except Exception as exc:  # noqa: BLE001 - staging the inputs failed: the graph never ran
        first = DeviceCall(error=readable(exc))
    else:
        first = run_device(st, compiled, values, False, profile=False)
    dc = first if first.error is not None else run_device(st, compiled, again, False)
    if first.error is not None:
        root = readable(root_cause(first.error))
        result.error = error_info(root, unit.overload, st.adapter.device_type, str(dtype).removeprefix("torch."))
        # the same rule as in eager mode: the CPU computes this unit (its reference exists)
        result.path, result.outcome, note = failed_call(st, unit.overload, uid, root, dc.fell_back, lambda: True,
                                                           unit_dtypes(unit), dc.read_to_host)
        result.note = note
        apply_evidence(result, dc)
        return result
    trivial = observe.event_names(observe.TRIVIAL_OPS)
    ran = sorted({n for n in dc.observed.names if n.startswith("aten::") and n not in trivial})
    result.path, result.components, result.note = _compiled_path(unit, eager, ran, dc.fell_back)
    apply_evidence(result, dc)
    if dc.observed.state is FallbackState.unknown and dc.seen.state is FallbackState.unknown and not ran:
        result.fallback = FallbackState.unknown
    if dc.error is not None:
        result.note = "; ".join(filter(None, [result.note, f"the profiled run raised ({type(dc.error).__name__}: "
                                              f"{str(dc.error)[:120]}); the plain run's result stands"]))
    check = check_values(st, unit, ref, first.out, dtype, result)
    result.outcome = Outcome.ok if check.ok else Outcome.wrong
    if not check.ok:  # what differs, as an eager cell says it
        result.note = "; ".join(filter(None, [result.note, check.comparison.detail]))
    return result
