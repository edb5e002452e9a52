"""Performance records (level 6) and the performance / compatibility requirements of a contract.

One :class:`PerfRecord` is one measured subject (a workload in eager or compiled mode, or a hot
operator) with everything a published number must name: model / op, input distribution,
precision, batch and concurrency, hardware, power mode, driver, firmware, framework versions,
compiler and options, warm-up, measurement window, repetitions, and the fallback state observed
during the measured window::

    id: workload.mlp.eager.float32
    subject: {kind: workload, name: mlp, mode: eager}
    input: {shapes: [[32, 64]], dtype: float32, generator: torch.randn, seed: 0, ...}
    precision: float32
    batch: 32
    timing: {clock: process_cpu, warmup: 10, window: 20, repetitions: 15, median_s: ..., ci_low_s: ...}
    fallback: {state: not_observed, ops: [], invalidates_latency: false}

A record whose window saw host fallback has ``fallback.invalidates_latency: true``: its latency is
not the device's, and every view flags it. Records are written by ``opmatrix bench`` and judged
by ``opmatrix gate`` (see :class:`PerfRequirement`); ``opmatrix compat`` writes a
:class:`CompatReport` judged by :class:`CompatRequirement`.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, model_validator

from .base import Message, Model
from .enums import FallbackPolicy, FallbackState, TextEnum

__all__ = [
    "Calibration",
    "Clock",
    "CompatCheck",
    "CompatReport",
    "CompatRequirement",
    "CompatRun",
    "CompilerInfo",
    "FallbackWindow",
    "HardwareInfo",
    "InputDistribution",
    "PERF_RECORD_KIND",
    "PerfRecord",
    "PerfRequirement",
    "SubjectKind",
    "Subject",
    "Timing",
    "torch_version_key",
]

#: a measured time: finite and not negative (a NaN or infinite sample is a broken record, not a slow one)
Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]

PERF_RECORD_KIND = "perf-record"
COMPAT_REPORT_KIND = "compat-report"


class SubjectKind(TextEnum):
    """What was measured."""

    workload = "workload"
    op = "op"


class Clock(TextEnum):
    """Which clock the samples come from.

    ``wall``: host wall time between two device synchronisations (devices that run asynchronously).
    ``process_cpu``: CPU time of the measuring process, for backends whose "device" is the host
    itself (cpu, refaccel): on a shared machine it excludes the time other processes held the cores,
    not what they do to the caches while this one runs (hence :class:`Calibration`).
    """

    wall = "wall"
    process_cpu = "process_cpu"


class Subject(Model):
    """The model or operator measured, and in which mode."""

    kind: SubjectKind
    name: str = Field(min_length=1, description="workload name (mlp) or operator (aten::mm)")
    mode: Literal["eager", "compile"]
    description: str = ""


class InputDistribution(Model):
    """How the inputs were made: shapes, dtype, generator and seed."""

    shapes: list[list[int]] = Field(description="shape of each tensor input")
    dtype: str
    generator: str = Field(description="how values were drawn, e.g. torch.randn (standard normal)")
    seed: int
    description: str = ""


class HardwareInfo(Model):
    """Hardware identity as the runtime reports it."""

    device_type: str
    device_name: str
    device_count: int = Field(ge=0)
    host_cpu: str
    host_cores: int = Field(ge=1)
    machine: str


class CompilerInfo(Model):
    """The compiler that produced the measured code and its options (``eager``: none)."""

    name: str = Field(description="eager or torch.compile")
    backend: str | None = Field(description="torch.compile backend, e.g. inductor (null for eager)")
    options: dict[str, str] = Field(description="options passed to the compiler ({} for eager)")


class Calibration(Model):
    """A fixed host-only loop, timed on the record's clock right after every window.

    On a host clock, other tenants of a shared machine slow every instruction (caches, memory
    bandwidth, a busy SMT sibling): on the 2-core CI machine the CPU time of one pure-Python loop
    varied 0.76-1.26x within seconds. The loop touches neither torch nor the backend, so dividing
    each window by the loop timed beside it removes the machine's speed of the moment and keeps a
    change of the subject. The gate compares normalised samples when both records carry the same
    loop under the same interpreter, and raw samples (saying so) otherwise.
    """

    loop: str = Field(description="what the loop does and its size; records with different loops are not normalised")
    python: str = Field(description="the interpreter that ran the loop (its speed depends on it)")
    samples_s: list[Seconds] = Field(min_length=1, description="seconds per loop, one per window, in samples_s order")


class Timing(Model):
    """Warm-up, measurement window, repetitions and robust statistics of the per-iteration time.

    Each repetition times ``window`` iterations between device synchronisations and contributes one
    sample (seconds per iteration); each run is a separate process. ``ci_low_s`` / ``ci_high_s``
    bound the median by a two-level bootstrap (runs, then repetitions within a run), so drift
    between runs widens the interval.
    """

    clock: Clock
    warmup: int = Field(ge=0, description="untimed iterations before the first window")
    window: int = Field(ge=1, description="iterations per timed repetition")
    repetitions: int = Field(ge=1, description="timed windows per run")
    runs: int = Field(ge=1, description="separate processes, spread over the benchmark's duration")
    samples_s: list[Seconds] = Field(min_length=1, description="run after run, repetitions each")
    median_s: Seconds
    iqr_s: Seconds
    ci_low_s: Seconds
    ci_high_s: Seconds
    confidence: float = Field(gt=0, lt=1)
    wall_median_s: Seconds = Field(description="host wall time per iteration, for reference")
    synchronized: bool = Field(description="the device was synchronised before and after every window")
    calibration: Calibration | None = Field(
        default=None, description="host clocks: the calibration loop timed after every window (None on device clocks)"
    )

    def _by_run(self, values: list[float]) -> list[list[float]]:
        n = self.repetitions
        return [values[i * n:(i + 1) * n] for i in range(self.runs)]

    def run_groups(self) -> list[list[float]]:
        """The samples of each run."""
        return self._by_run(self.samples_s)

    def normalised_groups(self) -> list[list[float]]:
        """Each run's samples divided by the calibration loop timed beside them (needs a calibration)."""
        assert self.calibration is not None, "normalised_groups needs a calibration"
        return self._by_run([s / c for s, c in zip(self.samples_s, self.calibration.samples_s, strict=True)])

    @model_validator(mode="after")
    def _consistent(self) -> Timing:
        if len(self.samples_s) != self.repetitions * self.runs:
            raise ValueError(
                f"{len(self.samples_s)} samples for {self.runs} runs x {self.repetitions} repetitions; they must match"
            )
        if min(self.samples_s) <= 0 or self.median_s <= 0:
            raise ValueError(
                "a timed window of 0 s cannot be real (at least one iteration ran in it): the record is broken or "
                "hand-made; measure it again with opmatrix bench"
            )
        cal = self.calibration
        if cal is not None and (len(cal.samples_s) != len(self.samples_s) or min(cal.samples_s) <= 0):
            raise ValueError(
                f"calibration: {len(cal.samples_s)} positive loop times are needed, one per sample "
                f"({len(self.samples_s)}); re-measure the record"
            )
        if not self.ci_low_s <= self.median_s <= self.ci_high_s:
            raise ValueError("the median lies outside its confidence interval; recompute the statistics")
        return self


