"""What the pages show, computed from a matrix: path legend, coverage counts, the op x dtype grid.

An operator x dtype grid cell stands for many probed cells (ranks x layouts x conditions). Its big
letter is the path of the main condition group (a plain eager call on contiguous input, without a
special argument such as a ``dtype=`` override; ties go to the worse path), the other paths seen
are small letters beside it, wrong values and faults are marked, and a tooltip gives the rank and
layout detail of every entry::

    >>> PATH_SYMBOL[ExecPath.fallback]
    'F'

Grid cells summarise eager-mode entries; an (op, dtype) that runs only through ``torch.compile``
shows its compile-mode path (``D``), and says so in its tooltip. Coverage counts are plain
cell counts over every entry, so they add up to ``Matrix.cell_count()``.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from opmatrix.schema import (
    DEFAULT_DTYPES,
    DType,
    Entry,
    EntryPart,
    ExecPath,
    FallbackState,
    Layout,
    Matrix,
    Mode,
    Outcome,
    cell_fault,
    count_matrix,
)
from opmatrix.schema.conditions import describe
from opmatrix.schema.enums import DTYPES

__all__ = [
    "PATHS",
    "PATH_SYMBOL",
    "PATH_MEANING",
    "Coverage",
    "conditions_text",
    "GridCell",
    "OpRow",
    "coverage",
    "dtype_columns",
    "entry_cells",
    "grid_rows",
    "op_counts",
    "ranks_text",
]

PATHS: tuple[ExecPath, ...] = tuple(ExecPath)

#: One letter per path, so that the grid never relies on colour alone.
PATH_SYMBOL: dict[ExecPath, str] = {
    ExecPath.native: "N",
    ExecPath.composite: "C",
    ExecPath.decomposed: "D",
    ExecPath.fallback: "F",
    ExecPath.rejected: "R",
    ExecPath.unknown: "?",
}

PATH_MEANING: dict[ExecPath, str] = {
    ExecPath.native: "a kernel registered for the backend ran",
    ExecPath.composite: "PyTorch's composite implementation ran as ops the backend executes",
    ExecPath.decomposed: "eager unavailable; the backend's compile path runs it (graph only)",
    ExecPath.fallback: "the call or a component op ran on the host (CPU fallback)",
    ExecPath.rejected: "failed cleanly with an actionable error",
    ExecPath.unknown: "the call faulted (crashed or hung) before its path could be observed",
}

#: Most lines a grid tooltip shows before it says how many more there are.
_TOOLTIP_LINES = 6


def entry_cells(entry: Entry) -> int:
    """Cells of one entry for one of its dtypes (ranks x layouts)."""
    return len(entry.ranks.ranks()) * len(entry.layouts)


def conditions_text(entry: Entry) -> str:
    """The argument conditions of an entry, or of each of its parts: ``dim=last / any``."""
    if not entry.parts:
        return describe(entry.conditions)
    seen = list(dict.fromkeys(describe(p.conditions) for p in entry.parts))
    return " / ".join(seen)


def ranks_text(entry: Entry | EntryPart) -> str:
    """``rank 3`` or ``ranks 1-5``."""
    lo, hi = entry.ranks.min, entry.ranks.max
    return f"rank {lo}" if lo == hi else f"ranks {lo}\u2013{hi}"


def dtype_columns(matrix: Matrix) -> list[DType]:
    """The dtypes present in the matrix, in the order of the default probe list, then the rest."""
    present = {d for entries in matrix.operators.values() for e in entries for d in e.dtypes}
    order = list(DEFAULT_DTYPES) + [d for d in DTYPES if d not in DEFAULT_DTYPES]
    return [DType(d) for d in order if DType(d) in present]


@dataclass
class Coverage:
    """Probed cells per dtype per path (all modes, and per mode), and outcome totals.

    Every number comes from :func:`opmatrix.schema.count_matrix`, the count every command prints."""

    dtypes: list[DType]
    counts: dict[DType, Counter[ExecPath]]
    outcomes: Counter[Outcome] = field(default_factory=Counter)
    fallback_observed: int = 0
    #: mode -> dtype -> path -> cells, for the modes the matrix holds (eager, compile)
    by_mode: dict[Mode, dict[DType, Counter[ExecPath]]] = field(default_factory=dict)
    #: which modes the totals cover, in words (``all modes: eager 700, compile 165``)
    modes_text: str = ""

    def count(self, dtype: DType, path: ExecPath) -> int:
        """Cells of ``dtype`` that took ``path``."""
        return self.counts[dtype][path]

    def dtype_total(self, dtype: DType) -> int:
        """All cells of ``dtype``."""
        return sum(self.counts[dtype].values())

    def path_total(self, path: ExecPath) -> int:
        """All cells that took ``path``."""
        return sum(c[path] for c in self.counts.values())

    @property
    def total(self) -> int:
        """All probed cells."""
        return sum(self.dtype_total(d) for d in self.dtypes)

    @property
    def wrong(self) -> int:
        """Cells that ran with numerics outside tolerance."""
        return self.outcomes[Outcome.wrong]

    #: faulted cells (:func:`opmatrix.schema.cell_fault`: a backward that crashed the worker counts)
    faulted: int = 0

    @property
    def faults(self) -> int:
        """Cells whose probe crashed, hung, ran out of memory, poisoned the device or errored,
        forward or (crashing the worker) backward: the count ``probe`` prints and exits 1 on."""
        return self.faulted


def coverage(matrix: Matrix) -> Coverage:
    """Count the matrix's cells per dtype and path (every mode, and each mode), and per outcome."""
    counted = count_matrix(matrix)
    dtypes = dtype_columns(matrix)
    counts: dict[DType, Counter[ExecPath]] = {d: Counter() for d in dtypes}
    by_mode: dict[Mode, dict[DType, Counter[ExecPath]]] = {m: {d: Counter() for d in dtypes}
                                                          for m in counted.cells_by_mode}
    for (mode, dtype, path), n in counted.cells_by.items():
        counts[dtype][path] += n
        by_mode[mode][dtype][path] += n
    return Coverage(dtypes=dtypes, counts=counts, outcomes=Counter(counted.cells_by_outcome),
                    fallback_observed=counted.fallback_observed, by_mode=by_mode, modes_text=counted.modes_text(),
                    faulted=counted.faults)


