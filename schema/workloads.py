"""Levels 3 and 4: workload runs in the matrix, and what a contract requires of them.

One :class:`WorkloadResult` per workload x dtype x mode: each step (``to_device``, ``inference``,
``training``, ``state_dict``; in compile mode ``to_device``, ``inference``, ``dynamic_shapes``,
``mutation``, ``custom_op`` and a compiled ``training`` step) with its outcome and evidence, the host fallback observed, memory and timings::

    workloads:
    - workload: tinygpt
      dtype: float32
      mode: eager
      outcome: ok
      steps: {inference: {result: pass, max_abs_error: 0.0, ...}, ...}
      host_fallback: {state: observed, ops: [aten::cumsum], predicted: [aten::cumsum]}

A contract's :class:`WorkloadRequirement` names workloads (``all``: every one in the matrix),
dtypes, a mode, the steps that must pass and bounds (host fallback ops, memory, graph breaks,
speedup after compile cost).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, ConfigDict, Field

from .base import Message, Model
from .enums import CheckResult, DType, FallbackState, FaultOutcome, FaultScope, Mode, Outcome, TextEnum

__all__ = ["WorkloadStep", "StepResult", "HostFallback", "CompileCache", "CompileStats", "WorkloadResult", "WorkloadRecord",
           "WorkloadRequirement", "WorkloadList"]


class WorkloadStep(TextEnum):
    """The steps a workload run takes: eager mode runs to_device, inference, training and
    state_dict; compile mode to_device, inference, the last three, and training with the model
    compiled."""

    to_device = "to_device"
    inference = "inference"
    training = "training"
    state_dict = "state_dict"
    dynamic_shapes = "dynamic_shapes"
    mutation = "mutation"
    custom_op = "custom_op"


#: the steps a workload requirement asks for unless it names others (and that a run's headline judges)
GATED_STEPS = (WorkloadStep.to_device, WorkloadStep.inference)


class StepResult(Model):
    """One step's result: pass / fail / unknown, the error or mismatch, figures."""

    result: CheckResult
    outcome: Outcome = Outcome.ok
    evidence: str = ""
    seconds: float = Field(default=0.0, ge=0)
    max_abs_error: float | None = Field(default=None, description="max |device - reference| over outputs")
    ref_max_abs: float | None = Field(default=None, description="max |reference|, for a contract's rtol")
    rtol: float | None = None
    atol: float | None = None
    host_fallback: list[str] = Field(default_factory=list, description="ops seen on the host during this step")
    rejected: bool = Field(
        default=False, description="the backend refused the step cleanly before any result (its message names what is "
        "unsupported, the device stayed healthy): result fail, outcome ok, as a rejected operator cell")


class HostFallback(Model):
    """Ops that ran on the host during the workload, host<->device copies, and the matrix's prediction."""

    state: FallbackState = FallbackState.unknown
    ops: list[str] = Field(default_factory=list, description="ATen overloads the adapter saw run on the host")
    copies: int | None = Field(default=None, ge=0, description="host<->device copies the profiler saw in the forward pass")
    copy_bytes: int | None = Field(default=None, ge=0)
    predicted: list[str] | None = Field(
        default=None, description="of those ops, the ones the operator matrix predicted (None: no ops probed)"
    )


class CompileCache(Model):
    """A second process compiling the same workload with the same backend: did it reuse the first
    process's on-disk compile cache? ``pass``: it hit the cache; ``fail``: it compiled again;
    ``not_applicable``: the backend keeps no cache; ``unknown``: not observable (with the reason)."""

    result: CheckResult
    hits: int = Field(default=0, ge=0, description="cache hits the second process's counters recorded")
    misses: int = Field(default=0, ge=0, description="cache misses (graphs compiled again)")
    seconds: float | None = Field(default=None, ge=0, description="the second process's first compiled call")
    evidence: str = ""


class CompileStats(Model):
    """Level 4 figures from dynamo's own counters and timings."""

    backend: str
    graph_breaks: int = Field(default=0, ge=0)
    break_reasons: list[str] = Field(default_factory=list)
    recompiles: int = Field(default=0, ge=0, description="compiles beyond the first (dynamic shapes)")
    graphs: int = Field(default=0, ge=0)
    compile_seconds: float = Field(default=0.0, ge=0)
    eager_ms: float | None = Field(default=None, ge=0, description="steady-state eager call on the device")
    compiled_ms: float | None = Field(default=None, ge=0, description="steady-state compiled call")
    speedup: float | None = Field(default=None, ge=0, description="eager_ms / compiled_ms")
    break_even_calls: int | None = Field(default=None, ge=0, description="calls until compile time pays off (None: never)")
    cache: CompileCache | None = Field(default=None, description="a second process compiling the same workload")


