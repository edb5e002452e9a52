"""The runner's ``workload`` task: one workload x dtype x mode in an isolated worker.

Planned by :func:`plan_workload_tasks`; ``handle`` runs the steps in order, telling the runner
before each one (``progress``) so a crash, hang or OOM is blamed on the step, and returns a
:class:`~opmatrix.schema.workloads.WorkloadRecord`::

    tasks = plan_workload_tasks(["mlp", "tinygpt"], ["float32"], ["eager", "compile"])
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict

from opmatrix.probes.runner import Skip, Task, WorkerContext
from opmatrix.probes.runner.faultscope import after_restart
from opmatrix.schema import CheckResult, DType, FallbackState, FaultOutcome, FaultScope, Mode, Outcome
from opmatrix.schema.workloads import (
    CompileCache,
    HostFallback,
    StepResult,
    WorkloadRecord,
    WorkloadResult,
    WorkloadStep,
)

from . import compiled, steps
from .cache import second_process
from .catalog import TORCH_DTYPES, WORKLOADS, build
from .observe import copies_during, device_peak, host_rss, reset_peak
from .steps import CompileBackend, Stats

__all__ = ["WorkloadPayload", "plan_workload_tasks", "handle", "fault_result", "task_id"]

_EAGER = (WorkloadStep.to_device, WorkloadStep.inference, WorkloadStep.training, WorkloadStep.state_dict)
_COMPILE = (WorkloadStep.to_device, WorkloadStep.inference, WorkloadStep.dynamic_shapes, WorkloadStep.mutation,
            WorkloadStep.custom_op, WorkloadStep.training)  # compiled training last: its compile leaves the
#                                                             inference figures (graphs, recompiles) as they were


def task_id(name: str, dtype: str, mode: str) -> str:
    """``workload:NAME|DTYPE|MODE``."""
    return f"workload:{name}|{dtype}|{mode}"


class WorkloadPayload(BaseModel):
    """A ``workload`` task's payload: which workload, at which dtype and mode, with which seed."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    workload: str
    dtype: str
    mode: str
    seed: int = 0
    #: replaces the adapter's torch.compile backend in compile mode (absent: the adapter's)
    compile_backend: str | None = None


def plan_workload_tasks(names: list[str], dtypes: list[str], modes: list[str], seed: int = 0,
                        compile_backend: str | None = None) -> list[Task]:
    """One ``workload`` task per name x dtype x mode, in a stable order (after the op tasks);
    ``compile_backend`` replaces the adapter's for compile mode (part of the payload, so of the
    evidence key: a run with another backend never reuses these records)."""
    tasks: list[Task] = []
    for name in names:
        for dtype in dtypes:
            for mode in modes:
                tasks.append(Task(id=task_id(name, dtype, mode), kind="workload", order=1_000_000 + len(tasks),
                                  payload=WorkloadPayload(workload=name, dtype=dtype, mode=mode, seed=seed,
                                                          compile_backend=compile_backend).model_dump(exclude_none=True)))
    return tasks


def _result(task: Task, outcome: Outcome, **fields: Any) -> WorkloadResult:
    p = WorkloadPayload.model_validate(task.payload)
    spec = WORKLOADS.get(p.workload)
    return WorkloadResult(workload=p.workload, dtype=DType(p.dtype), mode=Mode(p.mode), outcome=outcome,
                          description=spec.description if spec else "user workload", **fields)


def fault_result(task: Task, outcome: FaultOutcome, text: str, scope: str | None = None) -> WorkloadRecord:
    """The record of a workload whose worker crashed, hung, ran out of memory or was poisoned,
    with how far the fault reached when that was observed."""
    return WorkloadRecord(task=task.id, result=_result(task, Outcome(outcome.value), error=text[-2000:],
                                                       fault_scope=FaultScope(scope) if scope else None))


def _step_fn(step: WorkloadStep, run: steps.Run, backend: CompileBackend | None, stats: Stats) -> Callable[[], StepResult]:
    if step is WorkloadStep.to_device:
        return lambda: steps.move(run)
    if step is WorkloadStep.training:
        return lambda: steps.training(run, backend)
    if step is WorkloadStep.state_dict:
        return lambda: steps.state_dict_round_trip(run)
    if step is WorkloadStep.inference and backend is None:
        return lambda: steps.inference(run)
    if backend is None:
        raise ValueError(f"workload step {step.value} runs in compile mode only")
    if step is WorkloadStep.inference:
        return lambda: compiled.compiled_inference(run, backend, stats)
    if step is WorkloadStep.dynamic_shapes:
        return lambda: compiled.dynamic_shapes(run, stats)
    if step is WorkloadStep.mutation:
        return lambda: compiled.mutation(run, backend)
    return lambda: compiled.custom_op(run, backend)