@dataclass(frozen=True)
class GridCell:
    """One operator x dtype square of the grid."""

    primary: ExecPath
    others: tuple[ExecPath, ...]
    wrong: bool
    fault: bool
    fallback: bool
    title: str

    @property
    def paths(self) -> str:
        """Every path seen, space separated (the filter reads it)."""
        return " ".join(p.value for p in sorted((self.primary, *self.others)))


@dataclass(frozen=True)
class OpRow:
    """One operator: its page and a grid cell per dtype column (None: not probed)."""

    name: str
    page: str
    cells: tuple[GridCell | None, ...]


def _entry_line(entry: Entry) -> str:
    parts = [entry.path.value]
    if entry.outcome is not Outcome.ok:
        parts[0] += f" ({entry.outcome.value})"
    elif (fault := cell_fault(entry)) is not None:  # the forward ran; its backward faulted the worker
        parts[0] += f" (backward {fault.value})"
    parts.append(ranks_text(entry))
    parts.append(", ".join(layout.value for layout in entry.layouts))
    if entry.conditions:
        parts.append(describe(entry.conditions))
    if entry.fallback.state is FallbackState.observed:
        parts.append("host fallback observed")
    if entry.mode is Mode.compile:
        parts.append("compile")
    return " \u00b7 ".join(parts)


def _main_group(entries: Sequence[Entry]) -> tuple[list[Entry], str]:
    """The boxes the big letter speaks for, and a note for the tooltip.

    The main condition group is a plain call: eager, no special argument such as a ``dtype=``
    override, contiguous input where that was probed. An (op, dtype) that only runs through
    ``torch.compile`` (eager rejected, compile ok) shows its compile-mode path: ``D``.
    """
    eager = [e for e in entries if e.mode is Mode.eager]
    plain = [e for e in eager if "dtype" not in e.conditions] or eager
    runs = [e for e in plain if e.outcome is not Outcome.ok or e.path is not ExecPath.rejected]
    compiled = [e for e in entries if e.mode is Mode.compile and e.outcome is Outcome.ok
                and e.path is not ExecPath.rejected]
    if not eager:
        return list(entries), " (compile mode only)"
    if not runs and compiled:
        return compiled, " (eager rejected; runs through torch.compile)"
    contiguous = [e for e in plain if Layout.contiguous in e.layouts]
    return contiguous or plain, ""


def _grid_cell(op: str, dtype: DType, entries: Sequence[Entry]) -> GridCell:
    main, note = _main_group(entries)
    weight: Counter[ExecPath] = Counter()
    for entry in main:
        weight[entry.path] += entry_cells(entry)
    # most cells of the main group wins; on a tie the worse path, so it never flatters the backend
    primary = max(weight, key=lambda p: (weight[p], p.rank))
    eager = [e for e in entries if e.mode is Mode.eager]
    shown = eager or list(entries)
    others = tuple(sorted({e.path for e in shown if e.path is not primary}))
    lines = [f"{op} \u00b7 {dtype.value}: {primary.value} for a plain call{note}"]
    body = sorted(shown, key=lambda e: (e.path.rank, e.ranks.min, e.ranks.max))
    lines += [_entry_line(e) for e in body[:_TOOLTIP_LINES]]
    if len(body) > _TOOLTIP_LINES:
        lines.append(f"\u2026 {len(body) - _TOOLTIP_LINES} more on the operator page")
    return GridCell(
        primary=primary,
        others=others,
        wrong=any(e.outcome is Outcome.wrong for e in entries),
        fault=any(cell_fault(e) is not None for e in entries),
        fallback=any(e.path is ExecPath.fallback or e.fallback.state is FallbackState.observed for e in entries),
        title="\n".join(lines),
    )


def grid_rows(matrix: Matrix, dtypes: Iterable[DType], pages: dict[str, str]) -> list[OpRow]:
    """One row per operator, sorted by name, one cell per dtype column."""
    columns = list(dtypes)
    rows = []
    for op in sorted(matrix.operators):
        by_dtype: dict[DType, list[Entry]] = defaultdict(list)
        for entry in matrix.boxes()[op]:
            for dtype in entry.dtypes:
                by_dtype[dtype].append(entry)
        cells = tuple(_grid_cell(op, d, by_dtype[d]) if d in by_dtype else None for d in columns)
        rows.append(OpRow(name=op, page=pages[op], cells=cells))
    return rows


def op_counts(entries: Sequence[Entry], dtypes: Iterable[DType]) -> list[tuple[str, Counter[ExecPath], int]]:
    """Per dtype (in column order) of one operator: cells per path and wrong cells."""
    paths: dict[DType, Counter[ExecPath]] = defaultdict(Counter)
    wrong: Counter[DType] = Counter()
    for entry in entries:
        n = entry_cells(entry)
        for dtype in entry.dtypes:
            paths[dtype][entry.path] += n
            if entry.outcome is Outcome.wrong:
                wrong[dtype] += n
    return [(d.value, paths[d], wrong[d]) for d in dtypes if d in paths]
