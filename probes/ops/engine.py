"""The operator probe engine: one task = one OpInfo at one dtype, every sample x layout.

For each sample (generated once on the CPU) and each layout variant, the engine runs the op on
the device under the profiler and on a CPU reference, compares outputs, and classifies the
execution path from what the call tree shows (host copies inside the op are fallback),
the adapter's fallback counter and the registrations (:mod:`.classify`); first-order backward
is compared for differentiable dtypes (:mod:`.backward`); cells unavailable in eager are retried
through the backend's ``torch.compile`` backend (:mod:`.compiled`, ``decomposed``)::

    record = probe_task(adapter, "softmax", "float32")     # -> TaskRecord with CellRecords

The runner calls :func:`handle` in isolated workers; every risky unit is announced with
``progress(unit)`` first so a crash or hang is blamed on the unit that was running, and the
units an earlier fault rules out are listed as not run (:mod:`.faults`).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, cast

import torch

from opmatrix.probes.ops import OpPayload, task_id
from opmatrix.probes.runner import Skip, WorkerPoisoned
from opmatrix.schema import (
    Autograd,
    CellSource,
    DType,
    ErrorInfo,
    ExecPath,
    Layout,
    Mode,
    OpName,
    Outcome,
    Shapes,
    TaskRecord,
    UnitId,
)

from .backward import NoGradient, claims_backward, differentiable, grad_masks, probe_backward
from .cells import SampleResult, cells_from_samples
from .checkpoint import UnitDone, dump_batch, load_batch
from .compiled import probe_compile
from .declared import stamp_accumulation, with_declared_ranks
from .dynamic import grows, probe_dynamic
from .eager import probe_eager, refusal_text
from .faults import SkipPlan, fault_result
from .judging import Reference, reference, widened_reference
from .source import OpEntry, generate_samples, values_undefined
from .state import EngineState, InlineContext, ProbeOptions, engine_state
from .units import Unit, dtype_of, holds_dtype, unit_id, units, values_key
from .values import where

if TYPE_CHECKING:
    from opmatrix.backend.base import Adapter
    from opmatrix.probes.runner import Task, WorkerContext

__all__ = ["ProbeOptions", "handle", "probe_task", "task_id"]


class _TaskRun:
    """The units of one task, in order, with what the runner said about earlier attempts."""

    def __init__(self, st: EngineState, entry: OpEntry, dtype_name: str, opts: ProbeOptions, plan: SkipPlan,
                 progress: Callable[[str], None] | None, ctx: WorkerContext | InlineContext | None = None):
        self.st, self.entry, self.dtype_name, self.opts, self.plan = st, entry, dtype_name, opts, plan
        #: what the runner kept of earlier attempts (:mod:`opmatrix.probes.runner.carry`): units they
        #: finished (restored, not run again), units retried in a fresh worker, where to checkpoint
        self.carried: dict[UnitId, UnitDone] = {UnitId.parse(uid): done for batch in (
            getattr(ctx, "carried", None) or {}).values() for uid, done in load_batch(batch).items()}
        self.retried = {UnitId.parse(uid): why for uid, why in (getattr(ctx, "retried", None) or {}).items()}
        self.checkpoint: Callable[[str, bytes], None] | None = getattr(ctx, "checkpoint", None)
        #: finished units not yet checkpointed: pickled and written together (one pickle per unit
        #: cost 20-30 us, a batch 3-8 us per unit); a crash re-runs at most one batch
        self.unsaved: dict[UnitId, UnitDone] = {}
        self.saved_at = time.perf_counter()
        self.dtype = getattr(torch, dtype_name)
        self.claims_backward = claims_backward(entry, self.dtype)
        self.progress = progress or (lambda unit: None)
        self.results: list[SampleResult] = []
        self.autograd_budget: dict[tuple[OpName, int, Layout], int] = {}
        self.compile_done: dict[tuple[OpName, int], bool] = {}
        self.representative_done = False
        self.dynamic_done = False  # the dynamic-shape compile check: once per task
        self.invalid = 0
        self.samples = 0  # how many samples OpInfo yielded
        self.failed_units = 0  # units whose device call raised (their leftovers are freed)
        #: each sample's CPU reference, from its first layout: most layouts change memory, not values
        self.references: dict[tuple[str, bool], Reference] = {}
        self.gradients: dict[tuple[str, bool], Any] = {}  # and its CPU gradients

    def _admit(self, unit: Unit, uid: UnitId, mode: Mode) -> bool:
        """Whether ``uid`` runs now; one that an earlier fault rules out is recorded (or listed as not run)."""
        decision = self.plan.decide(uid)
        if isinstance(decision, Skip):
            self.results.append(fault_result(self.st, unit, mode, decision))
        return decision == "run"

    def unit(self, unit: Unit) -> None:
        """Probe one unit (eager, then compile when wanted), or record why it does not run."""
        uid = unit_id(unit, "eager")
        carried = self.carried.get(uid)
        if carried is not None:  # an earlier attempt finished it before its worker died
            self._restore(unit, carried)
            return
        if not self._admit(unit, uid, Mode.eager):
            return
        akey, ckey = _budget_keys(unit)
        start, invalid, failed = len(self.results), self.invalid, self.failed_units
        grads, compiled = self.autograd_budget.get(akey, 0), self.compile_done.get(ckey, False)
        self._run(unit, uid)
        if self.retried:
            self._noted_retries(unit, start)
        if self.checkpoint is not None:  # what this unit added, to be restored as it is
            self.unsaved[uid] = UnitDone(
                self.results[start:], self.invalid - invalid, self.failed_units - failed, self.representative_done,
                self.autograd_budget.get(akey, 0) - grads, self.compile_done.get(ckey, False) and not compiled)
            now = time.perf_counter()
            if now - self.saved_at >= CHECKPOINT_S or len(self.unsaved) >= CHECKPOINT_UNITS:
                self.checkpoint(f"{len(self.results)}@{now}", dump_batch({str(u): d for u, d in self.unsaved.items()}))
                self.unsaved, self.saved_at = {}, now

    def _restore(self, unit: Unit, done: UnitDone) -> None:
        """Take back a unit an earlier attempt finished: its results and what it counted."""
        self.results.extend(done.results)
        self.invalid, self.failed_units = self.invalid + done.invalid, self.failed_units + done.failed
        self.representative_done = self.representative_done or done.representative
        self.dynamic_done = self.dynamic_done or any(r.shapes is Shapes.dynamic for r in done.results)
        akey, ckey = _budget_keys(unit)
        self.autograd_budget[akey] = self.autograd_budget.get(akey, 0) + done.grads
        if done.compiled:
            self.compile_done[ckey] = True

    def _noted_retries(self, unit: Unit, start: int) -> None:
        """A step that crashed a worker which had run other units first, then ran without a fault
        in a fresh worker: its cell says so (the worker's state killed it, not
        this input)."""
        for result in self.results[start:]:
            steps = ["compile"] if result.mode is Mode.compile else ["eager", "backward"]
            for step in steps:
                sid = unit_id(unit, step)
                # the outcome this attempt recorded for the step: a fault means it did not run
                # cleanly here (it crashed again and is recorded from the runner's skip plan)
                now = result.outcome if step != "backward" else result.autograd.outcome if result.autograd else None
                if sid in self.retried and now is not None and not now.is_fault:
                    result.note = "; ".join(filter(None, [result.note, (
                        f"{step} ran without a fault in a fresh worker (it had first "
                        f"{self.retried[sid]})")]))

    def _run(self, unit: Unit, uid: UnitId) -> None:
        no_ref, own = None, None
        key = values_key(unit)
        ref: Reference | None = self.references.get(key)
        if ref is not None:  # borrowed from the sample's first layout; this layout's own on a mismatch
            if not ref.widened:  # (a widened one: the CPU has no kernel at this dtype in any layout)
                own = lambda: reference(self.entry.info.op, unit.cpu_values, self.dtype, unit.post)  # noqa: E731
        else:
            try:
                ref = self.references[key] = reference(self.entry.info.op, unit.cpu_values, self.dtype,
                                                              unit.post)
            except Exception as exc:  # noqa: BLE001 - the CPU rejects this input: the device still runs
                if self._layout_invalid(unit, uid, exc):
                    return
                # no CPU kernel at this dtype: computed in a wider one, the device is still judged
                # (on the host itself the device is the CPU: its refusal is the verdict)
                ref = None if self.st.adapter.is_host else widened_reference(
                    self.entry.info.op, unit.cpu_values, self.dtype, unit.post)
                if ref is None:
                    no_ref = f"the CPU reference rejects this input ({refusal_text(exc)})"
                    self.invalid += 1
                else:
                    self.references[key] = ref
        self.progress(str(uid))
        before = len(self.results)
        eager = self._eager(unit, ref, no_ref, own)
        if eager.error is not None and own is not None:
            try:
                own()
            except Exception as exc:  # noqa: BLE001 - the CPU refuses this layout of the sample too
                if self._layout_invalid(unit, uid, exc):
                    return
        self.results.append(eager)
        if ref is not None:
            self._backward(unit, eager)
            self._maybe_compile(unit, ref, eager)
        raised = [r for r in self.results[before:] if _raised(r)]
        if not self.st.adapter.is_host and raised:
            self.failed_units += 1
            # a compiled call's leftovers were alive through the collections compiling made, so they
            # are old: only a full collection frees them (torch_xla then fails every later call)
            release_failed_calls(full=any(r.mode is Mode.compile for r in raised))


    def _layout_invalid(self, unit: Unit, uid: UnitId, exc: BaseException) -> bool:
        """A layout variant the CPU refuses although it takes the sample contiguous changes what
        the op addresses (``as_strided`` reads the storage, which a layout rebuilds): not a variant
        of this sample, so not a cell; listed as not run with the CPU's refusal."""
        taken = self.references.get((unit.index, False))
        if unit.layout is Layout.contiguous or taken is None or taken.widened:  # widened: not taken at this dtype
            return False
        self.plan.not_run[str(uid)] = (f"not run: the CPU refuses this sample in the {unit.layout.value} layout although it "
                                  f"takes it contiguous (the layout changes what the op computes): {refusal_text(exc)}")
        return True

    def _backward(self, unit: Unit, eager: SampleResult) -> None:
        """First-order backward as its own unit (budgeted per cell): a fault there is the
        backward's, never the forward's."""
        key = _budget_keys(unit)[0]
        if (eager.error is not None or not self.opts.autograd or not differentiable(self.entry, self.dtype)
                or self.autograd_budget.get(key, 0) >= self.opts.autograd_per_cell):
            return
        self.autograd_budget[key] = self.autograd_budget.get(key, 0) + 1
        bid = unit_id(unit, "backward")
        decision = self.plan.decide(bid)
        if decision == "not_run":
            return
        if isinstance(decision, Skip):
            eager.autograd = Autograd(path=ExecPath.unknown, outcome=Outcome(decision.outcome))
            said = f"backward {decision.outcome} in unit {bid}: {decision.headline}"
            eager.note = "; ".join(filter(None, [eager.note, said]))
            return
        self.progress(str(bid))
        try:
            eager.autograd = probe_backward(self.st, self.entry.info.op, unit, self.dtype, self.gradients)
        except NoGradient as why:
            if self.claims_backward:  # OpInfo claims a backward here: its absence says why
                eager.note = "; ".join(filter(None, [eager.note, f"backward not compared: {why}"]))

    def _eager(self, unit: Unit, ref: Reference | None, no_ref: str | None,
               own: Callable[[], Reference] | None) -> SampleResult:
        try:
            return probe_eager(self.st, self.entry, unit, self.dtype, self.opts, ref, no_ref, own)
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception as exc:  # noqa: BLE001 - an engine failure on one unit is that cell's error
            if isinstance(exc, WorkerPoisoned):
                raise
            return SampleResult(op=str(unit.overload), rank=unit.rank, layout=unit.layout, mode=Mode.eager,
                                path=ExecPath.unknown, outcome=Outcome.error, features=unit.features, dtype=unit.dtype,
                                error=ErrorInfo(type=type(exc).__name__, actionable=False,
                                                message=f"opmatrix could not probe this sample: {where(exc)}"))

    def _maybe_compile(self, unit: Unit, ref: Reference, eager: SampleResult) -> None:
        opts = self.opts
        unavailable = eager.path is ExecPath.rejected and eager.outcome is Outcome.ok and not eager.unstaged
        checked = eager.outcome is Outcome.ok and not unavailable and (
            opts.compile == "all" or (opts.compile == "auto" and self.dtype_name == opts.representative_dtype))
        representative = not self.representative_done and checked
        if checked and opts.dynamic and not self.dynamic_done and unit.layout is Layout.contiguous and grows(unit):
            self.dynamic_done = True  # the first sample with a first dimension to grow (a second size)
            self._dynamic(unit, ref, eager)
        want = opts.compile != "off" and unit.layout is Layout.contiguous and (unavailable or representative)
        self.representative_done = self.representative_done or (want and representative)
        ckey = _budget_keys(unit)[1]
        if not want or self.compile_done.get(ckey):
            return
        self.compile_done[ckey] = True
        cid = unit_id(unit, "compile")
        if not self._admit(unit, cid, Mode.compile):
            return
        self.progress(str(cid))
        self.results.append(probe_compile(self.st, self.entry, unit, self.dtype, ref, eager,
                                          backend=self.opts.compile_backend))

    def _dynamic(self, unit: Unit, ref: Reference, eager: SampleResult) -> None:
        """The dynamic-shape compile check on the sample the static one compiled (:mod:`.dynamic`)."""
        did = unit_id(unit, "dynamic")
        start = len(self.results)
        if not self._admit(unit, did, Mode.compile):
            for faulted in self.results[start:]:
                faulted.shapes = Shapes.dynamic
            return
        self.progress(str(did))
        found = probe_dynamic(self.st, self.entry, unit, self.dtype, ref, eager, backend=self.opts.compile_backend)
        if isinstance(found, str):
            self.plan.not_run[str(did)] = f"not run: {found}"
        else:
            self.results.append(found)

    def record(self, tid: str, source: str, started: float) -> TaskRecord:
        """The task's journal record: cells, the worst fault, the units not run."""
        cells = cells_from_samples(self.results, self.dtype_name)
        faults = [r.outcome for r in self.results if r.outcome.is_fault]
        none = (f"no valid sample at {self.dtype_name}: the CPU reference rejected all {self.invalid}"
                if self.invalid else f"OpInfo yields no samples at {self.dtype_name}" if not self.samples
                else f"none of OpInfo's {self.samples} samples at {self.dtype_name} involves a device: no tensor "
                     f"in or out, or no layout asked for applies")
        return TaskRecord(
            task=tid, source=source, dtype=DType(self.dtype_name), outcome=max(faults) if faults else Outcome.ok,
            cells=cells, seconds=round(time.perf_counter() - started, 3), not_run=dict(self.plan.not_run),
            skipped=None if cells else f"all {len(self.plan.not_run)} units not run" if self.plan.not_run else none,
        )


