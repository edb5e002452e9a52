"""Levels 3 and 4 of the gate: workload requirements judged against the matrix's ``workloads``.

One result per requirement x workload; it fails when any promised dtype/mode run is missing,
faulted, a required step did not pass, or a bound is exceeded (host fallback ops, memory, graph
breaks, recompiles, speedup, break-even calls)::

    results = evaluate_workloads(req, rid="L3.workloads.0", level=3, blocking=True, matrix=matrix)
"""

from __future__ import annotations

import fnmatch

from opmatrix.schema import CheckResult, FaultOutcome, Matrix, WorkloadRequirement, WorkloadResult
from opmatrix.schema.gate import RequirementResult, Status
from opmatrix.schema.text import cut

__all__ = ["evaluate_workloads", "judge_run"]

_MB = 1024 * 1024


def _names(req: WorkloadRequirement, matrix: Matrix) -> list[str]:
    if req.names == ["all"]:
        return sorted({w.workload for w in matrix.workloads})
    return list(req.names)


def _tolerance(req: WorkloadRequirement, run: WorkloadResult, step: str) -> str | None:
    """A contract tolerance (stricter or looser than the workload's) judged from the recorded error."""
    r = run.steps.get(step)  # type: ignore[call-overload]
    if r is None or r.max_abs_error is None or (req.rtol is None and req.atol is None):
        return None
    rtol, atol = req.rtol if req.rtol is not None else (r.rtol or 0.0), req.atol if req.atol is not None else (r.atol or 0.0)
    bound = atol + rtol * (r.ref_max_abs or 0.0)
    if r.max_abs_error > bound:
        return f"{step}: max abs error {r.max_abs_error:.3g} > contract bound {bound:.3g} (atol {atol:g}, rtol {rtol:g})"
    return None


def _fallback(req: WorkloadRequirement, run: WorkloadResult) -> str | None:
    if req.max_host_fallback_ops is None:
        return None
    ops = [op for op in run.host_fallback.ops if not any(fnmatch.fnmatch(op, p) for p in req.allow_host_fallback)]
    if run.host_fallback.state.value == "unknown" and not run.host_fallback.ops:
        return "host fallback: unknown (the adapter cannot observe it)"
    if len(ops) > req.max_host_fallback_ops:
        predicted = set(run.host_fallback.predicted or [])
        named = ", ".join(f"{op}{' (predicted by the op matrix)' if op in predicted else ''}" for op in ops)
        return f"host fallback: {named} ({len(ops)} op(s), at most {req.max_host_fallback_ops} allowed)"
    return None


def _bounds(req: WorkloadRequirement, run: WorkloadResult) -> list[str]:
    out = []
    if req.max_device_memory_mb is not None:
        if run.device_peak_bytes is None:
            out.append("device peak memory: not reported by the runtime")
        elif run.device_peak_bytes > req.max_device_memory_mb * _MB:
            out.append(f"device peak memory {run.device_peak_bytes / _MB:.1f} MB > {req.max_device_memory_mb:g} MB")
    if req.max_host_rss_mb is not None and run.host_rss_bytes is not None and run.host_rss_bytes > req.max_host_rss_mb * _MB:
        out.append(f"host RSS {run.host_rss_bytes / _MB:.0f} MB > {req.max_host_rss_mb:g} MB")
    c = run.compile
    wants_compile = any(v is not None for v in (req.max_graph_breaks, req.max_recompiles, req.min_speedup,
                                                 req.max_break_even_calls))
    if wants_compile and c is None:
        return [*out, "no compile statistics (run with --workload-modes compile)"]
    if c is None:
        return out
    if c.graphs == 0 and run.steps.get("inference") is not None:  # type: ignore[call-overload]
        out.append("no graph captured: the compiled region ran eagerly")
    if req.max_graph_breaks is not None and c.graph_breaks > req.max_graph_breaks:
        out.append(f"{c.graph_breaks} graph breaks > {req.max_graph_breaks} ({'; '.join(c.break_reasons[:3])})")
    if req.max_recompiles is not None and c.recompiles > req.max_recompiles:
        out.append(f"{c.recompiles} recompiles > {req.max_recompiles}")
    if req.min_speedup is not None and (c.speedup is None or c.speedup < req.min_speedup):
        out.append(f"speedup {c.speedup if c.speedup is not None else 'unmeasured'} < {req.min_speedup:g}")
    if req.max_break_even_calls is not None and (c.break_even_calls is None or c.break_even_calls > req.max_break_even_calls):
        got = c.break_even_calls if c.break_even_calls is not None else "never"
        out.append(f"compile cost repaid after {got} calls (at most {req.max_break_even_calls})")
    return out


