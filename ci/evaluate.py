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
- a promised level without any requirement is ``unknown`` too (a promise needs its evidence);
- requirements above the promised level are evaluated but informational;
- gate-level checks: the matrix is for the contract's backend, it holds probed cells and not more
  than ``1 - min_cells_ratio`` fewer than the baseline, no cell regressed against the baseline
  (unless waived), no waiver has expired.
Working cells no requirement claims are reported as improvements with the contract lines to add.
"""

from __future__ import annotations

import datetime as dt

from opmatrix.schema import Contract, LevelRequirement, Matrix, WorkloadRequirement
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

from .baseline import compare_cells
from .cells import CellIndex, CellKey
from .distributed import distributed_baseline_check, distributed_count_check, evaluate_distributed
from .improvements import find_improvements, improvement_yaml
from .requirements import claimed_keys, evaluate_check, evaluate_operators
from .waivers import WaiverBook
from .workloads import evaluate_workloads

__all__ = ["LEVEL_NAMES", "evaluate_contract", "identity_mismatch"]

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

#: The highest level whose requirements opmatrix can evaluate from a matrix today.
EVALUABLE_LEVEL = 2

#: Failing cells listed per requirement in ``GateResult.blocking`` (all of them stay in ``requirements``).
MAX_LINES_PER_ITEM = 25


def _unknown(rid: str, level: int, kind: str, title: str, blocking: bool, message: str) -> RequirementResult:
    return RequirementResult(
        id=rid, level=level, kind=kind, title=title, status=Status.unknown, blocking=blocking, message=message
    )


def _slug(text: str) -> str:
    if text == "*":
        return "all"
    return "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in text).strip("_") or "unnamed"


def _level_results(
    req: LevelRequirement, *, promised: int, contract: Contract, matrix: Matrix, index: CellIndex, book: WaiverBook
) -> list[RequirementResult]:
    level, blocking = req.level, req.level <= promised
    out: list[RequirementResult] = []
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
    if req.distributed is not None:
        out.append(evaluate_distributed(req.distributed, rid=f"L{level}.distributed.{_slug(req.distributed.name or 'all')}",
                                        level=level, blocking=blocking, matrix=matrix))
    for i, workload in enumerate(req.workloads):
        wreq = WorkloadRequirement(names=[workload]) if isinstance(workload, str) else workload
        wid = f"L{level}.workload" + ("" if isinstance(workload, str) else f".{_slug(wreq.name) if wreq.name else i}")
        out += evaluate_workloads(wreq, rid=wid, level=level, blocking=blocking, matrix=matrix)
    if level > EVALUABLE_LEVEL and not req.workloads and req.distributed is None:
        out.append(
            _unknown(
                f"L{level}.level", level, "level", f"level {level}: {LEVEL_NAMES[level]}", blocking,
                f"level {level} ({LEVEL_NAMES[level]}) is not evaluable by opmatrix yet: no evidence, so this "
                "promise is unproven",
            )
        )
    if not out:
        out.append(
            _unknown(
                f"L{level}.level", level, "level", f"level {level}: {LEVEL_NAMES[level]}", blocking,
                "the requirement lists no checks, operators or workloads",
            )
        )
    return out


def _unique_ids(results: list[RequirementResult]) -> list[RequirementResult]:
    seen: dict[str, int] = {}
    out = []
    for r in results:
        n = seen.get(r.id, 0)
        seen[r.id] = n + 1
        out.append(r if n == 0 else r.model_copy(update={"id": f"{r.id}~{n + 1}"}))
    return out


def _named(backend: str, generation: str | None) -> str:
    return backend + (f" {generation}" if generation else "")


def identity_mismatch(matrix: Matrix, contract: Contract) -> str | None:
    """``"the contract is for X, the matrix is Y"`` when they name another backend or generation."""
    have = _named(matrix.backend.name, matrix.backend.generation)
    want = _named(contract.backend, contract.generation)
    if matrix.backend.name != contract.backend or (
        contract.generation is not None and matrix.backend.generation not in (None, contract.generation)
    ):
        return f"the contract is for {want}, the matrix is {have}"
    return None


def _identity_check(matrix: Matrix, contract: Contract) -> GateCheck:
    wrong = identity_mismatch(matrix, contract)
    if wrong is not None:
        return GateCheck(name="identity", status=Status.failed, message=wrong)
    return GateCheck(name="identity", status=Status.passed,
                     message=f"matrix and contract are for {_named(matrix.backend.name, matrix.backend.generation)}")


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


def _blocking_lines(requirements: list[RequirementResult], checks: list[GateCheck], regressions: list[CellRef]) -> list[str]:
    lines: list[str] = []
    for check in checks:
        if check.blocks and check.name != "baseline":
            lines.append(f"{check.name}: {check.message}")
    for r in requirements:
        if not r.blocks:
            continue
        failing = [c for c in r.cells if c.status is CellStatus.failed]
        if not failing:
            lines.append(f"{r.id} ({r.status}): {r.message}")
            continue
        lines.extend(f"{r.id}: {c.line()}" for c in failing[:MAX_LINES_PER_ITEM])
        if len(failing) > MAX_LINES_PER_ITEM:
            lines.append(f"{r.id}: ... and {len(failing) - MAX_LINES_PER_ITEM} more failing cells")
    unwaived = [c for c in regressions if c.status is CellStatus.failed]
    lines.extend(f"baseline: {c.line()}" for c in unwaived[:MAX_LINES_PER_ITEM])
    if len(unwaived) > MAX_LINES_PER_ITEM:
        lines.append(f"baseline: ... and {len(unwaived) - MAX_LINES_PER_ITEM} more regressions")
    return lines


def _requirement_results(matrix: Matrix, contract: Contract, index: CellIndex, book: WaiverBook
                         ) -> list[RequirementResult]:
    """One result per requirement of each level 0-7; a promised level without requirements is unknown."""
    by_level = {req.level: req for req in contract.requirements}
    requirements: list[RequirementResult] = []
    for level in range(0, 8):
        if contract.judged_levels is not None and level not in contract.judged_levels:
            continue  # judged by another contract of the release
        req = by_level.get(level)
        if req is not None:
            requirements += _level_results(
                req, promised=contract.level, contract=contract, matrix=matrix, index=index, book=book
            )
        elif level <= contract.level:
            requirements.append(
                _unknown(
                    f"L{level}.level", level, "level", f"level {level}: {LEVEL_NAMES[level]}", True,
                    f"level {level} is promised but the contract states no requirement for it: "
                    "nothing proves the promise",
                )
            )
    return _unique_ids(requirements)


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


def _waiver_check(waivers: list[WaiverReport]) -> GateCheck:
    expired = [w for w in waivers if w.state is WaiverState.expired]
    return GateCheck(
        name="waivers",
        status=Status.failed if expired else Status.passed,
        message="; ".join(
            f"waiver #{w.index} ({w.match.op}, owner {w.owner}) expired on {w.expires}: renew it or remove it"
            for w in expired
        )
        or f"{len(waivers)} waivers, none expired",
    )


def _flaky_cells(index: CellIndex) -> list[CellRef]:
    return [
        CellRef(op=key.op, dtype=key.dtype, rank=key.rank, layout=key.layout, mode=key.mode,
                conditions=dict(g.conditions), path=g.path, outcome=g.outcome, reason="flaky")
        for key, groups in index.items()
        for g in groups
        if g.flaky
    ]


def evaluate_contract(
    matrix: Matrix, contract: Contract, *, baseline: Matrix | None = None, today: dt.date | None = None
) -> GateResult:
    """Judge ``matrix`` against ``contract`` (and ``baseline``, the previous release's matrix)."""
    today = today or dt.date.today()
    index = CellIndex(matrix)
    book = WaiverBook(contract.waivers, today)
    requirements = _requirement_results(matrix, contract, index, book)

    count = matrix.cell_count()
    checks = [_identity_check(matrix, contract), distributed_count_check(matrix, contract) or _cell_count_check(
        count, baseline.cell_count() if baseline else None, contract.min_cells_ratio)]
    regressions: list[BaselineChange] = []
    better: list[BaselineChange] = []
    missing: list[CellRef] = []
    if baseline is not None:
        check, regressions, better, missing = _baseline_check(baseline, index, contract, book)
        checks.append(check)
        dist_check = distributed_baseline_check(matrix, baseline)
        if dist_check is not None:
            checks.append(dist_check)
    waivers = book.reports()
    checks.append(_waiver_check(waivers))

    claimed: set[CellKey] = set()
    for level_req in contract.requirements:
        for op_req in level_req.operators:
            claimed |= claimed_keys(op_req, index)
    improvements = find_improvements(index, contract, claimed)

    blocking = _blocking_lines(requirements, checks, [c.cell for c in regressions])
    return GateResult(
        verdict=Verdict.blocked if blocking else Verdict.passed,
        backend=matrix.backend.name,
        generation=matrix.backend.generation,
        release=contract.release,
        promised_level=contract.level,
        today=today.isoformat(),
        cell_count=count,
        baseline_cell_count=baseline.cell_count() if baseline else None,
        blocking=blocking,
        requirements=requirements,
        checks=checks,
        regressions=regressions,
        better=better,
        missing=missing,
        improvements=improvements,
        improvement_yaml=improvement_yaml(improvements),
        waivers=waivers,
        flaky=_flaky_cells(index),
    )
