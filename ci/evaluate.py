"""Evaluate a contract against a matrix (and the previous release's matrix): the release verdict.

The contract promises a support level; every level up to it must be proven by the matrix::

    from opmatrix.ci import evaluate_contract
    from opmatrix.schema import load_contract, load_matrix

    result = evaluate_contract(load_matrix("out/refaccel-g1/matrix.yaml"),
                               load_contract("ci/contracts/refaccel-g1.yaml"))
    result.verdict      # Verdict.blocked
    result.blocking     # ["L2.compute: aten.mm.default bfloat16 rank 2 contiguous eager: path rejected ...", ...]

- levels 0/1: runtime checks by name (or a pattern over the level's checks);
- level 2: operator requirements, judged cell by cell (:mod:`opmatrix.ci.requirements`);
- levels 3/4: workload requirements judged against the matrix's workload runs
  (:mod:`opmatrix.ci.workloads`); a level 3-7 requirement without them is ``unknown`` and blocks
  when promised; never a silent pass;
- level 5: distributed requirements, judged case by case (:mod:`opmatrix.ci.distributed`);
- level 6: performance records against the baseline's records (:mod:`opmatrix.ci.perf`);
- level 7: the promised torch window, from a compat report (:mod:`opmatrix.ci.compat`);
- a promised level without any requirement is ``unknown`` too (a promise needs its evidence), and
  so is a requirement that selects nothing to judge (no cell, run, case, record or check);
- without a matrix only the levels with performance or compatibility requirements are judged
  (a ``scope`` check says which were not), and a promised level 0-5 is ``unknown`` unless the
  contract names the levels it judges (``judged_levels``: an add-on to the main contract);
- requirements above the promised level are evaluated but informational;
- gate-level checks: every piece of evidence is of the contract's subject (:mod:`.evidence`), the
  matrix holds probed cells and not more
  than ``1 - min_cells_ratio`` fewer than the baseline, no cell regressed against the baseline
  (unless waived), no waiver has expired.
Working cells no requirement claims are reported as improvements with the contract lines to add.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping

from opmatrix.schema import ArtifactError, Contract, LevelRequirement, Matrix, WorkloadRequirement
from opmatrix.schema.gate import (
    BaselineChange,
    CellRef,
    CellStatus,
    GateCheck,
    GateResult,
    RequirementResult,
    Status,
    Verdict,
    WaiverReport,
    WaiverState,
)
from opmatrix.schema.perf import CompatReport, PerfRecord

from .baseline import compare_cells
from .cells import CellIndex, CellKey
from .compat import evaluate_compat
from .distributed import distributed_baseline_check, distributed_count_check, evaluate_distributed
from .evidence import identity_mismatch, identity_problems, named
from .faultscope import evaluate_fault_scope
from .improvements import find_improvements, improvement_yaml
from .perf import evaluate_perf, evaluate_perf_fallback, forbidden_in_perf
from .requirements import claimed_keys, evaluate_check, evaluate_operators
from .summary import blocking_lines
from .waivers import WaiverBook
from .workloads import evaluate_workloads

__all__ = ["LEVEL_NAMES", "evaluate_contract", "identity_mismatch", "identity_problems"]

#: The support levels of docs/levels.md#support-levels-0-7.
LEVEL_NAMES: dict[int, str] = {
    0: "device discovery and compatibility",
    1: "tensor semantics",
    2: "eager operator coverage",
    3: "workload correctness",
    4: "compiled execution",
    5: "distributed execution",
    6: "performance qualification",
    7: "maintained compatibility",
}

#: The highest level whose requirements opmatrix can evaluate from a matrix's cells and checks alone.
EVALUABLE_LEVEL = 2



def _unknown(rid: str, level: int, kind: str, title: str, blocking: bool, message: str) -> RequirementResult:
    return RequirementResult(
        id=rid, level=level, kind=kind, title=title, status=Status.unknown, blocking=blocking, message=message
    )


def _slug(text: str) -> str:
    if text == "*":
        return "all"
    return "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in text).strip("_") or "unnamed"


class _Evidence:
    """The typed inputs of one evaluation, in one place (every level's evaluator reads from it)."""

    def __init__(self, contract: Contract, matrix: Matrix | None, records: Mapping[str, PerfRecord] | None,
                 baseline_records: Mapping[str, PerfRecord] | None, compat: CompatReport | None,
                 book: WaiverBook) -> None:
        self.contract, self.matrix, self.book = contract, matrix, book
        self.records = dict(records) if records is not None else None
        self.baseline_records = dict(baseline_records) if baseline_records is not None else None
        self.compat = compat
        self.index = CellIndex(matrix) if matrix is not None else None


def _matrix_parts(req: LevelRequirement, level: int, blocking: bool, ev: _Evidence) -> list[RequirementResult]:
    """The requirement's parts judged from the matrix: runtime checks, operators, distributed, workloads."""
    matrix, index, contract, book = ev.matrix, ev.index, ev.contract, ev.book
    out: list[RequirementResult] = []
    if matrix is None or index is None:
        if req.checks or req.operators or req.distributed is not None or req.workloads or req.max_fault_scope:
            out.append(_unknown(f"L{level}.matrix", level, "level", f"level {level}: {LEVEL_NAMES[level]}", blocking,
                                "its checks, operators, workloads or distributed cases need a matrix (--matrix): "
                                "unproven"))
        return out
    for name in req.checks:
        out.append(
            evaluate_check(
                name, rid=f"L{level}.check.{_slug(name)}", level=level, blocking=blocking, runtime=matrix.runtime, book=book
            )
        )
    for i, op_req in enumerate(req.operators):
        rid = f"L{level}.ops.{_slug(op_req.name) if op_req.name else i}"
        out.append(
            evaluate_operators(op_req, rid=rid, level=level, blocking=blocking, contract=contract, index=index, book=book)
        )
    if req.max_fault_scope is not None:
        out.append(evaluate_fault_scope(req, rid=f"L{level}.fault_scope", level=level, blocking=blocking, matrix=matrix))
    if req.distributed is not None:
        out.append(evaluate_distributed(req.distributed, rid=f"L{level}.distributed.{_slug(req.distributed.name or 'all')}",
                                        level=level, blocking=blocking, matrix=matrix))
    for i, workload in enumerate(req.workloads):
        wreq = WorkloadRequirement(names=[workload]) if isinstance(workload, str) else workload
        wid = f"L{level}.workload" + ("" if isinstance(workload, str) else f".{_slug(wreq.name) if wreq.name else i}")
        out += evaluate_workloads(wreq, rid=wid, level=level, blocking=blocking, matrix=matrix)
    return out


def _level_results(req: LevelRequirement, ev: _Evidence) -> list[RequirementResult]:
    level, blocking = req.level, req.level <= ev.contract.level
    out = _matrix_parts(req, level, blocking, ev)
    if req.perf is not None:
        out.append(evaluate_perf(req.perf, rid=f"L{level}.perf", level=level, blocking=blocking, records=ev.records,
                                 baseline=ev.baseline_records, backend=ev.contract.backend))
        required = forbidden_in_perf(ev.contract, ev.index.ops if ev.index is not None else ())
        if required:
            out.append(evaluate_perf_fallback(required, rid=f"L{level}.perf.fallback", level=level, blocking=blocking,
                                              records=ev.records))
    if req.compat is not None:
        out.append(evaluate_compat(req.compat, rid=f"L{level}.compat", level=level, blocking=blocking, report=ev.compat))
    evidence_kinds = (req.workloads, req.distributed, req.perf, req.compat)
    if level > EVALUABLE_LEVEL and not any(k for k in evidence_kinds if k is not None):
        out.append(
            _unknown(
                f"L{level}.level", level, "level", f"level {level}: {LEVEL_NAMES[level]}", blocking,
                f"level {level} ({LEVEL_NAMES[level]}) states no requirement opmatrix can judge at that level "
                "(workloads, distributed, perf or compat): no evidence, so this promise is unproven",
            )
        )
    if not out:
        out.append(
            _unknown(
                f"L{level}.level", level, "level", f"level {level}: {LEVEL_NAMES[level]}", blocking,
                "the requirement lists no checks, operators, workloads, distributed cases, perf or compat",
            )
        )
    return [_never_vacuous(r) for r in out]


def _never_vacuous(result: RequirementResult) -> RequirementResult:
    """A requirement that judged nothing proves nothing: ``unknown`` (which blocks when promised), never a pass."""
    if result.status is not Status.passed or result.checked > 0 or result.cells:
        return result
    return result.model_copy(update={
        "status": Status.unknown,
        "message": f"selected nothing to judge (looked for: {result.title}); {result.message}",
    })


def _unique_ids(results: list[RequirementResult]) -> list[RequirementResult]:
    seen: dict[str, int] = {}
    out = []
    for r in results:
        n = seen.get(r.id, 0)
        seen[r.id] = n + 1
        out.append(r if n == 0 else r.model_copy(update={"id": f"{r.id}~{n + 1}"}))
    return out


def _identity_checks(contract: Contract, matrix: Matrix | None, baseline: Matrix | None, ev: _Evidence) -> list[GateCheck]:
    """One failing ``identity`` check per piece of evidence of another subject, else one passing check."""
    problems = identity_problems(contract, matrix=matrix, baseline=baseline, records=ev.records,
                                 baseline_records=ev.baseline_records, compat=ev.compat)
    if problems:
        return [GateCheck(name="identity", status=Status.failed, message=f"{which}: {p}" if which != "matrix" else p)
                for which, p in problems]
    return [GateCheck(name="identity", status=Status.passed,
                      message=f"the evidence and the contract are for {named(contract.backend, contract.generation)}")]


def _cell_count_check(count: int, baseline_count: int | None, ratio: float) -> GateCheck:
    if count == 0:
        return GateCheck(
            name="cell count", status=Status.failed,
            message="the matrix holds no probed cells: a broken probe run must not pass",
        )
    if baseline_count is None:
        return GateCheck(name="cell count", status=Status.passed, message=f"{count} probed cells")
    floor = baseline_count * ratio
    if count < floor:
        drop = 100 * (baseline_count - count) / baseline_count
        return GateCheck(
            name="cell count", status=Status.failed,
            message=f"{count} probed cells, {drop:.1f}% fewer than the baseline's {baseline_count} "
            f"(at most {100 * (1 - ratio):.0f}% fewer allowed): was the probe run cut short?",
        )
    return GateCheck(name="cell count", status=Status.passed, message=f"{count} probed cells (baseline {baseline_count})")


def _judged(contract: Contract, has_matrix: bool) -> list[int]:
    """The levels this evaluation judges: ``judged_levels`` (default all), without a matrix only levels 6-7's."""
    levels = [lvl for lvl in range(0, 8) if contract.judged_levels is None or lvl in contract.judged_levels]
    if has_matrix:
        return levels
    by_level = {req.level: req for req in contract.requirements}
    return [lvl for lvl in levels if lvl in by_level and (by_level[lvl].perf or by_level[lvl].compat)]


def _requirement_results(contract: Contract, ev: _Evidence) -> list[RequirementResult]:
    """One result per requirement of each judged level; a promised level without requirements is unknown."""
    by_level = {req.level: req for req in contract.requirements}
    requirements: list[RequirementResult] = []
    for level in _judged(contract, ev.matrix is not None):
        req = by_level.get(level)
        if req is not None:
            requirements += _level_results(req, ev)
        elif level <= contract.level:
            requirements.append(
                _unknown(
                    f"L{level}.level", level, "level", f"level {level}: {LEVEL_NAMES[level]}", True,
                    f"level {level} is promised but the contract states no requirement for it: "
                    "nothing proves the promise",
                )
            )
    if ev.matrix is None and contract.judged_levels is None:
        # a promise of levels 0-5 rests on a probed matrix: without one they are unproven, unless
        # the contract is an add-on that names the levels it judges (``judged_levels: [6]``)
        judged = set(_judged(contract, False))
        for level in range(contract.level + 1):
            if level not in judged:
                requirements.append(_unknown(
                    f"L{level}.level", level, "level", f"level {level}: {LEVEL_NAMES[level]}", True,
                    f"level {level} is promised and judged from a probed matrix, which was not given (--matrix); "
                    "a contract for performance records or a compat report alone names its levels in judged_levels",
                ))
    if not any(r.blocking for r in requirements):  # e.g. judged_levels naming only levels above the promise
        requirements.append(_unknown(
            "scope", contract.level, "level", "the promised levels", True,
            f"no requirement of a promised level (0-{contract.level}) was judged (judged: "
            f"{', '.join(map(str, sorted({r.level for r in requirements}))) or 'none'}): nothing proves the promise",
        ))
    return _unique_ids(requirements)


def _scope_check(contract: Contract) -> GateCheck:
    judged = _judged(contract, False)
    if not judged:
        raise ArtifactError(["opmatrix gate: the contract states no perf or compat requirement; give --matrix"])
    return GateCheck(name="scope", status=Status.passed,
                     message=f"no matrix: only level(s) {', '.join(map(str, judged))} (performance / compatibility) "
                     "were judged")


def _baseline_check(baseline: Matrix, index: CellIndex, contract: Contract, book: WaiverBook
                    ) -> tuple[GateCheck, list[BaselineChange], list[BaselineChange], list[CellRef]]:
    """The baseline comparison: its check, the regressions (waivers applied), better and missing cells."""
    changes = compare_cells(CellIndex(baseline), index, contract.tolerances)
    regressions = [c.model_copy(update={"cell": book.apply(c.cell)}) for c in changes.worse]
    better, missing = changes.better, changes.missing
    unwaived = sum(c.cell.status is CellStatus.failed for c in regressions)
    waived = len(regressions) - unwaived
    check = GateCheck(
        name="baseline",
        status=Status.failed if unwaived else Status.passed,
        message=f"{len(regressions)} cells worse than the baseline ({unwaived} blocking, {waived} waived), "
        f"{len(better)} better, {len(missing)} no longer probed",
    )
    return check, regressions, list(better), list(missing)


def _waiver_check(waivers: list[WaiverReport], today: dt.date) -> GateCheck:
    expired = [w for w in waivers if w.state is WaiverState.expired]
    return GateCheck(
        name="waivers",
        status=Status.failed if expired else Status.passed,
        message="; ".join(
            f"waiver #{w.index} ({w.match.op}, owner {w.owner}) expired on {w.expires} (judged on {today}, UTC): "
            "renew it or remove it"
            for w in expired
        )
        or f"{len(waivers)} waivers, none expired on {today} (UTC)",
    )


def utc_today() -> dt.date:
    """Today's date in UTC: a verdict is the same on runners in every time zone (``TZ`` decides nothing)."""
    return dt.datetime.now(dt.timezone.utc).date()


def _flaky_cells(index: CellIndex) -> list[CellRef]:
    return [
        CellRef(op=key.op, dtype=key.dtype, rank=key.rank, layout=key.layout, mode=key.mode,
                conditions=dict(g.conditions), path=g.path, outcome=g.outcome, reason="flaky")
        for key, groups in index.items()
        for g in groups
        if g.flaky
    ]


def _matrix_checks(checks: list[GateCheck], contract: Contract, baseline: Matrix | None, ev: _Evidence
                   ) -> tuple[list[BaselineChange], list[BaselineChange], list[CellRef]]:
    """Append the matrix's checks (cell count, baseline) to ``checks``; the regressions, better and missing cells."""
    matrix = ev.matrix
    if matrix is None or ev.index is None:
        checks.append(_scope_check(contract))
        return [], [], []
    checks.append(distributed_count_check(matrix, contract) or _cell_count_check(
        matrix.cell_count(), baseline.cell_count() if baseline else None, contract.min_cells_ratio))
    if baseline is None:
        return [], [], []
    check, regressions, better, missing = _baseline_check(baseline, ev.index, contract, ev.book)
    checks.append(check)
    dist_check = distributed_baseline_check(matrix, baseline)
    if dist_check is not None:
        checks.append(dist_check)
    return regressions, better, missing


def evaluate_contract(
    matrix: Matrix | None, contract: Contract, *, baseline: Matrix | None = None,
    records: Mapping[str, PerfRecord] | None = None, baseline_records: Mapping[str, PerfRecord] | None = None,
    compat: CompatReport | None = None, today: dt.date | None = None,
) -> GateResult:
    """Judge the evidence against ``contract``: levels 0-7 in one pass.

    ``matrix`` (levels 0-5, and its ``baseline``, the previous release's matrix), ``records`` and
    ``baseline_records`` (level 6, by record id, as :func:`opmatrix.ci.perf.load_records` reads them)
    and ``compat`` (level 7). Without a matrix only the levels with perf / compat requirements are
    judged; with neither, :class:`~opmatrix.schema.ArtifactError`.
    """
    today = today or utc_today()
    book = WaiverBook(contract.waivers, today)
    ev = _Evidence(contract, matrix, records, baseline_records, compat, book)
    requirements = _requirement_results(contract, ev)

    checks = _identity_checks(contract, matrix, baseline, ev)
    count = matrix.cell_count() if matrix is not None else 0
    regressions, better, missing = _matrix_checks(checks, contract, baseline, ev)
    waivers = book.reports()
    checks.append(_waiver_check(waivers, today))
    improvements = []
    if ev.index is not None:
        claimed: set[CellKey] = set()
        for level_req in contract.requirements:
            for op_req in level_req.operators:
                claimed |= claimed_keys(op_req, ev.index)
        improvements = find_improvements(ev.index, contract, claimed)

    blocking = blocking_lines(requirements, checks, [c.cell for c in regressions])
    return GateResult(
        verdict=Verdict.blocked if blocking else Verdict.passed,
        backend=matrix.backend.name if matrix is not None else contract.backend,
        generation=matrix.backend.generation if matrix is not None else contract.generation,
        release=contract.release,
        promised_level=contract.level,
        today=today.isoformat(),
        cell_count=count,
        baseline_cell_count=baseline.cell_count() if baseline else None,
        matrix_digest=matrix.digest() if matrix is not None else None,
        blocking=blocking,
        requirements=requirements,
        checks=checks,
        regressions=regressions,
        better=better,
        missing=missing,
        improvements=improvements,
        improvement_yaml=improvement_yaml(improvements),
        waivers=waivers,
        flaky=_flaky_cells(ev.index) if ev.index is not None else [],
    )