#: longest reason a grouped line repeats (the run's record keeps the whole text)
REASON_CHARS = 240


def grouped_problems(name: str, mode: str, found: list[tuple[str, str]]) -> list[str]:
    """One line per distinct reason: the steps and dtypes that share it are named together, and a
    long reason is cut with an ellipsis, so one rejection seen in six places is said once::

        tinygpt float32, float16 eager: inference, training fail: rejected: aten::bmm.out is not ...
    """
    by_reason: dict[str, dict[str, list[str]]] = {}  # reason -> step label -> dtypes
    for dtype, problem in found:
        head, sep, rest = problem.partition(": ")
        label, reason = (head, rest) if sep and len(head) <= 40 else ("", problem)
        steps = by_reason.setdefault(cut(reason, REASON_CHARS), {})
        dtypes = steps.setdefault(label, [])
        if dtype not in dtypes:
            dtypes.append(dtype)
    lines = []
    for reason, steps in by_reason.items():
        by_dtypes: dict[tuple[str, ...], list[str]] = {}
        for label, dtypes in steps.items():
            by_dtypes.setdefault(tuple(dtypes), []).append(label)
        for shared, labels in by_dtypes.items():
            what = _labels(labels)
            lines.append(f"{name} {', '.join(shared)} {mode}: {what + ': ' if what else ''}{reason}")
    return lines


def _labels(labels: list[str]) -> str:
    """``inference fail``, ``training fail`` -> ``inference, training fail``."""
    named = [label for label in labels if label]
    words = [label.split(" ", 1) for label in named]
    if len(named) > 1 and all(len(w) == 2 for w in words) and len({w[1] for w in words}) == 1:
        return ", ".join(w[0] for w in words) + " " + words[0][1]
    return ", ".join(named)


def judge_run(req: WorkloadRequirement, run: WorkloadResult) -> list[str]:
    """What in one workload run violates ``req`` (empty: it passes)."""
    problems = []
    # a run's outcome is its worst step's, so ``error`` is a step's own (judged by that step below,
    # and only when the requirement names it); the other faults mean the run itself broke
    fault = run.outcome.fault
    if (fault is not None and fault is not FaultOutcome.error) or run.error:
        problems.append(f"{run.outcome.value}: {run.error or 'the worker faulted'}")
    for step in req.steps:
        r = run.steps.get(step)
        if r is None:
            problems.append(f"{step.value}: not run")
        elif r.result is not CheckResult.passed:
            problems.append(f"{step.value} {r.result.value}: {r.evidence}")
        elif (why := _tolerance(req, run, step.value)) is not None:
            problems.append(why)
    if (why := _fallback(req, run)) is not None:
        problems.append(why)
    return problems + _bounds(req, run)


def evaluate_workloads(
    req: WorkloadRequirement, *, rid: str, level: int, blocking: bool, matrix: Matrix
) -> list[RequirementResult]:
    """One result per workload the requirement names."""
    runs = {w.key(): w for w in matrix.workloads}
    out = []
    for name in _names(req, matrix) or ["all"]:
        title = f"workload {name} ({', '.join(d.value for d in req.dtypes)}; {req.mode.value})"
        found: list[tuple[str, str]] = []  # (dtype, problem)
        checked, unknown = 0, 0
        for dtype in req.dtypes:
            run = runs.get((name, dtype.value, req.mode.value))
            if run is None:
                unknown += 1
                found.append((dtype.value, f"not in the matrix (probe with --suites workloads "
                                           f"--workloads {name} --workload-modes {req.mode.value})"))
                continue
            checked += 1
            found += [(dtype.value, p) for p in judge_run(req, run)]
        failed = len(found) - unknown
        status = Status.failed if failed else Status.unknown if unknown else Status.passed
        lines = grouped_problems(name, req.mode.value, found)
        message = "; ".join(lines) if lines else f"{checked} run(s) meet the requirement"
        out.append(RequirementResult(id=f"{rid}.{name}", level=level, kind="workload", title=title, status=status,
                                     blocking=blocking, message=message[:4000], checked=checked, failed=failed,
                                     not_probed=unknown))
    return out
