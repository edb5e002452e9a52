"""Diff the distributed sections of two matrices: cases worse, better, new, removed.

    changes = diff_distributed(load_matrix("g2/matrix.yaml"), load_matrix("g1/matrix.yaml"))
    [c.case for c in changes if c.kind == "worse"]     # ['all_reduce.sum.bfloat16.sync.w2', ...]

Quality is (outcome, path): an outcome further down :class:`DistOutcome` is worse whatever the
path; on a tie, a worse path (native -> fallback when a backend starts staging through the host).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from opmatrix.schema import Matrix
from opmatrix.schema.distributed import DistCase, DistOutcome

__all__ = ["DistChange", "diff_distributed", "render_distributed"]

_ORDER = list(DistOutcome)


@dataclass(frozen=True)
class DistChange:
    """One case whose result changed between matrix A and matrix B."""

    kind: Literal["worse", "better", "new", "removed"]
    case: str
    before: str | None
    after: str | None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON data."""
        return {"kind": self.kind, "case": self.case, "before": self.before, "after": self.after, "error": self.error}


def _label(c: DistCase) -> str:
    return f"{c.path.value}/{c.outcome.value}" if c.outcome is not DistOutcome.ok else c.path.value


def _quality(c: DistCase) -> tuple[int, int]:
    return (_ORDER.index(c.outcome), c.path.rank)


def diff_distributed(a: Matrix, b: Matrix) -> list[DistChange]:
    """Changed cases from ``a`` to ``b`` in case-id order (empty when neither has a distributed section)."""
    before = {c.id: c for c in (a.distributed.cases if a.distributed else [])}
    after = {c.id: c for c in (b.distributed.cases if b.distributed else [])}
    out: list[DistChange] = []
    for cid in sorted(before.keys() | after.keys()):
        x, y = before.get(cid), after.get(cid)
        if x is None and y is not None:
            out.append(DistChange("new", cid, None, _label(y), y.error))
        elif y is None and x is not None:
            out.append(DistChange("removed", cid, _label(x), None))
        elif x is not None and y is not None and _quality(x) != _quality(y):
            kind: Literal["worse", "better"] = "worse" if _quality(y) > _quality(x) else "better"
            out.append(DistChange(kind, cid, _label(x), _label(y), y.error if kind == "worse" else None))
    return out


def render_distributed(changes: list[DistChange]) -> str:
    """A fixed-width table of the changed cases, worse first, with counts first."""
    if not changes:
        return "distributed: no case changed\n"
    order = ("worse", "better", "new", "removed")
    counts = ", ".join(f"{sum(c.kind == k for c in changes)} {k}" for k in order)
    lines = [f"distributed cases: {counts}"]
    for c in sorted(changes, key=lambda c: (order.index(c.kind), c.case)):
        line = f"  {c.kind:<8} {c.case:<40} {c.before or '-':>20} -> {c.after or '-'}"
        lines.append(line + (f"  ({c.error[:100]})" if c.error else ""))
    return "\n".join(lines) + "\n"
