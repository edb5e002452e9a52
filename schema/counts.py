"""The one count of a matrix that every command prints: cells, entries, samples, each labelled.

``probe``, ``report``, ``gate``, ``diff`` and ``validate`` print numbers from the same matrix; they
must agree, so they all come from :func:`count_matrix`::

    >>> count_matrix(m).line()                                    # doctest: +SKIP
    '606 cells (native 113, composite 36, decomposed 15, rejected 442) in 12 entries, 3 operators; 2411 samples'

A *cell* is one (operator, dtype, rank, layout, mode, condition group) probe result; an *entry*
is one record of the matrix file (a contract-level entry groups several exact boxes); a *sample*
is one call probed inside a cell.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .enums import ExecPath, Outcome
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

    def paths_text(self) -> str:
        """``native 113, composite 36, rejected 442`` (paths in their order, zeros left out)."""
        return ", ".join(f"{p.value} {n}" for p, n in self.cells_by_path.items() if n)

    def line(self) -> str:
        """One labelled line: cells by path, entries, operators, samples, and any bad outcome."""
        bad = ", ".join(f"{o.value} {n}" for o, n in self.cells_by_outcome.items() if n and o is not Outcome.ok)
        text = (f"{self.cells} cells ({self.paths_text() or 'none'}) in {self.entries} entries, "
                f"{self.operators} operators; {self.samples} samples")
        return text + (f"; not ok: {bad} cells" if bad else "")


def count_matrix(matrix: Matrix) -> MatrixCounts:
    """Count ``matrix``: every number is over the exact cells its entries expand to."""
    by_path = {p: 0 for p in ExecPath}
    by_outcome = {o: 0 for o in Outcome}
    boxes = samples = 0
    for entries in matrix.boxes().values():
        for box in entries:
            n = len(box.dtypes) * len(box.layouts) * len(box.ranks.ranks())
            by_path[box.path] += n
            by_outcome[box.outcome] += n
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
    )
