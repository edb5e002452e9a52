"""Level 6 of the gate: performance records against the baseline's, noise-aware.

A record regressed when the bootstrap confidence interval of ``median(now) / median(baseline)``
lies entirely above ``1 + max_slowdown``: a 30% slower kernel is caught, while two runs of the
same build on a noisy machine (an interval that straddles the threshold) are not. On a host clock
each sample is first divided by the calibration loop timed beside it, when both records have one
(the machine's speed of the moment cancels; the line also gives the raw ratio)::

    result = evaluate_perf(req, rid="L6.perf", level=6, blocking=True,
                           records=load_records("out/perf"), baseline=load_records("prev/perf"))
    result.cells[0].line()   # "perf:workload.mlp.eager.float32 eager: 1.31x the baseline's median,
                             #  95% CI [1.27, 1.35] above the 1.10 threshold: regression"

Host fallback in a measured window blocks when the requirement forbids it (the latency is not the
device's). Records measured under different conditions (clock, threads, precision, batch,
hardware) are not compared: that is a failure that names the difference.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable

from opmatrix.matrix.perfstats import comparison_groups, incomparable, load_records, ratio_ci
from opmatrix.matrix.workloads import base_name
from opmatrix.schema import Contract, FallbackPolicy, FallbackState, Mode, OpName
from opmatrix.schema.gate import CellRef, CellStatus, RequirementResult, Status
from opmatrix.schema.perf import PerfRecord, PerfRequirement

from .opsets import resolve_ops

__all__ = ["compare_records", "evaluate_perf", "evaluate_perf_fallback", "forbidden_in_perf", "load_records", "ratio_ci"]





def compare_records(now: PerfRecord, before: PerfRecord, req: PerfRequirement) -> tuple[bool, str]:
    """(regressed, reason): the interval of the slowdown, judged against the threshold."""
    why = incomparable(now, before)
    if why:
        return True, f"not comparable with the baseline ({why}): re-measure the baseline under the same conditions"
    groups_now, groups_before, how = comparison_groups(now, before)
    point, lo, hi = ratio_ci(groups_now, groups_before, req.confidence)
    limit = 1 + req.max_slowdown
    interval = f"{point:.3f}x the baseline's median, {req.confidence:.0%} CI [{lo:.3f}, {hi:.3f}]{how}"
    if lo > limit:
        return True, f"{interval} lies above the {limit:.2f} threshold: regression"
    if point > limit:
        return False, f"{interval} straddles the {limit:.2f} threshold: within noise, not a regression"
    return False, interval


def _fallback_reason(rec: PerfRecord, policy: FallbackPolicy) -> str | None:
    if policy not in (FallbackPolicy.forbidden, FallbackPolicy.forbidden_in_perf):
        return None
    if rec.fallback.state is FallbackState.observed:
        ops = ", ".join(rec.fallback.ops) or "unnamed ops"
        return f"host fallback observed in the measured window ({ops}): its latency is not the device's"
    if rec.fallback.state is FallbackState.unknown:
        return "the adapter cannot tell whether fallback happened in the measured window (state unknown)"
    return None


def _judge(rid: str, rec: PerfRecord, base: PerfRecord | None, req: PerfRequirement, backend: str | None) -> CellRef:
    reasons, failed = [], False
    if backend is not None and rec.backend != backend:
        reasons.append(f"measured on {rec.backend}, the contract is for {backend}")
        failed = True
    fallback = _fallback_reason(rec, req.fallback)
    if fallback:
        reasons.append(fallback)
        failed = True
    if base is None:
        reasons.append("new: no baseline record")
    else:
        regressed, why = compare_records(rec, base, req)
        reasons.append(why)
        failed = failed or regressed
    if rec.injected_slowdown:
        reasons.append(f"measured with an injected slowdown ({rec.injected_slowdown}): never publish it")
    return CellRef(op=f"perf:{rid}", mode=Mode(rec.subject.mode), status=CellStatus.failed if failed else CellStatus.passed,
                   reason="; ".join(reasons))


def _selected(records: dict[str, PerfRecord], patterns: list[str]) -> tuple[list[str], list[str]]:
    chosen = sorted(rid for rid in records if any(fnmatch.fnmatchcase(rid, p) for p in patterns))
    unmatched = [p for p in patterns if not any(fnmatch.fnmatchcase(rid, p) for rid in records)]
    return chosen, unmatched


def evaluate_perf(
    req: PerfRequirement, *, rid: str, level: int, blocking: bool,
    records: dict[str, PerfRecord] | None, baseline: dict[str, PerfRecord] | None, backend: str | None = None,
) -> RequirementResult:
    """Judge the records a level-6 requirement selects against the baseline's records."""
    title = f"performance records {', '.join(req.records)} (max slowdown {req.max_slowdown:.0%})"

    def result(status: Status, message: str, cells: list[CellRef] | None = None) -> RequirementResult:
        cells = cells or []
        return RequirementResult(
            id=rid, level=level, kind="perf", title=title, status=status, blocking=blocking, message=message,
            cells=cells, checked=len(cells), failed=sum(c.status is CellStatus.failed for c in cells),
        )

    if records is None:
        return result(Status.unknown, "no performance records given (opmatrix gate --records DIR): unproven")
    chosen, unmatched = _selected(records, req.records)
    if unmatched:
        return result(Status.failed, f"no record matches {', '.join(unmatched)}: was the benchmark run cut short?")
    if baseline is None and req.baseline_required:
        return result(Status.unknown, "no baseline records (--baseline-records DIR): regressions cannot be judged")
    cells = [_judge(r, records[r], (baseline or {}).get(r), req, backend) for r in chosen]
    gone = sorted(set(_selected(baseline or {}, req.records)[0]) - set(records))
    cells += [CellRef(op=f"perf:{r}", status=CellStatus.failed, reason="in the baseline but no longer measured")
              for r in gone]
    bad = sum(c.status is CellStatus.failed for c in cells)
    summary = f"{len(cells) - bad}/{len(cells)} records pass"
    return result(Status.failed if bad else Status.passed, summary + (f", {bad} fail" if bad else ""), cells)