#: finished units a worker may lose when it dies (they run again in the next attempt): at most
#: this many seconds' or this many units' worth, whichever is less
CHECKPOINT_S, CHECKPOINT_UNITS = 0.25, 8


def _budget_keys(unit: Unit) -> tuple[tuple[OpName, int, Layout], tuple[OpName, int]]:
    """What a unit counts against: its cell's backward budget and its (overload, rank)'s compile check."""
    return (unit.overload, unit.rank, unit.layout), (unit.overload, unit.rank)


def _raised(result: SampleResult) -> bool:
    """Whether a device call of this unit raised (forward, backward or compiled)."""
    grad = result.autograd
    return result.error is not None or (grad is not None and grad.outcome is not Outcome.ok)


def release_failed_calls(full: bool = False) -> None:
    """Free what a failed device call left alive in reference cycles (the exception's traceback
    holds the frames, the frames hold device tensors). On a lazy device such a tensor is still
    part of the next graph: torch_xla then fails every later sync with "Check failed:
    tensor_data", every op after the failure reads ``error`` and the process looks poisoned
    while it is not (a fresh process runs the same ops). The young generations after each failed
    unit cost microseconds; a full collection (a fifth of a second with OpInfo loaded, until the
    worker froze what its setup imported; 50 ms once it has compiled) runs after a unit whose
    compiled call failed (what the failed graph held lived through the collections compiling
    made, so it is old) and at the end of a task that had failures. The host adapter keeps no
    device state: not needed."""
    gc.collect(2 if full else 1)


