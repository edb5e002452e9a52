"""Why a gate blocks, in plain words, worst first: one order for the CLI, the summary and the site.

A gate result lists every failing cell (``aten.add.Tensor bfloat16 rank 0 contiguous eager: path
rejected is worse than composite (...)``, one line each); people need the shape of the problem:
which operators, doing what, for which dtypes. The failing cells of a requirement are grouped by
what went wrong, then by operator, and operators with the same dtypes and layouts are named
together; wrong values come first, then faults, then what was never probed, then paths::

    >>> gate_reasons(result)  # needs a gate result: not run  # doctest: +SKIP
    ['L2.ops: mul.Tensor gives wrong values for float32 noncontiguous, transposed input',
     'L2.ops: bmm is rejected for bfloat16, float16, float32']
"""

from __future__ import annotations

from collections import defaultdict

from opmatrix.schema import ExecPath, GateResult, Mode, OpName, Outcome
from opmatrix.schema.gate import CellRef, CellStatus, RequirementResult

__all__ = ["gate_reasons", "plain_reasons", "ranked_reasons", "short_op"]


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
        if cell.missing or not cell.reason:
            return "was never probed", "were never probed"
        # a cell of no operator probe (a performance record, a workload, a check): its own reason,
        # e.g. the slowdown and its confidence interval
        return f"fails: {cell.reason}", f"fail: {cell.reason}"
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
    return [text for _, text in ranked_reasons(req)]


def _sentence(ops: list[str], verb: tuple[str, str], dtypes: tuple[str, ...], layouts: tuple[str, ...],
              mode: Mode) -> str:
    one, many = verb
    text = f"{_names(ops)} {one if len(ops) == 1 else many}"
    if dtypes:
        text += f" for {', '.join(dtypes)}"
    if layouts and layouts != ("contiguous",):
        text += f" {', '.join(layouts)} input" if dtypes else f" for {', '.join(layouts)} input"
    if mode is Mode.compile:
        text += " when compiled"
    return text


def ranked_reasons(req: RequirementResult) -> list[tuple[int, str]]:
    """(severity, sentence) for each group of ``req``'s failing cells; lower severity is worse."""
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
    for (verb, mode), per_op in groups.items():
        together: dict[tuple[tuple[str, ...], tuple[str, ...]], list[str]] = defaultdict(list)
        for op, (dtypes, layouts) in sorted(per_op.items()):
            together[(tuple(sorted(dtypes)), tuple(sorted(layouts)))].append(op)
        for (dtype_names, layout_names), ops in together.items():
            out.append((_severity(verb[0]), _sentence(ops, verb, dtype_names, layout_names, mode)))
    return out


def gate_reasons(result: GateResult) -> list[str]:
    """Every reason the gate blocks, grouped, worst first (contract order within a severity): the
    blocking requirements' grouped failures and the blocking gate checks (seal, identity, baseline)."""
    ranked = [(rank, f"{req.id}: {text}") for req in result.requirements if req.blocks
              for rank, text in ranked_reasons(req)]
    ranked += [(1, f"{c.name}: {c.message}") for c in result.checks if c.blocks]
    return [text for _, text in sorted(ranked, key=lambda r: r[0])]  # stable sort
