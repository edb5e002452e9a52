"""The gate's verdict in plain words, for the banner and the requirements section of the index.

A gate result lists every failing cell, one line each; people need the shape of the problem. The
grouping (:mod:`opmatrix.matrix.reasons`) is the one ``opmatrix gate`` prints, in the same order::

    >>> plain_reasons(requirement)  # needs a gate requirement: not run  # doctest: +SKIP
    ['bmm is rejected for bfloat16, float16, float32', 'mul.Tensor gives wrong values for float32 noncontiguous, transposed input']
"""

from __future__ import annotations

from dataclasses import dataclass, field

from opmatrix.matrix.reasons import gate_reasons, plain_reasons, short_op
from opmatrix.schema import GateResult
from opmatrix.schema.gate import CellRef, CellStatus, RequirementResult, Status

__all__ = ["RequirementView", "VerdictView", "plain_reasons", "short_op", "verdict_view"]

#: reasons the banner shows before "and N more"
BANNER_REASONS = 3
#: failing cells listed per requirement before "and N more"
CELL_EXAMPLES = 4


def _cell_text(cell: CellRef) -> str:
    where = " ".join(str(x) for x in (cell.dtype and cell.dtype.value, f"rank {cell.rank}" if cell.rank is not None
                                      else None, cell.layout and cell.layout.value, cell.mode.value) if x)
    reason = cell.reason if len(cell.reason) <= 160 else cell.reason[:159] + "\u2026"
    return f"{short_op(cell.op)} {where}: {reason}" if where else f"{short_op(cell.op)}: {reason}"


@dataclass(frozen=True)
class RequirementView:
    """One requirement as people read it."""

    id: str
    status: str
    blocks: bool
    level: int
    kind: str
    required: str
    result: str
    reasons: list[str]
    examples: list[str]
    more_cells: int
    ops: list[str]


@dataclass(frozen=True)
class VerdictView:
    """The banner: ship or blocked, why, and every requirement below it."""

    word: str  # "Ship" or "Blocked"
    tone: str  # pass | fail
    headline: str
    reasons: list[str]
    more_reasons: int
    passed: int
    total: int
    requirements: list[RequirementView] = field(default_factory=list)
    checks: list[tuple[str, str, str]] = field(default_factory=list)


def _requirement(req: RequirementResult) -> RequirementView:
    failing = [c for c in req.cells if c.status is CellStatus.failed]
    ops = sorted({c.op for c in failing})
    return RequirementView(
        id=req.id, status=req.status.value, blocks=req.blocks, level=req.level, kind=req.kind, required=req.title,
        result=req.message, reasons=plain_reasons(req) if req.status is not Status.passed else [],
        examples=[_cell_text(c) for c in failing[:CELL_EXAMPLES]], more_cells=max(0, len(failing) - CELL_EXAMPLES),
        ops=ops,
    )


def verdict_view(result: GateResult) -> VerdictView:
    """The banner and requirement list of a typed gate result."""
    who = f"{result.backend} {result.generation}" if result.generation else result.backend
    reqs = [_requirement(r) for r in result.requirements]
    reasons = gate_reasons(result)  # the same grouped, worst-first list `opmatrix gate` prints
    if result.passed:
        word, tone = "Ship", "pass"
        headline = f"{who} meets its level {result.promised_level} contract for release {result.release}"
    else:
        word, tone = "Blocked", "fail"
        headline = f"{who} does not meet its level {result.promised_level} contract for release {result.release}"
    return VerdictView(
        word=word, tone=tone, headline=headline, reasons=reasons[:BANNER_REASONS],
        more_reasons=max(0, len(reasons) - BANNER_REASONS),
        passed=sum(1 for r in result.requirements if r.status in (Status.passed, Status.waived)),
        total=len(result.requirements), requirements=reqs,
        checks=[(c.name, c.status.value, c.message) for c in result.checks],
    )
