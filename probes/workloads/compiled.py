"""Level 4 steps: the workload through the adapter's ``torch.compile`` backend.

Compiled == eager (the device's eager output, else the CPU reference), graph breaks, their reasons
and recompiles from dynamo's own counters, a second batch size (dynamic shapes), an in-place
mutation and a ``torch.library.custom_op`` inside a compiled region, compile time, steady-state
speedup and the break-even number of calls.
"""

from __future__ import annotations

import math
import statistics
import time
from typing import TYPE_CHECKING

import torch

from opmatrix.schema import CheckResult, Outcome
from opmatrix.schema.workloads import CompileStats, StepResult

from .compare import compare, to_cpu, to_device
from .steps import CompileBackend, Run, Stats, forward, observe

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["compiled_inference", "dynamic_shapes", "mutation", "custom_op", "timings"]

_CUSTOM: list[Callable[[torch.Tensor, float], torch.Tensor]] = []


def _counters() -> tuple[int, list[str], int]:
    """(graph breaks, their reasons, unique graphs) from ``torch._dynamo.utils.counters``."""
    from torch._dynamo.utils import counters

    breaks = counters["graph_break"]
    return sum(breaks.values()), sorted(str(k)[:200] for k in breaks), int(counters["stats"]["unique_graphs"])


def _fresh() -> None:
    import torch._dynamo

    torch._dynamo.reset()
    from torch._dynamo.utils import counters

    counters.clear()


def compiled_inference(run: Run, backend: CompileBackend, stats: Stats) -> StepResult:
    """Compile the model, run it once (compile time), compare with eager; fills ``stats``."""
    wl = run.workload
    _fresh()
    compiled = torch.compile(run.on_device(), backend=backend)
    start = time.perf_counter()
    with torch.no_grad():
        out = observe(run, lambda: forward(wl, compiled, run.inputs, True))
        run.adapter.synchronize()
    stats["compile_seconds"] = round(time.perf_counter() - start, 4)
    stats["compiled"] = compiled
    breaks, reasons, graphs = _counters()
    stats.update(graph_breaks=breaks, break_reasons=reasons, graphs=graphs)
    want, against = (run.eager_out, "eager on the device") if run.eager_out is not None else (None, "")
    if want is None:
        from .steps import _reference

        want, against = _reference(wl, True), "the CPU reference (eager failed on the device)"
    ok, err, scale, why = compare(to_cpu(out), want, wl.rtol, wl.atol)
    return StepResult(result=CheckResult.passed if ok else CheckResult.failed, outcome=Outcome.ok if ok else Outcome.wrong,
                      evidence=((why + f" vs {against}") if why else f"compiled == {against}")
                      + f" ({graphs} graph(s) captured, {breaks} graph break(s))",
                      seconds=stats["compile_seconds"], max_abs_error=err, ref_max_abs=scale, rtol=wl.rtol, atol=wl.atol)


def dynamic_shapes(run: Run, stats: Stats) -> StepResult:
    """A second batch size through the compiled model: recompiles counted, result vs eager on the device."""
    wl = run.workload
    if wl.make_inputs is None:
        return StepResult(result=CheckResult.not_applicable, evidence="the workload has no second input shape")
    if "compiled" not in stats:
        return StepResult(result=CheckResult.unknown, evidence="not run: compiled inference failed")
    inputs = to_device(wl.make_inputs(wl.batch * 2), run.device)
    before = _counters()[2]
    start = time.perf_counter()
    with torch.no_grad():
        got = observe(run, lambda: forward(wl, stats["compiled"], inputs, True))
        run.adapter.synchronize()
    seconds = time.perf_counter() - start
    stats["recompiles"] = max(0, _counters()[2] - before)
    with torch.no_grad():
        want = forward(wl, run.on_device(), inputs, True)
    ok, err, scale, why = compare(to_cpu(got), to_cpu(want), wl.rtol, wl.atol)
    note = f"batch {wl.batch} -> {wl.batch * 2}: {stats['recompiles']} recompile(s)"
    return StepResult(result=CheckResult.passed if ok else CheckResult.failed, outcome=Outcome.ok if ok else Outcome.wrong,
                      evidence=f"{note}; " + (why or "matches eager"), seconds=round(seconds, 4), max_abs_error=err,
                      ref_max_abs=scale)