def probe_task(adapter_or_ctx: Adapter | WorkerContext | InlineContext, source: str, dtype_name: str, *, options: Mapping[str, Any] | None = None,
               progress: Callable[[str], None] | None = None, skip: Mapping[str, Skip] | None = None,
               skip_rest: Skip | None = None) -> TaskRecord:
    """Probe OpInfo ``source`` at ``dtype_name`` on the adapter's device."""
    ctx = (cast("WorkerContext | InlineContext", adapter_or_ctx) if hasattr(adapter_or_ctx, "cache")
           else InlineContext(cast("Adapter", adapter_or_ctx)))
    st = engine_state(ctx)
    opts = ProbeOptions.from_dict(options)
    started = time.perf_counter()
    tid = task_id(source, dtype_name)
    entry = st.ops.get(source)
    if entry is None:
        return TaskRecord(task=tid, source=source, dtype=DType(dtype_name), outcome=Outcome.error,
                          skipped=f"no OpInfo named {source!r} in this torch build")
    dtype = getattr(torch, dtype_name)
    try:
        stopped: list[str] = []
        samples = generate_samples(entry, dtype, limit=opts.max_samples, partial=stopped)
    except Exception as exc:  # noqa: BLE001 - OpInfo cannot make samples for this dtype
        return TaskRecord(task=tid, source=source, dtype=DType(dtype_name), outcome=Outcome.ok,
                          skipped=f"OpInfo yields no samples at {dtype_name}: {type(exc).__name__}: {str(exc)[:200]}")
    if samples and not any(holds_dtype((s.input, tuple(s.args), dict(s.kwargs)), dtype) for s in samples):
        held = sorted({d for s in samples for d in [dtype_of((s.input, tuple(s.args), dict(s.kwargs)))] if d})
        return TaskRecord(task=tid, source=source, dtype=DType(dtype_name), outcome=Outcome.ok,
                          skipped=f"no sample holds {dtype_name}: OpInfo's {len(samples)} samples at {dtype_name} hold "
                                  f"{', '.join(held) or 'no tensor'} (cells are filed under the dtype passed)")
    masks = grad_masks(entry, dtype, samples, opts)
    probed, masks, first_extended, ranks_skipped = with_declared_ranks(entry, samples, masks, opts)
    run = _TaskRun(st, entry, dtype_name, opts, SkipPlan.from_runner(skip, skip_rest), progress, ctx)
    for unit in units(st, entry, probed, opts, values_undefined(entry, dtype), masks):
        start = len(run.results)
        run.unit(unit)
        if int(unit.index.split(".")[0]) >= first_extended:  # a sample extended to a declared rank
            for result in run.results[start:]:
                result.source = CellSource.rank_extension
    stamp_accumulation(st, entry, dtype_name, run.results, run.plan, run.progress)
    run.samples = len(samples)
    for why in stopped:  # the samples OpInfo never yielded are no cells: said, with the reason
        run.plan.not_run[f"samples after #{len(samples) - 1}"] = f"not run: {why}"
    if run.failed_units:
        release_failed_calls(full=True)
    st.overloads.flush(every=5.0)  # a worker killed before the next merge only costs a re-record
    record = run.record(tid, source, started)
    return record.model_copy(update={"ranks_skipped": ranks_skipped}) if ranks_skipped else record


def handle(ctx: WorkerContext, task: Task, progress: Callable[[str], None], skip: Mapping[str, Skip],
           skip_rest: Skip | None) -> TaskRecord:
    """Runner entry point for tasks of kind ``op``: payload ``{"source", "dtype", "options"}``."""
    p = OpPayload.model_validate(task.payload)
    return probe_task(ctx, p.source, p.dtype, options=p.options, progress=progress, skip=skip, skip_rest=skip_rest)