def _run_steps(ctx: WorkerContext, task: Task, run: steps.Run, backend: CompileBackend | None, progress: Callable[[str], None],
               stats: Stats) -> dict[WorkloadStep, StepResult]:
    results: dict[WorkloadStep, StepResult] = {}
    order = _COMPILE if backend is not None else _EAGER
    for step in order:
        if run.model is None and step is not WorkloadStep.to_device:
            results[step] = StepResult(result=CheckResult.unknown, evidence="not run: to_device failed")
            continue
        unit = f"{task.id}:{step.value}"
        progress(unit)
        run.step_ops = set()
        body = _step_fn(step, run, backend, stats)
        if step is WorkloadStep.inference:  # copies are profiled in the forward pass only (profiling is costly)
            results[step], stats["copies"] = copies_during(partial(steps.guarded, ctx.adapter, body))
        else:
            results[step] = steps.guarded(ctx.adapter, body)
        if run.step_ops:
            results[step] = results[step].model_copy(update={"host_fallback": sorted(run.step_ops)})
        if step is WorkloadStep.to_device and backend is not None and run.model is not None:
            seen = set(run.fallback_ops)  # the eager output for compiled == eager; its fallback is eager's
            quiet = steps.guarded(ctx.adapter, lambda: steps.inference(run))
            run.fallback_ops = seen
            if quiet.result is not CheckResult.passed:
                run.eager_out = None
        if results[step].outcome in (Outcome.error, Outcome.oom) or results[step].rejected:
            ctx.check_health(unit)  # a refusal that leaves the device unusable is no clean one
    return results


def _outcome(results: Mapping[WorkloadStep, StepResult]) -> Outcome:
    worst = Outcome.ok
    for r in results.values():
        if r.outcome > worst:
            worst = r.outcome
    return worst


def handle(ctx: WorkerContext, task: Task, progress: Callable[[str], None], skip: Mapping[str, Skip],
           skip_rest: Skip | None) -> WorkloadRecord:
    """Run workload task ``task`` (payload: workload, dtype, mode, seed) on ``ctx.adapter``."""
    p = WorkloadPayload.model_validate(task.payload)
    fault = skip_rest or next(iter(skip.values()), None)
    if fault is not None:
        where = next(iter(skip), task.id)
        scope = fault.scope or after_restart(ctx.adapter, None).scope.value
        return fault_result(task, fault.outcome, f"{fault.outcome} at {where}: {fault.message}", scope)
    wl = build(p.workload, TORCH_DTYPES[p.dtype], p.seed)
    run = steps.Run(adapter=ctx.adapter, workload=wl, device=ctx.adapter.device(), plain=p.mode == "compile")
    backend: CompileBackend | None = None
    if p.mode == "compile":
        backend = p.compile_backend or ctx.adapter.compile_backend()
        if backend is None:
            return WorkloadRecord(task=task.id, result=_result(task, Outcome.ok, inputs=wl.input_desc,
                                  error="the backend has no torch.compile backend"))
    stats: Stats = {}
    reset_peak(ctx.adapter)
    results = _run_steps(ctx, task, run, backend, progress, stats)
    copies = stats.get("copies", (None, None))
    fallback = HostFallback(
        state=FallbackState.observed if run.fallback_ops else FallbackState(run.fallback_state),
        ops=sorted(run.fallback_ops), copies=copies[0], copy_bytes=copies[1])
    comp = compiled.timings(run, stats, str(backend)) if backend is not None else None
    if comp is not None and backend is not None:
        inference = results.get(WorkloadStep.inference)
        if inference is not None and inference.result is CheckResult.passed:
            progress(f"{task.id}:compile_cache")
            comp = comp.model_copy(update={"cache": second_process(ctx, task.payload, backend)})
        else:
            comp = comp.model_copy(update={"cache": CompileCache(
                result=CheckResult.unknown, evidence="not tried: the compiled inference did not pass")})
    result = _result(task, _outcome(results), inputs=wl.input_desc, steps=results, host_fallback=fallback,
                     host_rss_bytes=host_rss(), device_peak_bytes=device_peak(ctx.adapter),
                     to_device_seconds=results[WorkloadStep.to_device].seconds, compile=comp)
    stats.clear()
    torch._dynamo.reset() if backend is not None else None
    return WorkloadRecord(task=task.id, result=result, evidence_key=ctx.adapter.evidence_key())