def _accumulate(out: torch.Tensor, acc: torch.Tensor) -> torch.Tensor:
    acc.add_(out)  # an in-place mutation of a graph input
    acc.mul_(0.5)
    return acc.sum()


def _first_float(run: Run) -> torch.Tensor:
    out = run.eager_out
    t = out if isinstance(out, torch.Tensor) else None
    if t is None or not t.is_floating_point():
        t = torch.ones(4, 4, dtype=next(run.on_device().parameters()).dtype)
    return t.to(run.device)


def mutation(run: Run, backend: CompileBackend) -> StepResult:
    """``acc.add_(out); acc.mul_(0.5)`` compiled: the mutated input and the result equal eager."""
    x = _first_float(run)
    acc_c, acc_e = torch.ones_like(x), torch.ones_like(x)
    fn = torch.compile(_accumulate, backend=backend)
    got = observe(run, lambda: fn(x, acc_c))
    want = _accumulate(x, acc_e)
    wl = run.workload
    ok, err, _, why = compare((got, acc_c), (want, acc_e), wl.rtol, wl.atol)
    return StepResult(result=CheckResult.passed if ok else CheckResult.failed, outcome=Outcome.ok if ok else Outcome.wrong,
                      evidence=why or "in-place mutation of a graph input matches eager", max_abs_error=err)


def _custom() -> Callable[[torch.Tensor, float], torch.Tensor]:
    if not _CUSTOM:
        @torch.library.custom_op("opmatrix_wl::scale_shift", mutates_args=())
        def scale_shift(x: torch.Tensor, scale: float) -> torch.Tensor:
            return x * scale + 1.0

        @scale_shift.register_fake
        def _(x: torch.Tensor, scale: float) -> torch.Tensor:
            return torch.empty_like(x)

        _CUSTOM.append(scale_shift)
    return _CUSTOM[0]


def custom_op(run: Run, backend: CompileBackend) -> StepResult:
    """A ``torch.library.custom_op`` inside a compiled region, on the workload's output."""
    op = _custom()
    x = _first_float(run)

    def region(t: torch.Tensor) -> torch.Tensor:
        return op(t.relu(), 0.5) * 2

    got = observe(run, lambda: torch.compile(region, backend=backend)(x))
    want = region(x)
    wl = run.workload
    ok, err, _, why = compare(got, want, wl.rtol, wl.atol)
    return StepResult(result=CheckResult.passed if ok else CheckResult.failed, outcome=Outcome.ok if ok else Outcome.wrong,
                      evidence=why or "custom op inside a compiled region matches eager", max_abs_error=err)


def _median_ms(fn: Callable[[], object], calls: int = 3) -> float:
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def timings(run: Run, stats: Stats, backend_name: str) -> CompileStats:
    """Steady-state eager and compiled call times, speedup and break-even calls."""
    wl = run.workload
    eager_ms = compiled_ms = None
    if "compiled" in stats and run.model is not None:
        with torch.no_grad():
            try:
                sync = run.adapter.synchronize
                compiled_ms = _median_ms(lambda: (forward(wl, stats["compiled"], run.inputs, True), sync()))
                eager_ms = _median_ms(lambda: (forward(wl, run.on_device(), run.inputs, True), sync()))
            except Exception:  # noqa: BLE001 - timing is best effort; a failing path was recorded by its step
                pass
    speedup = round(eager_ms / compiled_ms, 3) if eager_ms and compiled_ms else None
    saved = (eager_ms - compiled_ms) if eager_ms is not None and compiled_ms is not None else None
    extra = max(0.0, stats.get("compile_seconds", 0.0) * 1000 - (compiled_ms or 0.0))
    even = math.ceil(extra / saved) if saved and saved > 0 else None
    return CompileStats(backend=backend_name, graph_breaks=stats.get("graph_breaks", 0),
                        break_reasons=stats.get("break_reasons", []), recompiles=stats.get("recompiles", 0),
                        graphs=stats.get("graphs", 0), compile_seconds=stats.get("compile_seconds", 0.0),
                        eager_ms=round(eager_ms, 4) if eager_ms is not None else None,
                        compiled_ms=round(compiled_ms, 4) if compiled_ms is not None else None,
                        speedup=speedup, break_even_calls=even)
