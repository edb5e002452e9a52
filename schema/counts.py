"""The one count of a matrix that every command prints: cells, entries, samples, each labelled.

``probe``, ``report``, ``gate``, ``diff`` and ``validate`` print numbers from the same matrix; they
must agree, so they all come from :func:`count_matrix`::

    >>> count_matrix(m).line()  # needs a matrix: not run  # doctest: +SKIP
    '606 cells (native 113, composite 36, decomposed 15, rejected 442) in 12 entries, 3 operators; 2411 samples'

A *cell* is one (operator, dtype, rank, layout, mode, condition group) probe result; an *entry*
is one record of the matrix file (a contract-level entry groups several exact boxes); a *sample*
is one call probed inside a cell.

A cell is *faulted* when its own call faulted, or when its backward killed, hung or exhausted the
worker (:func:`cell_fault`): the probe's summary, its exit code and the site all count faults so.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .enums import DType, ExecPath, FallbackState, FaultOutcome, Mode, Outcome
from .matrix import CellResult, Matrix

__all__ = ["BACKWARD_FAULTS", "MatrixCounts", "cell_fault", "count_matrix"]

#: faults of a cell's backward that are faults of the process (the worker died, hung, ran out of
#: memory or poisoned the device in it): the cell's fault, whatever its forward call gave
BACKWARD_FAULTS = frozenset({FaultOutcome.crashed, FaultOutcome.hung, FaultOutcome.oom, FaultOutcome.poisoned})


def cell_fault(result: CellResult) -> FaultOutcome | None:
    """The fault a cell counts as: its own outcome's, else its backward's when that faulted the
    process (:data:`BACKWARD_FAULTS`); None for a cell that did not fault."""
    if result.outcome.fault is not None:
        return result.outcome.fault
    backward = result.autograd.outcome.fault if result.autograd is not None else None
    return backward if backward in BACKWARD_FAULTS else None


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
    #: faulted cells by fault (:func:`cell_fault`: a backward that crashed the worker counts)
    cells_faulted: dict[FaultOutcome, int] = field(default_factory=dict)

    @property
    def faults(self) -> int:
        """Faulted cells (:func:`cell_fault`), the number every command and the site show."""
        return sum(self.cells_faulted.values())

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
    faulted: dict[FaultOutcome, int] = {}
    boxes = samples = observed = 0
    for entries in matrix.boxes().values():
        for box in entries:
            per_dtype = len(box.layouts) * len(box.ranks.ranks())
            n = len(box.dtypes) * per_dtype
            by_path[box.path] += n
            by_outcome[box.outcome] += n
            if (fault := cell_fault(box)) is not None:
                faulted[fault] = faulted.get(fault, 0) + n
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
        cells_faulted={f: faulted[f] for f in FaultOutcome if f in faulted},
    )
