"""Compare a matrix with the previous release's (the baseline), cell by cell.

A cell is *worse* (a regression) when its path dropped (``native -> fallback``), its outcome got
worse (``ok -> wrong``, ``ok -> crashed``), its backward got worse, or its numerics error grew by
more than the tolerance (``atol``; a contract tolerance override wins). It is *better* in the
opposite directions. Cells with conditional groups are compared group by group when both
matrices have the same groups, worst group against worst group otherwise::

    changes = compare_cells(baseline_index, index, tolerances)
    changes.worse[0].what   # "path native -> fallback"

Cells that only the baseline has are listed as missing; the gate's cell-count check decides whether
their number means a broken probe run. (``opmatrix.matrix.diff`` will offer the same comparison
for humans; this one works on the schema models and judges for the gate.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from opmatrix.schema import CellResult, Outcome, ToleranceOverride
from opmatrix.schema.gate import BaselineChange, CellRef, CellStatus

from .cells import CellIndex, CellKey
from .requirements import tolerance_for

__all__ = ["CellChanges", "compare_cells", "compare_results"]


@dataclass
class CellChanges:
    """Cells worse and better than in the baseline, and baseline cells no longer probed."""

    worse: list[BaselineChange] = field(default_factory=list)
    better: list[BaselineChange] = field(default_factory=list)
    missing: list[CellRef] = field(default_factory=list)


def compare_results(before: CellResult, after: CellResult, atol: float) -> tuple[list[str], list[str]]:
    """(worse, better) descriptions of how one cell result changed."""
    worse: list[str] = []
    better: list[str] = []
    if after.path != before.path:
        (worse if after.path > before.path else better).append(f"path {before.path} -> {after.path}")
    if after.outcome != before.outcome:
        # ok -> anything is worse and anything -> ok better; among failures, only a worse fault counts
        if after.outcome is Outcome.ok:
            better.append(f"outcome {before.outcome} -> {after.outcome}")
        elif before.outcome is Outcome.ok or after.outcome > before.outcome:
            worse.append(f"outcome {before.outcome} -> {after.outcome}")
    ga, gb = before.autograd, after.autograd
    if ga is not None and gb is not None:
        if gb.outcome is not Outcome.ok and ga.outcome is Outcome.ok:
            worse.append(f"backward outcome {ga.outcome} -> {gb.outcome}")
        elif gb.outcome is Outcome.ok and ga.outcome is not Outcome.ok:
            better.append(f"backward outcome {ga.outcome} -> {gb.outcome}")
        if gb.path > ga.path:
            worse.append(f"backward path {ga.path} -> {gb.path}")
        elif gb.path < ga.path:
            better.append(f"backward path {ga.path} -> {gb.path}")
    elif ga is not None and ga.outcome is Outcome.ok and gb is None and after.outcome is Outcome.ok:
        worse.append("backward no longer probed")
    na, nb = before.numerics, after.numerics
    if na is not None and nb is not None and na.max_abs_err is not None and nb.max_abs_err is not None:
        if nb.max_abs_err - na.max_abs_err > atol:
            worse.append(f"max_abs_err {na.max_abs_err:g} -> {nb.max_abs_err:g} (grew by more than atol {atol:g})")
    return worse, better


def _change(key: CellKey, before: CellResult, after: CellResult, what: list[str], failed: bool) -> BaselineChange:
    cell = CellRef(
        op=key.op, dtype=key.dtype, rank=key.rank, layout=key.layout, mode=key.mode,
        conditions=dict(after.conditions), path=after.path, outcome=after.outcome,
        status=CellStatus.failed if failed else CellStatus.passed,
        reason=("regression: " if failed else "better: ") + "; ".join(what),
    )
    return BaselineChange(cell=cell, before_path=before.path, before_outcome=before.outcome, what="; ".join(what))


def _pairs(before: Sequence[CellResult], after: Sequence[CellResult]) -> list[tuple[CellResult, CellResult]]:
    conds_a = {frozenset(g.conditions.items()): g for g in before}
    conds_b = {frozenset(g.conditions.items()): g for g in after}
    if len(conds_a) == len(before) and conds_a.keys() == conds_b.keys():
        return [(conds_a[c], conds_b[c]) for c in sorted(conds_a, key=sorted)]
    return [(before[-1], after[-1])]  # groups are sorted best first: compare the worst ones


def compare_cells(baseline: CellIndex, current: CellIndex, tolerances: Sequence[ToleranceOverride] = ()) -> CellChanges:
    """Every cell that got worse or better than in the baseline; baseline cells not probed now."""
    out = CellChanges()
    for key, before_groups in baseline.items():
        after_groups = current.groups(key)
        if not after_groups:
            worst = before_groups[-1]
            out.missing.append(
                CellRef(op=key.op, dtype=key.dtype, rank=key.rank, layout=key.layout, mode=key.mode,
                        path=worst.path, outcome=worst.outcome, reason="probed in the baseline, not now")
            )
            continue
        for before, after in _pairs(before_groups, after_groups):
            tol = tolerance_for(tolerances, key.op, key.dtype)
            atol = tol.atol if tol else (after.numerics.atol if after.numerics else 0.0)
            worse, better = compare_results(before, after, atol)
            if worse:
                out.worse.append(_change(key, before, after, worse, failed=True))
            elif better:
                out.better.append(_change(key, before, after, better, failed=False))
    return out
