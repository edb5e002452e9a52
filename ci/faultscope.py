"""A level's widest allowed fault scope (``max_fault_scope`` in a contract's level requirement).

A faulted cell whose fault reached further than the level allows blocks the release: a fault that
poisons the device is not acceptable where the level promises only failed operations. A faulted
cell without a scope (probed before scopes were recorded) or with scope ``unknown`` cannot show
it stayed within the bound: it counts as too wide::

    requirements:
    - level: 2
      max_fault_scope: operation      # every fault of the level's operators failed one call only
      operators: [{ops: [aten.mul.Tensor], dtypes: [float32]}]
"""

from __future__ import annotations

import fnmatch

from opmatrix.schema import FaultScope, Matrix
from opmatrix.schema.contract import LevelRequirement
from opmatrix.schema.gate import CellRef, CellStatus, RequirementResult, Status

__all__ = ["evaluate_fault_scope"]


def _ops_of(req: LevelRequirement, matrix: Matrix) -> list[str]:
    """The matrix's operators the level names (every operator when it names none)."""
    patterns = [str(op) for r in req.operators for op in r.ops]
    names = sorted(matrix.operators)
    if not patterns:
        return names
    return [n for n in names if any(fnmatch.fnmatchcase(n, p) or n.split(".")[:2] == p.split(".")[:2] for p in patterns)]


def evaluate_fault_scope(req: LevelRequirement, *, rid: str, level: int, blocking: bool, matrix: Matrix
                         ) -> RequirementResult:
    """Every faulted entry of the level's operators has a scope no wider than ``max_fault_scope``."""
    bound = req.max_fault_scope
    assert bound is not None
    title = f"faults stay within scope {bound.value}"
    cells: list[CellRef] = []
    checked = faulted = 0
    for op in _ops_of(req, matrix):
        for entry in matrix.operators[op]:
            checked += 1  # an entry without a fault is evidence too: nothing of it reached further
            if not entry.outcome.is_fault:
                continue
            faulted += 1
            scope = entry.error.fault_scope if entry.error is not None else None
            if scope is not None and scope is not FaultScope.unknown and scope.rank <= bound.rank:
                continue
            said = scope.value if scope is not None else "not recorded"
            cells.append(CellRef(op=op, dtype=entry.dtypes[0], mode=entry.mode, path=entry.path, outcome=entry.outcome,
                                 status=CellStatus.failed, reason=f"{entry.outcome.value} with fault scope {said} "
                                                              f"(allowed: {bound.value} or narrower)"))
    if cells:
        return RequirementResult(id=rid, level=level, kind="fault_scope", title=title, status=Status.failed,
                                 blocking=blocking, cells=cells, checked=checked, failed=len(cells),
                                 message="; ".join(c.line() for c in cells[:8]))
    if checked == 0:  # a bound over nothing shows nothing: never a pass
        return RequirementResult(id=rid, level=level, kind="fault_scope", title=title, status=Status.unknown,
                                 blocking=blocking, checked=0,
                                 message="no probed entry of the level's operators: nothing shows faults stay within "
                                         f"scope {bound.value}")
    return RequirementResult(id=rid, level=level, kind="fault_scope", title=title, status=Status.passed,
                             blocking=blocking, checked=checked,
                             message=f"{checked} entries, {faulted} faulted, each fault within scope {bound.value}")
