"""The one count of a matrix that every command prints: cells, entries, samples, each labelled.

``probe``, ``report``, ``gate``, ``diff`` and ``validate`` print numbers from the same matrix; they
must agree, so they all come from :func:`count_matrix`::

    >>> count_matrix(m).line()  # needs a matrix: not run  # doctest: +SKIP
    '606 cells (native 113, composite 36, decomposed 15, rejected 442) in 12 entries, 3 operators; 2411 samples'

A *cell* is one (operator, dtype, rank, layout, mode, condition group) probe result; an *entry*
is one record of the matrix file (a contract-level entry groups several exact boxes); a *sample*
is one call probed inside a cell.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .enums import DType, ExecPath, FallbackState, Mode, Outcome
from .matrix import Matrix

__all__ = ["MatrixCounts", "count_matrix"]


@dataclass(frozen=True)
class MatrixCounts:
    """Counts of one matrix, by what they count."""

    operators: int
    entries: int
    boxes: int
    cells: int
    samples: int
    cells_by_path: dict[ExecPath, int] = field(default_factory=dict)
    cells_by_outcome: dict[Outcome, int] = field(default_factory=dict)
    #: cells per mode (eager, compile), in mode order, zeros left out
    cells_by_mode: dict[Mode, int] = field(default_factory=dict)
    #: cells per (mode, dtype, path): what the coverage tables and charts of every command show
    cells_by: dict[tuple[Mode, DType, ExecPath], int] = field(default_factory=dict)
    #: cells whose entry observed host fallback (any path)
    fallback_observed: int = 0

    def modes_text(self) -> str:
        """``all modes: eager 700, compile 165`` (or ``eager only``): which modes a total covers."""
        modes = [(m.value, n) for m, n in self.cells_by_mode.items() if n]
        if len(modes) == 1:
            return f"{modes[0][0]} only"
        return "all modes: " + ", ".join(f"{m} {n}" for m, n in modes) if modes else "no mode"

    def count(self, path: ExecPath | None = None, *, mode: Mode | None = None, dtype: DType | None = None) -> int:
        """Cells of ``mode`` / ``dtype`` / ``path`` (None: any)."""
        return sum(n for (m, d, p), n in self.cells_by.items()
                   if (mode is None or m is mode) and (dtype is None or d is dtype) and (path is None or p is path))

    def paths_text(self) -> str:
        """``native 113, composite 36, rejected 442`` (paths in their order, zeros left out)."""
        return ", ".join(f"{p.value} {n}" for p, n in self.cells_by_path.items() if n)

    def line(self) -> str:
        """One labelled line: cells by path, entries, operators, samples, and any bad outcome."""
        bad = ", ".join(f"{o.value} {n}" for o, n in self.cells_by_outcome.items() if n and o is not Outcome.ok)
        text = (f"{self.cells} cells ({self.paths_text() or 'none'}) in {self.entries} entries, "
                f"{self.operators} operators; {self.samples} samples; {self.modes_text()}")
        return text + (f"; not ok: {bad} cells" if bad else "")


def count_matrix(matrix: Matrix) -> MatrixCounts:
    """Count ``matrix``: every number is over the exact cells its entries expand to."""
    by_path = {p: 0 for p in ExecPath}
    by_outcome = {o: 0 for o in Outcome}
    by_mode = {m: 0 for m in Mode}
    cells_by: dict[tuple[Mode, DType, ExecPath], int] = {}
    boxes = samples = observed = 0
    for entries in matrix.boxes().values():
        for box in entries:
            per_dtype = len(box.layouts) * len(box.ranks.ranks())
            n = len(box.dtypes) * per_dtype
            by_path[box.path] += n
            by_outcome[box.outcome] += n
            by_mode[box.mode] += n
            for dtype in box.dtypes:
                key = (box.mode, dtype, box.path)
                cells_by[key] = cells_by.get(key, 0) + per_dtype
            if box.fallback.state is FallbackState.observed:
                observed += n
            boxes += 1
            samples += box.samples.probed
    return MatrixCounts(
        operators=len(matrix.operators),
        entries=sum(len(es) for es in matrix.operators.values()),
        boxes=boxes,
        cells=sum(by_path.values()),
        samples=samples,
        cells_by_path=by_path,
        cells_by_outcome=by_outcome,
        cells_by_mode={m: n for m, n in by_mode.items() if n},
        cells_by=cells_by,
        fallback_observed=observed,
    )