class FallbackWindow(Model):
    """Host fallback observed during the measured window (three-state, from the adapter)."""

    state: FallbackState
    ops: list[str] = Field(description="operators seen running on the host")
    source: str | None = Field(description="where the evidence came from")
    invalidates_latency: bool = Field(description="fallback was observed: the latency is not the device's")

    @model_validator(mode="after")
    def _flag(self) -> FallbackWindow:
        if self.invalidates_latency != (self.state is FallbackState.observed):
            raise ValueError("invalidates_latency must be true exactly when fallback was observed")
        return self


class PerfRecord(Model):
    """One measured subject with every field a published performance result must name."""

    schema_version: Literal[1] = 1
    kind: Literal["perf-record"]
    id: str = Field(min_length=1, description="stable id: kind.name.mode.precision")
    subject: Subject
    input: InputDistribution
    precision: str
    batch: int = Field(ge=1)
    concurrency: int = Field(ge=1, description="simultaneous streams / requests")
    backend: str
    generation: str | None = None
    hardware: HardwareInfo
    power_mode: str = Field(description="power / clock mode as the runtime reports it, or unknown")
    driver: str = Field(description="driver version, or unknown")
    firmware: str = Field(description="firmware version, or unknown")
    framework: dict[str, str] = Field(description="python, torch, opmatrix and backend versions")
    compiler: CompilerInfo
    threads: int = Field(ge=1, description="torch intra-op threads")
    timing: Timing
    fallback: FallbackWindow
    injected_slowdown: str | None = Field(
        description="a deliberate slowdown was active (testing the gate); never publish such a record"
    )
    measured_at: str = Field(description="UTC time of the measurement (evidence, not compared)")


class PerfRequirement(Model):
    """Level 6: which records must exist and how much slower than the baseline they may be."""

    model_config = ConfigDict(allow_inf_nan=False)  # a contract number that overflowed is an error

    records: list[str] = Field(default_factory=lambda: ["*"], description="fnmatch patterns over record ids")
    max_slowdown: float = Field(default=0.10, ge=0, allow_inf_nan=False, description="0.10: a regression is >10% slower")
    confidence: float = Field(default=0.95, gt=0, lt=1)
    fallback: FallbackPolicy = Field(default=FallbackPolicy.forbidden, description="host fallback in a window")
    baseline_required: bool = Field(default=True, description="without a baseline the requirement is unknown")


class CompatRequirement(Model):
    """Level 7: the promised torch / Python window and what must hold in every version of it."""

    model_config = ConfigDict(allow_inf_nan=False)  # a contract number that overflowed is an error

    torch: list[str] = Field(min_length=1, description="promised torch versions, e.g. [2.9.0, 2.13.0]")
    python: list[str] = Field(default_factory=list, description="promised Python versions (major.minor)")
    diagnostics: list[str] = Field(default_factory=lambda: ["profiler", "doctor"])
    install: bool = Field(default=True, description="a clean environment imports opmatrix and the backend")


class CompatCheck(Model):
    """One check run under one torch version (install, profiler, doctor)."""

    name: str
    ok: bool
    seconds: Seconds
    detail: Message = ""


class CompatRun(Model):
    """The op set probed under one torch version: path and outcome per cell label."""

    torch: str
    python: str
    environment: str = Field(description="the interpreter used (outside the clone)")
    checks: list[CompatCheck] = Field(default_factory=list)
    cells: dict[str, str] = Field(default_factory=dict, description="cell label -> 'path/outcome'")
    error: Message | None = None


def torch_version_key(text: str) -> tuple[int, ...]:
    """``2.13.0+cpu`` -> ``(2, 13, 0)``: torch versions in release order."""
    return tuple(int(x) for x in re.findall(r"\d+", text.split("+")[0])[:3])


class CompatReport(Model):
    """What ``opmatrix compat`` found across the promised torch versions."""

    schema_version: Literal[1] = 1
    kind: Literal["compat-report"]
    backend: str
    generation: str | None = Field(None, description="the device generation the matrices were probed on "
                                   "(none for backends without generations)")
    ops: list[str]
    runs: list[CompatRun]
    measured_at: str
