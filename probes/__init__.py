"""opmatrix.probes: what to run on a backend and how to observe it; this module is its public face.

Plan a run from its options, run it, and read the evidence it rests on::

    >>> from opmatrix.probes import ProbeOptions
    >>> ProbeOptions(backend="cpu", ops=("add",)).ops
    ('add',)
    >>> from opmatrix.probes import plan_probe, run, TASK_HANDLERS  # plans a probe (imports torch): not run  # doctest: +SKIP
    >>> plan = plan_probe(ProbeOptions(backend="refaccel", ops=("add",), out="out/r"))  # plans a probe (imports torch): not run  # doctest: +SKIP

Names load when first used: importing this package imports neither torch nor a backend.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .distributed.hooks import attach_distributed, distributed_line
    from .handlers import TASK_HANDLERS
    from .ops.opinfo_names import opinfo_names
    from .ops.source import UnknownOp, select_ops
    from .options import BenchOptions, DoctorOptions, ProbeOptions
    from .perf.bench import bench
    from .planning import ProbePlan, checked_adapter, plan_probe, probe_evidence, worker_evidence
    from .runner import EngineOptions, RunSummary, run
    from .runner.evidence import EvidenceKey
    from .runner.executor import Executor
    from .runner.journal import rotate as rotate_journal
    from .runner.raypool import RayExecutor, ray_missing
    from .runner.zygote import stop as stop_zygote
    from .runtime.doctor import DoctorReport, doctor
    from .runtime.doctor import show as show_doctor
    from .workloads.catalog import TORCH_DTYPES, WORKLOADS, BadFactory
    from .workloads.catalog import build as build_workload
    from .workloads.cli import check_factory, summary_lines

#: public name -> (module, attribute)
_LAZY: dict[str, tuple[str, str]] = {
    "ProbeOptions": (".options", "ProbeOptions"),
    "BenchOptions": (".options", "BenchOptions"),
    "DoctorOptions": (".options", "DoctorOptions"),
    # plan
    "ProbePlan": (".planning", "ProbePlan"),
    "plan_probe": (".planning", "plan_probe"),
    "checked_adapter": (".planning", "checked_adapter"),
    "UnknownOp": (".ops.source", "UnknownOp"),
    "select_ops": (".ops.source", "select_ops"),
    "opinfo_names": (".ops.opinfo_names", "opinfo_names"),
    "TASK_HANDLERS": (".handlers", "TASK_HANDLERS"),
    # run
    "run": (".runner", "run"),
    "RunSummary": (".runner", "RunSummary"),
    "EngineOptions": (".runner", "EngineOptions"),
    "Executor": (".runner.executor", "Executor"),
    "RayExecutor": (".runner.raypool", "RayExecutor"),
    "ray_missing": (".runner.raypool", "ray_missing"),
    "stop_zygote": (".runner.zygote", "stop"),
    "rotate_journal": (".runner.journal", "rotate"),
    "attach_distributed": (".distributed.hooks", "attach_distributed"),
    "distributed_line": (".distributed.hooks", "distributed_line"),
    "bench": (".perf.bench", "bench"),
    "doctor": (".runtime.doctor", "doctor"),
    "DoctorReport": (".runtime.doctor", "DoctorReport"),
    "show_doctor": (".runtime.doctor", "show"),
    # evidence
    "EvidenceKey": (".runner.evidence", "EvidenceKey"),
    "probe_evidence": (".planning", "probe_evidence"),
    "worker_evidence": (".planning", "worker_evidence"),
    # workloads
    "WORKLOADS": (".workloads.catalog", "WORKLOADS"),
    "TORCH_DTYPES": (".workloads.catalog", "TORCH_DTYPES"),
    "BadFactory": (".workloads.catalog", "BadFactory"),
    "build_workload": (".workloads.catalog", "build"),
    "check_factory": (".workloads.cli", "check_factory"),
    "summary_lines": (".workloads.cli", "summary_lines"),
}

__all__ = [
    "TASK_HANDLERS", "TORCH_DTYPES", "WORKLOADS", "BadFactory", "BenchOptions", "DoctorOptions", "DoctorReport",
    "EngineOptions", "EvidenceKey", "Executor", "ProbeOptions", "ProbePlan", "RayExecutor", "RunSummary",
    "UnknownOp", "attach_distributed", "bench", "build_workload", "check_factory", "checked_adapter",
    "distributed_line", "doctor", "opinfo_names", "plan_probe", "probe_evidence", "ray_missing", "rotate_journal",
    "run", "select_ops", "show_doctor", "stop_zygote", "summary_lines", "worker_evidence",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module, __name__), attr)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
