"""Judge a level-5 (distributed) requirement against a matrix's ``distributed`` section.

    - level: 5
      distributed:
        collectives: [all_reduce.sum, broadcast, barrier]   -> one case per collective x dtype x
        dtypes: [float32, bfloat16]                            world size x (sync, async)
        async_op: true
        ddp: true
        checkpoint: true
        rank_failure_seconds: 10

Each required case must have been probed, ended ``ok``, and taken a path no worse than
``worst_path`` (a c10d backend staging through host memory is ``fallback``). A case that is
missing or ``unsupported`` fails with its error text, so a gap of the c10d backend is named in
the gate output (``all_reduce.sum.bfloat16.sync.w2: unsupported: refaccel c10d (g1) does not
support all_reduce for torch.bfloat16 ...``).
"""

from __future__ import annotations

from opmatrix.schema import Contract, ExecPath, Matrix
from opmatrix.schema.distributed import DistCase, DistOutcome, DistributedRequirement
from opmatrix.schema.gate import CellRef, CellStatus, GateCheck, RequirementResult, Status

__all__ = ["distributed_baseline_check", "distributed_count_check", "evaluate_distributed", "required_case_ids"]

PREFIX = "distributed:"


def required_case_ids(req: DistributedRequirement) -> list[tuple[str, str]]:
    """(case id, what it proves) for every case ``req`` requires."""
    modes = ["sync", "async"] if req.async_op else ["sync"]
    out: list[tuple[str, str]] = []
    for ws in req.world_sizes:
        for name in req.collectives:
            for mode in modes:
                if name == "barrier":
                    out.append((f"barrier.{mode}.w{ws}", f"barrier {mode}"))
                    continue
                out += [(f"{name}.{dtype.value}.{mode}.w{ws}", f"{name} {dtype.value} {mode}") for dtype in req.dtypes]
    if req.ddp:
        out.append(("ddp.mlp.float32.w2", "DDP parity with single-process training"))
    if req.checkpoint:
        out.append(("checkpoint.dcp.float32.w2", "checkpoint round trip and resume"))
    if req.rank_failure_seconds is not None:
        out.append(("failure.rank_killed.w2", f"a killed rank detected within {req.rank_failure_seconds:g} s"))
    if req.never_joins_timeout:
        out.append(("failure.never_joins.w2", "a rank that never joins gives a timeout error"))
    return out


def _judge(case: DistCase | None, case_id: str, req: DistributedRequirement) -> tuple[CellStatus, str]:
    if case is None:
        return CellStatus.failed, "not probed (run opmatrix probe --suites distributed)"
    if case.outcome is not DistOutcome.ok:
        return CellStatus.failed, f"{case.outcome.value}: {(case.error or 'no error text')[:240]}"
    if case.path > req.worst_path:
        return CellStatus.failed, f"path {case.path.value} is worse than {req.worst_path.value}"
    if case_id.startswith("failure.rank_killed") and req.rank_failure_seconds is not None:
        took = case.detect_seconds
        if took is None or took > req.rank_failure_seconds:
            return CellStatus.failed, f"the killed rank was detected after {took} s (limit {req.rank_failure_seconds:g} s)"
        return CellStatus.passed, f"detected after {took:.2f} s, poison scope {case.poison_scope.value}"
    if case_id.startswith("failure.never_joins") and not case.evidence.get("timeout_error"):
        return CellStatus.failed, f"the error was not a timeout: {(case.error or '')[:200]}"
    return CellStatus.passed, "ok" + (" (host-staged)" if case.path is ExecPath.fallback else "")


def evaluate_distributed(req: DistributedRequirement, *, rid: str, level: int, blocking: bool,
                         matrix: Matrix) -> RequirementResult:
    """One requirement result with a cell per required case (failing ones name the case and the error)."""
    section = matrix.distributed
    cells = []
    for case_id, _what in required_case_ids(req):
        case = section.case(case_id) if section is not None else None
        cell_status, reason = _judge(case, case_id, req)
        cells.append(CellRef(op=PREFIX + case_id, status=cell_status, reason=reason,
                             dtype=case.dtype if case is not None else None))
    failed = [c for c in cells if c.status is CellStatus.failed]
    backend = section.c10d_backend if section is not None else "no distributed section"
    title = f"distributed {req.name or 'execution'} ({backend})"
    if section is None:
        status, message = Status.unknown, "the matrix has no distributed section: run opmatrix probe --suites distributed"
    elif failed:
        status = Status.failed
        message = f"{len(failed)} of {len(cells)} required cases fail; first: {failed[0].op[len(PREFIX):]}: {failed[0].reason}"
    else:
        status, message = Status.passed, f"{len(cells)} required cases pass on {backend}"
    return RequirementResult(id=rid, level=level, kind="distributed", title=title, status=status, blocking=blocking,
                             message=message, cells=cells, checked=len(cells), failed=len(failed),
                             not_probed=sum(1 for c in cells if c.reason.startswith("not probed")))


def distributed_count_check(matrix: Matrix, contract: Contract) -> GateCheck | None:
    """A matrix of distributed cases only is not empty for a contract that requires no operator cells."""
    if matrix.cell_count() or not matrix.distributed or not matrix.distributed.cases:
        return None
    if any(req.operators for req in contract.requirements):
        return None
    return GateCheck(name="cell count", status=Status.passed,
                     message=f"0 operator cells (none required); {len(matrix.distributed.cases)} distributed cases")


def distributed_baseline_check(matrix: Matrix, baseline: Matrix) -> GateCheck | None:
    """Distributed cases worse than in the previous release's matrix block (None when neither has any)."""
    from opmatrix.matrix.distributed import diff_distributed

    if baseline.distributed is None and matrix.distributed is None:
        return None
    changes = diff_distributed(baseline, matrix)
    worse = [c for c in changes if c.kind == "worse"]
    gone = sum(c.kind == "removed" for c in changes)  # like cells, cases no longer probed are reported, not judged
    if not worse:
        return GateCheck(name="distributed baseline", status=Status.passed,
                         message=f"no distributed case got worse ({gone} no longer probed)")
    listed = "; ".join(f"{c.case}: {c.before} -> {c.after}" for c in worse[:10])
    more = f" ... and {len(worse) - 10} more" if len(worse) > 10 else ""
    return GateCheck(name="distributed baseline", status=Status.failed,
                     message=f"{len(worse)} distributed cases worse than the baseline: {listed}{more}")
