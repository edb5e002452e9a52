"""Fold the level 6 (performance) and level 7 (compatibility) verdicts into a gate result.

``evaluate_contract`` judges levels 0-2 from a matrix and leaves levels 6 and 7 ``unknown``; when
the contract states a ``perf`` or ``compat`` requirement, this module replaces those unknowns with
the verdicts of :mod:`.perf` and :mod:`.compat`. Without a matrix the gate judges only levels 6-7
and says so in a check.
"""

from __future__ import annotations

import datetime as dt

from opmatrix.schema import Contract
from opmatrix.schema.gate import CellStatus, GateCheck, GateResult, RequirementResult, Status, Verdict
from opmatrix.schema.perf import CompatReport, PerfRecord

from .compat import evaluate_compat
from .perf import evaluate_perf

__all__ = ["apply_levels_6_7", "has_levels_6_7"]


def has_levels_6_7(contract: Contract) -> bool:
    """Whether the contract states a perf or compat requirement."""
    return any(r.perf is not None or r.compat is not None for r in contract.requirements)


def _results(
    contract: Contract, records: dict[str, PerfRecord] | None, baseline: dict[str, PerfRecord] | None,
    compat: CompatReport | None,
) -> list[RequirementResult]:
    out: list[RequirementResult] = []
    for req in contract.requirements:
        blocking = req.level <= contract.level
        if req.perf is not None:
            out.append(evaluate_perf(req.perf, rid=f"L{req.level}.perf", level=req.level, blocking=blocking,
                                     records=records, baseline=baseline, backend=contract.backend))
        if req.compat is not None:
            out.append(evaluate_compat(req.compat, rid=f"L{req.level}.compat", level=req.level, blocking=blocking,
                                       report=compat))
    return out


def _lines(r: RequirementResult) -> list[str]:
    failing = [c for c in r.cells if c.status is CellStatus.failed]
    return [f"{r.id}: {c.line()}" for c in failing] or [f"{r.id} ({r.status}): {r.message}"]


def _skeleton(contract: Contract, today: dt.date) -> GateResult:
    scope = GateCheck(name="scope", status=Status.passed,
                      message="no --matrix: only the performance (6) and compatibility (7) requirements were judged")
    return GateResult(verdict=Verdict.passed, backend=contract.backend, generation=contract.generation,
                      release=contract.release, promised_level=contract.level, today=today.isoformat(), cell_count=0,
                      checks=[scope])


def apply_levels_6_7(
    result: GateResult | None, contract: Contract, *, records: dict[str, PerfRecord] | None,
    baseline: dict[str, PerfRecord] | None, compat: CompatReport | None, today: dt.date | None = None,
) -> GateResult:
    """``result`` with its level 6/7 unknowns replaced by the perf / compat verdicts."""
    base = result or _skeleton(contract, today or dt.date.today())
    mine = _results(contract, records, baseline, compat)
    levels = {r.level for r in mine}
    replaced = {f"L{lvl}.level" for lvl in levels}
    kept = [r for r in base.requirements if r.id not in replaced]
    blocking = [line for line in base.blocking if not any(line.startswith(f"{rid} ") for rid in replaced)]
    for r in mine:
        if r.blocks:
            blocking += _lines(r)
    requirements = sorted(kept + mine, key=lambda r: r.level)
    return base.model_copy(update={
        "requirements": requirements, "blocking": blocking,
        "verdict": Verdict.blocked if blocking else Verdict.passed,
    })