class WorkloadResult(Model):
    """One workload x dtype x mode."""

    workload: str
    dtype: DType
    mode: Mode = Mode.eager
    outcome: Outcome = Field(description="ok when every step ran or was cleanly refused (a refused step: result "
                             "fail, rejected); else the worst fault or failure")
    description: str = ""
    inputs: str = Field(default="", description="input shapes, dtype, how generated, seed")
    steps: dict[WorkloadStep, StepResult] = Field(default_factory=dict)
    host_fallback: HostFallback = Field(default_factory=HostFallback)
    host_rss_bytes: int | None = Field(default=None, ge=0)
    device_peak_bytes: int | None = Field(default=None, ge=0, description="None: the runtime does not report it")
    to_device_seconds: float | None = Field(default=None, ge=0)
    compile: CompileStats | None = None
    error: Message | None = None
    fault_scope: FaultScope | None = Field(default=None, description="how far a fault reached (what still worked after it)")

    def key(self) -> tuple[str, str, str]:
        """(workload, dtype, mode): unique in a matrix."""
        return (self.workload, self.dtype.value, self.mode.value)

    def headline(self) -> str:
        """The word shown for the run: the verdict the gate gives it under a contract's default steps
        (:data:`GATED_STEPS`). A worker fault is the run's word; else the first gated step that did
        not pass gives it (``rejected`` for a clean refusal, else its outcome); a run whose gated steps
        all passed reads ``ok`` whatever a later step did (those steps are listed beside the word)."""
        fault = self.outcome.fault
        if (fault is not None and fault is not FaultOutcome.error) or self.error:
            return self.outcome.value
        for step in GATED_STEPS:
            r = self.steps.get(step)
            if r is None:
                return self.outcome.value if self.outcome is not Outcome.ok else "not run"
            if r.result is not CheckResult.passed:
                if r.rejected:
                    return "rejected"
                return (r.outcome if r.outcome is not Outcome.ok else self.outcome).value
        return Outcome.ok.value

    def failed_steps(self) -> list[str]:
        """Steps that did not pass, as ``step: evidence``."""
        return [f"{k.value}: {v.evidence}" for k, v in self.steps.items() if v.result is not CheckResult.passed]


class WorkloadRecord(Model):
    """The journal line for one workload task (one workload x dtype x mode)."""

    kind: Literal["workload"] = "workload"
    task: str
    result: WorkloadResult
    evidence_key: str = ""


class WorkloadRequirement(Model):
    """Levels 3/4: which workloads must run, how well, and within which bounds."""

    model_config = ConfigDict(allow_inf_nan=False)  # a contract number that overflowed is an error

    names: list[str] = Field(min_length=1, description="workload names, or ['all'] for every one in the matrix")
    dtypes: list[DType] = Field(default_factory=lambda: [DType("float32")])
    mode: Mode = Mode.eager
    steps: list[WorkloadStep] = Field(
        default_factory=lambda: list(GATED_STEPS),
        description="steps that must pass (compiled == eager is the inference step in compile mode)",
    )
    rtol: float | None = Field(default=None, ge=0, description="overrides each workload's own tolerance")
    atol: float | None = Field(default=None, ge=0)
    max_host_fallback_ops: int | None = Field(
        default=None, ge=0, description="distinct ops run on the host, besides allow_host_fallback (0 = forbidden)"
    )
    allow_host_fallback: list[str] = Field(
        default_factory=list, description="fnmatch patterns of ops accepted on the host (e.g. aten::gelu*)"
    )
    max_device_memory_mb: float | None = Field(default=None, gt=0)
    max_host_rss_mb: float | None = Field(default=None, gt=0)
    max_graph_breaks: int | None = Field(default=None, ge=0)
    max_recompiles: int | None = Field(default=None, ge=0)
    min_speedup: float | None = Field(default=None, gt=0, description="steady-state compiled speedup over eager")
    max_break_even_calls: int | None = Field(default=None, ge=1, description="compile cost repaid within N calls")
    name: str | None = None


def _unique(results: list[WorkloadResult]) -> list[WorkloadResult]:
    seen: set[tuple[str, str, str]] = set()
    for r in results:
        if r.key() in seen:
            raise ValueError(f"workload {'/'.join(r.key())} is listed twice; keep one entry per workload x dtype x mode")
        seen.add(r.key())
    return results


#: the matrix's ``workloads`` section: unique per workload x dtype x mode
WorkloadList = Annotated[list[WorkloadResult], AfterValidator(_unique)]
