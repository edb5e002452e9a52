"""The gate's verdict in plain words, for the banner and the requirements section of the index.

A gate result lists every failing cell (``aten.add.Tensor bfloat16 rank 0 contiguous eager: path
rejected is worse than composite (...)``, one line each); people need the shape of the problem:
which operators, doing what, for which dtypes. The failing cells of a requirement are grouped by
what went wrong, then by operator, and operators with the same dtypes and layouts are named
together::

    >>> plain_reasons(requirement)  # needs a gate requirement: not run  # doctest: +SKIP
    ['bmm is rejected for bfloat16, float16, float32', 'mul.Tensor gives wrong values for float32 noncontiguous, transposed input']
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from opmatrix.schema import ExecPath, GateResult, Mode, OpName, Outcome
from opmatrix.schema.gate import CellRef, CellStatus, RequirementResult, Status

__all__ = ["RequirementView", "VerdictView", "plain_reasons", "short_op", "verdict_view"]

#: reasons the banner shows before "and N more"
BANNER_REASONS = 3
#: failing cells listed per requirement before "and N more"
CELL_EXAMPLES = 4


def short_op(op: str) -> str:
    """``add.Tensor`` for ``aten.add.Tensor``, ``mm`` for ``aten.mm.default`` (:attr:`OpName.short`);
    a name that is no operator's is kept as it is."""
    try:
        return OpName.parse(op).short
    except ValueError:
        return op


def _names(items: list[str], most: int = 4) -> str:
    if len(items) <= most:
        return ", ".join(items)
    return ", ".join(items[:most]) + f", \u2026 ({len(items)} in all)"


def _what(cell: CellRef) -> tuple[str, str]:
    """(singular verb phrase, plural verb phrase) for what went wrong in a failing cell."""
    if not cell.probed:
        return "was never probed", "were never probed"
    if cell.outcome is Outcome.wrong:
        return "gives wrong values", "give wrong values"
    if cell.outcome is not None and cell.outcome is not Outcome.ok:
        word = cell.outcome.value
        return f"fails ({word})", f"fail ({word})"
    if cell.path is ExecPath.rejected:
        return "is rejected", "are rejected"
    if cell.path is ExecPath.fallback:
        return "falls back to the host", "fall back to the host"
    path = cell.path.value if cell.path is not None else "unknown"
    return f"takes the {path} path", f"take the {path} path"


_SEVERITY = {"gives wrong values": 0, "was never probed": 2}


def _severity(verb: str) -> int:
    """Wrong values first, then faults, then cells never probed, then paths worse than required."""
    if verb in _SEVERITY:
        return _SEVERITY[verb]
    return 1 if verb.startswith("fails") else 3


def plain_reasons(req: RequirementResult) -> list[str]:
    """What failed in ``req``, grouped into sentences (its message when it has no failing cells)."""
    return [text for _, text in _ranked_reasons(req)]


def _ranked_reasons(req: RequirementResult) -> list[tuple[int, str]]:
    failing = [c for c in req.cells if c.status is CellStatus.failed]
    if not failing:
        return [(1, f"{req.title}: {req.message}" if req.message else req.title)]
    # (verb, mode) -> op -> (dtypes, layouts)
    groups: dict[tuple[tuple[str, str], Mode], dict[str, tuple[set[str], set[str]]]] = defaultdict(dict)
    for cell in failing:
        per_op = groups[(_what(cell), cell.mode)]
        dtypes, layouts = per_op.setdefault(short_op(cell.op), (set(), set()))
        if cell.dtype is not None:
            dtypes.add(cell.dtype.value)
        if cell.layout is not None:
            layouts.add(cell.layout.value)
    out = []
    for ((one, many), mode), per_op in groups.items():
        together: dict[tuple[tuple[str, ...], tuple[str, ...]], list[str]] = defaultdict(list)
        for op, (dtypes, layouts) in sorted(per_op.items()):
            together[(tuple(sorted(dtypes)), tuple(sorted(layouts)))].append(op)
        for (dtype_names, layout_names), ops in together.items():
            text = f"{_names(ops)} {one if len(ops) == 1 else many}"
            if dtype_names:
                text += f" for {', '.join(dtype_names)}"
            if layout_names and layout_names != ("contiguous",):
                text += f" {', '.join(layout_names)} input" if dtype_names else f" for {', '.join(layout_names)} input"
            if mode is Mode.compile:
                text += " when compiled"
            out.append((_severity(one), text))
    return out


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
    ranked = [(rank, f"{req.id}: {text}") for req in result.requirements if req.blocks
              for rank, text in _ranked_reasons(req)]
    ranked += [(1, f"{c.name}: {c.message}") for c in result.checks if c.blocks]
    reasons = [text for _, text in sorted(ranked, key=lambda r: r[0])]  # stable: contract order within a rank
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