def forbidden_in_perf(contract: Contract, probed: Iterable[str]) -> list[str]:
    """The overloads (or patterns, without a matrix to resolve them) whose requirement's fallback
    policy, or the contract's, is ``forbidden_in_perf``."""
    out: set[str] = set()
    for level in contract.requirements:
        for req in level.operators:
            if (req.fallback or contract.fallback) is FallbackPolicy.forbidden_in_perf:
                selection = resolve_ops(req.ops, probed)
                out.update(selection.ops, selection.unmatched)
    return sorted(out)


def _same_op(seen: str, required: str) -> bool:
    """Whether an op a record saw on the host (``aten::sort``) is a required one (an overload name,
    any of its overloads, or a pattern left unresolved without a matrix)."""
    if base_name(seen) == base_name(required):
        return True
    try:
        return fnmatch.fnmatchcase(str(OpName.parse(seen, shorthand=True)), required)
    except ValueError:
        return False


def evaluate_perf_fallback(required: list[str], *, rid: str, level: int, blocking: bool,
                           records: dict[str, PerfRecord] | None) -> RequirementResult:
    """``fallback: forbidden_in_perf``: a performance record whose measured window saw a required
    op run on the host fails, naming the op and the record (its latency is not the device's)."""
    title = f"no host fallback of a required op in performance runs ({len(required)} ops)"

    def result(status: Status, message: str, cells: list[CellRef]) -> RequirementResult:
        return RequirementResult(id=rid, level=level, kind="perf", title=title, status=status, blocking=blocking,
                                 message=message, cells=cells, checked=len(cells),
                                 failed=sum(c.status is CellStatus.failed for c in cells))

    if records is None:
        return result(Status.unknown, "no performance records given (opmatrix gate --records DIR): unproven", [])
    cells = []
    for rid_, rec in sorted(records.items()):
        hit = [] if rec.fallback.state is not FallbackState.observed else sorted(
            {req for op in rec.fallback.ops for req in required if _same_op(op, req)})
        if hit:
            cells.append(CellRef(op=f"perf:{rid_}", mode=Mode(rec.subject.mode), status=CellStatus.failed, reason=(
                f"record {rid_} observed host fallback of required {', '.join(hit)} (ran on the host: "
                f"{', '.join(rec.fallback.ops)}); the contract forbids fallback in performance runs")))
        elif rec.fallback.state is FallbackState.unknown:
            cells.append(CellRef(op=f"perf:{rid_}", mode=Mode(rec.subject.mode), status=CellStatus.failed,
                                 reason=f"record {rid_}: the adapter cannot tell whether fallback happened (state unknown)"))
        else:
            cells.append(CellRef(op=f"perf:{rid_}", mode=Mode(rec.subject.mode), status=CellStatus.passed,
                                 reason=f"record {rid_}: no required op ran on the host"))
    bad = sum(c.status is CellStatus.failed for c in cells)
    return result(Status.failed if bad else Status.passed, f"{len(cells) - bad}/{len(cells)} records pass", cells)
